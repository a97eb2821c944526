"""E3, issue 12: how closely a DAgger student copies its teacher with the pole up and elsewhere.

``python results/cartpole_pi/upright_fit.py RUN`` takes a ``cartpole_pi_bc`` run (its last
student and its own teacher, softened as it was trained), collects 64 fresh episodes in which
the teacher drives each copy up to a step drawn from [0, 1000) and the student drives the rest
(``handover``, seed 12345), and compares the student's action with the teacher's on every
live step, split by ``cos θ > 0.9`` (the pole up) or not: sign agreement, MSE and correlation.
A student that is to hold an unstable pole up needs the sign of the teacher's push nearly
everywhere near the top.

``--fit EPOCHS`` then asks whether the student can fit it at all: it collects 128 more such
episodes (seed 1), trains the student on them for EPOCHS passes (the run's truncated-BPTT
loss, minibatches of 32 episodes, Adam 1e-3) and prints the agreement with the pole up on
those training episodes and on the 64 held-out ones every 10 passes. Train and held-out
rising together and slowly means the clone underfits rather than overfits.
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import torch

from attn_policies.algorithms.dagger import Episodes, _with_prev_action, collect, fit_epoch
from zoo import runs
from zoo.trainers import cmaes_trainer, get_trainer
from zoo.trainers.dagger_trainer import dagger_config, load_teacher


def own_actions(student: torch.nn.Module, data: Episodes) -> np.ndarray:
    """The student's output at every step of ``data``, its state carried as in collection."""
    obs = torch.as_tensor(np.take_along_axis(data.obs, data.perm[None], axis=2))
    played = torch.as_tensor(data.actions)
    state, own = None, []
    with torch.no_grad():
        for t in range(len(obs)):
            if t:
                state = _with_prev_action(state, played[t - 1])
            out, state = student(obs[t], state)
            own.append(out[:, 0].numpy())
    return np.stack(own)


def agreement(student: torch.nn.Module, data: Episodes, up: bool = True) -> dict[str, float]:
    """How the student's actions match the teacher's on the live steps with the pole up (or
    not): steps, sign agreement, MSE and correlation."""
    pred, target = own_actions(student, data), data.targets[..., 0]
    mask = data.alive.astype(bool) & ((data.obs[..., 2] > 0.9) == up)
    p, q = pred[mask], target[mask]
    return {
        "steps": int(mask.sum()),
        "sign": float((np.sign(p) == np.sign(q)).mean()),
        "mse": float(((p - q) ** 2).mean()),
        "corr": float(np.corrcoef(p, q)[0, 1]),
    }


def main(folder: str, fit_epochs: int = 0) -> None:
    torch.set_num_threads(1)
    handle = runs.load(folder)
    run = handle.config
    student = get_trainer("dagger").load(handle.path, run, "last")
    teacher = load_teacher(run)
    cfg = dataclasses.replace(dagger_config(run), n_envs=64, max_steps=1000, handover=1000)
    make_env = cmaes_trainer.rollout_spec(run).make_vector_env
    data = collect(student, teacher, make_env, cfg, beta=1.0, seed=12345)
    print(f"{folder}: {int(data.alive.sum())} live steps of 64 handover episodes")
    for name, up in (("pole up (cos θ > 0.9)", True), ("elsewhere", False)):
        r = agreement(student, data, up)
        print(
            f"  {name}: {r['steps']} steps, sign agreement {r['sign']:.1%}, "
            f"MSE {r['mse']:.3f}, correlation {r['corr']:.3f}"
        )
    if not fit_epochs:
        return
    train_cfg = dataclasses.replace(cfg, n_envs=128, batch_episodes=32)
    train = collect(student, teacher, make_env, train_cfg, beta=1.0, seed=1)
    optimizer = torch.optim.Adam(student.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(0)
    for epoch in range(1, fit_epochs + 1):
        student.train()
        fit_epoch(student, optimizer, train, train_cfg, generator)
        student.eval()
        if epoch % 10 == 0 or epoch == fit_epochs:
            seen, held = agreement(student, train), agreement(student, data)
            print(
                f"  pass {epoch}: pole up, training episodes {seen['sign']:.1%} "
                f"(MSE {seen['mse']:.3f}), held out {held['sign']:.1%} (MSE {held['mse']:.3f})",
                flush=True,
            )


if __name__ == "__main__":
    args = sys.argv[1:]
    epochs = 0
    if len(args) == 3 and args[1] == "--fit" and args[2].isdigit():
        args, epochs = args[:1], int(args[2])
    if len(args) != 1:
        sys.exit("usage: python results/cartpole_pi/upright_fit.py RUN [--fit EPOCHS]")
    main(args[0], epochs)
