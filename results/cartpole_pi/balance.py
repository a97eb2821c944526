"""E3, issue 12: where an agent's CartPoleSwingUpHarder return goes (early failures or balance).

``python results/cartpole_pi/balance.py RUN [RUN ...]`` plays each run's best model (its last
where there is no best) on the 1000 test episodes ``attn-zoo evaluate RUN --episodes 1000``
plays (reset seeds ``eval.test_seed + i``, so the means match its output), all 1000 copies at
once, and writes ``balance.md`` beside this script:

- the share of episodes that end early (the cart leaves the track) and their mean return;
- the mean return of the episodes that run the full 1000 steps;
- over steps 500-999 of those full episodes, the mean ``cos θ``, the mean ``|θ'|`` and the
  share of episodes that hold the pole up (mean ``cos θ`` above 0.95 over those steps).

A pole held up has ``cos θ`` near 1 and a small ``|θ'|``; a pole kept spinning over the top
scores about 0.8 a step with ``cos θ`` averaging about 0.6 (it is slow near the top).
The authors' checkpoint is read from a run folder made by ``attn-zoo import`` (see the
README); it is not part of this repository.

``--upright`` plays the balancing task instead (``CartPoleSwingUpEnv(upright=True)``: starts
``N(0, 0.2)`` around the pole up) and writes ``balance_upright.md``; ``--out=FILE`` writes the
table to ``FILE`` instead. A ``trials_<name>.npy`` file of ``trials.py`` stands for its agent.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from attn_envs.envs.cartpole_swingup import CartPoleSwingUpVectorEnv
from zoo import runs
from zoo.trainers import get_trainer

HERE = Path(__file__).parent
EPISODES = 1000
STEPS = 1000
LATE = 500


TRIALS_BASE = "results/cartpole_pi/pi_warm_T300"  # the run whose policy and seeds a trial uses


def load_agent(folder: str) -> tuple[torch.nn.Module, int]:
    """The policy of a run folder (its best model, its last where there is no best) or of a
    trial's agent (``trials_<name>.npy``, float32 parameters of the AttentionNeuron agent,
    played on ``pi_warm_T300``'s test seeds), and the first test seed."""
    if folder.endswith(".npy"):
        handle = runs.load(TRIALS_BASE)
        policy = get_trainer("cmaes").load(handle.path, handle.config, "best")
        x = torch.as_tensor(np.load(folder, allow_pickle=False))
        torch.nn.utils.vector_to_parameters(x, policy.parameters())
        return policy, handle.config.eval.test_seed
    handle = runs.load(folder)
    run = handle.config
    return get_trainer(run.body["algo"]).load(handle.path, run, "best"), run.eval.test_seed


def play(folder: str, upright: bool = False) -> dict[str, float]:
    """One row for a run folder or a trial's agent (see :func:`load_agent`)."""
    return play_policy(*load_agent(folder), upright)


def rollouts(
    policy: torch.nn.Module, test_seed: int, upright: bool = False, action_steps: int = 0
) -> dict[str, np.ndarray]:
    """Per test episode (seeded ``test_seed + i``): start state, return, length, the sums of
    ``cos θ`` and ``abs(θ')`` over its late steps and its first ``action_steps`` actions
    (``actions``, shape ``(action_steps, EPISODES)``, clipped as the env applies them)."""
    env = CartPoleSwingUpVectorEnv(
        EPISODES, harder=not upright, max_episode_steps=STEPS, autoreset=False, upright=upright
    )
    obs, _ = env.reset(seed=[test_seed + i for i in range(EPISODES)])
    starts = env.state
    returns, alive, length = np.zeros(EPISODES), np.ones(EPISODES, bool), np.zeros(EPISODES, int)
    late_cos, late_speed = np.zeros(EPISODES), np.zeros(EPISODES)
    actions = np.zeros((action_steps, EPISODES))
    state = None
    with torch.no_grad():
        for t in range(STEPS):
            action, state = policy(torch.as_tensor(obs, dtype=torch.float32), state)
            applied = np.clip(action.numpy(), -1, 1)
            if t < action_steps:
                actions[t] = applied[:, 0]
            obs, reward, terminated, truncated, _ = env.step(applied)
            returns += reward * alive
            length += alive
            if t >= LATE:
                late_cos += obs[:, 2] * alive
                late_speed += np.abs(obs[:, 4]) * alive
            alive &= ~(terminated | truncated)
            if not alive.any():
                break
    env.close()
    return {
        "starts": starts,
        "returns": returns,
        "length": length,
        "late_cos": late_cos,
        "late_speed": late_speed,
        "actions": actions,
    }


def play_policy(policy: torch.nn.Module, test_seed: int, upright: bool = False) -> dict[str, float]:
    """The figures of one row for ``policy`` on the test episodes seeded ``test_seed + i``."""
    r = rollouts(policy, test_seed, upright)
    returns, length = r["returns"], r["length"]
    full = length == STEPS
    cos = r["late_cos"][full] / (STEPS - LATE)
    return {
        "mean": returns.mean(),
        "early": 1 - full.mean(),
        "early_return": returns[~full].mean() if (~full).any() else float("nan"),
        "full_return": returns[full].mean(),
        "late_cos": cos.mean(),
        "late_speed": (r["late_speed"][full] / (STEPS - LATE)).mean(),
        "held_up": (cos > 0.95).mean(),
    }


def _num(x: float) -> str:
    return "-" if np.isnan(x) else f"{x:.1f}"


def main(folders: list[str], upright: bool = False, out: str | None = None) -> None:
    torch.set_num_threads(1)
    task = "the balancing task (upright starts)" if upright else "CartPoleSwingUpHarder"
    flag = ("--upright " if upright else "") + (f"--out={out} " if out else "")
    lines = [
        f"# Where the return goes on {task} ({EPISODES} test episodes each; late = steps "
        f"{LATE}-{STEPS - 1} of the full episodes)",
        "",
        f"`python results/cartpole_pi/balance.py {flag}{' '.join(folders)}`",
        "",
        "| run | mean return | ended early | their mean | full episodes' mean | late cos θ "
        "| late abs(θ') | pole held up |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for folder in folders:
        r = play(folder, upright)
        lines.append(
            f"| `{folder}` | {r['mean']:.1f} | {r['early']:.1%} | {_num(r['early_return'])} "
            f"| {r['full_return']:.1f} | {r['late_cos']:.3f} | {r['late_speed']:.2f} "
            f"| {r['held_up']:.1%} |"
        )
        print(lines[-1], flush=True)
    name = "balance_upright.md" if upright else "balance.md"
    (Path(out) if out else HERE / name).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    args = sys.argv[1:]
    upright = "--upright" in args
    out = next((a.split("=", 1)[1] for a in args if a.startswith("--out=")), None)
    folders = [a for a in args if a != "--upright" and not a.startswith("--")]
    unknown = [a for a in args if a.startswith("--") and a not in ("--upright", f"--out={out}")]
    if not folders or unknown:
        sys.exit(
            "usage: python results/cartpole_pi/balance.py [--upright] [--out=FILE] RUN [RUN ...]"
        )
    main(folders, upright, out)
