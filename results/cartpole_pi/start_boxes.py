"""E3, issue 12: which upright starts an agent holds, box by box (holding, braking, catching).

``python results/cartpole_pi/start_boxes.py RUN [RUN ...]`` plays each run's best model (see
``balance.py``) from ``EPISODES`` upright starts of each box in :data:`BOXES` (the Harder
env's ``start_span``: uniform half-widths ``[x, x_dot, θ, θ_dot]`` around the pole up) and
writes the mean return of each cell to ``start_boxes.md`` beside this script (``--out=FILE``
elsewhere). The same reset seeds for every agent and box (``SEED + i``), so the agents meet
the same draws. A pole held from the first step earns up to 1000; one that leaves the rail
or spins earns less.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from balance import load_agent

from attn_envs.envs.cartpole_swingup import CartPoleSwingUpVectorEnv

HERE = Path(__file__).parent
EPISODES = 500
STEPS = 1000
SEED = 1_000_000
BOXES = {  # name: [x, x_dot, theta, theta_dot] half-widths around the pole up
    "still": [0.5, 1.0, 0.2, 1.0],
    "slow cart": [1.0, 2.0, 0.2, 1.0],
    "cart 3 m/s": [1.5, 3.0, 0.3, 1.0],
    "cart 3 m/s, whole rail": [2.4, 3.0, 0.3, 2.0],
    "cart 6 m/s (hold_braking)": [2.4, 6.0, 0.3, 2.0],
    "pole 0.5 rad, 4 rad/s": [0.5, 1.0, 0.5, 4.0],
    "pole 1 rad, 8 rad/s": [0.5, 1.0, 1.0, 8.0],
    "pole 0.2 rad, 10 rad/s": [0.5, 1.0, 0.2, 10.0],
    "pole 1.5 rad, 10 rad/s, cart 2 m/s": [1.0, 2.0, 1.5, 10.0],
}


def box_return(policy: torch.nn.Module, span: list[float]) -> float:
    env = CartPoleSwingUpVectorEnv(
        EPISODES, harder=True, upright=True, start_span=span, autoreset=False
    )
    obs, _ = env.reset(seed=[SEED + i for i in range(EPISODES)])
    alive, returns, state = np.ones(EPISODES, bool), np.zeros(EPISODES), None
    with torch.no_grad():
        for _ in range(STEPS):
            action, state = policy(torch.as_tensor(obs, dtype=torch.float32), state)
            obs, reward, terminated, truncated, _ = env.step(np.clip(action.numpy(), -1, 1))
            returns += reward * alive
            alive &= ~(terminated | truncated)
            if not alive.any():
                break
    return float(returns.mean())


def main(argv: list[str]) -> None:
    out = next((a.split("=", 1)[1] for a in argv if a.startswith("--out=")), None)
    folders = [a for a in argv if not a.startswith("--")]
    torch.set_num_threads(1)
    head = "| run | " + " | ".join(f"{name} {span}" for name, span in BOXES.items()) + " |"
    lines = [
        f"# Mean return from upright starts, box by box ({EPISODES} episodes a cell)",
        "",
        f"`python results/cartpole_pi/start_boxes.py {' '.join(argv)}`",
        "",
        head,
        "| --- |" + " ---: |" * len(BOXES),
    ]
    for folder in folders:
        policy, _ = load_agent(folder)
        cells = [f"{box_return(policy, span):.1f}" for span in BOXES.values()]
        lines.append(f"| `{folder}` | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    path = Path(out) if out else HERE / "start_boxes.md"
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
