"""What a report reads of run folders: each run's score (:func:`read_score`) and an
experiment's rows of them (:func:`collect`).

:mod:`zoo.report` (tables), :mod:`zoo.curve_windows` (learning-curve windows and the A/B
rule) read these; this module reads only the run folders.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zoo.config_checks import ConfigError
from zoo.experiments import Cell, Experiment
from zoo.metrics import read_metrics, series
from zoo.results import eval_policy, final_return

__all__ = ["CellResult", "RunScore", "collect", "md_row", "read_score", "runs_in"]


@dataclass(frozen=True)
class RunScore:
    """What a table reads of one run folder (:func:`read_score`)."""

    path: Path
    seed: int | None
    score: float
    score_sd: float | None  # over the test episodes
    episodes: int | None
    final_return: float | None  # training episodes' return at the end, when logged
    num_timesteps: int | None
    wall_minutes: float | None


@dataclass(frozen=True)
class CellResult:
    cell: Cell
    runs: tuple[RunScore, ...]


def runs_in(folder: Path) -> list[Path]:
    """``folder`` if it is a finished run folder (it has ``eval.json``), else the ones
    directly inside it, sorted."""
    if (folder / "eval.json").is_file():
        return [folder]
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if (p / "eval.json").is_file())


def read_score(
    run: str | Path,
    score: str,
    policy: str | None = None,
    final: float = 0.1,
    final_from_eval: bool = False,
) -> RunScore:
    """One run's score (see :class:`zoo.experiments.Experiment`), its spread over test
    episodes, and its training episodes' final return (:func:`zoo.results.final_return`)
    when it logged any.

    Raises:
        ConfigError: ``eval.json`` lacks the score or the policy.
    """
    run = Path(run)
    result = json.loads((run / "eval.json").read_text())
    status_file = run / "status.json"
    status: dict[str, Any] = json.loads(status_file.read_text()) if status_file.is_file() else {}
    sd: float | None = None
    episodes: int | None = None
    if score == "test accuracy":
        if "test_accuracy" not in result:
            raise ConfigError(f"{run}/eval.json has no test_accuracy")
        value = float(result["test_accuracy"])
        episodes = result.get("n_test")
    else:
        entry = eval_policy(result, policy)
        if entry is None:
            tested = sorted(result.get("policies") or {})
            raise ConfigError(f"{run}/eval.json has no policy {policy!r} (has {tested})")
        key = "success_rate" if "success" in score else "mean_reward"
        value = float(entry[key])
        sd = None if key == "success_rate" else float(entry["std_reward"])
        episodes = entry.get("n_episodes")
    return RunScore(
        path=run,
        seed=status.get("seed"),
        score=value,
        score_sd=sd,
        episodes=episodes,
        final_return=_from_eval(result) if final_from_eval else _final_return(run, final),
        num_timesteps=status.get("num_timesteps"),
        wall_minutes=status["wall_seconds"] / 60 if "wall_seconds" in status else None,
    )


def _from_eval(result: dict[str, Any]) -> float | None:
    training = result.get("training_return")
    return None if training is None else float(training["mean_reward"])


def _final_return(run: Path, final: float) -> float | None:
    if not (run / "metrics.csv").is_file():
        return None
    steps, returns = series(read_metrics(run), "episode_return")
    if len(steps) == 0:
        return None
    fraction = final if final < 1 else min(1.0, final / float(np.max(steps)))
    return final_return(steps, returns, fraction)


def collect(
    experiment: Experiment, results: str | Path = "results", folders: Sequence[str | Path] = ()
) -> tuple[CellResult, ...]:
    """The experiment's rows: its cells (:data:`zoo.experiments.EXPERIMENTS`) under
    ``results``, or one row per folder of ``folders`` (a run folder, or a folder of seed run
    folders).

    Raises:
        ConfigError: a cell or folder holds no finished run folder.
    """
    if folders:
        cells = [Cell(str(f), "", "", None) for f in folders]
        groups = [runs_in(Path(f)) for f in folders]
    else:
        cells = list(experiment.cells)
        root = Path(results)
        groups = [
            [run for match in sorted(root.glob(c.pattern)) for run in runs_in(match)] for c in cells
        ]
    rows = []
    for cell, runs in zip(cells, groups, strict=True):
        if not runs:
            where = cell.label if folders else f"{results}/{cell.pattern}"
            raise ConfigError(f"{where}: no finished run folder (a folder with eval.json)")
        scores = tuple(
            read_score(
                r, experiment.score, cell.policy, experiment.final, experiment.final_from_eval
            )
            for r in runs
        )
        rows.append(CellResult(cell, scores))
    return tuple(rows)


def md_row(values: Sequence[Any]) -> str:
    """A Markdown table row; an empty cell is ``| |``."""
    return "|" + "|".join(f" {v} " if str(v) else " " for v in values) + "|"
