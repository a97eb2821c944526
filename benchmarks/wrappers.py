"""Step rate of each wrapper stack against its raw env, measured in the same run.

    python benchmarks/wrappers.py [--seconds 0.5] [--repeats 30]

Writes ``benchmarks/results/wrappers.json`` and ``wrappers.png``. Each pair (raw, wrapped)
is timed alternately in short runs (A B A B ...) with the same pre-drawn random actions, and
the median of the paired ratios is reported, so drift in machine speed hits both sides alike.
"raw" is the stack the seeds' tasks start from before any attn_envs wrapper: for Puzzle Pong
that is ALE Pong with the standard Atari preprocessing and a 4-frame stack.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import ale_py
import gymnasium as gym
import numpy as np
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

import attn_envs  # noqa: F401  (registers the ids)
from attn_envs.atari_ram import RamFeatureObservation
from attn_policies.canvas import new_figure, save_figure

gym.register_envs(ale_py)
OUT = Path(__file__).parent / "results"


def pong_preprocessed() -> gym.Env:
    env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0)
    return FrameStackObservation(AtariPreprocessing(env, frame_skip=4, screen_size=84), 4)


def ram_pong() -> gym.Env:
    return RamFeatureObservation(gym.make("ALE/Pong-v5", obs_type="ram"))


def doorkey_raw() -> gym.Env:
    import minigrid  # noqa: F401

    return gym.make("MiniGrid-DoorKey-5x5-v0", max_steps=400)


# name -> (raw factory, wrapped factory, what the raw side is)
PAIRS: dict[str, tuple[Callable[[], gym.Env], Callable[[], gym.Env], str]] = {
    "PuzzlePong(occlusion=0.5)": (
        pong_preprocessed,
        partial(gym.make, "attn_envs/PuzzlePong-v0", occlusion=0.5),
        "ALE Pong + AtariPreprocessing + 4-frame stack",
    ),
    "PuzzlePong(reshuffle_every=1)": (
        pong_preprocessed,
        partial(gym.make, "attn_envs/PuzzlePong-v0", reshuffle_every=1),
        "ALE Pong + AtariPreprocessing + 4-frame stack",
    ),
    "DistractorPong(k=3)": (
        ram_pong,
        partial(gym.make, "attn_envs/DistractorPong-v0", n_distractors=3),
        "RAM-feature Pong (one emulator)",
    ),
    "CarRacingBackground(kof)": (
        partial(gym.make, "CarRacing-v3"),
        partial(gym.make, "attn_envs/CarRacingBackground-v0", background="kof"),
        "CarRacing-v3",
    ),
    "ShuffledCartPoleSwingUpHarder(10 obs + 5 noise)": (
        partial(gym.make, "attn_envs/CartPoleSwingUpHarder-v0"),
        partial(
            gym.make,
            "attn_envs/ShuffledCartPoleSwingUpHarder-v0",
            copies=2,
            n_noise=5,
            reshuffle_every=25,
        ),
        "CartPoleSwingUpHarder",
    ),
    "EgocentricDoorKey-5x5": (
        doorkey_raw,
        partial(gym.make, "attn_envs/EgocentricDoorKey-5x5-v0"),
        "MiniGrid-DoorKey-5x5 (dict obs, 7 actions)",
    ),
}


def steps_per_second(env: gym.Env, actions: list, seconds: float) -> float:
    """Random-action steps per second over about ``seconds``, resets included."""
    env.reset(seed=0)
    n, start = 0, time.perf_counter()
    while True:
        for a in actions[n % len(actions) :][:10]:
            _, _, terminated, truncated, _ = env.step(a)
            n += 1
            if terminated or truncated:
                env.reset()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return n / elapsed


def bench_pair(raw_fn, wrapped_fn, seconds: float, repeats: int) -> dict[str, float]:
    raw, wrapped = raw_fn(), wrapped_fn()
    raw.action_space.seed(0)
    actions = [raw.action_space.sample() for _ in range(200)]
    if isinstance(raw.action_space, gym.spaces.Discrete):
        # the wrapped env may expose a subset of actions (ActionSubset): stay inside it
        actions = [int(a) % wrapped.action_space.n for a in actions]
    steps_per_second(raw, actions, 0.3)  # warm-up: track generation, JIT-free caches
    steps_per_second(wrapped, actions, 0.3)
    a, b = [], []
    for _ in range(repeats):
        a.append(steps_per_second(raw, actions, seconds))
        b.append(steps_per_second(wrapped, actions, seconds))
    raw.close()
    wrapped.close()
    ratios = [y / x for x, y in zip(a, b, strict=True)]
    q25, _, q75 = statistics.quantiles(ratios, n=4)
    return {
        "raw_steps_per_s": statistics.median(a),
        "wrapped_steps_per_s": statistics.median(b),
        "ratio_median": statistics.median(ratios),
        "ratio_q25": q25,
        "ratio_q75": q75,
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="per timed run")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--only", nargs="*", help="subset of pair names")
    parser.add_argument("--replot", action="store_true", help="redraw the PNG from the JSON")
    args = parser.parse_args()
    if args.replot:
        plot(json.loads((OUT / "wrappers.json").read_text())["pairs"], OUT / "wrappers.png")
        return

    results = {}
    for name, (raw_fn, wrapped_fn, raw_desc) in PAIRS.items():
        if args.only and name not in args.only:
            continue
        r = bench_pair(raw_fn, wrapped_fn, args.seconds, args.repeats)
        results[name] = {"raw": raw_desc, **r}
        print(
            f"{name:48s} raw {r['raw_steps_per_s']:9.0f}/s  wrapped "
            f"{r['wrapped_steps_per_s']:9.0f}/s  ratio {r['ratio_median']:.3f}",
            flush=True,
        )

    # Distractors multiply the emulation work by k+1, which no wrapper can hide: report the
    # fair reference too, k+1 RAM-Pong emulators stepped one after another.
    if "DistractorPong(k=3)" in results:
        r = bench_pair(
            partial(SequentialCopies, ram_pong, 4),
            partial(gym.make, "attn_envs/DistractorPong-v0", n_distractors=3),
            args.seconds,
            args.repeats,
        )
        results["DistractorPong(k=3) vs 4 sequential RAM-Pong emulators"] = {
            "raw": "4 RAM-feature Pong envs stepped one after another",
            **r,
        }
        print(f"{'  ... vs 4 sequential emulators':48s} ratio {r['ratio_median']:.3f}")

    OUT.mkdir(parents=True, exist_ok=True)
    meta = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": __import__("os").cpu_count(),
        "seconds_per_run": args.seconds,
        "repeats": args.repeats,
        "numpy": np.__version__,
        "gymnasium": gym.__version__,
    }
    (OUT / "wrappers.json").write_text(json.dumps({"meta": meta, "pairs": results}, indent=2))
    plot(results, OUT / "wrappers.png")
    print(f"wrote {OUT / 'wrappers.json'}")


class SequentialCopies(gym.Wrapper):
    """n copies of an env stepped in turn with the same action; the first one's output."""

    def __init__(self, make_env: Callable[[], gym.Env], n: int) -> None:
        super().__init__(make_env())
        self.others = [make_env() for _ in range(n - 1)]

    def reset(self, **kwargs):
        for e in self.others:
            e.reset()
        return self.env.reset(**kwargs)

    def step(self, action):
        for e in self.others:
            _, _, term, trunc, _ = e.step(action)
            if term or trunc:
                e.reset()
        return self.env.step(action)


def plot(results: dict, path: Path) -> None:
    names = list(results)
    ratio = [results[n]["ratio_median"] for n in names]
    lo = [results[n]["ratio_median"] - results[n]["ratio_q25"] for n in names]
    hi = [results[n]["ratio_q75"] - results[n]["ratio_median"] for n in names]
    fig = new_figure(9, 0.5 * len(names) + 1.5, layout="tight")
    ax = fig.subplots()
    ax.barh(names, ratio, xerr=[lo, hi], color="tab:blue")
    ax.axvline(0.9, color="tab:red", ls="--", label="goal: 90% of raw")
    ax.set_xlabel("wrapped / raw step rate (median, IQR of paired runs)")
    ax.invert_yaxis()
    ax.legend(loc="lower right")
    save_figure(fig, path, dpi=110)


if __name__ == "__main__":
    main()
