"""E3, issue 12: the curriculum's stages as one curve against wall time.

``python results/cartpole_pi/curriculum_curve.py [FOLDER]`` reads the stage run folders in
FOLDER (default ``results/cartpole_pi/curriculum``: ``1_hold``, ``2_catch``, ``3_tune``, ...,
in the order of their number) and writes ``curriculum.csv`` and ``curriculum.png`` there: each
stage's periodic tests (``evaluations.json``: 100 test episodes, or the hold stage's upright
ones) at the wall time they were reached, the stages placed end to end by their
``status.json`` wall seconds, and each stage's 1000-episode result (``eval.json``).

A chain whose stages lie in several folders (a branch) is drawn from its stage folders in
order, written to ``--out``::

    python results/cartpole_pi/curriculum_curve.py results/cartpole_pi/curriculum_harder/[1-6]_* \
        results/cartpole_pi/harder_side/{7,8,9,10}_tune_inward0.5 \
        --out results/cartpole_pi/harder_side
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import matplotlib

import zoo

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def stages(folder: Path) -> list[Path]:
    """The finished stage folders (``<number>_<name>`` with an ``eval.json``), in order."""
    found = [
        p for p in folder.iterdir() if p.name.split("_")[0].isdigit() and (p / "eval.json").exists()
    ]
    return sorted(found, key=lambda p: int(p.name.split("_")[0]))


def _evaluator(stage: Path) -> str | None:
    """The stage's CMA-ES evaluator (from its saved ``config.yml``), if any."""
    return zoo.load_runs(stage)[0].body.get("evaluator")


def chain_rows(chain: list[Path], offset: float = 0.0) -> list[list]:
    """``[stage, kind, minutes, mean_return]`` rows: the stages' checks and 1000-episode tests.

    The stages are placed end to end from ``offset`` seconds; a stage without an ``eval.json``
    (an interrupted one) contributes its checks only.
    """
    rows = []
    for stage in chain:
        status = json.loads((stage / "status.json").read_text())
        wall = float(status["wall_seconds"])
        count = "update" if "update" in status else "generation"
        total = float(status[count])
        tests = json.loads((stage / "evaluations.json").read_text())
        for e in tests:
            minutes = (offset + wall * e[count] / total) / 60
            rows.append([stage.name, "test", round(minutes, 2), round(e["test_mean"], 1)])
        offset += wall
        if (stage / "eval.json").exists():
            final = json.loads((stage / "eval.json").read_text())["policies"]["deterministic"]
            rows.append(
                [stage.name, "final_1000", round(offset / 60, 2), round(final["mean_reward"], 1)]
            )
    return rows


def main(chain: list[Path], out: Path) -> None:
    rows = chain_rows(chain)
    with (out / "curriculum.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["stage", "kind", "minutes", "mean_return"])
        writer.writerows(rows)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for stage in chain:
        tests = [r for r in rows if r[0] == stage.name and r[1] == "test"]
        style = "--" if "hold" in stage.name else "-"
        ax.plot([r[2] for r in tests], [r[3] for r in tests], style, lw=1, label=stage.name)
    finals = [r for r in rows if r[1] == "final_1000"]
    ax.plot(
        [r[2] for r in finals[1:]], [r[3] for r in finals[1:]], "ko", label="1000 test episodes"
    )
    ax.axhline(450, color="r", lw=0.8, ls=":", label="goal 450")
    ax.axvline(120, color="grey", lw=0.8, ls=":", label="2 h")
    both = any(_evaluator(stage) == "processes" for stage in chain)
    cores = "CMA-ES stages on both cores" if both else "1 core"
    ax.set_xlabel(f"wall minutes from scratch ({cores})")
    ax.set_ylabel("mean test return")
    ax.set_title("E3 curriculum from scratch (hold: upright starts; others: Harder starts)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out / "curriculum.png", dpi=110)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "paths", nargs="*", type=Path, default=[Path("results/cartpole_pi/curriculum")],
        help="a folder of numbered stages, or the stage folders of one chain in order",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, help="where to write (default: the one folder)")
    args = parser.parse_args()
    if len(args.paths) == 1 and not (args.paths[0] / "eval.json").exists():
        main(stages(args.paths[0]), args.out or args.paths[0])
    elif args.out is None:
        parser.error("--out is needed with stage folders")
    else:
        main(args.paths, args.out)
