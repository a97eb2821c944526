"""A Puzzle Pong student's (or teacher's) game for every start the env can draw: 1-30 no-ops.

    python results/puzzle_pong/noops.py results/puzzle_pong/sampled/0.5/0-20261124-080100 \
        --out results/puzzle_pong/sampled/0.5/noops.json

Pong here has no sticky actions and the student is greedy (and permutation invariant, so the
shuffle does not change its actions), so its whole game is fixed by the number of no-ops
gymnasium's ``AtariPreprocessing`` draws at reset (uniform on 1..``noop_max``). Playing each
count once gives the exact expected score of the 20-episode test, and which starts it loses.
The students here play only four games: the return depends on the count mod 4 (the frame
skip) alone. The test's random shuffle is kept; only the no-op draw is replaced
(``env_kwargs: {noops: k}``, :class:`attn_envs.atari_frames.FixedNoopReset`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.vec_env import DummyVecEnv

import zoo
from attn_policies.algorithms.bc import as_teacher
from zoo import factory
from zoo.trainers import get_trainer
from zoo.trainers.bc_trainer import _collect_run, load_teacher


class TeacherPlayer:
    """A bc run's teacher as a greedy player of the collect env (its own labels)."""

    def __init__(self, teacher: Any, view: Any) -> None:
        self.act, self.view = as_teacher(teacher), view

    def predict(self, obs: Any, **_: Any) -> tuple[np.ndarray, None]:
        return np.asarray(self.act(self.view(obs))[0]), None


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
    parser.add_argument(
        "--player", default="student", choices=["student", "teacher"],
        help="teacher: the run's teacher plays, from the RAM features read beside the tokens",
    )  # fmt: skip
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    handle = zoo.load(args.run)
    run = handle.config
    if args.player == "teacher":
        agent: Any = TeacherPlayer(*load_teacher(run, handle.path))
        run = _collect_run(run)  # the student's env with the teacher's features beside it
    else:
        agent = get_trainer("bc").load(handle.path, run, args.which)
    env_kwargs = run.body.get("env_kwargs") or {}
    noop_max = int(env_kwargs.get("noop_max", 30))
    fns = []
    for k in range(1, noop_max + 1):  # env k - 1 starts every game with k no-op frames
        body = {**run.body, "env_kwargs": {**env_kwargs, "noops": k}}
        fns.append(factory.make_env_fn(dataclasses.replace(run, body=body)))
    env = DummyVecEnv(fns)
    rewards, lengths = play_once(agent, env, args.seed)
    env.close()
    who = "teacher" if args.player == "teacher" else args.which
    print(f"{args.run} ({who}): mean over the {noop_max} starts "
          f"{np.mean(rewards):+.2f} ± {np.std(rewards):.2f}")  # fmt: skip
    for k, (r, n) in enumerate(zip(rewards, lengths, strict=True), start=1):
        print(f"  {k:2d} no-ops: {r:+.0f} in {n} steps")
    # with a frame skip of 4, the no-op count sets the phase of the agent's steps in the game
    phases = {p: sorted({rewards[k - 1] for k in range(1, noop_max + 1) if k % 4 == p})
              for p in range(4)}  # fmt: skip
    print("returns by no-ops mod 4:", phases)
    if args.out:
        summary = {"run": args.run, "which": args.which, "player": args.player,
                   "seed": args.seed,
                   "mean_reward": float(np.mean(rewards)), "std_reward": float(np.std(rewards)),
                   "by_phase": {str(p): v for p, v in phases.items()},
                   "rewards": rewards, "lengths": lengths}  # fmt: skip
        args.out.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
