"""The tables of a robustness sweep (:mod:`zoo.robustness`): CSV, Markdown and a figure.

One row per (run, condition) as :func:`zoo.robustness.run_sweep` returns them; runs become
table rows, conditions columns, each cell ``mean ± std`` of the return (``r2`` for the
``regression`` sweep), ``n/a`` where the agent could not take the condition.

Example:
    >>> rows = [
    ...     {"experiment": "pi", "condition": "as is", "mean_reward": 1.0, "std_reward": 0.5,
    ...      "n_episodes": 3, "note": ""},
    ...     {"experiment": "pi", "condition": "shuffled", "mean_reward": float("nan"),
    ...      "std_reward": float("nan"), "n_episodes": 0, "note": "n/a: no"},
    ... ]
    >>> print(markdown(rows), end="")
    | agent | as is | shuffled |
    | --- | --- | --- |
    | pi | 1.0 ± 0.5 | n/a |
    <BLANKLINE>
    Episodes per cell: 3.
    - pi, shuffled: n/a: no
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attn_policies.atomic import atomic_path, atomic_write
from attn_policies.canvas import new_figure, save_figure

__all__ = ["heat_grid", "markdown", "plot", "write_table"]


def _cell(row: dict[str, Any]) -> str:
    if "r2" in row:
        return f"{row['r2']:.3f}"
    if not row["n_episodes"]:
        return "n/a"
    return f"{row['mean_reward']:.1f} ± {row['std_reward']:.1f}"


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    """Runs as rows, conditions as columns, ``mean ± std``; notes listed below."""
    conditions = list(dict.fromkeys(r["condition"] for r in rows))
    experiments = list(dict.fromkeys(r["experiment"] for r in rows))
    lines = [
        "| agent | " + " | ".join(conditions) + " |",
        "| --- |" + " --- |" * len(conditions),
    ]
    for exp in experiments:
        cells = {r["condition"]: _cell(r) for r in rows if r["experiment"] == exp}
        lines.append(f"| {exp} | " + " | ".join(cells.get(c, "") for c in conditions) + " |")
    n = sorted({r["n_episodes"] for r in rows if r.get("n_episodes")})
    notes = sorted(
        {f"{r['experiment']}, {r['condition']}: {r['note']}" for r in rows if r.get("note")}
    )
    footer = [f"\nEpisodes per cell: {', '.join(map(str, n))}."] if n else []
    return "\n".join(lines + footer + [f"- {note}" for note in notes]) + "\n"


def heat_grid(
    rows: Sequence[dict[str, Any]],
    trains: Sequence[float] | None = None,
    tests: Sequence[float] | None = None,
) -> tuple[list[float], list[float], np.ndarray]:
    """An occlusion sweep's heat map: the mean return per (training ratio, test ratio), runs
    sharing a training ratio averaged, NaN where none played (or the agent could not).

    ``trains`` / ``tests`` fix the axes (default: the ratios in ``rows``); rows may come
    straight from :func:`write_table`'s CSV (values as text).

    Example:
        >>> rows = [{"train_ratio": "0.5", "value": "0.1", "mean_reward": "3", "n_episodes": "2"},
        ...         {"train_ratio": 0.5, "value": 0.1, "mean_reward": 5.0, "n_episodes": 2}]
        >>> heat_grid(rows, tests=[0.0, 0.1])
        ([0.5], [0.0, 0.1], array([[nan,  4.]]))
    """
    played = [r for r in rows if int(float(r.get("n_episodes") or 0))]
    if trains is None:
        trains = sorted({float(r["train_ratio"]) for r in rows})
    if tests is None:
        tests = sorted({float(r["value"]) for r in rows})
    total = np.zeros((len(trains), len(tests)))
    count = np.zeros_like(total)
    for r in played:
        i = np.flatnonzero(np.isclose(trains, float(r["train_ratio"])))
        j = np.flatnonzero(np.isclose(tests, float(r["value"])))
        if len(i) and len(j):
            total[i[0], j[0]] += float(r["mean_reward"])
            count[i[0], j[0]] += 1
    grid = np.divide(total, count, out=np.full_like(total, np.nan), where=count > 0)
    return list(trains), list(tests), grid


def plot(rows: Sequence[dict[str, Any]], title: str, path: Path) -> Path:
    """A bar chart (mean ± std per condition and agent), or the occlusion heat map."""
    fig = new_figure(8, 4.5)
    ax = fig.subplots()
    experiments = list(dict.fromkeys(r["experiment"] for r in rows))
    conditions = list(dict.fromkeys(r["condition"] for r in rows))
    value = "r2" if rows and "r2" in rows[0] else "mean_reward"
    heat = (
        len(experiments) > 1
        and all(r.get("value") is not None for r in rows)
        and (title == "occlusion")
    )
    if heat:
        trains, tests, grid = heat_grid(rows)
        image = ax.imshow(grid, cmap="viridis", aspect="auto")
        for (i, j), v in np.ndenumerate(grid):
            light = (
                not np.isnan(v) and float(np.asarray(image.norm(v))) > 0.6
            )  # viridis' yellow end
            ax.text(j, i, "n/a" if np.isnan(v) else f"{v:.3g}", ha="center", va="center",
                    color="k" if light else "w")  # fmt: skip
        ax.set_xticks(range(len(tests)), [f"{t:g}" for t in tests])
        ax.set_yticks(range(len(trains)), [f"{t:g}" for t in trains])
        ax.set_xlabel("test occlusion ratio")
        ax.set_ylabel("train occlusion ratio")
        fig.colorbar(image, ax=ax, label="mean return")
    else:
        width = 0.8 / max(len(experiments), 1)
        for k, exp in enumerate(experiments):
            by = {r["condition"]: r for r in rows if r["experiment"] == exp}
            means = [by.get(c, {}).get(value, math.nan) for c in conditions]
            errs = [by.get(c, {}).get("std_reward", 0.0) for c in conditions]
            x = np.arange(len(conditions)) + k * width
            ax.bar(x, means, width, yerr=None if value == "r2" else errs, label=exp, capsize=2)
        ax.set_xticks(np.arange(len(conditions)) + 0.4 - width / 2, conditions, rotation=20,
                      ha="right", fontsize=8)  # fmt: skip
        ax.set_ylabel("R²" if value == "r2" else "mean return (± std)")
        ax.legend(fontsize=8)
    ax.set_title(f"robustness: {title}")
    return save_figure(fig, path, dpi=110)


def write_table(rows: Sequence[dict[str, Any]], name: str, out: str | Path) -> list[Path]:
    """Write ``<out>/<name>.csv`` (every row), ``.md`` (agents x conditions, mean ± std, n)
    and ``.png`` (bar chart, or the heat map for an ``occlusion`` sweep of several runs).

    Returns:
        The three paths, in that order.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with atomic_path(out / f"{name}.csv") as tmp, tmp.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    atomic_write(out / f"{name}.md", markdown(rows))
    return [out / f"{name}.csv", out / f"{name}.md", plot(rows, name, out / f"{name}.png")]
