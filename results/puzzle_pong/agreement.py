"""How often a Puzzle Pong student picks its teacher's action: on a part of its own training
data, and on 4,000 fresh teacher steps (another env seed) it never saw.

    python results/puzzle_pong/agreement.py runs/puzzle_pong_bc/0.0-ce

A student that agrees on its training data but less on fresh teacher states overfits; one
that agrees on both yet loses its games drifts off the teacher's states (BC's covariate shift).
"""

from __future__ import annotations

import sys

import numpy as np

import zoo
from attn_policies.algorithms.bc import BCDataset
from zoo.trainers import get_trainer
from zoo.trainers.bc_trainer import collect_steps, load_teacher

SAMPLES = 4000
HELD_OUT_SEED = 12345


def agreement(agent, data: BCDataset, n: int = SAMPLES) -> float:
    obs = {k: v[:n] for k, v in data.obs.items()}
    batches = range(0, n, 256)
    actions = [agent.predict({k: v[i : i + 256] for k, v in obs.items()})[0] for i in batches]
    return float((np.concatenate(actions) == data.actions[:n]).mean())


def main(path: str) -> None:
    handle = zoo.load(path)
    run = handle.config
    teacher, view = load_teacher(run, handle.path)
    agent = get_trainer("bc").load(handle.path, run, "best")
    own = BCDataset.load(handle.path / "data" / "part-003.npz")
    print(f"training data (part 3): {agreement(agent, own):.1%}")
    fresh = collect_steps(run, teacher, view, SAMPLES // int(run.body["n_envs"]), HELD_OUT_SEED)
    print(f"fresh teacher steps: {agreement(agent, fresh):.1%}")
    share = np.bincount(fresh.actions, minlength=6) / len(fresh.actions)
    print(f"teacher's most frequent action: {share.max():.1%} of steps")


if __name__ == "__main__":
    main(sys.argv[1])
