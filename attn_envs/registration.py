"""The ``attn_envs/...`` ids: every perturbed task of the seeds one ``gym.make`` away.

Entry points are strings, so registering imports no simulator. Keyword arguments given to
``gym.make`` override the defaults below (e.g. ``n_distractors``, ``occlusion``,
``reshuffle_every``, ``background``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

NAMESPACE = "attn_envs"

# id (without namespace) -> (entry point, default kwargs, max_episode_steps)
_SPECS: dict[str, tuple[str, dict[str, Any], int | None]] = {
    # E3: CartPoleSwingUp (the env truncates at 1000 steps itself)
    "CartPoleSwingUp-v0": (
        "attn_envs.envs.cartpole_swingup:CartPoleSwingUpEnv",
        {"harder": False},
        None,
    ),
    "CartPoleSwingUpHarder-v0": (
        "attn_envs.envs.cartpole_swingup:CartPoleSwingUpEnv",
        {"harder": True},
        None,
    ),
    "ShuffledCartPoleSwingUp-v0": (
        "attn_envs.presets:make_shuffled_cartpole",
        {"harder": False},
        None,
    ),
    "ShuffledCartPoleSwingUpHarder-v0": (
        "attn_envs.presets:make_shuffled_cartpole",
        {"harder": True},
        None,
    ),
    # E5: Puzzle Pong (84x84 grey, 4 frames, shuffled 6x6 patches, optional occlusion)
    "PuzzlePong-v0": ("attn_envs.presets:make_puzzle_pong", {}, None),
    # E6: CarRacing, shuffled 6x6 patches of a grey 4-frame stack, background replacement
    "PuzzleCarRacing-v0": ("attn_envs.presets:make_puzzle_car_racing", {}, None),
    "CarRacingBackground-v0": ("attn_envs.background:make_car_racing_background", {}, None),
    # E7: AtariARI RAM features of the played game + k uncontrolled distractor instances
    "DistractorPong-v0": ("attn_envs.atari_ram:make_distractor_env", {"game": "Pong"}, None),
    "DistractorDemonAttack-v0": (
        "attn_envs.atari_ram:make_distractor_env",
        {"game": "DemonAttack"},
        None,
    ),
    "DistractorAsteroids-v0": (
        "attn_envs.atari_ram:make_distractor_env",
        {"game": "Asteroids"},
        None,
    ),
    # E2: the book's egocentric DoorKey (5 actions, step penalty, 400 steps) and its curriculum
    **{
        f"EgocentricDoorKey-{n}x{n}-v0": (
            "attn_envs.grid:make_egocentric_doorkey",
            {"size": n},
            None,
        )
        for n in (5, 6, 8, 16)
    },
}

# ids whose numpy-batched twin ``gym.make_vec(..., vectorization_mode="vector_entry_point")`` uses
_VECTOR_ENTRY_POINTS = {
    "CartPoleSwingUp-v0": "attn_envs.envs.cartpole_swingup:CartPoleSwingUpVectorEnv",
    "CartPoleSwingUpHarder-v0": "attn_envs.envs.cartpole_swingup:CartPoleSwingUpVectorEnv",
}

ENV_IDS: tuple[str, ...] = tuple(f"{NAMESPACE}/{name}" for name in _SPECS)


def register_envs() -> None:
    """Register every id in :data:`ENV_IDS`; calling it again is a no-op."""
    for name, (entry_point, kwargs, max_steps) in _SPECS.items():
        env_id = f"{NAMESPACE}/{name}"
        if env_id not in gym.registry:
            gym.register(
                id=env_id,
                entry_point=entry_point,
                kwargs=kwargs,
                vector_entry_point=_VECTOR_ENTRY_POINTS.get(name),
                max_episode_steps=max_steps,
                disable_env_checker=False,
            )
