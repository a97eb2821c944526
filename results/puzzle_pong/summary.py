"""E5 Puzzle Pong: the student's scores, the reshuffle row and the occlusion heat map beside
seed 001's, from the robustness tables here.

The teacher (``teacher/``, the cpu budget's: E7's FC on Pong's RAM features, seed 0, whose
feature order the students' collection must share, so they are run with ``--seed 0``)::

    OMP_NUM_THREADS=1 attn-zoo train atariari --budget cpu --seed 0 \
        --set condition=L model=fc n_timesteps=10000000 --run-dir runs/pong_ram_teacher/0
    attn-zoo evaluate runs/pong_ram_teacher/0 --episodes 20 --policy deterministic --json \
        > results/puzzle_pong/teacher/eval_deterministic_20.json
    OMP_NUM_THREADS=1 attn-zoo train puzzle_pong_bc --budget cpu --seed 0 \
        --set teacher=runs/pong_ram_teacher/0 occlusion=0.0       # and 0.3, 0.5, 0.7

The tables come from ``attn-zoo robustness`` on the students (one per training occlusion
ratio: the cells of ``attn-zoo train puzzle_pong_bc``, copied to ``<ratio>/<seed>-<time>/``
beside this file)::

    attn-zoo robustness results/puzzle_pong/0.0/* --sweep shuffle --episodes 20 \
        --out results/puzzle_pong/robustness
    attn-zoo robustness results/puzzle_pong/0.0/* --sweep reshuffle=25,50,100,200,500 \
        --episodes 20 --out results/puzzle_pong/robustness
    attn-zoo robustness results/puzzle_pong/0.[0-9]/* --episodes 20 \
        --sweep occlusion=0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9 --out results/puzzle_pong/robustness

(``0.[0-9]`` leaves out the other 0.0 students, ``0.0-ce`` and the like.) The sweep keeps each
finished cell in ``robustness/cells/``, so the rows can be run one student at a time, in any
order and across sessions; the last command over all students then only reads them back.

``python results/puzzle_pong/summary.py`` then writes ``summary.md`` (each table with the
article's row beside ours; a table whose sweep has not run yet says so) and ``heatmap.png``
(the article's 10 x 10 occlusion map and ours on one colour scale, -21 to 21).
``--root DIR`` reads ``DIR/robustness/`` and writes both files to ``DIR`` instead, so a second
set of students (another recipe, with the same sweeps run with ``--out DIR/robustness``) gets
its own tables and heat map beside the first; ``--teacher DIR`` names its teacher (default
``teacher/``)::

    python results/puzzle_pong/summary.py --root results/puzzle_pong/phases \
        --teacher results/puzzle_pong/teacher_phases
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import matplotlib
import numpy as np

from attn_policies.canvas import new_figure, save_figure
from zoo.robustness_tables import heat_grid

HERE = Path(__file__).parent
RATIOS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
RESHUFFLE = (25, 50, 100, 200, 500)
# Seed 001 (the article's Puzzle Pong figures): 21 ± 0 with and without shuffling; the
# reshuffle row; the heat map (rows: training occlusion ratio, columns: test ratio).
ARTICLE_SHUFFLE = {"as is": 21.0, "shuffled": 21.0}
ARTICLE_RESHUFFLE = dict(zip(RESHUFFLE, (-20.0, -20.0, -10.0, -2.0, 18.0), strict=True))
ARTICLE_OCCLUSION = np.array(
    [
        [21, -20, -20, -21, -21, -21, -21, -21, -21, -21],
        [21, 7, -5, -10, -16, -19, -21, -21, -21, -21],
        [21, 11, 5, -3, -8, -17, -20, -21, -20, -21],
        [21, 12, 4, -3, -9, -13, -20, -20, -21, -21],
        [21, 17, 8, 0, 0, -10, -16, -18, -21, -21],
        [21, 15, 17, 15, 15, 10, -4, -14, -20, -21],
        [21, 16, 11, 13, 10, 7, 2, -10, -17, -21],
        [21, 11, 6, 6, 5, -1, -4, -8, -16, -21],
        [1, -13, -15, -15, -16, -17, -18, -13, -17, -20],
        [-12, -17, -20, -20, -19, -20, -19, -21, -21, -20],
    ],
    dtype=float,
)


def read_rows(name: str, tables: Path) -> list[dict[str, str]]:
    path = tables / f"{name}.csv"
    if not path.exists():
        return []
    with path.open(newline="") as fh:
        return [row for row in csv.DictReader(fh) if int(row["n_episodes"] or 0) > 0]


def cell(rows: list[dict[str, str]]) -> str:
    """Mean ± sd of one condition (several runs: the mean of their means)."""
    if not rows:
        return "not run"
    means = [float(r["mean_reward"]) for r in rows]
    if len(rows) == 1:
        return f"{means[0]:.1f} ± {float(rows[0]['std_reward']):.1f}"
    return f"{np.mean(means):.1f} ({len(rows)} runs)"


def draw(ax, grid: np.ndarray, title: str):
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="0.85")  # untested cells grey
    image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=-21, vmax=21, aspect="auto")
    for (i, j), v in np.ndenumerate(grid):
        if not np.isnan(v):
            ax.text(j, i, f"{v:.0f}", ha="center", va="center", fontsize=7,
                    color="k" if v > 5 else "w")  # fmt: skip
    ax.set_xticks(range(len(RATIOS)), [f"{r:g}" for r in RATIOS])
    ax.set_yticks(range(len(RATIOS)), [f"{r:g}" for r in RATIOS])
    ax.set_xlabel("test occlusion ratio (one mask per episode)")
    ax.set_ylabel("training occlusion ratio (per batch)")
    ax.set_title(title)
    return image


def teacher_lines(folder: Path) -> list[str]:
    """The teacher committed under ``folder``: its greedy score and training cost."""
    score = folder / "eval_deterministic_20.json"
    runs = sorted(folder.glob("*/status.json"))
    if not score.exists() or not runs:
        return ["No teacher committed yet.", ""]
    greedy = json.loads(score.read_text())
    result = greedy["policies"]["deterministic"]
    status = json.loads(runs[-1].read_text())
    return [
        "| teacher | steps | wall time | greedy return (20 episodes) |",
        "| --- | ---: | ---: | --- |",
        f"| PPO, FC on Pong's 8 RAM features x 4 steps | {greedy['num_timesteps']:,} "
        f"| {status['wall_seconds'] / 60:.0f} min "
        f"| {result['mean_reward']:.1f} ± {result['std_reward']:.1f} |",
        "",
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--root", type=Path, default=HERE,
        help="folder whose robustness/ tables are read and where summary.md and heatmap.png "
        "are written (default: this one)",
    )  # fmt: skip
    parser.add_argument(
        "--teacher", type=Path, default=HERE / "teacher",
        help="the students' teacher folder (its eval_deterministic_20.json and RUN/status.json)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    root = args.root
    tables = root / "robustness"
    lines = ["# E5 Puzzle Pong at the cpu budget", "", *teacher_lines(args.teacher)]
    shuffle = read_rows("shuffle", tables)
    lines += ["| student (train occlusion 0.0) | as is | shuffled |", "| --- | --- | --- |"]
    lines.append(
        "| article | " + " | ".join(f"{v:.0f} ± 0" for v in ARTICLE_SHUFFLE.values()) + " |"
    )
    by = {c: [r for r in shuffle if r["condition"] == c] for c in ARTICLE_SHUFFLE}
    lines += ["| this project | " + " | ".join(cell(by[c]) for c in ARTICLE_SHUFFLE) + " |", ""]

    reshuffle = read_rows("reshuffle", tables)
    lines += [
        "| reshuffle every t steps | " + " | ".join(map(str, RESHUFFLE)) + " |",
        "| --- |" + " ---: |" * len(RESHUFFLE),
        "| article | " + " | ".join(f"{v:.0f}" for v in ARTICLE_RESHUFFLE.values()) + " |",
    ]
    ours = [cell([r for r in reshuffle if int(float(r["value"])) == t]) for t in RESHUFFLE]
    lines += ["| this project | " + " | ".join(ours) + " |", ""]

    _, _, grid = heat_grid(read_rows("occlusion", tables), RATIOS, RATIOS)  # the article's grid
    lines += [
        "| train ratio | source | " + " | ".join(f"{r:g}" for r in RATIOS) + " |",
        "| ---: | --- |" + " ---: |" * len(RATIOS),
    ]
    for train, article, ours in zip(RATIOS, ARTICLE_OCCLUSION, grid, strict=True):
        lines.append(f"| {train:g} | article | " + " | ".join(f"{v:.0f}" for v in article) + " |")
        if not np.isnan(ours).all():
            text = ["" if np.isnan(v) else f"{v:.1f}" for v in ours]
            lines.append(f"| {train:g} | this project | " + " | ".join(text) + " |")
    if np.isnan(grid).all():
        lines.append("\nOur occlusion sweep has not run yet.")
    text = "\n".join(lines) + "\n"
    (root / "summary.md").write_text(text)
    print(text)

    fig = new_figure(13, 5)
    left, right = fig.subplots(1, 2)
    draw(left, ARTICLE_OCCLUSION, "article (seed 001)")
    image = draw(right, grid, "this project (cpu budget; grey: no student at that ratio)")
    fig.colorbar(image, ax=[left, right], label="mean return over the test episodes")
    save_figure(fig, root / "heatmap.png")


if __name__ == "__main__":
    main()
