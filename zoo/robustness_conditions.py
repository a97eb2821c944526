"""The test conditions of a robustness sweep (:mod:`zoo.robustness`) and how each one
perturbs what a run's agent sees.

A sweep is a list of conditions, parsed from a CLI spec (:func:`parse_sweep`):

- ``shuffle``: the observation as is, and shuffled once per episode;
- ``reshuffle=25,50,100,200,500``: reshuffled every t steps;
- ``channels``: seed 001's E3 columns: 5 obs, 5 obs shuffled, 10 obs (each input duplicated),
  5 obs + 5 pure-noise channels (sigma 0.1); with extra channels an AttentionNeuron's output
  is scaled by (original / new number of inputs), 0.5 here, unless ``rescale=False``;
- ``occlusion=0,0.3,0.5,0.7``: a fraction of the patch tokens removed for the episode;
  with several runs the table is a train-ratio x test-ratio heat map (seed 001's Pong figure);
- ``background=kof,mt_fuji,...``: CarRacing's grass replaced by a picture (E6);
- ``regression``: not a perturbation: the R² of each input regressed on the AttentionNeuron's
  output (:func:`zoo.analysis.input_regression`).

Vector-observation perturbations are the ``attn_envs`` wrappers appended after the run's own
``env_wrapper``; the screen presets (``PuzzlePong``, ``PuzzleCarRacing``) take them as
env kwargs (``reshuffle_every``, ``occlusion``, ``background``); an egocentric grid's
cells are shuffled or masked whole (:func:`prepare_condition`).

Example:
    >>> [c.label for c in parse_sweep("reshuffle=25,50").conditions]
    ['reshuffle every 25', 'reshuffle every 50']
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import gymnasium as gym
import numpy as np

from zoo import factory
from zoo.config_checks import ConfigError, RunConfig, nearest, require_int

__all__ = [
    "Condition",
    "Sweep",
    "cells_note",
    "parse_sweep",
    "prepare_condition",
    "train_ratio",
]

Wrapper = Callable[[gym.Env], gym.Env]
SWEEPS = ("shuffle", "reshuffle", "channels", "occlusion", "background", "sticky", "regression")


@dataclass(frozen=True)
class Condition:
    """One test condition: env kwargs and/or wrappers, and test-time policy settings.

    Attributes:
        label: column name in the table.
        kind: ``"shuffle"``, ``"channels"``, ``"occlusion"``, ``"background"``, ``"sticky"``
            or ``"none"``.
        value: the swept value (t, ratio, picture name, number of inputs, probability).
        extra_inputs: multiplies the number of vector inputs (duplicates / noise channels).
        noise: the extra inputs are pure-noise channels rather than copies.
    """

    label: str
    kind: str = "none"
    value: Any = None
    extra_inputs: int = 1
    noise: bool = False


@dataclass(frozen=True)
class Sweep:
    """A named list of conditions (the table's columns); ``name`` names the output files.

    Attributes:
        name: ``shuffle``, ``reshuffle``, ``channels``, ``occlusion``, ``background``,
            ``sticky`` or ``regression``.
        conditions: the test conditions, in column order (empty for ``regression``).
    """

    name: str
    conditions: list[Condition] = field(default_factory=list)


def _values(name: str, raw: str, cast: Callable[[str], Any]) -> list[Any]:
    if not raw:
        raise ConfigError(f"sweep {name!r} needs values, e.g. '{name}=1,2'")
    try:
        return [cast(v) for v in raw.split(",")]
    except ValueError:
        raise ConfigError(f"sweep {name!r}: cannot read values {raw!r}") from None


def parse_sweep(spec: str) -> Sweep:
    """Read a CLI sweep spec, ``"name"`` or ``"name=v1,v2,..."``.

    Args:
        spec: ``shuffle``, ``reshuffle=T,...``, ``channels``, ``occlusion=R,...``,
            ``background[=NAME,...]`` (default: every shipped picture), ``sticky=P,...``
            (an Atari env's ``repeat_action_probability``) or ``regression``.

    Returns:
        The sweep and its conditions.

    Raises:
        ConfigError: unknown name (with the nearest known one), missing or unreadable values,
            t < 1, an occlusion ratio outside [0, 1) or a sticky probability outside [0, 1].

    Example:
        >>> [c.value for c in parse_sweep("occlusion=0,0.5").conditions]
        [0.0, 0.5]
        >>> parse_sweep("shufle")
        Traceback (most recent call last):
        ...
        zoo.config.ConfigError: unknown sweep 'shufle'. Did you mean 'shuffle'...
    """
    if not isinstance(spec, str):
        raise ConfigError(f"a sweep spec is a string like 'reshuffle=25,50', got {spec!r}")
    name, _, raw = spec.partition("=")
    name = name.strip()
    if name == "shuffle":
        return Sweep(name, [Condition("as is"), Condition("shuffled", "shuffle")])
    if name == "reshuffle":
        ts = _values(name, raw, int)
        for t in ts:
            require_int(t, "sweep 'reshuffle': every t", minimum=1)
        return Sweep(name, [Condition(f"reshuffle every {t}", "shuffle", t) for t in ts])
    if name == "channels":
        return Sweep(
            name,
            [
                Condition("as is"),
                Condition("shuffled", "shuffle"),
                Condition("duplicated x2, shuffled", "channels", extra_inputs=2),
                Condition("+ noise channels (sigma 0.1), shuffled", "channels", 2, 2, True),
            ],
        )
    if name == "occlusion":
        ratios = _values(name, raw, float)
        if any(not 0 <= r < 1 for r in ratios):
            raise ConfigError("sweep 'occlusion': ratios must be in [0, 1)")
        return Sweep(name, [Condition(f"occlusion {r:g}", "occlusion", r) for r in ratios])
    if name == "background":
        from attn_envs.background import available_backgrounds

        names = _values(name, raw or ",".join(available_backgrounds()), str)
        return Sweep(name, [Condition("no change")] + [
            Condition(f"background {n}", "background", n) for n in names
        ])  # fmt: skip
    if name == "sticky":
        probabilities = _values(name, raw, float)
        if any(not 0 <= p <= 1 for p in probabilities):
            raise ConfigError("sweep 'sticky': probabilities must be in [0, 1]")
        return Sweep(name, [Condition(f"sticky {p:g}", "sticky", p) for p in probabilities])
    if name == "regression":
        return Sweep(name, [])
    raise ConfigError(f"unknown sweep {name!r}.{nearest(name, SWEEPS)} Known: {', '.join(SWEEPS)}")


def _env_params(run: RunConfig) -> set[str]:
    """Named parameters of the run's env entry point (the screen presets take perturbations)."""
    from attn_policies.catalog import import_object

    entry = factory.env_spec(run.body["env"]).entry_point
    target = import_object(entry) if isinstance(entry, str) else entry
    if target is None:  # a spec without an entry point: no parameters to read
        return set()
    try:
        return set(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        return set()


def prepare_condition(
    run: RunConfig, condition: Condition, rescale: bool
) -> tuple[RunConfig, list[Wrapper], dict[str, Any] | None]:
    """The run (env kwargs / own wrappers changed), wrappers and policy settings of one
    condition."""
    from attn_envs import (
        BackgroundObservation,
        DuplicateObservation,
        NoiseChannelsObservation,
        OcclusionObservation,
        ShuffleObservation,
    )

    params = _env_params(run)
    env_kwargs = dict(run.body.get("env_kwargs") or {})
    own = factory.wrapper_specs(run.body.get("env_wrapper"))
    wrappers: list[Wrapper] = []
    policy_kwargs = None
    kind, value = condition.kind, condition.value
    if kind == "shuffle" and "reshuffle_every" in params:
        env_kwargs.update(shuffle=True, reshuffle_every=value)
    elif kind in ("shuffle", "occlusion") and _grid_view(run) and not _trained_occluded(own):
        # an egocentric grid's tokens are its cells (what a relational model attends over):
        # cells are moved or masked (as unseen, 0) whole, the (C, H, W) shape kept
        if kind == "shuffle":
            wrappers.append(_on_cells(lambda env: ShuffleObservation(env, reshuffle_every=value)))
        else:
            wrappers.append(_on_cells(lambda env: OcclusionObservation(env, value, fill=0.0)))
    elif kind == "shuffle":
        wrappers.append(lambda env: ShuffleObservation(env, reshuffle_every=value))
    elif kind == "channels":
        if condition.noise:
            wrappers.append(lambda env: NoiseChannelsObservation(env, n=_n_inputs(env), std=0.1))
        else:
            wrappers.append(lambda env: DuplicateObservation(env, copies=condition.extra_inputs))
        wrappers.append(lambda env: ShuffleObservation(env))
        if rescale:
            policy_kwargs = {"output_scale": 1.0 / condition.extra_inputs}
    elif kind == "occlusion" and "occlusion" in params:
        env_kwargs["occlusion"] = value
    elif kind == "occlusion" and _trained_occluded(own):
        # the test ratio replaces the training one (same place, mode and fill), not on top
        own = [(n, {**kw, "ratio": value} if _is_occlusion(n) else kw) for n, kw in own]
    elif kind == "occlusion":
        wrappers.append(lambda env: OcclusionObservation(env, ratio=value))
    elif kind == "sticky":  # an env that takes no such kwarg fails to build: an n/a cell
        env_kwargs["repeat_action_probability"] = value
    elif kind == "background" and "background" in params:
        env_kwargs["background"] = value
    elif kind == "background":
        wrappers.append(lambda env: BackgroundObservation(env, value))
    body = {**run.body, "env_kwargs": env_kwargs}
    if own:
        body["env_wrapper"] = [{name: kwargs} for name, kwargs in own]
    return dataclasses.replace(run, body=body), wrappers, policy_kwargs


def _is_occlusion(wrapper_name: str) -> bool:
    return wrapper_name.endswith("OcclusionObservation")


def _trained_occluded(own: list[tuple[str, dict[str, Any]]]) -> bool:
    return any(_is_occlusion(name) for name, _ in own)


_GRID_VIEWS: dict[str, tuple[int, ...] | None] = {}


def _grid_view(run: RunConfig) -> tuple[int, ...] | None:
    """The ``(C, H, W)`` observation shape when the run's env shows MiniGrid's egocentric
    view (an ``EgocentricGridObservation`` in its wrapper chain), None otherwise."""
    key = json.dumps(run.body, sort_keys=True, default=str)
    if key not in _GRID_VIEWS:
        from zoo.record import egocentric

        env = factory.make_env_fn(run)()
        try:
            shape = cast("tuple[int, ...]", env.observation_space.shape)
            _GRID_VIEWS[key] = tuple(shape) if egocentric(env) and len(shape) == 3 else None
        finally:
            env.close()
    return _GRID_VIEWS[key]


def _on_cells(perturb: Wrapper) -> Wrapper:
    """``perturb`` applied to the cells of a ``(C, H, W)`` grid: the view as ``H * W`` tokens
    of ``C`` values (row-major, as a relational extractor reads it), perturbed, and back."""

    def wrap(env: gym.Env) -> gym.Env:
        from gymnasium import spaces
        from gymnasium.wrappers import TransformObservation

        space = cast(spaces.Box, env.observation_space)  # a grid view: (C, H, W)
        c, h, w = space.shape

        def cells(x: np.ndarray) -> np.ndarray:
            return np.ascontiguousarray(np.asarray(x).transpose(1, 2, 0).reshape(h * w, c))

        def grid(x: np.ndarray) -> np.ndarray:
            return np.ascontiguousarray(np.asarray(x).reshape(h, w, c).transpose(2, 0, 1))

        tokens = TransformObservation(
            env,
            cells,
            spaces.Box(cells(space.low), cells(space.high), dtype=space.dtype),
        )
        inner = perturb(tokens)
        out = cast(spaces.Box, inner.observation_space)
        return TransformObservation(
            inner, grid, spaces.Box(grid(out.low), grid(out.high), dtype=out.dtype)
        )

    return wrap


def cells_note(run: RunConfig, condition: Condition) -> str:
    """What a shuffle or occlusion moved in a grid run (its cells, not its channels)."""
    view = _grid_view(run) if condition.kind in ("shuffle", "occlusion") else None
    if view is None or (condition.kind == "occlusion" and _trained_occluded(
        factory.wrapper_specs(run.body.get("env_wrapper"))
    )):  # fmt: skip
        return ""
    verb = "shuffled" if condition.kind == "shuffle" else "masked as unseen (0)"
    return f"{verb}: the {view[1] * view[2]} cells of the {view[1]}x{view[2]} view, whole"


def _n_inputs(env: gym.Env) -> int:
    return int(np.prod(cast("tuple[int, ...]", env.observation_space.shape)))


def train_ratio(run: RunConfig) -> float:
    """The occlusion ratio a run was trained with: 0 if none.

    Read from the env kwarg ``occlusion`` (screen presets), an ``OcclusionObservation`` in
    ``env_wrapper``, or BC's per-batch ``occlusion`` (a ``[low, high]`` range gives its
    midpoint).
    """
    ratio = (run.body.get("env_kwargs") or {}).get("occlusion")
    for name, kwargs in factory.wrapper_specs(run.body.get("env_wrapper")):
        if _is_occlusion(name):
            ratio = kwargs.get("ratio", ratio)
    if run.algo == "bc" and run.body.get("occlusion") is not None:
        ratio = run.body["occlusion"]
    if isinstance(ratio, (list, tuple)):
        ratio = sum(ratio) / len(ratio) if ratio else 0.0
    return float(ratio or 0.0)
