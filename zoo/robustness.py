"""Robustness sweeps of trained zoo agents (seed 001's tables): ``attn-zoo robustness``.

A sweep is a list of test conditions (:mod:`zoo.robustness_conditions`: ``shuffle``,
``reshuffle``, ``channels``, ``occlusion``, ``background``, ``regression``); each condition
plays the same test episodes (seeds ``seed, seed + 1, ...``, by default the run's
``eval.test_seed``, so the unperturbed column equals ``eval.json``) under one perturbation of
what the agent sees. Episodes run vectorised (each trainer's ``episode_returns``; SB3 and BC
runs use ``eval.n_envs`` copies, in subprocesses when the run says ``vec_env: subproc``;
CMA-ES runs play all episodes as one batch). A perturbation the *env* cannot take
(duplicated channels of an image) is refused with a :class:`~zoo.config.ConfigError` before
any episode is played; one the *agent* cannot take (an FNN given 10 inputs) is reported as
``n/a`` with the reason, not as an error. The CSV, Markdown and PNG tables are
:mod:`zoo.robustness_tables`'.

Long sweeps resume: :func:`robustness_sweep` keeps each finished cell in
``<out>/cells/<sweep>/<key>.json`` (JSON only), where the key is a hash of everything the
cell depends on that lives in files (the model and ``config.yml`` bytes, the condition, the
episodes, seed, ``which`` and ``rescale``); a rerun reuses the cells whose key matches and
plays only the rest. ``fresh=True`` (``attn-zoo robustness --fresh``) plays every cell again,
e.g. after a code change that alters the env or the agent.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attn_policies.atomic import atomic_write, make_folder
from zoo import factory
from zoo.config import ConfigError, RunConfig, require_int
from zoo.config_checks import read_json
from zoo.outputs import make_output_folder
from zoo.robustness_conditions import (
    Condition,
    Sweep,
    cells_note,
    parse_sweep,
    prepare_condition,
    train_ratio,
)
from zoo.robustness_tables import write_table
from zoo.runs import Run, load
from zoo.trainers import get_episode_trainer
from zoo.trainers.contract import EpisodeTrainer

__all__ = [
    "check_sweep",
    "not_played",
    "robustness_sweep",
    "run_labels",
    "run_sweep",
]


def _handles(runs: Sequence[Run | str | Path] | Run | str | Path) -> list[Run]:
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
    changed, wrappers, _ = prepare_condition(run, condition, rescale)
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
                if cells_note(run, condition):  # not the cells of the channel-shuffling code
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
            changed, wrappers, policy_kwargs = prepare_condition(run, condition, rescale)
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
                row["note"] = "; ".join(n for n in (settings, cells_note(run, condition)) if n)
            rows.append(row)
            if cell is not None:
                assert cache is not None  # cells are kept only under a cache folder
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


def _digests(handle: Run, trainer: EpisodeTrainer, which: str) -> dict[str, str]:
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
        kept = read_json(path)
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
    folder = Path(out) if out else make_output_folder(handles[0].path, "robustness")
    rows = run_sweep(
        handles, sweep, n_episodes, seed, which, rescale, cache=folder / "cells", fresh=fresh
    )
    write_table(rows, sweep.name, folder)
    return rows
