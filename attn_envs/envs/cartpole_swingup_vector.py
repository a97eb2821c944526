"""CartPoleSwingUp (E3), numpy-batched: ``num_envs`` copies of the swing-up stepped at once.

The copies run the single env's physics
(:func:`~attn_envs.envs.cartpole_swingup.swingup_dynamics` on states laid out ``(4, B)``),
draw their starts as it does (:func:`~attn_envs.envs.cartpole_swingup.draw_starts`) and take
the same options, so copy ``i`` seeded like a
:class:`~attn_envs.envs.cartpole_swingup.CartPoleSwingUpEnv` plays the same episode; an ES
evaluator steps thousands of them in one numpy call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.error import ResetNeeded
from gymnasium.utils.seeding import np_random
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space
from numpy.typing import ArrayLike, NDArray

from attn_envs._spaces import require_integral
from attn_envs.envs.cartpole_swingup import (
    X_THRESHOLD,
    FloatArray,
    check_probability,
    check_start_span,
    check_upright_share,
    draw_starts,
    state_option,
    swingup_action_space,
    swingup_dynamics,
    swingup_observation,
    swingup_observation_space,
    swingup_reward,
)

__all__ = ["CartPoleSwingUpVectorEnv"]


class CartPoleSwingUpVectorEnv(VectorEnv[NDArray[np.float32], NDArray[np.float32], np.ndarray]):
    """``num_envs`` copies of
    :class:`~attn_envs.envs.cartpole_swingup.CartPoleSwingUpEnv` stepped in one numpy call.

    With ``autoreset=True`` it follows gymnasium's NEXT_STEP autoreset: the step after a copy
    ends ignores that copy's action and returns its fresh initial observation with reward 0
    and both flags False. With ``autoreset=False`` (``AutoresetMode.DISABLED``) a copy that
    ends freezes: its state and step count stop changing, its reward is 0 and its flags are
    False from the next step on, until it is reset (``reset(options={"reset_mask": m})``
    resets only the copies in ``m``). Either way :attr:`done` marks the copies whose episode
    has ended and that have not been reset yet, so an ES evaluator can run all copies for
    ``max_episode_steps`` steps and just sum the rewards.

    ``reset(seed=s)`` seeds one generator that draws all copies' initial states (copy ``i``
    gets draws ``4i … 4i+3``, so copy 0 starts like ``CartPoleSwingUpEnv`` reset with the
    same seed); autoresets draw from the same generator, and so does a masked reset (with a
    seed, the generator is reseeded first). ``reset(seed=[s_0, ..., s_{B-1}])`` starts copy
    ``i`` exactly where ``CartPoleSwingUpEnv`` reset with ``s_i`` starts (later autoresets
    draw from a generator seeded with ``s_0``), so equal seeds give equal episodes.
    ``options={"state": (B, 4) array}`` sets exact initial states instead (only the masked
    rows are used when a mask is given).

    Args:
        num_envs: Number of copies ``B``.
        harder: Use the Harder reset distribution.
        max_episode_steps: Truncation step of every copy.
        autoreset: NEXT_STEP autoreset if True, freeze finished copies if False.
        upright: Start around the pole up, as :class:`CartPoleSwingUpEnv`.
        upright_share: Probability that a start is upright, as :class:`CartPoleSwingUpEnv`.
        inward_share: Probability that a start's cart moves towards the centre, as
            :class:`CartPoleSwingUpEnv`.
        start_span: The Harder box's half-widths, as :class:`CartPoleSwingUpEnv`.

    Attributes:
        done: Bool mask ``(B,)`` of copies that ended and were not reset yet.
        steps: Int ``(B,)`` steps taken in each copy's current episode.

    Example:
        >>> venv = CartPoleSwingUpVectorEnv(4, harder=True, autoreset=False)
        >>> obs, info = venv.reset(seed=0)
        >>> obs.shape, obs.dtype, venv.action_space.shape
        ((4, 5), dtype('float32'), (4, 1))
        >>> obs, rewards, terminations, truncations, infos = venv.step(np.zeros((4, 1)))
        >>> rewards.shape, terminations.dtype, venv.done.shape
        ((4,), dtype('bool'), (4,))
    """

    metadata: dict[str, Any] = {"render_modes": [], "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(
        self,
        num_envs: int,
        harder: bool = False,
        max_episode_steps: int = 1000,
        autoreset: bool = True,
        upright: bool = False,
        upright_share: float = 0.0,
        inward_share: float = 0.0,
        start_span: ArrayLike | None = None,
    ) -> None:
        self.num_envs = require_integral(num_envs, "num_envs")
        self.harder, self.upright = bool(harder), bool(upright)
        self.upright_share = check_upright_share(self.upright, upright_share)
        self.inward_share = check_probability("inward_share", inward_share)
        self.start_span = check_start_span(self.harder, start_span)
        self.max_episode_steps = require_integral(max_episode_steps, "max_episode_steps")
        self.autoreset = bool(autoreset)
        mode = AutoresetMode.NEXT_STEP if self.autoreset else AutoresetMode.DISABLED
        self.metadata = {**type(self).metadata, "autoreset_mode": mode}
        self.single_observation_space = swingup_observation_space()
        self.single_action_space = swingup_action_space()
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._state: FloatArray | None = None  # (4, B): contiguous rows for the physics
        self._obs = np.zeros((self.num_envs, 5), dtype=np.float32)  # last observation
        self.steps = np.zeros(self.num_envs, dtype=np.int64)
        self.done = np.zeros(self.num_envs, dtype=np.bool_)

    def _starts(self, rng: np.random.Generator, n: int) -> FloatArray:
        shares = self.upright_share, self.inward_share, self.start_span
        return draw_starts(rng, n, self.harder, self.upright, *shares)

    @property
    def state(self) -> FloatArray | None:
        """Copy of the float64 states, shape ``(B, 4)``; ``None`` before ``reset``."""
        return None if self._state is None else self._state.T.copy()

    def reset(
        self,
        *,
        seed: int | Sequence[int] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[NDArray[np.float32], dict[str, Any]]:
        seeds = None
        if seed is not None and not isinstance(seed, int | np.integer):
            seeds = np.asarray(seed, dtype=np.int64)
            if seeds.shape != (self.num_envs,):
                raise ValueError(
                    f"seed must be an int or {self.num_envs} ints, got shape {seeds.shape}"
                )
            seed = int(seeds[0])
        super().reset(seed=seed)
        mask = self._reset_mask(options)
        given = state_option(options, (self.num_envs, 4))
        if self._state is None:
            if not mask.all():
                raise ResetNeeded("The first reset() must reset every copy (no reset_mask).")
            self._state = np.empty((4, self.num_envs), dtype=np.float64)
        idx = np.flatnonzero(mask)
        if given is not None:
            self._state[:, idx] = given[idx].T
        elif seeds is not None:
            # ES evaluators give many copies the same seed: draw once per distinct seed.
            unique, inverse = np.unique(seeds[idx], return_inverse=True)
            drawn = np.stack([self._starts(np_random(int(s))[0], 1)[0] for s in unique])
            self._state[:, idx] = drawn[inverse].T
        else:
            self._state[:, idx] = self._starts(self.np_random, idx.size).T
        # Rebind rather than write in place, as step() does: arrays handed out stay snapshots.
        self.steps = np.where(mask, 0, self.steps)
        self.done = self.done & ~mask
        self._obs = swingup_observation(self._state)
        return self._obs.copy(), {}

    def step(
        self, actions: ArrayLike
    ) -> tuple[
        NDArray[np.float32], FloatArray, NDArray[np.bool_], NDArray[np.bool_], dict[str, Any]
    ]:
        if self._state is None:
            raise ResetNeeded("Call reset() before step().")
        a = np.asarray(actions, dtype=np.float64)
        if a.shape not in ((self.num_envs,), (self.num_envs, 1)):
            raise ValueError(
                f"actions must have shape ({self.num_envs},) or ({self.num_envs}, 1), got {a.shape}"
            )
        ended = self.done
        live = ~ended
        a = a.reshape(self.num_envs)
        if self.autoreset:
            state = swingup_dynamics(self._state, a)
            self.steps += 1
            rewards = np.where(live, swingup_reward(state), 0.0)
            obs = None
        else:
            # Frozen copies are not stepped: an ES generation soon has most copies ended.
            # The maths is elementwise, so a copy's result does not depend on the others.
            idx = np.flatnonzero(live)
            state = self._state.copy()
            rewards = np.zeros(self.num_envs)
            obs = self._obs.copy()
            if idx.size:
                new = swingup_dynamics(self._state[:, idx], a[idx])
                state[:, idx] = new
                rewards[idx] = swingup_reward(new)
                obs[idx] = swingup_observation(new)
            self.steps += live
        terminations = live & (np.abs(state[0]) > X_THRESHOLD)
        truncations = live & (self.steps >= self.max_episode_steps)
        if self.autoreset:
            idx = np.flatnonzero(ended)
            if idx.size:
                state[:, idx] = self._starts(self.np_random, idx.size).T
                self.steps[idx] = 0
            self.done = terminations | truncations
        else:
            self.done = ended | terminations | truncations
        self._state = state
        if obs is None:
            obs = swingup_observation(state)
        self._obs = obs
        return obs.copy(), rewards, terminations, truncations, {}

    def _reset_mask(self, options: dict[str, Any] | None) -> NDArray[np.bool_]:
        if not options or options.get("reset_mask") is None:
            return np.ones(self.num_envs, dtype=np.bool_)
        mask = options["reset_mask"]
        if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_:
            raise TypeError(f"options['reset_mask'] must be a bool numpy array, got {mask!r}")
        if mask.shape != (self.num_envs,):
            raise ValueError(
                f"options['reset_mask'] must have shape ({self.num_envs},), got {mask.shape}"
            )
        return mask
