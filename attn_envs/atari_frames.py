"""Atari frames as seed 003 (Wang et al. 2019, E8) and DQN 2013 preprocess them.

The paper: "we convert the RGB image to a grayscale image and then down-sample it to
110x84. Finally we crop it and get an 84x84 region which captures the playing area."
SB3's ``AtariWrapper`` (``WarpFrame``) instead squashes the whole 210x160 frame to 84x84,
score and borders included, with another aspect ratio. ``DownsampleCropObservation`` does the
paper's step; ``AtariCropWrapper`` is SB3's ``AtariWrapper`` with it in place of
``WarpFrame`` (no-op reset, frame skip with max-pooling, life loss, fire reset, reward
clipping unchanged).

The crop keeps rows ``[18, 102)`` of the 110x84 frame, i.e. rows ~34..194 of the original:
the DQN 2013 paper names no offset; this is the common choice of its reimplementations and
spans the playing field of Pong (score above it, bottom wall at ~194) and Breakout.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import cv2
import gymnasium as gym
import numpy as np
from ale_py.env import AtariEnv
from gymnasium import spaces
from stable_baselines3.common.atari_wrappers import (
    ClipRewardEnv,
    EpisodicLifeEnv,
    FireResetEnv,
    MaxAndSkipEnv,
    NoopResetEnv,
    StickyActionEnv,
)

from attn_envs._seeding import SeededWrapperMixin
from attn_envs._spaces import require_box, require_integral

__all__ = ["AtariCropWrapper", "DownsampleCropObservation", "FixedNoopReset", "NoopFrameReset"]


class DownsampleCropObservation(
    gym.ObservationWrapper[np.ndarray, Any, np.ndarray], gym.utils.RecordConstructorArgs
):
    """Grey, downsample to ``height x width``, crop ``size x size`` from row ``crop_top``.

    Grey uses OpenCV's weights (``cv2.COLOR_RGB2GRAY``) on an RGB ``(H, W, 3)`` input; a grey
    ``(H, W)`` or ``(H, W, 1)`` input is used as it is. The downsampling is ``cv2.INTER_AREA``
    (as SB3's ``WarpFrame``); the crop spans all columns when ``width == size``, else it is
    centred. The output is ``(size, size, 1)`` uint8, channel last like ``WarpFrame``'s.

    Args:
        env: Env with a uint8 Box observation of shape ``(H, W, 3)``, ``(H, W)`` or
            ``(H, W, 1)``.
        height: Rows after downsampling (paper: 110).
        width: Columns after downsampling (paper: 84).
        crop_top: First row of the crop in the downsampled frame.
        size: Side of the square crop (paper: 84).

    Example:
        >>> import ale_py
        >>> gym.register_envs(ale_py)
        >>> env = DownsampleCropObservation(gym.make("ALE/Pong-v5"))
        >>> obs, _ = env.reset(seed=0)
        >>> obs.shape, obs.dtype
        ((84, 84, 1), dtype('uint8'))
        >>> env.close()
    """

    def __init__(
        self,
        env: gym.Env,
        height: int = 110,
        width: int = 84,
        crop_top: int = 18,
        size: int = 84,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self, height=height, width=width, crop_top=crop_top, size=size
        )
        gym.ObservationWrapper.__init__(self, env)
        name = type(self).__name__
        space = require_box(env.observation_space, name, ndim=(2, 3))
        if space.dtype != np.uint8 or (len(space.shape) == 3 and space.shape[2] not in (1, 3)):
            raise ValueError(
                f"{name} needs a uint8 (H, W, 3) RGB or (H, W[, 1]) grey observation, got "
                f"shape {space.shape} and dtype {space.dtype}"
            )
        self.height = require_integral(height, "height")
        self.width = require_integral(width, "width")
        self.size = require_integral(size, "size")
        self.crop_top = require_integral(crop_top, "crop_top", minimum=0)
        if self.crop_top + self.size > self.height or self.size > self.width:
            raise ValueError(
                f"a {size}x{size} crop from row {crop_top} does not fit a {height}x{width} frame"
            )
        self._rgb = len(space.shape) == 3 and space.shape[2] == 3
        self._left = (self.width - self.size) // 2
        self.observation_space = spaces.Box(0, 255, (self.size, self.size, 1), dtype=np.uint8)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        frame = np.ascontiguousarray(observation)
        if self._rgb:
            frame = cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY)
        elif frame.ndim == 3:
            frame = frame[..., 0]
        small = cv2.resize(frame, (self.width, self.height), interpolation=cv2.INTER_AREA)
        crop = small[self.crop_top : self.crop_top + self.size, self._left : self._left + self.size]
        return crop[..., None]


def _require_noop_ale(env: gym.Env, wrapper: str) -> AtariEnv:
    """The ALE env under ``env``: TypeError unless there is one, ValueError unless its action
    0 is NOOP."""
    base = env.unwrapped
    if not isinstance(base, AtariEnv):
        raise TypeError(f"{wrapper} needs an ALE env, got {type(base).__name__}")
    first = base.get_action_meanings()[0]
    if first != "NOOP":
        raise ValueError(f"{wrapper} needs action 0 to be NOOP, got {first!r}")
    return base


@runtime_checkable
class _NamesActions(Protocol):
    """What ``AtariCropWrapper`` asks of the env under its wrappers (ALE-like)."""

    def get_action_meanings(self) -> list[str]: ...


class FixedNoopReset(gym.Wrapper[Any, int, Any, int], gym.utils.RecordConstructorArgs):
    """Exactly ``noops`` NOOP frames after every reset: one fixed start of the ones that
    ``NoopResetEnv`` (or ``AtariPreprocessing``'s ``noop_max``) draws from ``1..noop_max``.

    Without sticky actions an ALE game is deterministic, so a greedy agent's whole episode is
    fixed by its start, and under a frame skip of ``f`` the count mod ``f`` sets the phase of
    the agent's steps in the game. Playing each start once gives an agent's exact expected
    score (E5's lab notes, ``docs/lab_notes/e5_puzzle_pong.md``). Wrap the frame-skip-1 env,
    inside the frame skip, in place of the random no-ops.

    Args:
        env: An ALE env whose action 0 is NOOP.
        noops: No-op frames after each reset (0: none).

    Example:
        >>> import ale_py
        >>> gym.register_envs(ale_py)
        >>> pong = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0)
        >>> env = FixedNoopReset(pong, noops=7)
        >>> obs, info = env.reset(seed=0)
        >>> obs.shape, info["episode_frame_number"]
        ((210, 160, 3), 7)
        >>> env.close()
    """

    def __init__(self, env: gym.Env, noops: int) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, noops=noops)
        self.noops = require_integral(noops, "noops", minimum=0)
        _require_noop_ale(env, "FixedNoopReset")
        super().__init__(env)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        for _ in range(self.noops):
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(seed=seed, options=options)
        return obs, info


class NoopFrameReset(
    SeededWrapperMixin, gym.Wrapper[Any, Any, Any, Any], gym.utils.RecordConstructorArgs
):
    """A uniform ``0..noop_max`` single emulator frames of NOOP after every reset, also under
    the ALE env's own frame skip: the start's frame phase varies.

    ``NoopResetEnv`` on an env that skips frames itself (``ALE/<Game>-v5``, ``frameskip=4``)
    waits whole steps, so every episode starts at the same phase of the skip, and an agent
    trained there meets only that phase; ``AtariPreprocessing``'s no-ops are single frames,
    so its agents meet all of them. Pong without sticky actions plays a different game in each
    phase (``docs/lab_notes/e5_puzzle_pong.md``). The frames go straight to the emulator
    (``ale.act``), so it sits right on the ALE env; wrappers above that read the emulator at
    reset (``DistractorFeatureObservation``) see the advanced state. The draw comes from a
    generator seeded in ``reset(seed=...)``.

    Args:
        env: An ALE env (``ale_py.AtariEnv``, possibly under ``gym.make``'s wrappers) whose
            action 0 is NOOP.
        noop_max: The most frames added (3 covers every phase of a frame skip of 4).

    Example:
        >>> import ale_py
        >>> gym.register_envs(ale_py)
        >>> pong = gym.make("ALE/Pong-v5", obs_type="ram", repeat_action_probability=0.0)
        >>> env = NoopFrameReset(pong, noop_max=3)
        >>> obs, info = env.reset(seed=0)
        >>> obs.shape, info["episode_frame_number"] in (0, 1, 2, 3)
        ((128,), True)
        >>> env.close()
    """

    def __init__(self, env: gym.Env, noop_max: int = 3) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, noop_max=noop_max)
        self.noop_max = require_integral(noop_max, "noop_max", minimum=0)
        self._ale_env = _require_noop_ale(env, "NoopFrameReset")
        super().__init__(env)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._reseed(seed)
        frames = int(self.rng.integers(self.noop_max + 1))
        if frames:
            base = self._ale_env  # self.env.unwrapped
            noop = base._action_set[0]
            for _ in range(frames):
                base.ale.act(noop)
            if base.ale.game_over():
                return self.env.reset(seed=seed, options=options)
            # the reset's obs and info predate these frames: the emulator's own, as step makes
            obs, info = base._get_obs(), dict(base._get_info())
        return obs, info


class AtariCropWrapper(
    gym.Wrapper[np.ndarray, int, np.ndarray, int], gym.utils.RecordConstructorArgs
):
    """SB3's ``AtariWrapper`` with the paper's downsample-and-crop instead of ``WarpFrame``.

    Innermost first: sticky actions (if ``action_repeat_probability > 0``), up to
    ``noop_max`` no-ops at reset, frame skip with max-pooling of the last two frames, life
    loss as episode end (``terminal_on_life_loss``), FIRE at reset where the game has it,
    :class:`DownsampleCropObservation`, reward clipping to its sign. Use it on frame-skip-1
    envs (``ALE/<Game>-v5`` with ``frameskip=1``, or ``<Game>NoFrameskip-v4``).

    Example:
        >>> import ale_py
        >>> gym.register_envs(ale_py)
        >>> env = AtariCropWrapper(gym.make("ALE/Breakout-v5", frameskip=1))
        >>> obs, _ = env.reset(seed=0)
        >>> obs.shape
        (84, 84, 1)
        >>> env.close()
    """

    def __init__(
        self,
        env: gym.Env,
        noop_max: int = 30,
        frame_skip: int = 4,
        terminal_on_life_loss: bool = True,
        clip_reward: bool = True,
        action_repeat_probability: float = 0.0,
        crop_top: int = 18,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            noop_max=noop_max,
            frame_skip=frame_skip,
            terminal_on_life_loss=terminal_on_life_loss,
            clip_reward=clip_reward,
            action_repeat_probability=action_repeat_probability,
            crop_top=crop_top,
        )
        base = env.unwrapped
        if not isinstance(base, _NamesActions):
            raise TypeError(f"AtariCropWrapper needs an ALE env, got {type(base).__name__}")
        if action_repeat_probability > 0.0:
            env = StickyActionEnv(env, action_repeat_probability)
        if noop_max > 0:
            env = NoopResetEnv(env, noop_max=noop_max)
        if frame_skip > 1:
            env = MaxAndSkipEnv(env, skip=frame_skip)
        if terminal_on_life_loss:
            env = EpisodicLifeEnv(env)
        if "FIRE" in base.get_action_meanings():  # the wrappers above keep env.unwrapped
            env = FireResetEnv(env)
        env = DownsampleCropObservation(env, crop_top=crop_top)
        if clip_reward:
            env = ClipRewardEnv(env)
        gym.Wrapper.__init__(self, env)
