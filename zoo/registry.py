"""Short names the YAML configs may use, resolved by import (never ``eval``).

Every class-valued key (``algo``, ``policy``, ``features_extractor_class``, wrappers,
``replay_buffer_class``, ``activation_fn``, ...) takes either a short name listed here or an
import path ``"package.module:Name"`` / ``"package.module.Name"``.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

import torch.nn

from attn_policies.catalog import EXTRACTORS, POLICIES, import_object
from attn_policies.catalog import resolve as resolve_name

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
    "AtariCropWrapper": "attn_envs.atari_frames:AtariCropWrapper",
    "NoopResetEnv": "stable_baselines3.common.atari_wrappers:NoopResetEnv",
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


def _base_classes() -> dict[str, tuple[type, ...]]:
    """The class every resolved name of a kind must be (checked before anything is called)."""
    import gymnasium as gym
    from stable_baselines3.common.base_class import BaseAlgorithm
    from stable_baselines3.common.buffers import ReplayBuffer
    from stable_baselines3.common.policies import BasePolicy
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    return {
        "algo": (BaseAlgorithm,),
        "policy": (BasePolicy,),
        "extractor": (BaseFeaturesExtractor,),
        "replay buffer": (ReplayBuffer,),
        "wrapper": (gym.Wrapper,),
        "optimizer": (torch.optim.Optimizer,),
        "activation": (torch.nn.Module,),
    }


def check_kind(kind: str, name: str, obj: Any) -> Any:
    """``obj`` if it is a class of the expected kind, else a ``ValueError`` naming it.

    Example:
        >>> check_kind("wrapper", "os:system", __import__("os").system)
        Traceback (most recent call last):
        ...
        ValueError: wrapper 'os:system' is a builtin_function_or_method, not a subclass of Wrapper
    """
    bases = _base_classes()[kind]
    if isinstance(obj, type) and issubclass(obj, bases):
        return obj
    what = f"class {obj.__name__}" if isinstance(obj, type) else type(obj).__name__
    names = " or ".join(b.__name__ for b in bases)
    raise ValueError(f"{kind} {name!r} is a {what}, not a subclass of {names}")


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
        return check_kind(kind, name, import_object(registry[key]))
    return check_kind(kind, name, resolve_name(name, registry, kind))


def resolve_module_builder(name: str, what: str = "policy") -> Any:
    """A ``torch.nn.Module`` subclass, or a classmethod preset of one (``"module:Cls.preset"``).

    Anything else (a function such as ``os:system``) is refused before it is called.

    Example:
        >>> name = "attn_policies.es_policies:AttentionNeuronPolicy.cartpole"
        >>> resolve_module_builder(name).__name__
        'cartpole'
    """
    obj = import_object(name)
    owner = getattr(obj, "__self__", None)
    if isinstance(obj, type) and issubclass(obj, torch.nn.Module):
        return obj
    if inspect.ismethod(obj) and isinstance(owner, type) and issubclass(owner, torch.nn.Module):
        return obj
    raise ValueError(
        f"{what} {name!r} is a {type(obj).__name__}, not a torch.nn.Module subclass or a "
        "classmethod of one"
    )


def resolve_function(name: str, what: str) -> Any:
    """A plain Python function from a package (not a builtin, class or standard-library
    function such as ``os:system`` or ``shutil:rmtree``), checked before it is called.

    Example:
        >>> resolve_function("shutil:rmtree", "action_fn")
        Traceback (most recent call last):
        ...
        ValueError: action_fn 'shutil:rmtree' is a standard-library function; ...
    """
    obj = import_object(name)
    if not inspect.isfunction(obj):
        raise ValueError(f"{what} {name!r} is a {type(obj).__name__}, not a Python function")
    root = (obj.__module__ or "").split(".")[0]
    if root in sys.stdlib_module_names or root == "builtins":
        raise ValueError(
            f"{what} {name!r} is a standard-library function; give a function of your package"
        )
    return obj


def is_activation(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, torch.nn.Module)
