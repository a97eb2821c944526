"""E3, issue 12: how much a softened FNN teacher loses, tanh(z) -> tanh(z / T).

``python results/cartpole_pi/soft_teacher.py`` plays the committed FNN teacher
(``results/cartpole_pi/fnn``, best model) on ``CartPoleSwingUpHarder`` for 100 test episodes
(reset seeds 0-99) at each temperature and writes ``soft_teacher.md``:
mean ± sd return, and the share of steps where |action| > 0.9. The hard teacher (T = 1) is
bang-bang, which is what a DAgger student (``cartpole_pi_bc``, ``teacher_temperature``) has
to fit with MSE.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

import zoo
from attn_envs.envs.cartpole_swingup import CartPoleSwingUpVectorEnv
from zoo.trainers.dagger_trainer import load_teacher

HERE = Path(__file__).parent
TEMPERATURES = (1, 100, 200, 300, 400, 1000)
EPISODES = 100


def play(temperature: float) -> tuple[np.ndarray, float]:
    (run,) = zoo.load_runs(
        "cartpole_pi_bc",
        budget="cpu",
        overrides={"teacher": str(HERE / "fnn"), "teacher_temperature": temperature},
    )
    teacher = load_teacher(run)
    env = CartPoleSwingUpVectorEnv(EPISODES, harder=True, max_episode_steps=1000, autoreset=False)
    obs, _ = env.reset(seed=list(range(EPISODES)))
    returns, alive, saturated, steps = np.zeros(EPISODES), np.ones(EPISODES, bool), 0, 0
    with torch.no_grad():
        while alive.any():
            action = teacher(torch.as_tensor(obs, dtype=torch.float32))[0].numpy()
            saturated += int((np.abs(action[alive]) > 0.9).sum())
            steps += int(alive.sum())
            obs, reward, terminated, truncated, _ = env.step(action)
            returns += reward * alive
            alive &= ~(terminated | truncated)
    return returns, saturated / steps


def main() -> None:
    torch.set_num_threads(1)
    lines = [
        "| T | return (100 episodes) | steps with abs(action) > 0.9 |",
        "| ---: | --- | ---: |",
    ]
    for t in TEMPERATURES:
        returns, share = play(t)
        lines.append(f"| {t} | {returns.mean():.1f} ± {returns.std():.1f} | {share:.0%} |")
        print(lines[-1], flush=True)
    (HERE / "soft_teacher.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
