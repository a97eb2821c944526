"""Env and model factories for SB3 runs: a :class:`RunConfig` in, a VecEnv / algorithm out.

Env stack, innermost first (as SB3's ``make_vec_env`` and rl-baselines3-zoo build it):
``gym.make(env, **env_kwargs)`` -> ``Monitor`` (true episode returns, even under Atari's
life-loss and reward-clipping wrappers) -> ``env_wrapper`` in order -> ``DummyVecEnv`` /
``SubprocVecEnv`` -> ``VecFrameStack(frame_stack)`` -> ``VecNormalize(normalize)``.
An env whose entry point takes ``order_seed`` gets the run seed there unless ``env_kwargs``
sets it, so every env of a run (training actors, evaluation, replays) shares one order.
"""

from __future__ import annotations

import inspect
import sys
import typing
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec, load_env_creator
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.utils import LinearSchedule
from stable_baselines3.common.vec_env import (
    DummyVecEnv,
    SubprocVecEnv,
    VecEnv,
    VecFrameStack,
    VecNormalize,
)

import attn_envs  # noqa: F401  (registers the attn_envs/... ids)
from attn_envs.registration import make_args
from attn_policies.atomic import atomic_write, make_folder
from attn_policies.catalog import POLICIES
from zoo.config_checks import ConfigError, RunConfig, nearest
from zoo.registry import import_module, resolve

WrapperSpec = tuple[str, dict[str, Any]]

# Hyper-parameters that may be given as "lin_<value>" (linear decay to 0, rl-zoo syntax).
SCHEDULE_KEYS = ("learning_rate", "clip_range", "clip_range_vf")
# Constructor arguments the zoo sets itself.
RESERVED = {
    "self",
    "policy",
    "env",
    "policy_kwargs",
    "tensorboard_log",
    "verbose",
    "seed",
    "device",
    "_init_setup_model",
    "kwargs",
    "args",
}


def wrapper_specs(raw: Any, where: str = "env_wrapper") -> list[WrapperSpec]:
    """Normalise ``env_wrapper`` (a name, a ``{name: kwargs}`` or a list of either).

    Example:
        >>> wrapper_specs(["StepPenalty", {"ShuffleObservation": {"reshuffle_every": 5}}])
        [('StepPenalty', {}), ('ShuffleObservation', {'reshuffle_every': 5})]
    """
    if raw is None:
        return []
    items = raw if isinstance(raw, list) else [raw]
    specs: list[WrapperSpec] = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            specs.append((item, {}))
        elif isinstance(item, dict) and len(item) == 1:
            ((name, kwargs),) = item.items()
            if kwargs is not None and not isinstance(kwargs, dict):
                raise ConfigError(f"{where}[{i}] {name}: kwargs must be a mapping, got {kwargs!r}")
            specs.append((name, dict(kwargs or {})))
        else:
            raise ConfigError(
                f"{where}[{i}] must be a wrapper name or a one-key mapping {{name: kwargs}}, "
                f"got {item!r}"
            )
    return specs


def check_kwargs(
    where: str, target: Callable[..., Any], kwargs: Mapping[str, Any], skip: int = 0
) -> None:
    """Raise :class:`ConfigError` for keyword arguments ``target`` does not accept.

    ``target`` is a class (its ``__init__`` is inspected) or a function; ``skip`` drops
    leading positional parameters the caller fills itself (``self``, ``env``, ...).
    """
    label = getattr(target, "__name__", str(target))
    functions = (
        [vars(c)["__init__"] for c in target.__mro__ if "__init__" in vars(c)]
        if isinstance(target, type)
        else [target]
    )
    names: list[str] = []
    for k, fn in enumerate(functions):
        params = list(inspect.signature(fn).parameters.values())[skip if k == 0 else 0 :]
        names += [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            break
    else:
        return  # the chain ends in **kwargs: anything goes
    for key in kwargs:
        if key not in names:
            raise ConfigError(
                f"{where}: {label} has no argument {key!r}."
                f"{nearest(key, names)} Arguments: {', '.join(names)}"
            )


def resolve_wrappers(specs: list[WrapperSpec]) -> list[tuple[type, dict[str, Any]]]:
    out = []
    for i, (name, kwargs) in enumerate(specs):
        try:
            cls = resolve("wrapper", name)
        except ValueError as err:
            raise ConfigError(f"env_wrapper[{i}]: {err}") from None
        check_kwargs(f"env_wrapper[{i}]", cls, kwargs, skip=2)
        out.append((cls, kwargs))
    return out


def env_spec(env_id: str) -> EnvSpec:
    """``gym.spec`` of an id, also in ``gym.make``'s ``"module:EnvId"`` form (the module is
    imported first to register it, e.g. ``pybullet_envs_gymnasium:AntBulletEnv-v0``)."""
    module, sep, name = env_id.rpartition(":")
    if sep and "/" not in module:
        import_module(module, f"env {env_id!r}")  # an allowed module only (zoo.registry)
        env_id = name
    return gym.spec(env_id)


def takes_order_seed(env_id: str) -> bool:
    """Whether the registered env's entry point has an ``order_seed`` argument (E7's
    distractor envs): the zoo then sets it to the run seed unless ``env_kwargs`` does."""
    try:
        entry = env_spec(env_id).entry_point
        creator = load_env_creator(entry) if isinstance(entry, str) else entry
        return creator is not None and "order_seed" in inspect.signature(creator).parameters
    except Exception:  # unknown ids fail later, with gym's own message
        return False


@contextmanager
def built_from(what: str) -> Iterator[None]:
    """A ``ValueError`` or ``TypeError`` of a constructor given config values (an env's,
    a wrapper's, a model's) as a :class:`ConfigError` naming ``what``: the config's to fix.

    Only the construction is wrapped, so a ``ValueError`` later (a bug, numpy's own) stays
    an internal error.

    Example:
        >>> with built_from("exp: env_kwargs {'size': -1}"):
        ...     raise ValueError("size must be >= 1")
        Traceback (most recent call last):
        ...
        zoo.config.ConfigError: exp: env_kwargs {'size': -1} does not build: size must be >= 1
    """
    try:
        yield
    except ConfigError:
        raise
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{what} does not build: {err}") from err


def make_env_fn(
    run: RunConfig,
    monitor_file: str | None = None,
    render_mode: str | None = None,
    extra_wrappers: Sequence[Callable[[gym.Env], gym.Env]] = (),
    overrides: Mapping[str, Any] | None = None,
) -> Callable[[], gym.Env]:
    """A picklable thunk building one env of the run (for Dummy/SubprocVecEnv).

    ``extra_wrappers`` (test-time perturbations) go after the run's own ``env_wrapper``;
    ``overrides`` are merged over the run's ``env_kwargs`` for this env only.
    """
    env_id = run.body["env"]
    env_kwargs = {**(run.body.get("env_kwargs") or {}), **(overrides or {})}
    if "order_seed" not in env_kwargs and takes_order_seed(env_id):
        # E7: the feature order is a property of the run, shared by all of its envs.
        env_kwargs["order_seed"] = run.seed
    if render_mode is not None:
        env_kwargs["render_mode"] = render_mode
    wrappers = resolve_wrappers(wrapper_specs(run.body.get("env_wrapper")))

    def thunk() -> gym.Env:
        if env_id.startswith("ALE/"):  # ale-py registers its ids only when asked
            import ale_py

            gym.register_envs(ale_py)
        make_id, make_kwargs = make_args(env_id, env_kwargs)  # "attn_envs:" for subprocesses
        with built_from(f"{run.name}: env {env_id!r} with env_kwargs {make_kwargs}"):
            env = gym.make(make_id, **make_kwargs)
        if monitor_file is not None:  # Monitor opens its CSV itself, following a symlink:
            atomic_write(f"{monitor_file}.{Monitor.EXT}", b"")  # put a plain file in its place
        env = Monitor(env, filename=monitor_file)
        for i, (cls, kwargs) in enumerate(wrappers):
            with built_from(f"{run.name}: env_wrapper[{i}] {cls.__name__}({kwargs})"):
                env = cls(env, **kwargs)
        for wrap in extra_wrappers:
            env = wrap(env)
        return env

    return thunk


def probe_eval_envs(run: RunConfig) -> None:
    """Build each env of ``eval.env_kwargs`` once, so a misnamed or bad kwarg fails before
    training (and data collection) starts, with one :class:`ConfigError` line."""
    for i, overrides in enumerate(run.eval.env_kwargs or []):
        try:
            make_env_fn(run, overrides=overrides)().close()
        except Exception as err:  # the env's own TypeError / ValueError, gym's errors
            raise ConfigError(
                f"{run.name}: eval.env_kwargs[{i}] = {overrides!r} does not build: {err}"
            ) from err


def make_single_env(run: RunConfig, render_mode: str | None = None) -> gym.Env:
    """One env of the run with every gym wrapper (no vec wrappers), e.g. for recording."""
    return make_env_fn(run, render_mode=render_mode)()


def make_vec_env(
    run: RunConfig,
    n_envs: int | None = None,
    monitor_dir: str | Path | None = None,
    prefix: str = "",
    training: bool = True,
    render_mode: str | None = None,
    extra_wrappers: Sequence[Callable[[gym.Env], gym.Env]] = (),
    env_kwargs: Sequence[Mapping[str, Any]] | None = None,
) -> VecEnv:
    """The run's vectorised env, with frame stacking and normalisation as configured.

    Args:
        run: the run config.
        n_envs: number of envs (default ``n_envs`` of the config).
        monitor_dir: where Monitor CSVs go (``<prefix><rank>.monitor.csv``); None: not saved.
        prefix: Monitor file prefix.
        training: for ``VecNormalize``: update statistics (training) or not (evaluation).
        render_mode: passed to ``gym.make``.
        extra_wrappers: more ``env -> env`` wrappers after the run's ``env_wrapper``.
        env_kwargs: one mapping per env, merged over the run's ``env_kwargs`` (e.g.
            ``eval.env_kwargs``: a fixed start per evaluation env); its length sets ``n``.
    """
    n = len(env_kwargs) if env_kwargs is not None else int(n_envs or run.body.get("n_envs", 1))
    fns = []
    for rank in range(n):
        monitor_file = None
        if monitor_dir is not None:
            make_folder(monitor_dir)  # a symlinked monitor/ is replaced, not followed
            monitor_file = str(Path(monitor_dir) / f"{prefix}{rank}")
        overrides = env_kwargs[rank] if env_kwargs is not None else None
        fns.append(make_env_fn(run, monitor_file, render_mode, extra_wrappers, overrides))
    vec_cls = SubprocVecEnv if run.body.get("vec_env") == "subproc" and n > 1 else DummyVecEnv
    venv: VecEnv = vec_cls(fns)
    if run.body.get("frame_stack"):
        venv = VecFrameStack(venv, int(run.body["frame_stack"]))
    normalize = run.body.get("normalize")
    if normalize:
        kwargs = dict(normalize) if isinstance(normalize, dict) else {}
        venv = VecNormalize(venv, training=training, **kwargs)
        if not training:
            venv.norm_reward = False
    return venv


def _schedule(value: Any, key: str) -> Any:
    if isinstance(value, str):
        if value.startswith("lin_"):
            try:
                start = float(value[4:])
            except ValueError:
                raise ConfigError(f"{key!r}: cannot read {value!r} as 'lin_<number>'") from None
            return LinearSchedule(start, 0.0, 1.0)
        raise ConfigError(f"{key!r} must be a number or 'lin_<number>', got {value!r}")
    return value


def algo_class(run: RunConfig) -> type[BaseAlgorithm]:
    try:
        return resolve("algo", run.algo)
    except ValueError as err:
        raise ConfigError(f"{run.name}: 'algo': {err}") from None


def policy_class(run: RunConfig, algo: type[BaseAlgorithm]) -> type:
    policy = run.body.get("policy")
    if not isinstance(policy, str):
        raise ConfigError(f"{run.name}: 'policy' must be a policy name, got {policy!r}")
    aliases = getattr(algo, "policy_aliases", {})
    if policy in aliases:
        return aliases[policy]
    try:
        return resolve("policy", policy)
    except ValueError as err:
        if "." in policy or ":" in policy:
            raise ConfigError(f"{run.name}: 'policy': {err}") from None
        hint = nearest(policy, [*aliases, *POLICIES])
        raise ConfigError(
            f"{run.name}: unknown policy {policy!r}.{hint} {algo.__name__} takes "
            f"{', '.join(aliases)}, the short names {', '.join(POLICIES)}, or an import path."
        ) from None


def algo_parameters(algo: type[BaseAlgorithm]) -> dict[str, inspect.Parameter]:
    """Constructor parameters of ``algo``, following ``**kwargs`` up the class hierarchy."""
    params: dict[str, inspect.Parameter] = {}
    for cls in algo.__mro__:
        if "__init__" not in vars(cls):
            continue
        sig = inspect.signature(vars(cls)["__init__"]).parameters
        for name, p in sig.items():
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                params.setdefault(name, p)
        if not any(p.kind is p.VAR_KEYWORD for p in sig.values()):
            break
    return params


def hyperparameter_names(algo: type[BaseAlgorithm]) -> list[str]:
    return [name for name in algo_parameters(algo) if name not in RESERVED]


def resolve_policy_kwargs(run: RunConfig, policy: type) -> dict[str, Any]:
    """``policy_kwargs`` with class names resolved and every kwarg checked."""
    raw = dict(run.body.get("policy_kwargs") or {})
    where = f"{run.name}: policy_kwargs"
    kinds = {
        "features_extractor_class": "extractor",
        "activation_fn": "activation",
        "share_features_extractor": "activation",
        "optimizer_class": "optimizer",
    }

    def by_name(mapping: dict[str, Any], at: str) -> dict[str, Any]:
        resolved = dict(mapping)
        for key, value in mapping.items():
            if key in kinds and isinstance(value, str):
                try:
                    resolved[key] = resolve(kinds[key], value)
                except ValueError as err:
                    raise ConfigError(f"{at}.{key}: {err}") from None
        return resolved

    out = by_name(raw, where)
    check_kwargs(where, policy, out, skip=4)
    extractor = out.get("features_extractor_class")
    kwargs = out.get("features_extractor_kwargs")
    if isinstance(kwargs, dict) and isinstance(kwargs.get("activation_fn"), str):
        # only the activation: an extractor's own kwargs may use the other names differently
        picked = by_name(
            {"activation_fn": kwargs["activation_fn"]}, f"{where}.features_extractor_kwargs"
        )
        out["features_extractor_kwargs"] = {**kwargs, **picked}
    if extractor is not None and "features_extractor_kwargs" in out:
        check_kwargs(
            f"{where}.features_extractor_kwargs",
            extractor,
            out["features_extractor_kwargs"],
            skip=2,
        )
    return out


def _literal_choices(algo: type, key: str) -> tuple[Any, ...] | None:
    """The allowed values of a ``Literal``-annotated constructor argument, else None."""
    for cls in algo.__mro__:
        if "__init__" not in vars(cls):
            continue
        try:
            init = vars(cls)["__init__"]  # the class's own, as the guard above says
            hints = typing.get_type_hints(init, vars(sys.modules[cls.__module__]))
        except Exception:  # unresolvable forward references: no static check
            continue
        if key in hints:
            hint = hints[key]
            return typing.get_args(hint) if typing.get_origin(hint) is typing.Literal else None
    return None


def _annotation_types(param: inspect.Parameter) -> tuple[type, ...] | None:
    """Scalar types a parameter's annotation admits (None: not a plain scalar, unchecked)."""
    text = param.annotation if isinstance(param.annotation, str) else str(param.annotation)
    if param.annotation is inspect.Parameter.empty:
        default = param.default
        return (type(default),) if isinstance(default, (bool, str)) else None
    words = set(
        text.replace("[", " ")
        .replace("]", " ")
        .replace(",", " ")
        .replace("|", " ")
        .replace("'", " ")
        .split()
    )
    if words & {
        "Any",
        "Schedule",
        "Callable",
        "dict",
        "Dict",
        "tuple",
        "Tuple",
        "Optional",
        "None",
        "type",
        "Type",
    }:
        return None
    found = tuple(t for t in (bool, int, float, str) if t.__name__ in words)
    return found or None


def resolve_hyperparams(run: RunConfig, algo: type[BaseAlgorithm]) -> dict[str, Any]:
    """The algorithm's constructor arguments from the config, checked and resolved."""
    from zoo.config_checks import check_type

    params = algo_parameters(algo)
    out: dict[str, Any] = {}
    for key in hyperparameter_names(algo):
        if key not in run.body:
            continue
        value = run.body[key]
        if key in SCHEDULE_KEYS:
            value = _schedule(value, key)
        elif key == "replay_buffer_class" and isinstance(value, str):
            try:
                value = resolve("replay buffer", value)
            except ValueError as err:
                raise ConfigError(f"{run.name}: 'replay_buffer_class': {err}") from None
        elif key == "train_freq" and isinstance(value, list):
            value = tuple(value)
        else:
            choices = _literal_choices(algo, key)
            if choices is not None and value not in choices:
                raise ConfigError(
                    f"{run.name}: {key!r} must be one of {', '.join(map(repr, choices))}, "
                    f"got {value!r}.{nearest(str(value), map(str, choices))}"
                )
            types = _annotation_types(params[key])
            if types:
                check_type(run.name, key, value, types)
        out[key] = value
    buffer = out.get("replay_buffer_class")
    if buffer is not None and out.get("replay_buffer_kwargs"):
        check_kwargs(
            f"{run.name}: replay_buffer_kwargs", buffer, out["replay_buffer_kwargs"], skip=4
        )
    return out


def make_model(
    run: RunConfig,
    env: VecEnv,
    tensorboard_log: str | None = None,
    verbose: int = 0,
    probe: bool = False,
) -> BaseAlgorithm:
    """The SB3 algorithm of the run on ``env``, seeded with the run's seed.

    ``probe=True`` shrinks replay buffers, for validation only. The probe builds the model
    on one env, so SB3's warning that ``batch_size`` exceeds ``n_steps * n_envs`` is about
    the probe, not the run, and is silenced there (a run with that mismatch still warns).
    """
    algo = algo_class(run)
    policy = policy_class(run, algo)
    policy_kwargs = resolve_policy_kwargs(run, policy if isinstance(policy, type) else object)
    hyper = resolve_hyperparams(run, algo)
    if probe and "buffer_size" in hyper:
        hyper["buffer_size"] = min(int(hyper["buffer_size"]), 1000)
    what = f"{run.name}: the {run.algo} model (policy, policy_kwargs, hyper-parameters)"
    with warnings.catch_warnings(), built_from(what):
        if probe:
            warnings.filterwarnings("ignore", "You have specified a mini-batch size", UserWarning)
        return algo(
            policy,
            env,
            policy_kwargs=policy_kwargs or None,
            tensorboard_log=tensorboard_log,
            verbose=verbose,
            seed=run.seed,
            device=run.body.get("device", "cpu"),
            **hyper,
        )
