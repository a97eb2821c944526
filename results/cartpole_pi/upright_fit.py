"""E3, issue 12: how closely a DAgger student copies its teacher with the pole up and elsewhere.

``python results/cartpole_pi/upright_fit.py RUN`` takes a ``cartpole_pi_bc`` run (its last
student and its own teacher, softened as it was trained), collects 64 fresh episodes in which
the teacher drives each copy up to a step drawn from [0, 1000) and the student drives the rest
(``handover``, seed 12345), and compares the student's action with the teacher's on every
live step, split by ``cos θ > 0.9`` (the pole up) or not: sign agreement, MSE and correlation.
A student that is to hold an unstable pole up needs the sign of the teacher's push nearly
everywhere near the top.
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import torch

from attn_policies.algorithms.dagger import _with_prev_action, collect
from zoo import runs
from zoo.trainers import cmaes_trainer, get_trainer
from zoo.trainers.dagger_trainer import dagger_config, load_teacher


def main(folder: str) -> None:
    torch.set_num_threads(1)
    handle = runs.load(folder)
    run = handle.config
    student = get_trainer("dagger").load(handle.path, run, "last")
    cfg = dataclasses.replace(dagger_config(run), n_envs=64, max_steps=1000, handover=1000)
    spec = cmaes_trainer.rollout_spec(run)
    data = collect(student, load_teacher(run), spec.make_vector_env, cfg, beta=1.0, seed=12345)
    obs = torch.as_tensor(np.take_along_axis(data.obs, data.perm[None], axis=2))
    played = torch.as_tensor(data.actions)
    state, own = None, []
    with torch.no_grad():  # the student's own output at every step, carried as in collection
        for t in range(len(obs)):
            if t:
                state = _with_prev_action(state, played[t - 1])
            out, state = student(obs[t], state)
            own.append(out[:, 0].numpy())
    pred, target = np.stack(own), data.targets[..., 0]
    alive = data.alive.astype(bool)
    up = data.obs[..., 2] > 0.9
    print(f"{folder}: {int(alive.sum())} live steps of 64 handover episodes")
    for name, mask in (("pole up (cos θ > 0.9)", alive & up), ("elsewhere", alive & ~up)):
        p, q = pred[mask], target[mask]
        print(
            f"  {name}: {mask.sum()} steps, sign agreement {(np.sign(p) == np.sign(q)).mean():.1%}"
            f", MSE {((p - q) ** 2).mean():.3f}, correlation {np.corrcoef(p, q)[0, 1]:.3f}"
        )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python results/cartpole_pi/upright_fit.py RUN")
    main(sys.argv[1])
