"""Env-steps per second of the numpy-batched CartPoleSwingUpHarder against the single env.

    python benchmarks/cartpole_vector.py [--seconds 2] [--repeats 5]

Writes ``benchmarks/results/cartpole_vector.json``. Random actions are drawn up front; the
batched env runs with autoreset (gymnasium's next-step mode) and with finished copies frozen
(``autoreset=False``, the evolution-strategies evaluation mode). Sizes are interleaved and
each figure is the median over repeats.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from attn_envs.envs.cartpole_swingup import CartPoleSwingUpEnv
from attn_envs.envs.cartpole_swingup_vector import CartPoleSwingUpVectorEnv

OUT = Path(__file__).parent / "results"


def single_rate(seconds: float) -> float:
    env = CartPoleSwingUpEnv(harder=True)
    env.reset(seed=0)
    actions = np.random.default_rng(0).uniform(-1, 1, (1000, 1)).astype(np.float32)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        _, _, terminated, truncated, _ = env.step(actions[n % 1000])
        n += 1
        if terminated or truncated:
            env.reset()
    return n / (time.perf_counter() - start)


def vector_rate(num_envs: int, autoreset: bool, seconds: float) -> float:
    env = CartPoleSwingUpVectorEnv(num_envs, harder=True, autoreset=autoreset)
    env.reset(seed=0)
    actions = np.random.default_rng(0).uniform(-1, 1, (16, num_envs, 1)).astype(np.float32)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.step(actions[n % 16])
        n += 1
        if not autoreset and n % 1000 == 0:
            env.reset()  # an ES generation is 1000 steps
    return n * num_envs / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    cases = {"single env": lambda: single_rate(args.seconds)}
    for b in (64, 1024, 4096):
        cases[f"vector B={b} autoreset"] = lambda b=b: vector_rate(b, True, args.seconds)
    cases["vector B=4096 frozen"] = lambda: vector_rate(4096, False, args.seconds)
    rates: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.repeats):
        for name, fn in cases.items():
            rates[name].append(fn())
    single = statistics.median(rates["single env"])
    results = {
        name: {"env_steps_per_s": statistics.median(r), "x_single": statistics.median(r) / single}
        for name, r in rates.items()
    }
    for name, r in results.items():
        print(f"{name:28s} {r['env_steps_per_s']:14,.0f} env-steps/s  {r['x_single']:8.1f}x")
    OUT.mkdir(parents=True, exist_ok=True)
    meta = {"python": platform.python_version(), "numpy": np.__version__, **vars(args)}
    (OUT / "cartpole_vector.json").write_text(
        json.dumps({"meta": meta, "results": results}, indent=2)
    )


if __name__ == "__main__":
    main()
