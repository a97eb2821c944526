"""Puzzle Pong students' training checks against epoch, one line per run.

    python results/puzzle_pong/exact_curves.py results/puzzle_pong/exact/ce \
        results/puzzle_pong/exact/kl --out results/puzzle_pong/exact/curves.png

Each run's ``progress.csv`` holds its loss and, at every check, the mean return of the
check's episodes. Runs trained with ``eval.env_kwargs: [{noops: 4}, {noops: 1}, {noops: 2},
{noops: 3}]`` check the four games a greedy student can play (one per no-op phase, see
``noops.py``), so their check is the unweighted mean over the phases: within 1.5 points of
the exact expected test score, which weights the phases 7, 8, 8, 7 of 30.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

import zoo


def curve(path: Path) -> tuple[list[float], list[float], list[float], list[float]]:
    """``(epochs, losses, check epochs, check means)`` from the run's ``progress.csv``."""
    with (path / "progress.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    epochs = [float(r["epoch"]) for r in rows]
    losses = [float(r["loss"]) for r in rows]
    checked = [(float(r["epoch"]), float(r["test_mean"])) for r in rows if r["test_mean"]]
    return epochs, losses, [e for e, _ in checked], [m for _, m in checked]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    for path in args.runs:
        run = zoo.load(path).config
        label = f"{path.parent.name}/{path.name}: loss {run.body.get('loss')}"
        epochs, losses, checked, means = curve(path)
        top.plot(checked, means, marker="o", ms=3, label=label)
        bottom.plot(epochs, losses, label=label)
        best = max(range(len(means)), key=lambda i: (means[i], checked[i]))
        print(f"{path}: best check {means[best]:+.2f} at epoch {checked[best]:.0f}; "
              f"checks {', '.join(f'{m:+.2f}' for m in means)}")  # fmt: skip
    top.axhline(15, color="grey", ls=":", lw=1, label="issue 13's goal (15)")
    top.set_ylabel("check: mean return")
    top.set_ylim(-22, 22)
    top.legend(fontsize=7)
    bottom.set_ylabel("training loss")
    bottom.set_xlabel("epoch")
    bottom.set_yscale("log")
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(args.out)


if __name__ == "__main__":
    main()
