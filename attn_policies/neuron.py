"""Old import path of the seed-001 AttentionNeuron pieces (configs and saved runs name it).

The code lives in :mod:`attn_policies.attention_neuron` (the layers),
:mod:`attn_policies.es_policies` (the ES agents) and :mod:`attn_policies.neuron_extractors`
(the SB3 extractors); ``attn_policies.neuron:AttentionNeuronExtractor`` and the like still
resolve through this module.
"""

from __future__ import annotations

from attn_policies._es_support import FlatParameters
from attn_policies.attention_neuron import (
    AttentionActivation,
    AttentionNeuron,
    NeuronState,
    VisionAttentionNeuron,
)
from attn_policies.es_policies import AttentionNeuronPolicy, FNNPolicy, PolicyState
from attn_policies.neuron_extractors import (
    AttentionNeuronExtractor,
    AttentionNeuronVectorExtractor,
)

__all__ = [
    "AttentionActivation",
    "AttentionNeuron",
    "AttentionNeuronExtractor",
    "AttentionNeuronPolicy",
    "AttentionNeuronVectorExtractor",
    "FNNPolicy",
    "FlatParameters",
    "NeuronState",
    "PolicyState",
    "VisionAttentionNeuron",
]
