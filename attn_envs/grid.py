"""MiniGrid pieces of the relational double-DQN experiment (seed 000, book ch. 10, E2).

The book trains on ``MiniGrid-DoorKey-5x5-v0`` with the agent's 7x7x3 egocentric view divided
by its max, five of the seven actions (``{0: left, 1: right, 2: forward, 3: pickup,
4: toggle}``; drop and done are never needed), a 400-step limit and a -0.01 reward for every
step whose env reward is 0. Each of those is one wrapper here; :func:`make_egocentric_doorkey`
composes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, SupportsFloat

import gymnasium as gym
import minigrid  # noqa: F401  (registers the MiniGrid-* ids)
import numpy as np
from gymnasium import spaces
from minigrid.core.constants import COLOR_TO_IDX, DIR_TO_VEC, OBJECT_TO_IDX, STATE_TO_IDX

from attn_envs._spaces import require_box, require_integral

__all__ = [
    "DOORKEY_SIZES",
    "GRID_CHANNEL_MAX",
    "RAW_GRID_KEY",
    "ActionSubset",
    "EgocentricGridObservation",
    "StepPenalty",
    "make_egocentric_doorkey",
]

GRID_CHANNEL_MAX: tuple[int, int, int] = (
    max(OBJECT_TO_IDX.values()),
    max(COLOR_TO_IDX.values()),
    # Door states reach 2 (locked); fully observed grids store the agent's direction (0-3)
    # in the same channel.
    max(max(STATE_TO_IDX.values()), len(DIR_TO_VEC) - 1),
)
"""Largest value of each MiniGrid cell channel (object index, colour index, state)."""

DOORKEY_SIZES: tuple[int, ...] = (5, 6, 8, 16)
"""Sizes with a registered ``MiniGrid-DoorKey-{size}x{size}-v0``."""

RAW_GRID_KEY = "raw_grid"
"""``info`` key of :class:`EgocentricGridObservation`'s raw (unscaled, integer) grid."""

Scale = Literal["max", "fixed"] | None


class EgocentricGridObservation(
    gym.ObservationWrapper[np.ndarray, Any, Any], gym.utils.RecordConstructorArgs
):
    """MiniGrid's egocentric (H, W, 3) cell encoding as a float32, channels-first array.

    Keeps only the ``"image"`` entry of MiniGrid's Dict observation (like ``ImgObsWrapper``;
    an image-only Box is accepted too), moves channels first for SB3/torch convolutions and
    scales it. The spatial axes stay as MiniGrid lays them out.

    ``reset`` and ``step`` also report the view as MiniGrid encodes it, unscaled, in
    ``info["raw_grid"]`` (:data:`RAW_GRID_KEY`): a ``(3, H, W)`` integer array in the
    observation's layout (object, colour, state indices), so figures read the cells
    (``attn_policies.attention_plots.doorkey_nodes``) without undoing the scaling.

    Args:
        env: MiniGrid env: Dict observation with an ``"image"`` Box of shape (H, W, 3), or
            that Box itself.
        scale: ``"max"`` divides by the observation's own maximum, as the book does (an
            all-zero view stays zero); ``"fixed"`` divides each channel by
            :data:`GRID_CHANNEL_MAX` (object, colour, state), so values mean the same thing in
            every step; ``None`` keeps the raw cell values as floats.

    Raises:
        TypeError: if the observation is neither such a Dict nor a Box.
        ValueError: if the image is not (H, W, 3), has negative bounds while scaling, or
            ``scale`` is unknown.

    Example:
        >>> import gymnasium as gym
        >>> from attn_envs.grid import EgocentricGridObservation
        >>> env = EgocentricGridObservation(gym.make("MiniGrid-DoorKey-5x5-v0"))
        >>> obs, _ = env.reset(seed=0)
        >>> obs.shape, obs.dtype, float(obs.max())
        ((3, 7, 7), dtype('float32'), 1.0)
        >>> raw, _ = gym.make("MiniGrid-DoorKey-5x5-v0").reset(seed=0)
        >>> bool(np.allclose(obs, raw["image"].transpose(2, 0, 1) / raw["image"].max()))
        True
        >>> obs, *_, info = env.step(2)
        >>> grid = info["raw_grid"]
        >>> grid.shape, grid.dtype, bool(np.allclose(obs, grid / grid.max()))
        ((3, 7, 7), dtype('uint8'), True)
    """

    def __init__(self, env: gym.Env, scale: Scale = "max") -> None:
        gym.utils.RecordConstructorArgs.__init__(self, scale=scale)
        gym.ObservationWrapper.__init__(self, env)
        space = env.observation_space
        self._from_dict = isinstance(space, spaces.Dict)
        if isinstance(space, spaces.Dict):
            if "image" not in space.spaces:
                raise TypeError(
                    "EgocentricGridObservation needs a MiniGrid Dict observation with an "
                    f"'image' entry, got keys {list(space.spaces)}"
                )
            space = space["image"]
        elif not isinstance(space, spaces.Box):
            raise TypeError(
                "EgocentricGridObservation needs a MiniGrid Dict observation with an 'image' "
                f"Box, or that Box, got {type(space).__name__}: {space}"
            )
        image = require_box(space, "EgocentricGridObservation", ndim=(3,))
        if image.shape[-1] != 3:
            raise ValueError(
                "EgocentricGridObservation needs MiniGrid cells encoded as (H, W, 3), got shape "
                f"{image.shape}"
            )
        if scale not in ("max", "fixed", None):
            raise ValueError(f"scale must be 'max', 'fixed' or None, got {scale!r}")
        if scale is not None and np.any(image.low < 0):
            raise ValueError(
                f"EgocentricGridObservation scale={scale!r} needs non-negative cell values, "
                f"got low={image.low.min()}"
            )
        self.scale = scale
        h, w, c = image.shape
        if scale is None:
            low = np.transpose(image.low, (2, 0, 1)).astype(np.float32)
            high = np.transpose(image.high, (2, 0, 1)).astype(np.float32)
            self.observation_space = spaces.Box(low, high, dtype=np.float32)
        else:
            self.observation_space = spaces.Box(0.0, 1.0, (c, h, w), np.float32)
        self._channel_max = np.asarray(GRID_CHANNEL_MAX, np.float32)[:, None, None]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        return self.observation(obs), self._with_grid(obs, info)

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self.observation(obs), reward, terminated, truncated, self._with_grid(obs, info)

    def _with_grid(self, observation: Any, info: dict[str, Any]) -> dict[str, Any]:
        image = observation["image"] if self._from_dict else observation
        grid = np.transpose(np.asarray(image), (2, 0, 1))
        if grid.dtype.kind == "f":  # a float image Box: the cells are still whole numbers
            grid = np.rint(grid).astype(np.int64)
        return {**info, RAW_GRID_KEY: np.ascontiguousarray(grid)}

    def observation(self, observation: Any) -> np.ndarray:
        image = observation["image"] if self._from_dict else observation
        x = np.transpose(np.asarray(image, np.float32), (2, 0, 1))
        if self.scale == "max":
            peak = x.max()
            x = x / peak if peak > 0 else np.zeros_like(x)
        elif self.scale == "fixed":
            # Clip so objects from custom MiniGrid extensions cannot leave the space.
            x = np.minimum(x / self._channel_max, 1.0)
        return np.ascontiguousarray(x, dtype=np.float32)


class ActionSubset(gym.ActionWrapper[Any, np.int64, int], gym.utils.RecordConstructorArgs):
    """Expose only some actions of a Discrete action space: new action ``i`` is ``actions[i]``.

    Args:
        env: env with a Discrete action space.
        actions: distinct env actions to keep, in the order of the new indices. The default
            keeps MiniGrid's left, right, forward, pickup and toggle (the book's mapping
            ``{0: 0, 1: 1, 2: 2, 3: 3, 4: 5}``).

    Raises:
        TypeError: if the action space is not Discrete or an action is not an integer.
        ValueError: if ``actions`` is empty, repeats an action or leaves the env's range.

    Example:
        >>> import gymnasium as gym
        >>> from attn_envs.grid import ActionSubset
        >>> env = ActionSubset(gym.make("MiniGrid-DoorKey-5x5-v0"))
        >>> env.action_space, env.action(4)
        (Discrete(5), 5)
    """

    def __init__(self, env: gym.Env, actions: Sequence[int] = (0, 1, 2, 3, 5)) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, actions=actions)
        gym.ActionWrapper.__init__(self, env)
        space = env.action_space
        if not isinstance(space, spaces.Discrete):
            raise TypeError(
                f"ActionSubset needs a Discrete action space, got {type(space).__name__}: {space}"
            )
        acts = list(actions)
        if not acts:
            raise ValueError("ActionSubset needs at least one action, got none")
        bad = [a for a in acts if isinstance(a, bool) or not isinstance(a, int | np.integer)]
        if bad:
            raise TypeError(f"ActionSubset actions must be integers, got {bad!r}")
        lo, hi = int(space.start), int(space.start + space.n)
        out = [int(a) for a in acts if not lo <= a < hi]
        if out:
            raise ValueError(
                f"ActionSubset actions {out} are outside the env's {space} (valid {lo}..{hi - 1})"
            )
        if len(set(acts)) != len(acts):
            dup = sorted({int(a) for a in acts if acts.count(a) > 1})
            raise ValueError(f"ActionSubset actions must be distinct, got {dup} more than once")
        self.actions: tuple[int, ...] = tuple(int(a) for a in acts)
        self.action_space = spaces.Discrete(len(self.actions))

    def action(self, action: int | np.integer) -> int:
        i = int(action)
        if not 0 <= i < len(self.actions):  # plain indexing would wrap negatives silently
            raise ValueError(f"ActionSubset action {action!r} is outside {self.action_space}")
        return self.actions[i]


class StepPenalty(gym.RewardWrapper[Any, Any], gym.utils.RecordConstructorArgs):
    """Replace a reward of exactly 0 with ``penalty``; any other reward passes unchanged.

    Sparse-reward tasks such as DoorKey pay only on success; a small cost per idle step
    pushes the agent to finish quickly. ``penalty=0`` is the identity.

    Args:
        env: any env.
        penalty: the reward given instead of 0.

    Raises:
        ValueError: if ``penalty`` is not a finite number.

    Example:
        >>> import gymnasium as gym
        >>> from attn_envs.grid import StepPenalty
        >>> env = StepPenalty(gym.make("MiniGrid-DoorKey-5x5-v0"), penalty=-0.01)
        >>> _ = env.reset(seed=0)
        >>> env.step(0)[1], env.reward(0.5)
        (-0.01, 0.5)
    """

    def __init__(self, env: gym.Env, penalty: float = -0.01) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, penalty=penalty)
        gym.RewardWrapper.__init__(self, env)
        if not np.isfinite(penalty):
            raise ValueError(f"StepPenalty penalty must be a finite number, got {penalty!r}")
        self.penalty = float(penalty)

    def reward(self, reward: SupportsFloat) -> SupportsFloat:
        return self.penalty if reward == 0 else reward


def make_egocentric_doorkey(
    size: int = 5,
    max_steps: int = 400,
    penalty: float = -0.01,
    actions: Sequence[int] = (0, 1, 2, 3, 5),
    scale: Scale = "max",
    render_mode: str | None = None,
) -> gym.Env:
    """The book's DoorKey task: egocentric scaled view, 5 actions, step penalty (E2).

    Builds ``MiniGrid-DoorKey-{size}x{size}-v0`` with ``max_steps`` (the env truncates there)
    and wraps it in :class:`EgocentricGridObservation`, :class:`ActionSubset` and
    :class:`StepPenalty`. Larger sizes give the text's curriculum 5x5 -> 6x6 -> 8x8 -> 16x16.

    Raises:
        ValueError: if ``size`` has no registered DoorKey env or ``max_steps`` < 1.

    Example:
        >>> env = make_egocentric_doorkey()
        >>> obs, _ = env.reset(seed=0)
        >>> obs.shape, env.action_space, env.unwrapped.max_steps
        ((3, 7, 7), Discrete(5), 400)
    """
    if size not in DOORKEY_SIZES:
        raise ValueError(f"DoorKey size must be one of {DOORKEY_SIZES}, got {size!r}")
    max_steps = require_integral(max_steps, "max_steps")
    env = gym.make(
        f"MiniGrid-DoorKey-{size}x{size}-v0", max_steps=max_steps, render_mode=render_mode
    )
    env = EgocentricGridObservation(env, scale=scale)
    env = ActionSubset(env, actions=actions)
    return StepPenalty(env, penalty=penalty)
