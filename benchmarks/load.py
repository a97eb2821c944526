"""Training speed alone and beside one busy process, per torch thread count (issue 49, item 1).

Each cell is a real ``attn-zoo train`` in a subprocess with periodic evaluations off; its
speed is env steps over the training wall time that the run writes to ``status.json``. A
"busy" cell runs it beside ``python -c 'while True: pass'``, the load a second job puts on a
2-core machine. The ratio busy / alone per thread count is what the default thread rule
(one torch thread per training process) is chosen on.

Usage::

    python benchmarks/load.py [--only doorkey atari_nonlocal] [--out benchmarks/results/load.json]

Writes the JSON and a PNG beside it. Run it on an otherwise quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

# name, budget, overrides: short runs past learning_starts, no periodic evaluation
CASES: dict[str, tuple[str, str, list[str]]] = {
    "E2 doorkey (Double DQN)": (
        "doorkey",
        "cpu",
        ["n_timesteps=2500", "eval.freq=0", "eval.final_episodes=1"],
    ),
    "E8 atari_nonlocal Pong (A2C, Nature CNN)": (
        "atari_nonlocal",
        "cpu",
        ["game=Pong", "variant=cnn", "n_timesteps=8000", "eval.freq=0", "eval.final_episodes=1"],
    ),
}
THREADS = (1, 2)


def run_cell(name: str, budget: str, overrides: list[str], threads: int, busy: bool) -> dict:
    """One short training run; its steps per second of training wall time."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        with tempfile.TemporaryDirectory() as root:
            env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
            cmd = ["attn-zoo", "train", name, "--budget", budget, "--root", root, "--no-progress"]
            cmd += ["--set", *overrides, f"torch_threads={threads}"]
            subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=1800)
            (status_file,) = Path(root).rglob("status.json")
            status = json.loads(status_file.read_text())
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    steps, wall = int(status["num_timesteps"]), float(status["wall_seconds"])
    return {"threads": threads, "busy": busy, "steps": steps, "wall_seconds": wall,
            "steps_per_s": round(steps / wall, 1)}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/load.json")
    parser.add_argument("--only", nargs="*", help="experiment names to run (default all)")
    args = parser.parse_args()
    results: dict[str, list[dict]] = {}
    for label, (name, budget, overrides) in CASES.items():
        if args.only and name not in args.only:
            continue
        rows = results.setdefault(label, [])
        for threads in THREADS:
            for busy in (False, True):
                row = run_cell(name, budget, overrides, threads, busy)
                rows.append(row)
                print(label, row, flush=True)
    summary = {
        label: {
            t: round(
                next(r["steps_per_s"] for r in rows if r["threads"] == t and r["busy"])
                / next(r["steps_per_s"] for r in rows if r["threads"] == t and not r["busy"]),
                2,
            )
            for t in THREADS
        }
        for label, rows in results.items()
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"cpus": os.cpu_count(), "cells": results, "busy_over_alone": summary}, indent=1)
        + "\n"
    )
    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.5))
    for ax, (label, rows) in zip(list(axes), results.items(), strict=True):
        for busy, colour in ((False, "tab:blue"), (True, "tab:red")):
            xs = [r["threads"] for r in rows if r["busy"] == busy]
            ys = [r["steps_per_s"] for r in rows if r["busy"] == busy]
            ax.bar([x + (0.2 if busy else -0.2) for x in xs], ys, width=0.4, color=colour,
                   label="beside a busy process" if busy else "alone")  # fmt: skip
        ax.set_xticks(list(THREADS))
        ax.set_xlabel("torch threads")
        ax.set_ylabel("env steps / s")
        ax.set_title(label, fontsize=9)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=110)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
