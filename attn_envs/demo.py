"""Build the seeds' perturbed tasks, step them, and save what the agent sees as a PNG.

Run ``python -m attn_envs.demo --out demo_output``. Until the zoo trains agents, this is the
project's end-to-end job: every registered env is made, stepped with random actions, and
drawn next to the unperturbed view.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import gymnasium as gym
import matplotlib.pyplot as plt
import numpy as np

import attn_envs
from attn_envs.patches import unpatchify


def _puzzle_view(tokens: np.ndarray, env: gym.Env, n_slots: int, frame: int = -1) -> np.ndarray:
    """Lay the agent's tokens out on the patch grid in the order it receives them."""
    grid_shape = env.get_wrapper_attr("grid_shape")
    p = env.get_wrapper_attr("patch_size")
    c = tokens.shape[1] // (p * p)
    grid = np.full((n_slots, p, p, c), 128, dtype=tokens.dtype)  # grey = occluded slot
    grid[: len(tokens)] = tokens.reshape(len(tokens), p, p, c)
    return unpatchify(grid, grid_shape)[..., frame]


def run(out: Path, steps: int = 120, seed: int = 0) -> dict[str, object]:
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, object] = {}
    fig, axes = plt.subplots(2, 3, figsize=(13, 8.5))

    # Shuffled CartPoleSwingUpHarder with 5 noise channels: the agent sees 10 unordered inputs.
    env = gym.make("attn_envs/ShuffledCartPoleSwingUpHarder-v0", n_noise=5, reshuffle_every=50)
    obs, _ = env.reset(seed=seed)
    seen, total = [obs], 0.0
    for _ in range(steps):
        obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        seen.append(obs)
        total += float(reward)
        if terminated or truncated:
            break
    env.close()
    axes[0, 0].imshow(np.array(seen).T, aspect="auto", cmap="coolwarm", vmin=-3, vmax=3)
    axes[0, 0].set(
        title="ShuffledCartPoleSwingUpHarder\n5 obs + 5 noise, reshuffled every 50 steps",
        xlabel="step",
        ylabel="input slot",
    )
    summary["ShuffledCartPoleSwingUpHarder"] = {"obs_shape": list(obs.shape), "return": total}

    # Puzzle Pong, 50 % occluded: true frame vs the shuffled, occluded patch list.
    env = gym.make("attn_envs/PuzzlePong-v0", occlusion=0.5)
    obs, _ = env.reset(seed=seed)
    for _ in range(steps):
        obs, *_ = env.step(env.action_space.sample())
    raw = env.unwrapped.ale.getScreenGrayscale()
    n_slots = int(np.prod(env.get_wrapper_attr("grid_shape")))
    axes[0, 1].imshow(raw, cmap="gray")
    axes[0, 1].set_title("Pong (ALE screen)")
    axes[0, 2].imshow(_puzzle_view(obs, env, n_slots), cmap="gray", vmin=0, vmax=255)
    axes[0, 2].set_title(
        f"Puzzle Pong as the agent sees it\n{obs.shape[0]} of {n_slots} patches, shuffled"
    )
    summary["PuzzlePong"] = {"obs_shape": list(obs.shape)}
    env.close()

    # CarRacing with a replaced background, then its shuffled-patch version.
    env = gym.make("attn_envs/CarRacingBackground-v0", background="mt_fuji")
    obs, _ = env.reset(seed=seed)
    for _ in range(60):
        obs, *_ = env.step(np.array([0.0, 0.3, 0.0], np.float32))
    axes[1, 0].imshow(obs)
    axes[1, 0].set_title("CarRacingBackground (mt_fuji)")
    env.close()
    env = gym.make("attn_envs/PuzzleCarRacing-v0", background="mt_fuji")
    obs, _ = env.reset(seed=seed)
    for _ in range(60):
        obs, *_ = env.step(np.array([0.0, 0.3, 0.0], np.float32))
    axes[1, 1].imshow(_puzzle_view(obs, env, len(obs)), cmap="gray", vmin=0, vmax=255)
    axes[1, 1].set_title("PuzzleCarRacing as the agent sees it\n256 shuffled 6x6 patches")
    summary["PuzzleCarRacing"] = {"obs_shape": list(obs.shape)}
    env.close()

    # Distractor Pong: 32 RAM features (Pong + 3 uncontrolled copies), 4 steps stacked.
    env = gym.make("attn_envs/DistractorPong-v0", n_distractors=3)
    obs, _ = env.reset(seed=seed)
    for _ in range(steps):
        obs, *_ = env.step(env.action_space.sample())
    names = env.get_wrapper_attr("feature_names")
    axes[1, 2].imshow(obs, aspect="auto", cmap="viridis")
    axes[1, 2].set(
        title="DistractorPong (4L): stacked RAM features", xlabel="feature", ylabel="time step"
    )
    axes[1, 2].set_xticks(range(len(names)), names, rotation=90, fontsize=5)
    summary["DistractorPong"] = {"obs_shape": list(obs.shape), "n_features": len(names)}
    env.close()

    fig.tight_layout()
    png = out / "what_the_agent_sees.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)
    summary["registered_ids"] = list(attn_envs.ENV_IDS)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return {"png": str(png), **summary}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("demo_output"))
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    result = run(args.out, steps=args.steps, seed=args.seed)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
