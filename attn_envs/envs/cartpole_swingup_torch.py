"""CartPoleSwingUp's physics in torch, so that a return can be differentiated through it.

The numpy env (:mod:`attn_envs.envs.cartpole_swingup`) is what agents are scored on; this is
the same semi-implicit Euler step, observation and reward on ``(B, 4)`` torch states, for
analytic policy gradients (:mod:`attn_policies.algorithms.apg`). :class:`CartPoleHoldTask`
bundles them with a quadratic cost whose optimum is the pole held up over a centred cart: a
balancing stage for curricula, where the task's own reward pays a spinning pole 0.6-0.8 a
step and the cost below makes it pay about 1.

Example:
    >>> import torch
    >>> s = torch.zeros(2, 4, dtype=torch.float64)  # upright, centred, at rest
    >>> dynamics(s, torch.zeros(2, dtype=torch.float64)).abs().max().item()
    0.0
    >>> task = CartPoleHoldTask(harder=False)
    >>> task.observe(s).shape, task.cost(s).tolist()
    (torch.Size([2, 5]), [0.0, 0.0])
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch
from torch import Tensor

from attn_envs.envs import cartpole_swingup as csu

__all__ = ["CartPoleHoldTask", "dynamics", "observation", "reward"]


def dynamics(state: Tensor, action: Tensor) -> Tensor:
    """:func:`~attn_envs.envs.cartpole_swingup.swingup_dynamics` for states ``(B, 4)`` and
    actions ``(B,)`` (clipped to [-1, 1], times the force), differentiable."""
    x, x_dot, theta, theta_dot = state.unbind(-1)
    force = action.clamp(-1.0, 1.0) * csu.FORCE_MAG
    sin, cos = torch.sin(theta), torch.cos(theta)
    m, mpl, mp, g, fr = csu._TOTAL_M, csu._M_P_L, csu.MASS_POLE, csu.GRAVITY, csu.FRICTION
    x_acc = (
        -2 * mpl * theta_dot**2 * sin + 3 * mp * g * sin * cos + 4 * force - 4 * fr * x_dot
    ) / (4 * m - 3 * mp * cos**2)
    theta_acc = (
        -3 * mpl * theta_dot**2 * sin * cos + 6 * m * g * sin + 6 * (force - fr * x_dot) * cos
    ) / (4 * csu.POLE_LENGTH * m - 3 * mpl * cos**2)
    # semi-implicit as the env: positions move with the old velocities
    dt = csu.DT
    return torch.stack(
        (x + x_dot * dt, x_dot + x_acc * dt, theta + theta_dot * dt, theta_dot + theta_acc * dt),
        -1,
    )


def observation(state: Tensor) -> Tensor:
    """``[x, x_dot, cos θ, sin θ, theta_dot]`` of states ``(B, 4)``."""
    x, x_dot, theta, theta_dot = state.unbind(-1)
    return torch.stack((x, x_dot, torch.cos(theta), torch.sin(theta), theta_dot), -1)


def reward(state: Tensor) -> Tensor:
    """The task's reward of states ``(B, 4)``: ``(cos θ + 1) / 2 · cos(x / 2.4 · π / 2)``."""
    return (torch.cos(state[:, 2]) + 1) / 2 * torch.cos(state[:, 0] / csu.X_THRESHOLD * math.pi / 2)


@dataclasses.dataclass(frozen=True)
class CartPoleHoldTask:
    """Holding the pole up over a centred cart, as a differentiable task.

    Cost a step: ``1 - cos θ + x_weight (x / 2.4)^2 + theta_dot_weight θ'^2 + x_dot_weight
    x'^2``. A copy has *failed* when its cart is off the rail or its pole is below the
    horizontal; the trainer restarts it.

    Args:
        harder: starts from the Harder box instead of ``N(0, 0.2)`` around the centre.
        upright: starts around the pole up (the balancing task; the other starts hang down
            and would count as failed at once).
        x_weight, theta_dot_weight, x_dot_weight: the cost's weights.
        span: the Harder box's half-widths ``[x, x_dot, θ, θ_dot]`` (``harder`` only; ``None``:
            the env's default box), as the env's ``start_span``.
    """

    harder: bool = False
    upright: bool = True
    x_weight: float = 0.25
    theta_dot_weight: float = 0.01
    x_dot_weight: float = 0.01
    obs_dim: int = 5
    span: tuple[float, float, float, float] | None = None

    def starts(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return csu.sample_initial_states(rng, n, self.harder, self.upright, self.span)

    def step(self, state: Tensor, action: Tensor) -> Tensor:
        return dynamics(state, action.reshape(-1))

    def observe(self, state: Tensor) -> Tensor:
        return observation(state)

    def cost(self, state: Tensor) -> Tensor:
        x, x_dot, theta, theta_dot = state.unbind(-1)
        return (
            1 - torch.cos(theta)
            + self.x_weight * (x / csu.X_THRESHOLD) ** 2
            + self.theta_dot_weight * theta_dot**2
            + self.x_dot_weight * x_dot**2
        )  # fmt: skip

    def failed(self, state: Tensor) -> Tensor:
        off_rail = state[:, 0].abs() > csu.X_THRESHOLD
        return off_rail | (torch.cos(state[:, 2]) < 0) if self.upright else off_rail
