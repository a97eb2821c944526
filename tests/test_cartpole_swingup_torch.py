"""Tests for attn_envs.envs.cartpole_swingup_torch: the torch twin of CartPoleSwingUp's physics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from gymnasium.utils.seeding import np_random

from attn_envs.envs import cartpole_swingup as csu
from attn_envs.envs.cartpole_swingup_torch import CartPoleHoldTask, dynamics, observation, reward
from attn_envs.envs.cartpole_swingup_vector import CartPoleSwingUpVectorEnv


def random_states(n: int = 256, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (n, 4)) * np.array([2.4, 10.0, 2 * np.pi, 10.0])


def test_step_observation_and_reward_equal_the_numpy_env() -> None:
    states = random_states()
    actions = np.random.default_rng(1).uniform(-2, 2, len(states))  # clipping included
    s, a = torch.as_tensor(states), torch.as_tensor(actions)
    expected = csu.swingup_dynamics(states.T, actions).T
    np.testing.assert_allclose(dynamics(s, a).numpy(), expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        observation(s).numpy(), csu.swingup_observation(states.T), rtol=1e-6, atol=1e-6
    )
    np.testing.assert_allclose(reward(s).numpy(), csu.swingup_reward(states.T), atol=1e-12)


def test_a_rollout_matches_the_vector_env_step_for_step() -> None:
    env = CartPoleSwingUpVectorEnv(8, harder=True, autoreset=False)
    env.reset(seed=3)
    s = torch.as_tensor(env.state)
    rng = np.random.default_rng(0)
    for _ in range(50):
        a = rng.uniform(-1, 1, 8)
        env.step(a)
        s = dynamics(s, torch.as_tensor(a))
        live = ~env.done
        np.testing.assert_allclose(s.numpy()[live], env.state[live], atol=1e-9)


def test_gradients_flow_through_the_physics() -> None:
    a = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    s = torch.as_tensor(random_states(4))
    for _ in range(10):
        s = dynamics(s, a)
    s[:, 0].sum().backward()
    assert a.grad is not None and (a.grad > 0).all()  # pushing right moves the cart right


def test_hold_task_cost_and_failure() -> None:
    task = CartPoleHoldTask(x_weight=1.0)
    up = torch.zeros(3, 4, dtype=torch.float64)
    up[1, 0] = 1.2  # half way to the rail
    up[2, 2] = math.pi  # hanging
    assert task.cost(up).tolist() == pytest.approx([0.0, 0.25, 2.0])
    off = up.clone()
    off[0, 0] = 2.5
    assert task.failed(off).tolist() == [True, False, True]
    swing = CartPoleHoldTask(upright=False)
    assert swing.failed(off).tolist() == [True, False, False]  # only the rail ends a swing-up
    starts = task.starts(np.random.default_rng(0), 100)
    assert starts.shape == (100, 4) and np.cos(starts[:, 2]).min() > 0.5


def test_hold_task_span_draws_the_envs_starts() -> None:
    """The task's ``span`` is the env's ``start_span``: the same starts from the same draws."""
    span = (2.4, 6.0, 0.3, 2.0)
    task = CartPoleHoldTask(harder=True, span=span)
    venv = CartPoleSwingUpVectorEnv(5, harder=True, upright=True, start_span=span)
    venv.reset(seed=3)
    np.testing.assert_array_equal(task.starts(np_random(3)[0], 5), venv.state)
