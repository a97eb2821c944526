"""What a report reads of run folders: each run's score (:func:`read_score`) and an
experiment's rows of them (:func:`collect`).

:mod:`zoo.report` (tables), :mod:`zoo.curve_windows` (learning-curve windows and the A/B
rule) read these; this module reads only the run folders.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zoo.config_checks import ConfigError, read_json
from zoo.experiments import Cell, Experiment
from zoo.metrics import read_metrics, series
from zoo.results import eval_policy, final_return

__all__ = ["CellResult", "RunScore", "collect", "md_cell", "md_row", "read_score", "runs_in"]


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


def _number(value: Any, where: str, minimum: float | None = None) -> float:
    """``value`` if it is a finite JSON number (at least ``minimum``), else one
    :class:`ConfigError` naming ``where``: a stranger's ``eval.json`` may hold ``"abc"``,
    ``{}``, ``null`` or ``NaN`` where a score goes, and a table never shows one silently."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where} must be a number, got {_shown(value)}")
    if not math.isfinite(value):
        raise ConfigError(
            f"{where} is {value}: a score that is not a finite number is not tabled "
            "(evaluate the run again, or leave it out)"
        )
    if minimum is not None and value < minimum:
        raise ConfigError(f"{where} must be at least {minimum:g}, got {value}")
    return float(value)


def _count(value: Any, where: str) -> int | None:
    """``value`` if it is absent (None) or a whole number >= 0 (a count or a seed)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{where} must be a whole number >= 0, got {_shown(value)}")
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a JSON mapping, got {_shown(value)}")
    return value


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

    Every value read is checked by type and range first (run folders may come from
    strangers): scores and spreads are finite numbers, counts and seeds whole numbers >= 0.

    Raises:
        ConfigError: ``eval.json`` lacks the score or the policy, or a value is of the wrong
            type or not finite.
    """
    run = Path(run)
    result = _mapping(read_json(run / "eval.json"), f"{run}/eval.json")
    status_file = run / "status.json"
    status = _mapping(read_json(status_file), str(status_file)) if status_file.is_file() else {}
    sd: float | None = None
    episodes: int | None = None
    where = f"{run}/eval.json"
    if score == "test accuracy":
        if "test_accuracy" not in result:
            raise ConfigError(f"{where} has no test_accuracy")
        value = _number(result["test_accuracy"], f"{where}: test_accuracy", minimum=0)
        episodes = _count(result.get("n_test"), f"{where}: n_test")
    else:
        _mapping(result.get("policies") or {}, f"{where}: policies")
        entry = eval_policy(result, policy)
        if entry is None:
            tested = sorted(result.get("policies") or {})
            raise ConfigError(f"{where} has no policy {policy!r} (has {tested})")
        entry = _mapping(entry, f"{where}: policy {policy!r}")
        key = "success_rate" if "success" in score else "mean_reward"
        value = _number(entry.get(key), f"{where}: {key}")
        if key != "success_rate":
            sd = _number(entry.get("std_reward"), f"{where}: std_reward", minimum=0)
        episodes = _count(entry.get("n_episodes"), f"{where}: n_episodes")
    wall = status.get("wall_seconds")
    return RunScore(
        path=run,
        seed=_count(status.get("seed"), f"{status_file}: seed"),
        score=value,
        score_sd=sd,
        episodes=episodes,
        final_return=_from_eval(result, where) if final_from_eval else _final_return(run, final),
        num_timesteps=_count(status.get("num_timesteps"), f"{status_file}: num_timesteps"),
        wall_minutes=None
        if wall is None
        else _number(wall, f"{status_file}: wall_seconds", minimum=0) / 60,
    )


def _from_eval(result: dict[str, Any], where: str) -> float | None:
    training = result.get("training_return")
    if training is None:
        return None
    training = _mapping(training, f"{where}: training_return")
    return _number(training.get("mean_reward"), f"{where}: training_return.mean_reward")


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


MARKDOWN_ESCAPES = str.maketrans(
    {"&": "&amp;", "<": "&lt;", ">": "&gt;", "|": "\\|", "\n": " ", "\r": " "}
)
"""What a table cell's text may not hold as it is: HTML (``<script>``, a ``<!-- report: -->``
marker that the next report would refuse), a ``|`` that splits the cell, a line break."""


def md_cell(value: Any) -> str:
    """``value`` as the text of one Markdown table cell: HTML and table syntax escaped, so a
    folder name or a value from a stranger's run folder shows as text, never as markup.

    Example:
        >>> print(md_cell("<script>alert(1)</script> | <!-- report: x -->"))
        &lt;script&gt;alert(1)&lt;/script&gt; \\| &lt;!-- report: x --&gt;
    """
    return str(value).translate(MARKDOWN_ESCAPES)


def md_row(values: Sequence[Any]) -> str:
    """A Markdown table row, every cell through :func:`md_cell`; an empty cell is ``| |``."""
    return "|" + "|".join(f" {md_cell(v)} " if str(v) else " " for v in values) + "|"
