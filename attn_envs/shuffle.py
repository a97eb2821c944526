"""Observation shuffling and extra input channels (seed 001, the AttentionNeuron article).

``ShuffleObservation`` permutes the leading axis of an observation: the five CartPole
readings, or the patch tokens of a screen. ``DuplicateObservation`` and
``NoiseChannelsObservation`` add redundant or pure-noise inputs to a vector observation, the
"10 obs" and "5 obs + 5 noise" columns of the article's CartPoleSwingUpHarder table.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from attn_envs._seeding import SeededWrapperMixin
from attn_envs._spaces import require_box, require_integral

__all__ = ["DuplicateObservation", "NoiseChannelsObservation", "ShuffleObservation"]

_NOISE_BLOCK = 1024


def token_space(space: spaces.Box, n_tokens: int) -> spaces.Box:
    """The Box of ``n_tokens`` tokens drawn in any order from the tokens of ``space``.

    Tokens move between positions, so every position gets the loosest bounds of any token.
    """
    low = np.broadcast_to(space.low.min(axis=0), (n_tokens, *space.shape[1:]))
    high = np.broadcast_to(space.high.max(axis=0), (n_tokens, *space.shape[1:]))
    return spaces.Box(low=low.copy(), high=high.copy(), dtype=space.dtype)


class ShuffleObservation(
    SeededWrapperMixin,
    gym.ObservationWrapper[np.ndarray, Any, np.ndarray],
    gym.utils.RecordConstructorArgs,
):
    """Permute the first axis of a Box observation with a fresh permutation every episode.

    ``obs_out[i] = obs_in[permutation[i]]``. A new permutation is drawn at every reset and,
    with ``reshuffle_every=k``, again after every ``k`` steps within the episode (the
    article's "reshuffle every t steps" tests). The permutation in force for the returned
    observation is ``info["permutation"]``.

    With ``stacked_frames=f`` the tokens hold a stack of ``f`` frames on their last axis (or
    as the innermost of their flattened values, as
    :class:`~attn_envs.patches.PatchObservation` writes a frame stack), oldest first, and
    each frame keeps the permutation in force when it was observed: after a reshuffle, the
    older ``f - 1`` frames of a token still come from the old positions for ``f - 1`` steps.
    That is what shuffling each screen before stacking it does (the authors' Puzzle Pong and
    CarRacing wrappers), and why their agents lose points when reshuffled often. Without a
    reshuffle it changes nothing.

    Args:
        env: Env with a Box observation of at least one dimension.
        reshuffle_every: Draw a new permutation every this many steps; ``None`` keeps one
            permutation for the whole episode.
        stacked_frames: Frames stacked in each token (see above); ``None`` or 1: move whole
            tokens.

    Example:
        >>> import gymnasium as gym
        >>> from attn_envs import ShuffleObservation
        >>> env = ShuffleObservation(gym.make("CartPole-v1"))
        >>> obs, info = env.reset(seed=0)
        >>> obs.shape, sorted(info["permutation"].tolist())
        ((4,), [0, 1, 2, 3])
        >>> raw, _ = gym.make("CartPole-v1").reset(seed=0)
        >>> bool((obs == raw[info["permutation"]]).all())
        True
    """

    def __init__(
        self, env: gym.Env, reshuffle_every: int | None = None, stacked_frames: int | None = None
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self, reshuffle_every=reshuffle_every, stacked_frames=stacked_frames
        )
        gym.ObservationWrapper.__init__(self, env)
        space = require_box(env.observation_space, "ShuffleObservation")
        if len(space.shape) == 0:
            raise ValueError("ShuffleObservation needs an observation with at least one axis")
        self.reshuffle_every = (
            None
            if reshuffle_every is None
            else require_integral(reshuffle_every, "reshuffle_every")
        )
        self.frames = (
            1 if stacked_frames is None else require_integral(stacked_frames, "stacked_frames")
        )
        values = int(np.prod(space.shape[1:]))
        if self.frames > 1 and values % self.frames:
            raise ValueError(
                f"stacked_frames={self.frames} does not divide the {values} values of a token "
                f"(observation shape {space.shape})"
            )
        self.n_tokens = space.shape[0]
        self.observation_space = token_space(space, self.n_tokens)
        self.permutation = np.arange(self.n_tokens)  # replaced at reset
        # the permutation each stacked frame was observed under, oldest first
        self._frame_perms = np.tile(self.permutation, (self.frames, 1))
        self._t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        self._reseed(seed)
        self._t = 0
        self.permutation = self.rng.permutation(self.n_tokens)
        self._frame_perms[:] = self.permutation
        obs, info = self.env.reset(seed=seed, options=options)
        info["permutation"] = self.permutation.copy()
        return self.observation(obs), info

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        self._t += 1
        if self.reshuffle_every is not None and self._t % self.reshuffle_every == 0:
            self.permutation = self.rng.permutation(self.n_tokens)
        self._frame_perms[:-1] = self._frame_perms[1:].copy()
        self._frame_perms[-1] = self.permutation
        obs, reward, terminated, truncated, info = self.env.step(action)
        info["permutation"] = self.permutation.copy()
        return self.observation(obs), reward, terminated, truncated, info

    def observation(self, observation: np.ndarray) -> np.ndarray:
        perms = self._frame_perms
        if self.frames == 1 or (perms == self.permutation).all():
            return observation[self.permutation]
        tokens = observation.reshape(self.n_tokens, -1, self.frames)
        mixed = tokens[
            perms.T[:, None, :], np.arange(tokens.shape[1])[None, :, None], np.arange(self.frames)
        ]
        return mixed.reshape(observation.shape)


class DuplicateObservation(
    gym.ObservationWrapper[np.ndarray, Any, np.ndarray], gym.utils.RecordConstructorArgs
):
    """Repeat a 1-D observation ``copies`` times: ``[o, o, ...]``.

    Args:
        env: Env with a 1-D Box observation.
        copies: How many times the vector appears; 1 leaves the observation unchanged.

    Example:
        >>> import gymnasium as gym
        >>> from attn_envs import DuplicateObservation
        >>> env = DuplicateObservation(gym.make("CartPole-v1"), copies=2)
        >>> obs, _ = env.reset(seed=0)
        >>> obs.shape, bool((obs[:4] == obs[4:]).all())
        ((8,), True)
    """

    MAX_SIZE = 2**24  # elements of the duplicated observation

    def __init__(self, env: gym.Env, copies: int = 2) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, copies=copies)
        gym.ObservationWrapper.__init__(self, env)
        space = require_box(env.observation_space, "DuplicateObservation", ndim=(1,))
        self.copies = require_integral(copies, "copies")
        if self.copies * space.shape[0] > self.MAX_SIZE:  # np.tile would exhaust memory
            raise ValueError(
                f"copies={copies} of a {space.shape[0]}-element observation exceeds "
                f"{self.MAX_SIZE:,} elements"
            )
        self.observation_space = spaces.Box(
            low=np.tile(space.low, self.copies),
            high=np.tile(space.high, self.copies),
            dtype=space.dtype,
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.concatenate((observation,) * self.copies)


class NoiseChannelsObservation(
    SeededWrapperMixin,
    gym.ObservationWrapper[np.ndarray, Any, np.ndarray],
    gym.utils.RecordConstructorArgs,
):
    """Append ``n`` channels of pure Gaussian noise ``N(0, std**2)`` to a 1-D observation.

    Fresh noise is drawn for every observation from the wrapper's own generator, which
    ``reset(seed=...)`` reseeds.

    Args:
        env: Env with a 1-D floating-point Box observation.
        n: Number of noise channels; 0 leaves the observation unchanged.
        std: Standard deviation of the noise.

    Example:
        >>> import gymnasium as gym
        >>> from attn_envs import NoiseChannelsObservation
        >>> env = NoiseChannelsObservation(gym.make("CartPole-v1"), n=5, std=0.1)
        >>> obs, _ = env.reset(seed=0)
        >>> obs.shape, obs.dtype
        ((9,), dtype('float32'))
    """

    def __init__(self, env: gym.Env, n: int = 5, std: float = 0.1) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, n=n, std=std)
        gym.ObservationWrapper.__init__(self, env)
        space = require_box(env.observation_space, "NoiseChannelsObservation", ndim=(1,))
        if not np.issubdtype(space.dtype, np.floating):
            raise TypeError(
                f"NoiseChannelsObservation needs a floating-point Box, got dtype {space.dtype}"
            )
        n = require_integral(n, "n", minimum=0)
        if not np.isfinite(std) or std < 0:
            raise ValueError(f"std must be a finite non-negative number, got {std!r}")
        self.n, self.std = n, float(std)
        self._noise = np.empty((0, self.n), dtype=space.dtype)
        self._next = 0
        inf = np.full(self.n, np.inf, dtype=space.dtype)
        self.observation_space = spaces.Box(
            low=np.concatenate([space.low, -inf]),
            high=np.concatenate([space.high, inf]),
            dtype=space.dtype,
        )

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is not None:
            self._noise, self._next = self._noise[:0], 0
        self._reseed(seed)
        return super().reset(seed=seed, options=options)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        if self._next == len(self._noise):
            # one generator call per block of steps: per-step calls cost more than the env step
            block = self.rng.standard_normal((_NOISE_BLOCK, self.n)) * self.std
            self._noise, self._next = block.astype(self._noise.dtype), 0
        self._next += 1
        return np.concatenate((observation, self._noise[self._next - 1]))
