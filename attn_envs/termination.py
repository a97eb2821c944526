"""End hopeless training episodes early (seed 001, E6 CarRacing).

CarRacing pays -0.1 per frame and only rewards new track tiles, so a car that has left the
track collects a long tail of negative rewards. The authors' CarRacing training stops an
episode after 20 consecutive negative rewards, which saves most of the frames CMA-ES would
spend on dead rollouts.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym

from attn_envs._spaces import require_integral

__all__ = ["NegativeRewardTruncation"]


class NegativeRewardTruncation(gym.Wrapper[Any, Any, Any, Any], gym.utils.RecordConstructorArgs):
    """Truncate the episode once ``patience`` rewards in a row have been negative.

    The step that completes the streak returns ``truncated=True`` (the state is not
    terminal: the agent is stopped, as a time limit would stop it) and
    ``info["negative_reward_truncation"] = True``. A zero or positive reward resets the
    count, and so does :meth:`reset`.

    Args:
        env: any environment with scalar rewards.
        patience: length of the negative streak that ends the episode (``>= 1``).

    Example:
        >>> import gymnasium as gym
        >>> env = NegativeRewardTruncation(gym.make("MountainCar-v0"), patience=3)
        >>> _ = env.reset(seed=0)
        >>> [env.step(1)[3] for _ in range(3)]
        [False, False, True]
    """

    def __init__(self, env: gym.Env, patience: int = 20) -> None:
        patience = require_integral(patience, "patience")
        gym.utils.RecordConstructorArgs.__init__(self, patience=patience)
        gym.Wrapper.__init__(self, env)
        self.patience = patience
        self.streak = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        self.streak = 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.streak = self.streak + 1 if float(reward) < 0 else 0
        if self.streak >= self.patience and not terminated:
            truncated = True
            info = {**info, "negative_reward_truncation": True}
        return obs, reward, terminated, truncated, info
