"""Attention layers, SB3 feature extractors and attention-map tools for attention-based RL.

Public names are imported lazily, so ``import attn_policies`` stays cheap. Extractors and
policies are also listed by short name in :mod:`attn_policies.catalog`.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import Any

try:
    __version__ = version("attn-zoo")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

_MODULES = {
    "attn_policies.attention": [
        "AttentionCapture",
        "MultiHeadSelfAttention",
        "append_coordinates",
        "capture_attention",
        "sinusoidal_table",
    ],
    "attn_policies.relational": [
        "CNNMNIST",
        "RelationalDQNPolicy",
        "RelationalDoorKey",
        "RelationalExtractor",
        "RelationalMNIST",
        "RelationalModule",
    ],
    "attn_policies.attention_neuron": ["AttentionNeuron", "VisionAttentionNeuron"],
    "attn_policies.es_policies": ["AttentionNeuronPolicy", "FNNPolicy"],
    "attn_policies.neuron_extractors": [
        "AttentionNeuronExtractor",
        "AttentionNeuronVectorExtractor",
    ],
    "attn_policies.patch_voting": ["PatchVoting"],
    "attn_policies.patch_agents": ["AttentionAgent", "AttentionNeuronVotingAgent"],
    "attn_policies.awrl": ["AWRLExtractor", "DAWRLPolicy"],
    "attn_policies.feature_baselines": ["FeatureCNNExtractor", "FeatureFCExtractor"],
    "attn_policies.nonlocal_cnn": ["NonLocalBlock", "NonLocalNatureCNN"],
    "attn_policies.capture": ["attention_maps"],
    "attn_policies.attention_plots": [
        "plot_feature_attention",
        "plot_grid_attention",
        "plot_saliency",
        "plot_top_patches",
    ],
    "attn_policies.attention_rollouts": [
        "doorkey_attention_figure",
        "feature_attention_figure",
        "saliency_figure",
        "top_patches_figure",
    ],
    "attn_policies.catalog": ["EXTRACTORS", "POLICIES", "get_extractor", "get_policy"],
    "attn_policies.algorithms": ["DoubleDQN", "OversamplingReplayBuffer"],
}
_PUBLIC = {name: module for module, names in _MODULES.items() for name in names}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'attn_policies' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
