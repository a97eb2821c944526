"""Robustness sweeps of trained zoo agents (seed 001's tables): ``attn-zoo robustness``.

A sweep is a list of test conditions; each condition plays the same test episodes (seeds
``seed, seed + 1, ...``, by default the run's ``eval.test_seed``, so the unperturbed column
equals ``eval.json``) under one perturbation of what the agent sees:

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
env kwargs (``reshuffle_every``, ``occlusion``, ``background``). Episodes run vectorised
(each trainer's ``episode_returns``; SB3 and BC runs use ``eval.n_envs`` copies, in
subprocesses when the run says ``vec_env: subproc``; CMA-ES runs play all episodes as one
batch). A perturbation the *env* cannot take (duplicated channels of an image) is refused
with a :class:`~zoo.config.ConfigError` before any episode is played; one the *agent* cannot
take (an FNN given 10 inputs) is reported as ``n/a`` with the reason, not as an error.
The CSV, Markdown and PNG tables are :mod:`zoo.robustness_tables`' (its ``markdown`` and
``write_table`` are importable from here too).

Long sweeps resume: :func:`robustness_sweep` keeps each finished cell in
``<out>/cells/<sweep>/<key>.json`` (JSON only), where the key is a hash of everything the
cell depends on that lives in files (the model and ``config.yml`` bytes, the condition, the
episodes, seed, ``which`` and ``rescale``); a rerun reuses the cells whose key matches and
plays only the rest. ``fresh=True`` (``attn-zoo robustness --fresh``) plays every cell again,
e.g. after a code change that alters the env or the agent.

Example:
    >>> [c.label for c in parse_sweep("reshuffle=25,50").conditions]
    ['reshuffle every 25', 'reshuffle every 50']
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from attn_policies.atomic import atomic_write, make_folder
from zoo import factory
from zoo.config import ConfigError, RunConfig, nearest, require_int
from zoo.outputs import output_folder
from zoo.robustness_tables import write_table
from zoo.runs import Run, load
from zoo.trainers import get_episode_trainer

__all__ = [
    "Condition",
    "Sweep",
    "check_sweep",
    "not_played",
    "parse_sweep",
    "robustness_sweep",
    "run_labels",
    "run_sweep",
    "train_ratio",
]

Wrapper = Callable[[gym.Env], gym.Env]
SWEEPS = ("shuffle", "reshuffle", "channels", "occlusion", "background", "regression")


@dataclass(frozen=True)
class Condition:
    """One test condition: env kwargs and/or wrappers, and test-time policy settings.

    Attributes:
        label: column name in the table.
        kind: ``"shuffle"``, ``"channels"``, ``"occlusion"``, ``"background"`` or ``"none"``.
        value: the swept value (t, ratio, picture name, number of inputs).
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
        name: ``shuffle``, ``reshuffle``, ``channels``, ``occlusion``, ``background`` or
            ``regression``.
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
            ``background[=NAME,...]`` (default: every shipped picture) or ``regression``.

    Returns:
        The sweep and its conditions.

    Raises:
        ConfigError: unknown name (with the nearest known one), missing or unreadable values,
            t < 1 or an occlusion ratio outside [0, 1).

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
    if name == "regression":
        return Sweep(name, [])
    raise ConfigError(f"unknown sweep {name!r}.{nearest(name, SWEEPS)} Known: {', '.join(SWEEPS)}")


def _env_params(run: RunConfig) -> set[str]:
    """Named parameters of the run's env entry point (the screen presets take perturbations)."""
    from attn_policies.catalog import import_object

    entry = factory.env_spec(run.body["env"]).entry_point
    target = import_object(entry) if isinstance(entry, str) else entry
    try:
        return set(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        return set()


def _prepare(
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
            shape = env.observation_space.shape
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

        space = env.observation_space
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
        out = inner.observation_space
        return TransformObservation(
            inner, grid, spaces.Box(grid(out.low), grid(out.high), dtype=out.dtype)
        )

    return wrap


def _cells_note(run: RunConfig, condition: Condition) -> str:
    """What a shuffle or occlusion moved in a grid run (its cells, not its channels)."""
    view = _grid_view(run) if condition.kind in ("shuffle", "occlusion") else None
    if view is None or (condition.kind == "occlusion" and _trained_occluded(
        factory.wrapper_specs(run.body.get("env_wrapper"))
    )):  # fmt: skip
        return ""
    verb = "shuffled" if condition.kind == "shuffle" else "masked as unseen (0)"
    return f"{verb}: the {view[1] * view[2]} cells of the {view[1]}x{view[2]} view, whole"


def _n_inputs(env: gym.Env) -> int:
    return int(np.prod(env.observation_space.shape))


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


def _handles(runs: Sequence[Run | str | Path]) -> list[Run]:
    if isinstance(runs, (str, Path, Run)):
        runs = [runs]
    if not runs:
        raise ConfigError("a robustness sweep needs at least one run folder")
    return [r if isinstance(r, Run) else load(r) for r in runs]


def _label(run: RunConfig) -> str:
    return f"{run.experiment}/{run.tag}" if run.tag else run.experiment


def run_labels(paths: Sequence[Path]) -> list[str]:
    """Table row names: each run folder's name (``results/cartpole_pi/pi`` is ``pi``),
    with as many parent folders as make the names distinct.

    Example:
        >>> run_labels([Path("a/x/pi"), Path("b/x/pi"), Path("c/fnn")])
        ['a/x/pi', 'b/x/pi', 'fnn']
    """
    parts = [Path(p).resolve().parts for p in paths]
    labels = []
    for mine in parts:
        for depth in range(1, len(mine) + 1):
            label = mine[-depth:]
            if sum(other[-depth:] == label for other in parts) == 1 or depth == len(mine):
                break
        labels.append("/".join(label))
    return labels


def _check_env(run: RunConfig, condition: Condition, rescale: bool) -> None:
    """Build one env of the condition (no agent): a wrapper that cannot take it raises."""
    changed, wrappers, _ = _prepare(run, condition, rescale)
    try:
        env = factory.make_env_fn(changed, extra_wrappers=wrappers)()
    except (TypeError, ValueError, FileNotFoundError) as err:
        raise ConfigError(
            f"{_label(run)}: its env {run.body['env']} cannot take the condition "
            f"{condition.label!r}: {str(err).splitlines()[0]}"
        ) from None
    env.close()


def check_sweep(
    runs: Sequence[Run | str | Path] | Run | str | Path,
    sweep: Sweep | str,
    rescale: bool = True,
) -> Sweep:
    """Refuse, before any episode, a sweep that some run's env cannot take.

    Args:
        runs: run handles or folders.
        sweep: a :class:`Sweep` or a spec for :func:`parse_sweep`.
        rescale: as in :func:`run_sweep`.

    Returns:
        The parsed sweep.

    Raises:
        ConfigError: a bad spec, a folder that is no run, or a perturbation the env refuses
            (e.g. duplicated channels of an image observation).
    """
    sweep = parse_sweep(sweep) if isinstance(sweep, str) else sweep
    for handle in _handles(runs):
        for condition in sweep.conditions:
            _check_env(handle.config, condition, rescale)
    return sweep


def run_sweep(
    runs: Sequence[Run | str | Path] | Run | str | Path,
    sweep: Sweep | str,
    n_episodes: int | None = None,
    seed: int | None = None,
    which: str = "best",
    rescale: bool = True,
    cache: str | Path | None = None,
    fresh: bool = False,
) -> list[dict[str, Any]]:
    """One row per (run, condition): mean and std of the return over the test episodes.

    Every condition plays the same episodes (seeds ``seed, seed + 1, ...``).

    Args:
        runs: run handles or folders (several: one table row each; ``occlusion`` with
            runs of different training ratios makes the heat map).
        sweep: a :class:`Sweep` or a spec for :func:`parse_sweep`.
        n_episodes: episodes per cell; default each run's ``eval.final_episodes``
            (1000 for the E3 configs).
        seed: first episode seed; default each run's ``eval.test_seed``.
        which: ``"best"`` or ``"last"`` model.
        rescale: with duplicated / noise channels, pass ``output_scale`` = original / new
            number of inputs to the policy (seed 001's x0.5); False keeps it at 1.
        cache: folder of finished cells (see the module docstring); None: keep none.
        fresh: play every cell even where ``cache`` holds it (and replace it there).

    Returns:
        Rows with ``run``, ``experiment`` (the table row's name: the run folder's name,
        :func:`run_labels`), ``condition``, ``value``, ``train_ratio``,
        ``mean_reward``, ``std_reward``, ``n_episodes`` and ``note`` (why a cell is n/a, or
        the test-time policy setting used); ``regression`` rows hold ``r2`` instead.

    Raises:
        ConfigError: see :func:`check_sweep`.
    """
    if n_episodes is not None:
        require_int(n_episodes, "episodes per cell", minimum=1)
    handles = _handles(runs)
    sweep = check_sweep(handles, sweep, rescale)
    rows: list[dict[str, Any]] = []
    for handle, label in zip(handles, run_labels([h.path for h in handles]), strict=True):
        run = handle.config
        if sweep.name == "regression":
            from zoo.analysis import input_regression

            result = input_regression(handle, n_episodes=n_episodes or 100, seed=seed or 0)
            rows += [
                {"run": str(handle.path), "experiment": label, "condition": name, "r2": r2,
                 "n_samples": result["n_samples"], "n_episodes": result["n_episodes"]}
                for name, r2 in result["inputs"].items()
            ]  # fmt: skip
            continue
        trainer = get_episode_trainer(run.algo)
        n = int(n_episodes or run.eval.final_episodes)
        test_seed = run.eval.test_seed if seed is None else int(seed)
        files = _digests(handle, trainer, which) if cache is not None else {}
        for condition in sweep.conditions:
            cell = None
            if cache is not None:
                key = _cell_key(files, condition, n, test_seed, which, rescale)
                if _cells_note(run, condition):  # not the cells of the channel-shuffling code
                    key = hashlib.sha256(f"{key} cells".encode()).hexdigest()
                cell = Path(cache) / sweep.name / f"{key[:24]}.json"
                kept = None if fresh else _read_cell(cell, key)
                if kept is not None:
                    rows.append({**kept, "run": str(handle.path), "experiment": label})
                    continue
            row: dict[str, Any] = {
                "run": str(handle.path),
                "experiment": label,
                "condition": condition.label,
                "value": condition.value,
                "train_ratio": train_ratio(run),
                "mean_reward": math.nan,
                "std_reward": math.nan,
                "n_episodes": 0,
                "note": "",
            }
            changed, wrappers, policy_kwargs = _prepare(run, condition, rescale)
            try:
                result = trainer.episode_returns(
                    handle.path,
                    changed,
                    wrappers=wrappers,
                    n_episodes=n,
                    seed=test_seed,
                    which=which,
                    policy_kwargs=policy_kwargs,
                )
            except (ValueError, RuntimeError, TypeError) as err:
                # the env took the condition (check_sweep), so the agent cannot: a table cell
                row["note"] = f"n/a: {_reason(err)}"
            else:
                rewards = np.asarray(result["rewards"], dtype=float)
                row.update(
                    mean_reward=float(rewards.mean()),
                    std_reward=float(rewards.std()),
                    n_episodes=len(rewards),
                )
                settings = ", ".join(f"{k}={v:g}" for k, v in (policy_kwargs or {}).items())
                row["note"] = "; ".join(n for n in (settings, _cells_note(run, condition)) if n)
            rows.append(row)
            if cell is not None:
                make_folder(cell.parent, inside=Path(cache).parent)  # links are replaced
                atomic_write(cell, json.dumps({"key": key, "row": row}, indent=1, default=str))
    return rows


REASON_CHARS = 400
"""Longest reason kept in an n/a cell's note."""


def _reason(err: BaseException) -> str:
    """The error on one line: its first lines (a state_dict error names the misfit there)."""
    text = " ".join(" ".join(str(err).splitlines()[:4]).split()) or type(err).__name__
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 3] + "..."


def not_played(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of cells that could not be played (``n/a``; ``regression`` rows are
    played by construction)."""
    return [r for r in rows if "r2" not in r and not r.get("n_episodes")]


def _digests(handle: Run, trainer: Any, which: str) -> dict[str, str]:
    """sha256 of the files a cell's result depends on: the model (and its normalisation
    statistics) and ``config.yml``."""
    found = trainer.model_file(handle.path, which)
    paths = [Path(f) for f in (found if isinstance(found, tuple) else (found,))]
    paths.append(handle.path / "config.yml")
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "absent"
        for p in paths
    }


def _cell_key(
    files: dict[str, str], condition: Condition, n: int, seed: int, which: str, rescale: bool
) -> str:
    spec = {
        "files": files,
        "condition": dataclasses.asdict(condition),
        "n_episodes": n,
        "seed": seed,
        "which": which,
        "rescale": rescale,
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()


CELL_FIELDS = ("condition", "value", "train_ratio", "mean_reward", "std_reward", "n_episodes")


def _read_cell(path: Path, key: str) -> dict[str, Any] | None:
    """The row kept in ``path`` for ``key``; None if absent, unreadable or for another key."""
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or kept.get("key") != key:
        return None
    row = kept.get("row")
    if not isinstance(row, dict):
        return None
    if not all(f in row for f in CELL_FIELDS):
        return None
    return row


def robustness_sweep(
    runs: Sequence[Run | str | Path] | Run | str | Path,
    sweep: Sweep | str,
    *,
    n_episodes: int | None = None,
    seed: int | None = None,
    which: str = "best",
    rescale: bool = True,
    out: str | Path | None = None,
    fresh: bool = False,
) -> list[dict[str, Any]]:
    """:func:`run_sweep`, then the tables ``<out>/<sweep>.csv``, ``.md`` and ``.png``; each
    finished cell is kept in ``<out>/cells/`` as it completes, so a killed sweep resumes.

    Args:
        runs, sweep, n_episodes, seed, which, rescale, fresh: as in :func:`run_sweep`.
        out: folder for the tables; default ``robustness`` in the first run's
            :func:`zoo.outputs.output_folder` (the run folder, or ``runs/...`` for a run
            under version control).

    Returns:
        The rows of :func:`run_sweep`.
    """
    handles = _handles(runs)
    sweep = parse_sweep(sweep) if isinstance(sweep, str) else sweep
    # by default a symlinked robustness/ is replaced, never followed (an --out is the user's)
    folder = Path(out) if out else make_folder(output_folder(handles[0].path) / "robustness")
    rows = run_sweep(
        handles, sweep, n_episodes, seed, which, rescale, cache=folder / "cells", fresh=fresh
    )
    write_table(rows, sweep.name, folder)
    return rows
