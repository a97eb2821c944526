"""Shared checks every wrapper/env in attn_envs must pass.

Each wrapper's test module calls :func:`assert_env_contract` with a *picklable* factory
(module-level function or ``functools.partial``) so the same factory can be shipped to
``AsyncVectorEnv`` and SB3's ``SubprocVecEnv`` workers.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils.env_checker import check_env as gym_check_env
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv
from stable_baselines3.common.env_checker import check_env as sb3_check_env
from stable_baselines3.common.vec_env import SubprocVecEnv

EnvFactory = Callable[[], gym.Env]


def tree_equal(a: Any, b: Any) -> bool:
    """Exact equality over nested dicts/tuples/arrays (observations and infos)."""
    if isinstance(a, dict):
        return (
            isinstance(b, dict) and a.keys() == b.keys() and all(tree_equal(a[k], b[k]) for k in a)
        )
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(tree_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(np.array_equal(np.asarray(a), np.asarray(b)))


def rollout(make_env: EnvFactory, seed: int, n_steps: int) -> list[tuple[Any, ...]]:
    """Seeded rollout with seeded random actions; returns (obs, reward, term, trunc, info)."""
    env = make_env()
    env.action_space.seed(seed)
    obs, info = env.reset(seed=seed)
    out: list[tuple[Any, ...]] = [(obs, 0.0, False, False, info)]
    for _ in range(n_steps):
        obs, reward, term, trunc, info = env.step(env.action_space.sample())
        out.append((obs, reward, term, trunc, info))
        if term or trunc:
            obs, info = env.reset()
            out.append((obs, 0.0, False, False, info))
    env.close()
    return out


def assert_deterministic(make_env: EnvFactory, seed: int = 7, n_steps: int = 30) -> None:
    a = rollout(make_env, seed, n_steps)
    b = rollout(make_env, seed, n_steps)
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        assert tree_equal(x, y), f"rollouts with seed {seed} differ at transition {i}"


def assert_gym_and_sb3_check_env(make_env: EnvFactory) -> None:
    env = make_env()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # checkers warn about non-image Boxes, bounds, etc.
        gym_check_env(env, skip_render_check=True)
        sb3_check_env(env, warn=False)
    env.close()


def assert_vectorises(make_env: EnvFactory, n_steps: int = 5, subproc: bool = True) -> None:
    """Gymnasium Sync/Async vector envs and SB3 SubprocVecEnv can build and step the env."""
    for vec_cls in (SyncVectorEnv, AsyncVectorEnv):
        venv = vec_cls([make_env, make_env])
        obs, _ = venv.reset(seed=3)
        assert venv.single_observation_space.contains(_first(obs)), (
            f"{vec_cls.__name__}: batched obs leaves the single space"
        )
        for _ in range(n_steps):
            venv.step(venv.action_space.sample())
        venv.close()
    if subproc:
        venv = SubprocVecEnv([make_env, make_env], start_method="fork")
        venv.seed(3)
        venv.reset()
        for _ in range(n_steps):
            venv.step(np.stack([venv.action_space.sample() for _ in range(2)]))
        venv.close()


def _first(batched: Any) -> Any:
    if isinstance(batched, dict):
        return {k: _first(v) for k, v in batched.items()}
    return batched[0]


def assert_env_contract(make_env: EnvFactory, *, n_steps: int = 30, subproc: bool = True) -> None:
    """The full contract: both env checkers, seeded determinism, vectorisation."""
    assert_gym_and_sb3_check_env(make_env)
    assert_deterministic(make_env, n_steps=n_steps)
    assert_vectorises(make_env, subproc=subproc)


class UniformBoxEnv(gym.Env):
    """Observations drawn uniformly from ``space`` by the env's seeded generator.

    A stand-in for an image or vector env when a property must hold for any layout or bounds.
    """

    def __init__(self, space: gym.spaces.Box) -> None:
        self.observation_space = space
        self.action_space = gym.spaces.Discrete(2)

    def _obs(self) -> np.ndarray:
        space = self.observation_space
        return self.np_random.uniform(space.low, space.high).astype(space.dtype)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action: int):
        return self._obs(), 0.0, False, False, {}
