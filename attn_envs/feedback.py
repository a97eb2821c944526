"""Feed the previous action back into the observation (seed 001, the AttentionNeuron article).

Each AttentionNeuron's key network sees ``[o_i, a_{t-1}]``: its own input plus the action the
agent just took, which is how a permutation-invariant agent can work out what each of its
inputs means. :class:`PreviousActionObservation` adds ``a_{t-1}`` as a separate Dict entry, so
SB3's ``MultiInputPolicy`` and the torch extractors can route it.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["PreviousActionObservation", "action_feature_space"]


def action_feature_space(action_space: spaces.Space) -> spaces.Box:
    """The float32 Box that :class:`PreviousActionObservation` uses to encode an action.

    Discrete(n) -> one-hot Box(0, 1, (n,)); MultiDiscrete(nvec) -> concatenated one-hots
    Box(0, 1, (sum(nvec),)); Box -> a Box of the action's shape with the action bounds,
    widened to include 0 (the "no previous action" value at reset).

    Raises:
        TypeError: for any other action space.

    Example:
        >>> from gymnasium import spaces
        >>> action_feature_space(spaces.MultiDiscrete([3, 2]))
        Box(0.0, 1.0, (5,), float32)
    """
    if isinstance(action_space, spaces.Discrete):
        return spaces.Box(0.0, 1.0, (int(action_space.n),), np.float32)
    if isinstance(action_space, spaces.MultiDiscrete):
        return spaces.Box(0.0, 1.0, (int(action_space.nvec.sum()),), np.float32)
    if isinstance(action_space, spaces.Box):
        low = np.minimum(action_space.low, 0).astype(np.float32)
        high = np.maximum(action_space.high, 0).astype(np.float32)
        return spaces.Box(low, high, dtype=np.float32)
    raise TypeError(
        "PreviousActionObservation needs a Discrete, MultiDiscrete or Box action space, got "
        f"{type(action_space).__name__}: {action_space}"
    )


class PreviousActionObservation(
    gym.Wrapper[dict[str, Any], Any, Any, Any], gym.utils.RecordConstructorArgs
):
    """Add the previous action ``a_{t-1}`` to the observation as a Dict entry.

    The observation becomes ``{obs_key: original observation, key: feature}``; if the env
    already has a Dict observation, ``key`` is added to it instead. The feature encodes the
    action passed to the previous :meth:`step`: a float32 one-hot for Discrete actions,
    concatenated one-hots for MultiDiscrete, the action itself (as float32, clipped to the
    action bounds) for Box. After :meth:`reset` there is no previous action and the feature
    is all zeros (see :func:`action_feature_space` for the spaces).

    Args:
        env: env with a Discrete, MultiDiscrete or Box action space.
        key: name of the previous-action entry.
        obs_key: name of the original observation when it is not already a Dict.

    Raises:
        TypeError: for other action spaces.
        ValueError: if ``key`` is already an entry of a Dict observation, or equals
            ``obs_key``.

    Example:
        >>> import gymnasium as gym
        >>> from attn_envs.feedback import PreviousActionObservation
        >>> env = PreviousActionObservation(gym.make("CartPole-v1"))
        >>> obs, _ = env.reset(seed=0)
        >>> obs["observation"].shape, obs["prev_action"]
        ((4,), array([0., 0.], dtype=float32))
        >>> obs, *_ = env.step(1)
        >>> obs["prev_action"]
        array([0., 1.], dtype=float32)
    """

    def __init__(
        self, env: gym.Env, key: str = "prev_action", obs_key: str = "observation"
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, key=key, obs_key=obs_key)
        gym.Wrapper.__init__(self, env)
        self.feature_space = action_feature_space(env.action_space)
        space = env.observation_space
        self._is_dict = isinstance(space, spaces.Dict)
        if isinstance(space, spaces.Dict):
            if key in space.spaces:
                raise ValueError(
                    f"PreviousActionObservation: the Dict observation already has a {key!r} "
                    f"entry (keys {list(space.spaces)}); pass another key"
                )
            entries = dict(space.spaces)
        else:
            if key == obs_key:
                raise ValueError(f"key and obs_key must differ, both are {key!r}")
            entries = {obs_key: space}
        entries[key] = self.feature_space
        self.key, self.obs_key = key, obs_key
        self.observation_space = spaces.Dict(entries)

        act = env.action_space
        if isinstance(act, spaces.MultiDiscrete):
            nvec = act.nvec.ravel().astype(np.int64)
            self._offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]])
            self._nvec = nvec
            self._start = np.asarray(act.start).ravel().astype(np.int64)
        elif isinstance(act, spaces.Discrete):
            self._start = np.int64(act.start)
            self._n = int(act.n)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        return self._with_feature(obs, np.zeros(self.feature_space.shape, np.float32)), info

    def step(self, action: Any) -> tuple[dict[str, Any], SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        feature = self.encode(action)
        return self._with_feature(obs, feature), reward, terminated, truncated, info

    def encode(self, action: Any) -> np.ndarray:
        """The float32 feature of ``action`` (a fresh array)."""
        space = self.env.action_space
        feature = np.zeros(self.feature_space.shape, np.float32)
        if isinstance(space, spaces.Box):
            a = np.asarray(action, np.float32).reshape(space.shape)
            return np.clip(a, space.low, space.high).astype(np.float32)
        if isinstance(space, spaces.Discrete):
            i = int(action) - self._start
            if not 0 <= i < self._n:
                raise ValueError(f"action {np.asarray(action).tolist()} is outside {space}")
            feature[i] = 1.0
            return feature
        idx = np.asarray(action, np.int64).ravel() - self._start
        if idx.shape != self._nvec.shape or np.any((idx < 0) | (idx >= self._nvec)):
            raise ValueError(f"action {np.asarray(action).tolist()} is outside {space}")
        feature[self._offsets + idx] = 1.0
        return feature

    def _with_feature(self, obs: Any, feature: np.ndarray) -> dict[str, Any]:
        if self._is_dict:
            return {**obs, self.key: feature}
        return {self.obs_key: obs, self.key: feature}
