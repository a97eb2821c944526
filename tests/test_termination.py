"""Tests for attn_envs.termination (early end of CarRacing training episodes, E6)."""

from __future__ import annotations

from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from _contract import assert_env_contract
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_envs import NegativeRewardTruncation


class ScriptedRewards(gym.Env):
    """Pays the scripted rewards in order; terminates after the last one."""

    metadata = {"render_modes": []}

    def __init__(self, rewards: tuple[float, ...] = (1.0, -1.0) * 20) -> None:
        self.rewards = rewards
        self.observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action: int) -> Any:
        reward = self.rewards[self.t]
        self.t += 1
        done = self.t >= len(self.rewards)
        return np.zeros(1, np.float32), reward, done, False, {}


def test_env_contract() -> None:
    assert_env_contract(partial(NegativeRewardTruncation, ScriptedRewards(), patience=2))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from([-0.1, 0.0, 1.0]), min_size=1, max_size=40),
    st.integers(1, 6),
)
def test_truncates_at_the_first_negative_streak(rewards: list[float], patience: int) -> None:
    env = NegativeRewardTruncation(ScriptedRewards(tuple(rewards)), patience=patience)
    env.reset(seed=0)
    streak, expected = 0, None
    for i, r in enumerate(rewards):  # independent reference: the first index ending a streak
        streak = streak + 1 if r < 0 else 0
        if streak >= patience:
            expected = i
            break
    for i in range(len(rewards)):
        _, reward, terminated, truncated, info = env.step(0)
        assert reward == rewards[i]
        if expected is not None and i == expected and not terminated:
            assert truncated and info["negative_reward_truncation"]
            break
        assert not truncated
        if terminated:
            break


def test_reset_clears_the_streak() -> None:
    env = NegativeRewardTruncation(ScriptedRewards((-1.0,) * 10), patience=3)
    env.reset()
    env.step(0), env.step(0)
    env.reset()
    assert [env.step(0)[3] for _ in range(3)] == [False, False, True]


@pytest.mark.parametrize("patience", [0, -2, 1.5, True, "3", None])
def test_rejects_bad_patience(patience: Any) -> None:
    with pytest.raises(ValueError, match="patience must be a positive int"):
        NegativeRewardTruncation(ScriptedRewards(), patience=patience)
