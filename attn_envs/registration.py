"""The ``attn_envs/...`` ids: every perturbed task of the seeds one ``gym.make`` away.

Entry points are strings, so registering imports no simulator. Keyword arguments given to
``gym.make`` override the defaults below (e.g. ``n_distractors``, ``occlusion``,
``reshuffle_every``, ``background``).

The ids exist once ``attn_envs`` is imported. Where that import may not have happened (a
``SubprocVecEnv`` worker, another tool's script), name the module in the id:
``gym.make("attn_envs:attn_envs/CartPoleSwingUp-v0")`` imports it first (:func:`make_args`
does this for the project's own factories). ``env.spec.max_episode_steps`` is the episode
limit: 1000 for CartPoleSwingUp, 400 for DoorKey (pass DoorKey's ``max_steps`` to
:func:`make_args`, or ``max_episode_steps`` to ``gym.make`` as well, to change it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym

NAMESPACE = "attn_envs"

# id (without namespace) -> (entry point, default kwargs, max_episode_steps)
_SPECS: dict[str, tuple[str, dict[str, Any], int | None]] = {
    # E3: CartPoleSwingUp (the env also truncates at 1000 steps itself)
    "CartPoleSwingUp-v0": (
        "attn_envs.envs.cartpole_swingup:CartPoleSwingUpEnv",
        {"harder": False},
        1000,
    ),
    "CartPoleSwingUpHarder-v0": (
        "attn_envs.envs.cartpole_swingup:CartPoleSwingUpEnv",
        {"harder": True},
        1000,
    ),
    "ShuffledCartPoleSwingUp-v0": (
        "attn_envs.presets:make_shuffled_cartpole",
        {"harder": False},
        1000,
    ),
    "ShuffledCartPoleSwingUpHarder-v0": (
        "attn_envs.presets:make_shuffled_cartpole",
        {"harder": True},
        1000,
    ),
    # E5: Puzzle Pong (84x84 grey, 4 frames, shuffled 6x6 patches, optional occlusion)
    "PuzzlePong-v0": ("attn_envs.presets:make_puzzle_pong", {}, None),
    # E6: CarRacing, shuffled 6x6 patches of a grey 4-frame stack, background replacement
    "PuzzleCarRacing-v0": ("attn_envs.presets:make_puzzle_car_racing", {}, None),
    "CarRacingBackground-v0": ("attn_envs.background:make_car_racing_background", {}, None),
    # E6: CarRacing-v3 physics with the 96x96 screen drawn as gym <= 0.21 drew it
    "ClassicCarRacing-v0": ("attn_envs.classic_car_racing:ClassicCarRacing", {}, 1000),
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
            400,
        )
        for n in (5, 6, 8, 16)
    },
}

# ids whose numpy-batched twin ``gym.make_vec(..., vectorization_mode="vector_entry_point")`` uses
_VECTOR_ENTRY_POINTS = {
    "CartPoleSwingUp-v0": "attn_envs.envs.cartpole_swingup_vector:CartPoleSwingUpVectorEnv",
    "CartPoleSwingUpHarder-v0": "attn_envs.envs.cartpole_swingup_vector:CartPoleSwingUpVectorEnv",
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


# ids whose own episode-length argument must move the registered TimeLimit along with it
_LIMIT_KWARGS = {f"{NAMESPACE}/EgocentricDoorKey-{n}x{n}-v0": "max_steps" for n in (5, 6, 8, 16)}


def make_args(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> tuple[str, dict]:
    """``(id, kwargs)`` for ``gym.make``: ``attn_envs/...`` ids prefixed ``attn_envs:`` (so
    any process imports the package first), and DoorKey's ``max_steps`` passed on as
    ``max_episode_steps`` (so the registered 400-step TimeLimit does not cut a longer
    episode, and ``env.spec`` reports the real limit). Other ids pass through unchanged.

    Example:
        >>> make_args("attn_envs/EgocentricDoorKey-5x5-v0", {"max_steps": 30})
        ('attn_envs:attn_envs/EgocentricDoorKey-5x5-v0', {'max_steps': 30, 'max_episode_steps': 30})
        >>> make_args("CartPole-v1")
        ('CartPole-v1', {})
    """
    kwargs = dict(env_kwargs or {})
    limit = _LIMIT_KWARGS.get(env_id)
    if limit in kwargs and "max_episode_steps" not in kwargs:
        kwargs["max_episode_steps"] = kwargs[limit]
    if env_id.startswith(f"{NAMESPACE}/"):
        env_id = f"{NAMESPACE}:{env_id}"
    return env_id, kwargs
