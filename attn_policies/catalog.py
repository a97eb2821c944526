"""Every SB3 feature extractor and policy in attn_policies, by short name.

The extractors live next to the layers they wrap (``relational.py``, ``neuron_extractors.py``,
...); this module is the one place that lists them, so a config can name a class by a short
name (``"relational"``) or by its import path
(``"attn_policies.relational.RelationalExtractor"`` or
``"attn_policies.relational:RelationalExtractor"``). Names are resolved by import, never by
``eval``. Old import paths (``attn_policies.neuron:...``, ``attn_policies.awrl:FeatureFCExtractor``)
still resolve through re-exports.

===========================  ===========================================================  ====
short name                   class (in ``attn_policies``)                                 exp.
===========================  ===========================================================  ====
``relational``               :class:`~.relational.RelationalExtractor`                    E2
``awrl``                     :class:`~.awrl.AWRLExtractor`                                E7
``feature_fc``               :class:`~.feature_baselines.FeatureFCExtractor`              E7
``feature_cnn``              :class:`~.feature_baselines.FeatureCNNExtractor`             E7
``attention_neuron``         :class:`~.neuron_extractors.AttentionNeuronExtractor`        E5
``attention_neuron_vector``  :class:`~.neuron_extractors.AttentionNeuronVectorExtractor`  E3
``nonlocal_nature_cnn``      :class:`~.nonlocal_cnn.NonLocalNatureCNN`                    E8
===========================  ===========================================================  ====

Policies: ``relational_dqn`` (:class:`~attn_policies.relational.RelationalDQNPolicy`, the
book's DoorKey Q-network with its elu head) and ``dawrl``
(:class:`~attn_policies.awrl.DAWRLPolicy`, value as a sum of per-feature values).
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

EXTRACTORS: dict[str, str] = {
    "relational": "attn_policies.relational:RelationalExtractor",
    "awrl": "attn_policies.awrl:AWRLExtractor",
    "feature_fc": "attn_policies.feature_baselines:FeatureFCExtractor",
    "feature_cnn": "attn_policies.feature_baselines:FeatureCNNExtractor",
    "attention_neuron": "attn_policies.neuron_extractors:AttentionNeuronExtractor",
    "attention_neuron_vector": "attn_policies.neuron_extractors:AttentionNeuronVectorExtractor",
    "nonlocal_nature_cnn": "attn_policies.nonlocal_cnn:NonLocalNatureCNN",
    "channels_last_nature_cnn": "attn_policies.cnn_layers:ChannelsLastNatureCNN",
}

POLICIES: dict[str, str] = {
    "relational_dqn": "attn_policies.relational:RelationalDQNPolicy",
    "dawrl": "attn_policies.awrl:DAWRLPolicy",
}


def import_object(path: str) -> Any:
    """Import ``"package.module:Name"`` or ``"package.module.Name"``.

    After a colon, dots walk attributes:
    ``"attn_policies.es_policies:AttentionNeuronPolicy.cartpole"``. It imports whatever it is
    given, so it is for paths written in code: a path read from a file must first be checked
    against the packages it may import, and must not walk attributes (``BasePolicy.load``
    unpickles the file it is given).

    Example:
        >>> import_object("attn_policies.attention:MultiHeadSelfAttention").__name__
        'MultiHeadSelfAttention'
    """
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"{path!r} is not an import path like 'package.module:Name'")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        raise ValueError(f"cannot import module {module_name!r} (from {path!r}): {err}") from err
    obj, first, *rest = module, *attr.split(".")
    try:
        obj = getattr(obj, first)
    except AttributeError:
        close = difflib.get_close_matches(attr, [n for n in dir(module) if not n.startswith("_")])
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"module {module_name!r} has no attribute {first!r}{hint}") from None
    for name in rest:  # "module:Class.preset" names a classmethod
        try:
            obj = getattr(obj, name)
        except AttributeError:
            raise ValueError(f"{path!r}: {first!r} has no attribute {name!r}") from None
    return obj


def resolve(name: str, registry: dict[str, str], kind: str) -> Any:
    if name in registry:
        return import_object(registry[name])
    if "." in name or ":" in name:
        return import_object(name)
    close = difflib.get_close_matches(name, list(registry), n=3)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ValueError(
        f"unknown {kind} {name!r}.{hint} Known: {', '.join(sorted(registry))}, "
        "or an import path like 'package.module:Class'."
    )


def get_extractor(name: str) -> type:
    """The extractor class for a short name or an import path.

    Example:
        >>> get_extractor("relational").__name__
        'RelationalExtractor'
        >>> get_extractor("relationl")
        Traceback (most recent call last):
        ...
        ValueError: unknown extractor 'relationl'. Did you mean 'relational'? ...
    """
    return resolve(name, EXTRACTORS, "extractor")


def get_policy(name: str) -> type:
    """The SB3 policy class for a short name or an import path.

    Example:
        >>> get_policy("relational_dqn").__name__
        'RelationalDQNPolicy'
    """
    return resolve(name, POLICIES, "policy")
