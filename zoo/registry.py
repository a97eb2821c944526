"""Short names the YAML configs may use, resolved by import (never ``eval``).

Every class-valued key (``algo``, ``policy``, ``features_extractor_class``, wrappers,
``replay_buffer_class``, ``activation_fn``, ...) takes either a short name listed here or an
import path ``"package.module:Name"`` / ``"package.module.Name"``.
"""

from __future__ import annotations

from typing import Any

import torch.nn

from attn_policies.extractors import EXTRACTORS, POLICIES, _resolve, import_object

ALGOS: dict[str, str] = {
    "ppo": "stable_baselines3:PPO",
    "a2c": "stable_baselines3:A2C",
    "dqn": "stable_baselines3:DQN",
    "double_dqn": "attn_policies.algorithms:DoubleDQN",
    "qrdqn": "sb3_contrib:QRDQN",
    "recurrent_ppo": "sb3_contrib:RecurrentPPO",
}

REPLAY_BUFFERS: dict[str, str] = {
    "replay": "stable_baselines3.common.buffers:ReplayBuffer",
    "oversampling": "attn_policies.algorithms:OversamplingReplayBuffer",
}

WRAPPERS: dict[str, str] = {
    name: f"attn_envs:{name}"
    for name in (
        "ShuffleObservation",
        "DuplicateObservation",
        "NoiseChannelsObservation",
        "PatchObservation",
        "OcclusionObservation",
        "RamFeatureObservation",
        "DistractorFeatureObservation",
        "BackgroundObservation",
        "EgocentricGridObservation",
        "ActionSubset",
        "StepPenalty",
        "PreviousActionObservation",
        "NegativeRewardTruncation",
    )
} | {
    "AtariWrapper": "stable_baselines3.common.atari_wrappers:AtariWrapper",
    "TimeLimit": "gymnasium.wrappers:TimeLimit",
    "FlattenObservation": "gymnasium.wrappers:FlattenObservation",
    "ClipReward": "gymnasium.wrappers:ClipReward",
}

OPTIMIZERS: dict[str, str] = {
    "adam": "torch.optim:Adam",
    "adamw": "torch.optim:AdamW",
    "rmsprop": "torch.optim:RMSprop",
    "rmsprop_tf_like": "stable_baselines3.common.sb2_compat.rmsprop_tf_like:RMSpropTFLike",
    "sgd": "torch.optim:SGD",
}

ACTIVATIONS: dict[str, str] = {
    name.lower(): f"torch.nn:{name}"
    for name in ("ReLU", "Tanh", "ELU", "GELU", "LeakyReLU", "SiLU", "Sigmoid", "Identity")
}

REGISTRIES: dict[str, dict[str, str]] = {
    "algo": ALGOS,
    "policy": POLICIES,
    "extractor": EXTRACTORS,
    "replay buffer": REPLAY_BUFFERS,
    "wrapper": WRAPPERS,
    "optimizer": OPTIMIZERS,
    "activation": ACTIVATIONS,
}


def resolve(kind: str, name: str) -> Any:
    """The object a short name or import path names.

    Args:
        kind: a key of :data:`REGISTRIES` (``"algo"``, ``"policy"``, ``"wrapper"``, ...).
        name: a short name of that registry, or an import path.

    Raises:
        ValueError: naming the nearest short names when ``name`` is neither.

    Example:
        >>> resolve("algo", "double_dqn").__name__
        'DoubleDQN'
        >>> resolve("wrapper", "ShuffleObservaton")
        Traceback (most recent call last):
        ...
        ValueError: unknown wrapper 'ShuffleObservaton'. Did you mean 'ShuffleObservation', ...
    """
    registry = REGISTRIES[kind]
    key = name.lower() if kind in ("activation", "optimizer") else name
    if kind == "activation" and key.startswith("nn."):
        key = key[3:]
    if key in registry:
        return import_object(registry[key])
    return _resolve(name, registry, kind)


def is_activation(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, torch.nn.Module)
