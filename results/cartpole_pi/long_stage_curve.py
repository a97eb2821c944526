"""E3, issue 12: one long CMA-ES stage against the chain's restarted stages, by wall time.

``python results/cartpole_pi/long_stage_curve.py CHAIN --shared 2 LONG [LONG ...] --out DIR``
places each LONG stage folder after the first ``--shared`` stages of the chain folder CHAIN
(the stages they all start from), draws their checks beside the chain's own later stages
against wall minutes from scratch, and writes ``long_stage.csv`` and ``long_stage.png`` in DIR.
A long stage that was interrupted (no ``eval.json``) is drawn by its checks alone::

    python results/cartpole_pi/long_stage_curve.py results/cartpole_pi/two_core --shared 2 \\
        results/cartpole_pi/long_stage/3_tune900 --out results/cartpole_pi/long_stage
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import matplotlib

sys.path.insert(0, str(Path(__file__).parent))
from curriculum_curve import chain_rows, stages

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main(chain_dir: Path, shared: int, long: list[Path], out: Path) -> None:
    chain = stages(chain_dir)
    start = sum(
        float(json.loads((s / "status.json").read_text())["wall_seconds"]) for s in chain[:shared]
    )
    lines = {f"chain {chain_dir.name}": chain_rows(chain[shared:], offset=start)}
    for stage in long:
        lines[stage.name] = chain_rows([stage], offset=start)
    with (out / "long_stage.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["line", "stage", "kind", "minutes", "mean_return"])
        writer.writerows([name, *row] for name, rows in lines.items() for row in rows)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, (name, rows) in enumerate(lines.items()):
        colour = f"C{i}"
        checks = [r for r in rows if r[1] == "test"]
        finals = [r for r in rows if r[1] == "final_1000"]
        ax.plot([r[2] for r in checks], [r[3] for r in checks], "-", lw=1, color=colour, label=name)
        ax.plot([r[2] for r in finals], [r[3] for r in finals], "o", color=colour, ms=5)
    ax.axhline(450, color="r", lw=0.8, ls=":", label="goal 450")
    ax.axvline(120, color="grey", lw=0.8, ls=":", label="2 h")
    ax.set_xlabel(f"wall minutes from scratch (after {chain_dir.name}'s first {shared} stages)")
    ax.set_ylabel("mean return (lines: checks; dots: 1000 test episodes)")
    ax.set_title("E3: one long CMA-ES stage against restarted 300-generation stages")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "long_stage.png", dpi=110)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chain", type=Path, help="a folder of numbered stages")
    parser.add_argument("long", nargs="+", type=Path, help="long stage folders")
    parser.add_argument("--shared", type=int, required=True, help="chain stages they start from")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    main(args.chain, args.shared, args.long, args.out)
