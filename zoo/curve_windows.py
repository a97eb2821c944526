"""Learning curves by window of steps: each run's training return per window
(:func:`window_returns`), a table of them over seeds (:func:`window_table`) and the
learning-curve A/B rule (:func:`curves_match`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from zoo.metrics import read_metrics, series
from zoo.run_scores import CellResult, md_row

__all__ = ["WINDOW_COLUMNS", "curves_match", "window_returns", "window_table"]

WINDOW_COLUMNS = ("cell", "run", "seed", "window_start", "window_end", "mean_return")
"""The columns of ``windows.csv`` (:func:`window_table`'s rows)."""


def window_returns(run: str | Path, width: float) -> np.ndarray:
    """Mean return of the training episodes that ended in each window of ``width`` steps,
    ``(0, width]``, ``(width, 2 width]``, ...; NaN where none ended.

    Example:
        >>> import tempfile
        >>> run = Path(tempfile.mkdtemp())
        >>> rows = ["step,wall_time,metric,value"]
        >>> rows += [f"{s},0,episode_return,{v}" for s, v in [(40, -21), (100, -19), (250, -15)]]
        >>> _ = (run / "metrics.csv").write_text("\\n".join(rows) + "\\n")
        >>> window_returns(run, 100).tolist()  # an episode ending at step 100 is in (0, 100]
        [-20.0, nan, -15.0]
    """
    steps, returns = series(read_metrics(run), "episode_return")
    if len(steps) == 0:
        return np.zeros(0)
    index = np.maximum(np.ceil(steps / width).astype(int) - 1, 0)
    counts = np.bincount(index)
    sums = np.bincount(index, weights=returns)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _steps_text(steps: float) -> str:
    for size, suffix in ((1e6, "M"), (1e3, "k")):
        if steps >= size:
            return f"{steps / size:g}{suffix}"
    return f"{steps:g}"


def _window_grid(cell: CellResult, width: float) -> np.ndarray:
    """:func:`window_returns` of each run of ``cell``, ``(runs, windows)``, NaN-padded."""
    per_run = [window_returns(r.path, width) for r in cell.runs]
    grid = np.full((len(per_run), max((len(w) for w in per_run), default=0)), np.nan)
    for i, values in enumerate(per_run):
        grid[i, : len(values)] = values
    return grid


def window_table(cells: Sequence[CellResult], width: float) -> tuple[str, list[list[Any]]]:
    """Each cell's training return by window of ``width`` steps (:func:`window_returns`):
    the mean over its runs ± their sd, each run's figure after it; and the rows per run and
    window for a CSV (``cell, run, seed, window_start, window_end, mean_return``).

    A learning-curve A/B reads here whether one change moves the curve more than seeds do.
    """
    grids = [_window_grid(row, width) for row in cells]
    n = max((g.shape[1] for g in grids), default=0)
    heads = [f"{_steps_text(k * width)}-{_steps_text((k + 1) * width)}" for k in range(n)]
    lines = [md_row(["cell", "runs", *heads]), "| --- | ---: |" + " ---: |" * n]
    rows: list[list[Any]] = []
    for row, grid in zip(cells, grids, strict=True):
        grid = np.pad(grid, ((0, 0), (0, n - grid.shape[1])), constant_values=np.nan)
        texts = []
        for k in range(n):
            column = grid[:, k][~np.isnan(grid[:, k])]
            if len(column) == 0:
                texts.append("")
            elif len(column) == 1:
                texts.append(f"{column[0]:.1f}")
            else:
                each = " / ".join(f"{v:.1f}" for v in column)
                texts.append(f"{column.mean():.1f} ± {column.std(ddof=1):.1f} ({each})")
        lines.append(md_row([row.cell.label, len(row.runs), *texts]))
        for r, values in zip(row.runs, grid, strict=True):
            for k, value in enumerate(values):
                if not np.isnan(value):
                    seed = "" if r.seed is None else r.seed
                    start, end = int(k * width), int((k + 1) * width)
                    rows.append(
                        [row.cell.label, r.path.as_posix(), seed, start, end, f"{value:.6g}"]
                    )
    return "\n".join(lines), rows


def curves_match(
    base: CellResult,
    new: CellResult,
    width: float,
    window_tolerance: float = 1.0,
    test_sds: float = 2.0,
) -> dict[str, Any]:
    """A learning-curve A/B of two cells (same command, one change), by a rule fixed in
    advance: ``new`` matches ``base`` when, in every window of ``width`` steps, its mean
    training return over seeds (:func:`window_returns`) is within ``window_tolerance`` of
    ``base``'s, and its mean test score within ``base``'s mean ± ``test_sds`` sd over seeds.

    Returns the figures behind the verdict (JSON-ready) and ``"match"``; windows where
    either cell has no episode are left out of the rule, and the result says how many.

    Raises:
        ValueError: ``base`` has fewer than two runs (no sd over seeds to compare with).
    """
    if len(base.runs) < 2:
        raise ValueError(f"{base.cell.label}: an A/B needs at least two base seeds")

    def means(cell: CellResult) -> np.ndarray:  # NaN where no run has an episode
        grid = _window_grid(cell, width)
        counts = (~np.isnan(grid)).sum(axis=0)
        with np.errstate(invalid="ignore"):
            return np.nansum(grid, axis=0) / counts

    a, b = means(base), means(new)
    n = min(len(a), len(b))
    gaps = np.abs(b[:n] - a[:n])
    compared = ~np.isnan(gaps)
    base_tests = [r.score for r in base.runs]
    mean, sd = statistics.mean(base_tests), statistics.stdev(base_tests)
    new_test = statistics.mean(r.score for r in new.runs)
    windows_hold = bool(np.all(gaps[compared] <= window_tolerance))
    test_holds = abs(new_test - mean) <= test_sds * sd
    return {
        "base": base.cell.label,
        "new": new.cell.label,
        "seeds": [len(base.runs), len(new.runs)],
        "window_steps": width,
        "window_means": [[round(float(x), 3) for x in a[:n]], [round(float(x), 3) for x in b[:n]]],
        "windows_compared": int(compared.sum()),
        "largest_window_gap": round(float(gaps[compared].max()), 3) if compared.any() else None,
        "window_tolerance": window_tolerance,
        "test": {
            "base_mean": round(mean, 3),
            "base_sd": round(sd, 3),
            "new_mean": round(new_test, 3),
            "sds": test_sds,
        },
        "match": windows_hold and test_holds,
    }
