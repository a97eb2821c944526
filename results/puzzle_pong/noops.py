"""A Puzzle Pong student's game for every start the env can draw: 1 to 30 no-op frames.

    python results/puzzle_pong/noops.py results/puzzle_pong/sampled/0.5/0-20261124-080100 \
        --out results/puzzle_pong/sampled/0.5/noops.json

Pong here has no sticky actions and the student is greedy (and permutation invariant, so the
shuffle does not change its actions), so its whole game is fixed by the number of no-ops
gymnasium's ``AtariPreprocessing`` draws at reset (uniform on 1..``noop_max``). Playing each
count once gives the exact expected score of the 20-episode test, and which starts it loses.
The students here play only four games: the return depends on the count mod 4 (the frame
skip) alone.
The test's random shuffle is kept; only the no-op draw is replaced.
"""

from __future__ import annotations

import argparse
import json
import types
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium.wrappers import AtariPreprocessing

import zoo
from zoo import factory
from zoo.trainers import get_trainer


def fixed_noop_reset(self: AtariPreprocessing, *, seed=None, options=None):
    """``AtariPreprocessing.reset`` with ``self.fixed_noops`` no-ops instead of a draw."""
    _, info = self.env.reset(seed=seed, options=options)
    for _ in range(self.fixed_noops):
        _, _, terminated, truncated, step_info = self.env.step(0)
        info.update(step_info)
        if terminated or truncated:
            _, info = self.env.reset(seed=seed, options=options)
    self.lives = self.ale.lives()
    if self.grayscale_obs:
        self.ale.getScreenGrayscale(self.obs_buffer[0])
    else:
        self.ale.getScreenRGB(self.obs_buffer[0])
    self.obs_buffer[1].fill(0)
    return self._get_obs(), info


def preprocessing(env: Any) -> AtariPreprocessing:
    while not isinstance(env, AtariPreprocessing):
        env = env.env
    return env


def play_once(agent: Any, env: Any, seed: int) -> tuple[list[float], list[int]]:
    """One greedy episode in each env of ``env``: its return and length, by env."""
    n = env.num_envs
    rewards, lengths = [np.nan] * n, [0] * n
    env.seed(seed)
    obs, starts = env.reset(), np.ones(n, bool)
    while np.isnan(rewards).any():
        actions, _ = agent.predict(obs, episode_start=starts, deterministic=True)
        obs, _, starts, infos = env.step(actions)
        for i in np.flatnonzero(starts):
            episode = infos[i].get("episode")
            if np.isnan(rewards[i]) and episode is not None:
                rewards[i], lengths[i] = float(episode["r"]), int(episode["l"])
    return rewards, lengths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("--which", default="best", choices=["best", "last"])
    parser.add_argument("--seed", type=int, default=2_000_000, help="the test seed (shuffles)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    handle = zoo.load(args.run)
    run = handle.config
    noop_max = int(run.body.get("env_kwargs", {}).get("noop_max", 30))
    agent = get_trainer("bc").load(handle.path, run, args.which)
    env = factory.make_vec_env(run, n_envs=noop_max, training=False)
    for k, inner in enumerate(env.envs, start=1):
        wrapper = preprocessing(inner)
        wrapper.fixed_noops = k
        wrapper.reset = types.MethodType(fixed_noop_reset, wrapper)
    rewards, lengths = play_once(agent, env, args.seed)
    env.close()
    print(f"{args.run} ({args.which}): mean over the {noop_max} starts "
          f"{np.mean(rewards):+.2f} ± {np.std(rewards):.2f}")  # fmt: skip
    for k, (r, n) in enumerate(zip(rewards, lengths, strict=True), start=1):
        print(f"  {k:2d} no-ops: {r:+.0f} in {n} steps")
    # with a frame skip of 4, the no-op count sets the phase of the agent's steps in the game
    phases = {p: sorted({rewards[k - 1] for k in range(1, noop_max + 1) if k % 4 == p})
              for p in range(4)}  # fmt: skip
    print("returns by no-ops mod 4:", phases)
    if args.out:
        summary = {"run": args.run, "which": args.which, "seed": args.seed,
                   "mean_reward": float(np.mean(rewards)), "std_reward": float(np.std(rewards)),
                   "by_phase": {str(p): v for p, v in phases.items()},
                   "rewards": rewards, "lengths": lengths}  # fmt: skip
        args.out.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
