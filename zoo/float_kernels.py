"""Replay a run folder's test under other CPU float kernels, to tell arithmetic from behaviour.

A committed ``eval.json`` was measured on some CPU. Matrix products there may have run
AVX-512, AVX2 or plain kernels (MKL and ATen pick them from the CPU), and each rounds
differently in the last bit. In a chaotic task (E3's swing-up: 1,000 steps of an attention
policy) that last bit changes episodes, so the same model, code and seeds can score a few
tenths of a percent apart on another machine. :func:`kernel_spread` replays the test once per
kernel set of :data:`KERNELS` (each in a fresh interpreter, since MKL and ATen read these
variables when they load) and returns the spread: a recorded mean inside it is consistent
with the same behaviour measured on other hardware; one outside it is not.

Run as ``python -m zoo.float_kernels FOLDER --episodes N --seed S`` it prints one JSON line
with the mean of each policy mode (the child process :func:`kernel_spread` starts).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from zoo.runs import evaluate

#: Kernel sets a CPU may run: what this machine picks by itself, then the variables that make
#: MKL (``MKL_CBWR``, ``MKL_ENABLE_INSTRUCTIONS``) and ATen (``ATEN_CPU_CAPABILITY``) run
#: as on an AVX2-only CPU, an AVX-only one, and MKL's run-to-run compatible path.
KERNELS: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"},
    "avx": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "AVX"},
    "compatible": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"},
}
#: Every variable some kernel set of :data:`KERNELS` sets (cleared before a replay sets its own).
KERNEL_VARIABLES = {name for variables in KERNELS.values() for name in variables}


def replay_means(
    folder: str | Path, n_episodes: int, seed: int, kernels: dict[str, str], threads: int = 1
) -> dict[str, float]:
    """Each policy mode's mean return on ``folder``'s test, replayed in a child interpreter
    whose environment sets ``kernels`` and ``threads`` torch threads."""
    env = {k: v for k, v in os.environ.items() if k not in KERNEL_VARIABLES}
    env.update(kernels, OMP_NUM_THREADS=str(threads))
    command = [sys.executable, "-m", "zoo.float_kernels", str(folder)]
    command += ["--episodes", str(n_episodes), "--seed", str(seed), "--threads", str(threads)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"replay of {folder} failed: {done.stderr.strip()[-400:]}")
    return {k: float(v) for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}


def kernel_spread(
    folder: str | Path, n_episodes: int, seed: int, kernels: dict[str, dict[str, str]] = KERNELS
) -> dict[str, dict[str, float]]:
    """For each policy mode, its mean under each kernel set of ``kernels`` (by name)."""
    out: dict[str, dict[str, float]] = {}
    for name, variables in kernels.items():
        for mode, mean in replay_means(folder, n_episodes, seed, variables).items():
            out.setdefault(mode, {})[name] = mean
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Mean return of a run folder's test, as JSON.")
    parser.add_argument("folder")
    parser.add_argument("--episodes", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    result = evaluate(args.folder, n_episodes=args.episodes, seed=args.seed)
    means = {mode: r["mean_reward"] for mode, r in result["policies"].items()}
    print(json.dumps(means))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
