"""Short names the YAML configs may use, resolved by import (never ``eval``).

Every class-valued key (``algo``, ``policy``, ``features_extractor_class``, wrappers,
``replay_buffer_class``, ``activation_fn``, ...) takes either a short name listed here or an
import path ``"package.module:Name"`` / ``"package.module.Name"``.

This module is the one door through which a config (or a run folder's ``config.yml``)
imports anything: :func:`import_module` for modules (an env id's ``"module:"`` part too, see
:func:`check_env_ids`) and :func:`import_path` for the object a path names. Importing a
module runs its top-level code, so a module is imported only inside :data:`ALLOWED_IMPORTS`
or a package the person running the command named (:func:`allow_imports`, the CLI's
``--allow-import PKG``), checked before the import. A path names one public object of a
module (``module:Class``), never an attribute of it: ``BasePolicy.load`` would unpickle a
file. The zoo's own presets (``"module:Class.preset"``) come from its registries only.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import re
import sys
from collections.abc import Collection, Iterable, Mapping
from types import ModuleType
from typing import Any

import torch.nn

from attn_policies.catalog import EXTRACTORS, POLICIES, import_object
from attn_policies.catalog import resolve as resolve_name
from zoo.config_checks import ConfigError

ALLOWED_IMPORTS: tuple[str, ...] = (
    "attn_envs",
    "attn_policies",
    "zoo",
    "gymnasium",
    "stable_baselines3",
    "sb3_contrib",
    "torch.nn",
    "torch.optim",
    "ale_py",
    "minigrid",
    "pybullet_envs_gymnasium",
)
"""Packages (with their modules) a config may import: this project's three, gymnasium and
the env packages whose ids it uses, SB3, sb3-contrib and torch's layers and optimizers."""

ALLOW_IMPORT_ENV = "ATTN_ZOO_ALLOW_IMPORT"
"""Where :func:`allow_imports` keeps the packages named on the command line (comma
separated), so the worker processes of a run (vector envs, evaluators, Ray on this machine)
inherit them."""

_PACKAGE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def package_names(names: Iterable[str], where: str) -> list[str]:
    """``names`` if each is a dotted Python package name: the one check of the packages the
    person running may add, whether they come from ``--allow-import`` or from
    :data:`ALLOW_IMPORT_ENV` (comma separated; empty entries are skipped).

    Raises:
        ConfigError: ``where`` and the first name that is not one (``os;touch x``,
            ``../x``, a name longer than 200 characters).
    """
    names = list(names)
    for name in names:
        if not _PACKAGE.fullmatch(name) or len(name) > 200:
            shown = repr(name) if len(name) <= 60 else repr(name[:57] + "...")
            raise ConfigError(f"{where} {shown}: not a Python package name like 'my_pkg'")
    return names


def _from_environment() -> list[str]:
    raw = os.environ.get(ALLOW_IMPORT_ENV, "")
    return package_names([n for n in raw.split(",") if n], ALLOW_IMPORT_ENV)


def allow_imports(packages: Iterable[str]) -> None:
    """Let configs import these packages too (``attn-zoo ... --allow-import PKG``).

    Only the person running the command says so; nothing in a config or a run folder does.

    Raises:
        ConfigError: a name that is not a dotted Python package name, given here or already
            in :data:`ALLOW_IMPORT_ENV`.
    """
    names = package_names(packages, "--allow-import")
    os.environ[ALLOW_IMPORT_ENV] = ",".join(dict.fromkeys([*_from_environment(), *names]))


def allowed_imports() -> tuple[str, ...]:
    """:data:`ALLOWED_IMPORTS` and the packages :func:`allow_imports` or
    :data:`ALLOW_IMPORT_ENV` added (checked as ``--allow-import`` names are)."""
    return (*ALLOWED_IMPORTS, *_from_environment())


ALLOW_WRITER_ENV = "ATTN_ZOO_ALLOW_WRITER"
"""Where :func:`allow_writers` keeps the classes named with ``--allow-writer`` (comma
separated), for the run's worker processes as :data:`ALLOW_IMPORT_ENV`."""

OUTPUT_ARGUMENT = re.compile(r"(folder|_dir|^dir|directory|path|file|filename|tensorboard_log)$")
"""Constructor arguments that name where a class writes (``video_folder``, ``log_dir``,
``save_path``, ``filename``): a class taking one writes wherever a config says."""

WRITERS: dict[str, str] = {
    "HumanRendering": "it renders every step to a window on the screen",
}
"""Classes that write outside the run folder without a path argument, and what they do."""


def allow_writers(classes: Iterable[str]) -> None:
    """Let configs name these classes even though they write files (``--allow-writer CLASS``,
    a class name such as ``RecordVideo`` or a path such as ``gymnasium.wrappers:RecordVideo``).

    Raises:
        ConfigError: a name that is not a class name or ``module:Class`` path.
    """
    names = list(classes)
    for name in names:
        module, _, cls = name.rpartition(":")
        if not cls.isidentifier() or (module and not _PACKAGE.fullmatch(module)):
            raise ConfigError(
                f"--allow-writer {name!r}: not a class name like 'RecordVideo' or "
                "'gymnasium.wrappers:RecordVideo'"
            )
    os.environ[ALLOW_WRITER_ENV] = ",".join(dict.fromkeys([*allowed_writers(), *names]))


def allowed_writers() -> list[str]:
    """The classes :func:`allow_writers` let configs name."""
    return [n for n in os.environ.get(ALLOW_WRITER_ENV, "").split(",") if n]


def _constructor_arguments(cls: type) -> list[str]:
    names: list[str] = []
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if klass is object or init is None:
            continue
        try:
            names += list(inspect.signature(init).parameters)
        except (TypeError, ValueError):  # a builtin's: no Python signature
            continue
    return names


def check_writer(kind: str, name: str, cls: type) -> type:
    """``cls`` unless its constructor takes an output path (``RecordVideo(video_folder=)``,
    SB3's ``Monitor(filename=)``, any ``*_folder``, ``*_path``, ``*_dir``, ``log_dir``
    argument) or it is one of :data:`WRITERS`: such a class, named in a shared config, would
    write wherever the config says. Only the person running allows one: ``--allow-writer``.

    Example:
        >>> check_writer("wrapper", "gymnasium.wrappers:RecordVideo",
        ...              import_path("gymnasium.wrappers:RecordVideo", "wrapper"))
        Traceback (most recent call last):
        ...
        zoo.config.ConfigError: wrapper 'gymnasium.wrappers:RecordVideo' writes files ...
    """
    allowed = allowed_writers()
    spellings = {name, cls.__name__, f"{cls.__module__}:{cls.__qualname__}"}
    if spellings & set(allowed):
        return cls
    outputs = sorted({a for a in _constructor_arguments(cls) if OUTPUT_ARGUMENT.search(a)})
    if outputs:
        what = f"where its argument {', '.join(outputs)} says"
    elif cls.__name__ in WRITERS:
        what = WRITERS[cls.__name__]
    else:
        return cls
    raise ConfigError(
        f"{kind} {name!r} writes files ({what}): a config may not name it; if you trust this "
        f"config, add --allow-writer {cls.__name__}"
    )


def check_import(module: str, source: str) -> None:
    """Refuse, before importing it, a module outside :func:`allowed_imports` (or a private
    one such as ``venv.__main__``): importing runs its top-level code.

    Raises:
        ConfigError: naming ``source`` (what the config says) and how to allow the package.

    Example:
        >>> check_import("this", "env 'this:CartPole-v1'")
        Traceback (most recent call last):
        ...
        zoo.config.ConfigError: env 'this:CartPole-v1': a config imports ... --allow-import this
    """
    parts = module.split(".")
    if not _PACKAGE.fullmatch(module) or any(p.startswith("_") for p in parts):
        raise ConfigError(
            f"{source}: {module!r} is not a public module path (a config never imports a "
            "private module such as __main__)"
        )
    if any(module == p or module.startswith(p + ".") for p in allowed_imports()):
        return
    raise ConfigError(
        f"{source}: a config imports only from {', '.join(ALLOWED_IMPORTS)} (an import runs "
        f"the module's code); if you trust {parts[0]!r}, add --allow-import {parts[0]}"
    )


def import_module(module: str, source: str) -> ModuleType:
    """``importlib.import_module`` of a module a config names, after :func:`check_import`."""
    check_import(module, source)
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        raise ConfigError(f"{source}: cannot import module {module!r}: {err}") from err


def import_path(path: str, what: str) -> Any:
    """The object a config's ``"package.module:Name"`` / ``"package.module.Name"`` names:
    one public name of an allowed module (:func:`check_import`), never an attribute of it.

    Example:
        >>> import_path("stable_baselines3.common.policies:BasePolicy.load", "policy")
        Traceback (most recent call last):
        ...
        zoo.config.ConfigError: policy 'stable_baselines3.common.policies:BasePolicy.load' ...
    """
    source = f"{what} {path!r}"
    module_name, sep, name = path.partition(":")
    if not sep:
        module_name, _, name = path.rpartition(".")
    if not module_name or not name:
        raise ConfigError(f"{source} is not an import path like 'package.module:Name'")
    if not name.isidentifier() or name.startswith("_"):
        what_it_is = "an attribute of " if "." in name else ""
        raise ConfigError(
            f"{source} names {what_it_is}{name.split('.')[0]!r}; a config names a public class "
            "or function of a module ('package.module:Name'), never an attribute of one"
        )
    module = import_module(module_name, source)
    try:
        return getattr(module, name)
    except AttributeError:
        close = difflib.get_close_matches(name, [n for n in dir(module) if not n.startswith("_")])
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(
            f"{source}: module {module_name!r} has no attribute {name!r}{hint}"
        ) from None


def check_env_ids(body: Mapping[str, Any], where: str) -> None:
    """Every ``env`` of a config (a curriculum stage's too) in ``"module:EnvId"`` form names
    an allowed module: gymnasium imports it when it makes the env, so it is checked here,
    when the config is read, before anything else is imported.

    Example:
        >>> check_env_ids({"env": "attn_envs/CartPoleSwingUp-v0"}, "x")  # no module: fine
        >>> check_env_ids({"curriculum": [{"env": "evil:CartPole-v1"}]}, "x")
        Traceback (most recent call last):
        ...
        zoo.config.ConfigError: x: env 'evil:CartPole-v1': a config imports ... --allow-import evil
    """
    for key, value in body.items():
        if key == "env" and isinstance(value, str) and ":" in value:
            check_import(value.partition(":")[0], f"{where}: env {value!r}")
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, Mapping):
                check_env_ids(item, where)


ALGOS: dict[str, str] = {
    "ppo": "stable_baselines3:PPO",
    "a2c": "stable_baselines3:A2C",
    "a2c_graph": "attn_policies.algorithms:RolloutGraphA2C",
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
    """``obj`` if it is a class of the expected kind, else a :class:`ConfigError` naming it.

    Example:
        >>> check_kind("wrapper", "os:system", __import__("os").system)
        Traceback (most recent call last):
        ...
        zoo.config.ConfigError: wrapper 'os:system' is a builtin_function_or_method, not a ...
    """
    bases = _base_classes()[kind]
    if isinstance(obj, type) and issubclass(obj, bases):
        # an algorithm's own output argument (tensorboard_log) is the zoo's to set
        return obj if kind == "algo" else check_writer(kind, name, obj)
    what = f"class {obj.__name__}" if isinstance(obj, type) else type(obj).__name__
    names = " or ".join(b.__name__ for b in bases)
    raise ConfigError(f"{kind} {name!r} is a {what}, not a subclass of {names}")


def resolve(kind: str, name: str) -> Any:
    """The object a short name or import path names.

    Args:
        kind: a key of :data:`REGISTRIES` (``"algo"``, ``"policy"``, ``"wrapper"``, ...).
        name: a short name of that registry, or an import path.

    Raises:
        ConfigError: naming the nearest short names when ``name`` is neither.

    Example:
        >>> resolve("algo", "double_dqn").__name__
        'DoubleDQN'
        >>> resolve("wrapper", "ShuffleObservaton")
        Traceback (most recent call last):
        ...
        zoo.config.ConfigError: unknown wrapper 'ShuffleObservaton'. Did you mean ...
    """
    registry = REGISTRIES[kind]
    key = name.lower() if kind in ("activation", "optimizer") else name
    if kind == "activation" and key.startswith("nn."):
        key = key[3:]
    if key in registry:
        return check_kind(kind, name, import_object(registry[key]))
    if "." in name or ":" in name:
        return check_kind(kind, name, import_path(name, kind))
    try:
        found = resolve_name(name, registry, kind)
    except ValueError as err:  # the library's message: unknown, with the nearest names
        raise ConfigError(str(err)) from None
    return check_kind(kind, name, found)


def resolve_module_builder(name: str, what: str = "policy", presets: Collection[str] = ()) -> Any:
    """A ``torch.nn.Module`` subclass a config names, or one of the zoo's own classmethod
    presets: ``presets`` holds their import paths (``"module:Cls.preset"``, a registry's
    values).

    Anything else (a function such as ``os:system``, or a classmethod such as
    ``BasePolicy.load``, which unpickles the file it is given) is refused before it is called.

    Example:
        >>> preset = "attn_policies.es_policies:AttentionNeuronPolicy.cartpole"
        >>> resolve_module_builder(preset, presets=[preset]).__name__
        'cartpole'
        >>> resolve_module_builder("torch.nn:Linear").__name__
        'Linear'
    """
    if name in presets:
        obj = import_object(name)
        owner = getattr(obj, "__self__", None)
        if inspect.ismethod(obj) and isinstance(owner, type) and issubclass(owner, torch.nn.Module):
            return obj
    else:
        obj = import_path(name, what)
    if isinstance(obj, type) and issubclass(obj, torch.nn.Module):
        return check_writer(what, name, obj)
    raise ConfigError(f"{what} {name!r} is a {type(obj).__name__}, not a torch.nn.Module subclass")


def resolve_function(name: str, what: str) -> Any:
    """A plain Python function from a package (not a builtin, class or standard-library
    function such as ``os:system`` or ``shutil:rmtree``), checked before it is called.

    Example:
        >>> resolve_function("zoo.runs:contextmanager", "action_fn")
        Traceback (most recent call last):
        ...
        zoo.config.ConfigError: action_fn 'zoo.runs:contextmanager' is a standard-library ...
    """
    obj = import_path(name, what)
    if not inspect.isfunction(obj):
        raise ConfigError(f"{what} {name!r} is a {type(obj).__name__}, not a Python function")
    root = (obj.__module__ or "").split(".")[0]
    if root in sys.stdlib_module_names or root == "builtins":
        raise ConfigError(
            f"{what} {name!r} is a standard-library function; give a function of your package"
        )
    return obj


def is_activation(obj: object) -> bool:
    return isinstance(obj, type) and issubclass(obj, torch.nn.Module)
