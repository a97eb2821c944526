"""CartPoleSwingUp (E3): the estool / EvoJAX swing-up task, its physics and the single env.

Faithful to ``CartPoleSwingUpHarderEnv`` of Tang & Ha's AttentionNeuron code (itself hardmaru's
estool ``cartpole_swingup``; EvoJAX ``cartpole.py`` is the same task): semi-implicit Euler with
dt 0.01, an episode ends when ``|x| > 2.4`` (terminated) or after ``max_episode_steps`` steps
(truncated), reward ``((cos θ + 1) / 2) · cos((x / 2.4) · π / 2)`` on the new state.

Choices where the original is silent or differs from gymnasium conventions:

* The reward is paid on the terminating step too, exactly as the original (and EvoJAX) do; it
  is computed from the new state, so it is slightly negative when the cart has just left the
  track (``cos`` of an angle a little beyond ``π/2``).
* θ is never wrapped (the original does not wrap it); only ``cos θ`` and ``sin θ`` are
  observed, so a pole that spins keeps an ever-growing θ without any visible effect.
* θ = 0 is upright and θ grows counter-clockwise, i.e. the pole tip is at
  ``x - l·sin θ`` (the original renderer's convention: pushing the cart right tips an
  upright pole towards +θ, i.e. to the left).
* The action is cast to float64 before clipping and scaling (the original's numpy-1 scalar
  arithmetic did the same), and the state is float64; only observations are float32.
* ``truncated`` follows gymnasium's ``TimeLimit``: it is ``steps >= max_episode_steps`` whether
  or not the same step also terminated.

The physics lives in :func:`swingup_dynamics` and acts on states laid out ``(4, *batch)``, so
the single env (state ``(4,)``) and the numpy-batched env
(:mod:`attn_envs.envs.cartpole_swingup_vector`, state ``(4, B)``) run the same code; they
also share the start draws (:func:`draw_starts`), the checks of their options and the spaces.
"""

from __future__ import annotations

from typing import Any, cast

import cv2
import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import ResetNeeded
from numpy.typing import ArrayLike, NDArray

from attn_envs._spaces import require_integral

__all__ = [
    "DT",
    "FORCE_MAG",
    "FRICTION",
    "GRAVITY",
    "MASS_CART",
    "MASS_POLE",
    "POLE_LENGTH",
    "X_THRESHOLD",
    "CartPoleSwingUpEnv",
    "check_probability",
    "check_start_span",
    "check_upright_share",
    "draw_starts",
    "render_frame",
    "sample_initial_states",
    "state_option",
    "swingup_action_space",
    "swingup_dynamics",
    "swingup_observation",
    "swingup_observation_space",
    "swingup_reward",
    "swingup_trig",
]

GRAVITY = 9.82
MASS_CART = 0.5
MASS_POLE = 0.5
POLE_LENGTH = 0.6
FORCE_MAG = 10.0
DT = 0.01
FRICTION = 0.1
X_THRESHOLD = 2.4

_TOTAL_M = MASS_CART + MASS_POLE
_M_P_L = MASS_POLE * POLE_LENGTH
_REST = np.array([0.0, 0.0, np.pi, 0.0])
_UP = np.zeros(4)  # the pole up: a balancing task (``upright``) for curricula
_HARDER_SPAN = np.array([X_THRESHOLD, 10.0, np.pi / 2.0, 10.0])
_EASY_STD = 0.2

FloatArray = NDArray[np.float64]
Float32Space = spaces.Space[NDArray[np.float32]]


def swingup_trig(state: FloatArray) -> FloatArray:
    """``[sin θ, cos θ]`` of states ``(4, *batch)``, shape ``(2, *batch)``: what the physics,
    the reward and the observation of a state share, so a batched env computes it once."""
    theta = state[2]
    return np.stack((np.sin(theta), np.cos(theta)))


def swingup_dynamics(
    state: FloatArray, action: ArrayLike, trig: FloatArray | None = None
) -> FloatArray:
    """Advance ``state`` by one step of the original semi-implicit Euler scheme.

    Args:
        state: ``[x, x_dot, theta, theta_dot]`` along the FIRST axis, shape ``(4, *batch)``.
        action: Normalised force, shape ``batch``; clipped to ``[-1, 1]``, scaled by
            ``FORCE_MAG``.
        trig: ``swingup_trig(state)`` when the caller has it (the same numbers; a batched
            env keeps them from the last observation instead of taking sin and cos again).

    Returns:
        The next state, shape ``(4, *batch)``, float64.

    Example:
        >>> swingup_dynamics(np.zeros((4, 3)), np.array([0.0, 1.0, -5.0])).shape
        (4, 3)
        >>> swingup_dynamics(np.zeros(4), 0.0).tolist()  # upright, centred, at rest: stays
        [0.0, 0.0, 0.0, 0.0]
    """
    x, x_dot, theta, theta_dot = state
    force = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0) * FORCE_MAG
    s, c = swingup_trig(state) if trig is None else trig
    # Same expression order as the original so a plain-float reference agrees to the last bit.
    xdot_update = (
        -2 * _M_P_L * (theta_dot**2) * s
        + 3 * MASS_POLE * GRAVITY * s * c
        + 4 * force
        - 4 * FRICTION * x_dot
    ) / (4 * _TOTAL_M - 3 * MASS_POLE * c**2)
    thetadot_update = (
        -3 * _M_P_L * (theta_dot**2) * s * c
        + 6 * _TOTAL_M * GRAVITY * s
        + 6 * (force - FRICTION * x_dot) * c
    ) / (4 * POLE_LENGTH * _TOTAL_M - 3 * _M_P_L * c**2)
    return np.stack(
        (
            x + x_dot * DT,
            x_dot + xdot_update * DT,
            theta + theta_dot * DT,
            theta_dot + thetadot_update * DT,
        )
    )


def swingup_reward(state: FloatArray, trig: FloatArray | None = None) -> FloatArray:
    """``((cos θ + 1) / 2) · cos((x / X_THRESHOLD) · π / 2)`` for states ``(4, *batch)``
    (``trig``: ``swingup_trig(state)`` when the caller has it).

    Example:
        >>> float(swingup_reward(np.zeros(4)))  # upright and centred
        1.0
        >>> swingup_reward(np.zeros((4, 2))).shape
        (2,)
    """
    x = state[0]
    cos_theta = np.cos(state[2]) if trig is None else trig[1]
    return ((cos_theta + 1.0) / 2.0) * np.cos((x / X_THRESHOLD) * (np.pi / 2.0))


def swingup_observation(state: FloatArray, trig: FloatArray | None = None) -> NDArray[np.float32]:
    """``[x, x_dot, cos θ, sin θ, theta_dot]`` as float32, shape ``(*batch, 5)``
    (``trig``: ``swingup_trig(state)`` when the caller has it).

    Example:
        >>> swingup_observation(np.zeros((4, 3))).shape
        (3, 5)
        >>> swingup_observation(np.zeros(4)).tolist()
        [0.0, 0.0, 1.0, 0.0, 0.0]
    """
    x, x_dot, _, theta_dot = state
    sin_theta, cos_theta = swingup_trig(state) if trig is None else trig
    obs = np.stack((x, x_dot, cos_theta, sin_theta, theta_dot), axis=-1)
    return obs.astype(np.float32)


def sample_initial_states(
    rng: np.random.Generator,
    n: int,
    harder: bool,
    upright: bool = False,
    span: ArrayLike | None = None,
) -> FloatArray:
    """Draw ``n`` initial states, one per ROW, shape ``(n, 4)``.

    Easy: ``N([0, 0, π, 0], 0.2)``. Harder: ``[0, 0, π, 0] + U(-1, 1)·[2.4, 10, π/2, 10]``.
    ``upright`` centres either on the pole up (θ = 0) instead of hanging (θ = π), with the
    same draws. ``span`` replaces the Harder box's half-widths ``[x, x_dot, θ, θ_dot]`` (with
    ``harder`` only), keeping its draws. Row ``i`` uses draws ``4i … 4i+3``, so the first copy
    of a batch seeded like a single env starts where that single env starts.

    Example:
        >>> sample_initial_states(np.random.default_rng(0), 3, harder=True).shape
        (3, 4)
        >>> up = sample_initial_states(np.random.default_rng(0), 3, False, upright=True)
        >>> down = sample_initial_states(np.random.default_rng(0), 3, False)
        >>> bool(np.allclose(down[:, 2] - up[:, 2], np.pi))
        True
    """
    centre = _UP if upright else _REST
    if harder:
        box = _HARDER_SPAN if span is None else np.asarray(span, dtype=np.float64)
        return centre + rng.uniform(-1.0, 1.0, size=(n, 4)) * box
    return centre + rng.standard_normal(size=(n, 4)) * _EASY_STD


def check_upright_share(upright: bool, upright_share: float) -> float:
    """``upright_share`` as a float in ``[0, 1]``, or a one-line ``ValueError`` (also when
    ``upright`` is set too: a share of upright starts and all of them contradict)."""
    share = check_probability("upright_share", upright_share)
    if upright and share:
        raise ValueError("give upright=True or an upright_share, not both")
    return share


def check_start_span(harder: bool, start_span: ArrayLike | None) -> FloatArray | None:
    """``start_span`` as a float64 array (``None`` kept), or a one-line ``ValueError``."""
    if start_span is None:
        return None
    if not harder:
        raise ValueError("start_span sets the Harder box's half-widths: give harder=True")
    try:
        span = np.asarray(start_span, dtype=np.float64)
    except (TypeError, ValueError):
        span = np.empty(0)
    if span.shape != (4,) or not np.all(np.isfinite(span)) or np.any(span < 0):
        raise ValueError(
            "start_span must be 4 finite half-widths >= 0 for [x, x_dot, theta, theta_dot], "
            f"got {start_span!r}"
        )
    return span


def check_probability(name: str, value: float) -> float:
    """``value`` as a float in ``[0, 1]``, or a one-line ``ValueError`` naming ``name``."""
    share = float(value)
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    return share


def draw_starts(
    rng: np.random.Generator,
    n: int,
    harder: bool,
    upright: bool,
    upright_share: float,
    inward_share: float = 0.0,
    span: FloatArray | None = None,
) -> FloatArray:
    """``n`` starts, shape ``(n, 4)``: :func:`sample_initial_states`, each start then around
    the pole up with probability
    ``upright_share`` and with its cart moving towards the centre with probability
    ``inward_share`` (one more draw per start for each share strictly between 0 and 1, so
    the other settings keep their streams)."""
    if upright_share >= 1.0:
        starts = sample_initial_states(rng, n, harder, True, span)
    else:
        starts = sample_initial_states(rng, n, harder, upright, span)
        if upright_share > 0.0:
            starts[rng.random(n) < upright_share, 2] -= np.pi  # same draws around θ = 0
    if inward_share > 0.0:
        turn = np.ones(n, dtype=bool) if inward_share >= 1.0 else rng.random(n) < inward_share
        speed = np.abs(starts[turn, 1])
        starts[turn, 1] = np.where(starts[turn, 0] > 0.0, -speed, speed)
    return starts


def swingup_observation_space() -> spaces.Box:
    """The space of one :func:`swingup_observation`: ``[x, x_dot, cos θ, sin θ, θ_dot]``."""
    big = np.finfo(np.float32).max  # the original's bound; ±inf would trip the env checkers
    high = np.array([big, big, 1.0, 1.0, big], dtype=np.float32)
    return spaces.Box(-high, high, dtype=np.float32)


def swingup_action_space() -> spaces.Box:
    """The space of one action: a normalised force in ``[-1, 1]``."""
    return spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)


def state_option(options: dict[str, Any] | None, shape: tuple[int, ...]) -> FloatArray | None:
    """``reset``'s ``options["state"]`` as a float64 array of ``shape`` (``None`` when not
    given), or a one-line ``ValueError`` (wrong shape, not finite)."""
    if not options or options.get("state") is None:
        return None
    state = np.array(options["state"], dtype=np.float64)
    if state.shape != shape:
        raise ValueError(f"options['state'] must have shape {shape}, got {state.shape}")
    if not np.all(np.isfinite(state)):
        raise ValueError("options['state'] must be finite")
    return state


_SCREEN_W, _SCREEN_H = 600, 400
_SCALE = _SCREEN_W / 5.0  # 5 m of track visible, as in the original renderer
_CART_W, _CART_H = 40, 20
_POLE_W = 6
_WHEEL_R = _CART_H // 4


def render_frame(state: ArrayLike) -> NDArray[np.uint8]:
    """Draw cart, pole and track for one state ``[x, x_dot, theta, theta_dot]``.

    Returns:
        An RGB image, shape ``(400, 600, 3)``, uint8; the track spans ``|x| <= 2.4``.

    Example:
        >>> render_frame(np.zeros(4)).shape
        (400, 600, 3)
    """
    x, _, theta, _ = np.asarray(state, dtype=np.float64)
    img = np.full((_SCREEN_H, _SCREEN_W, 3), 255, dtype=np.uint8)
    cx, cy = _SCREEN_W / 2 + x * _SCALE, _SCREEN_H / 2
    track_y = round(cy + _CART_H / 2 + _WHEEL_R)
    half_track = round(X_THRESHOLD * _SCALE)
    ends = (_SCREEN_W // 2 - half_track, track_y), (_SCREEN_W // 2 + half_track, track_y)
    cv2.line(img, *ends, (0, 0, 0), 1, cv2.LINE_AA)
    left, right = round(cx - _CART_W / 2), round(cx + _CART_W / 2)
    top, bottom = round(cy - _CART_H / 2), round(cy + _CART_H / 2)
    cv2.rectangle(img, (left, top), (right, bottom), (255, 0, 0), -1)
    for wx in (left, right):
        cv2.circle(img, (wx, bottom), _WHEEL_R, (0, 0, 0), -1, cv2.LINE_AA)
    # Image rows grow downwards, hence the minus on the vertical component.
    pole_len = _SCALE * POLE_LENGTH
    tip = (round(cx - pole_len * np.sin(theta)), round(cy - pole_len * np.cos(theta)))
    axle = (round(cx), round(cy))
    cv2.line(img, axle, tip, (0, 0, 255), _POLE_W, cv2.LINE_AA)
    cv2.circle(img, axle, _POLE_W // 2, (25, 255, 255), -1, cv2.LINE_AA)
    cv2.circle(img, tip, _POLE_W // 2, (0, 0, 0), -1, cv2.LINE_AA)
    return img


class CartPoleSwingUpEnv(gym.Env[NDArray[np.float32], NDArray[np.float32]]):
    """Swing the pole up from hanging and balance it, without leaving the ±2.4 m track.

    Observation ``[x, x_dot, cos θ, sin θ, theta_dot]`` (float32), action ``Box(-1, 1, (1,))``
    scaled to a force of ±10 N. The time limit is enforced here (``truncated`` at
    ``max_episode_steps``), so no ``TimeLimit`` wrapper is needed. ``reset`` accepts
    ``options={"state": [x, x_dot, theta, theta_dot]}`` to start from an exact state.
    See the module docstring for the choices made where the original is ambiguous.

    Args:
        harder: ``CartPoleSwingUpHarder`` reset (uniform box) instead of ``N([0,0,π,0], 0.2)``.
        max_episode_steps: Steps after which the episode is truncated (1000 in E3).
        render_mode: ``None`` or ``"rgb_array"`` (600x400 frames from :func:`render_frame`).
        upright: start around the pole up (θ = 0) instead of hanging (θ = π), with the same
            spread: a balancing task, e.g. the first stage of a curriculum.
        upright_share: the probability that a start is upright (0: none, as ``upright=False``;
            1: all, as ``upright=True``); a mixed training task where holding the pole pays
            before the swing-up's catch is found. Not with ``upright=True``.
        inward_share: the probability that a start's cart moves towards the track's centre
            (its drawn speed, pointed inward; 0 keeps the drawn direction). With the Harder
            box such carts must brake from the first step or cross the track and leave it
            at the far end: a training task that weighs that skill more.
        start_span: the Harder box's half-widths ``[x, x_dot, θ, θ_dot]`` (default ``[2.4,
            10, π/2, 10]``; with ``harder=True`` only), e.g. ``[2.4, 10, 0.2, 1]`` with
            ``upright=True``: the pole near the top over a cart moving at up to 10 m/s, a
            balancing task that also asks for braking.

    Attributes:
        state: The float64 state ``[x, x_dot, theta, theta_dot]``, ``None`` before ``reset``.
        steps: Steps taken in the current episode.

    Example:
        >>> env = CartPoleSwingUpEnv(harder=True)
        >>> obs, info = env.reset(seed=0)
        >>> obs.shape, obs.dtype
        ((5,), dtype('float32'))
        >>> obs, reward, terminated, truncated, info = env.step(np.array([0.5], np.float32))
        >>> obs.shape, type(reward).__name__, terminated, truncated
        ((5,), 'float', False, False)
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": round(1 / DT)}

    def __init__(
        self,
        harder: bool = False,
        max_episode_steps: int = 1000,
        render_mode: str | None = None,
        upright: bool = False,
        upright_share: float = 0.0,
        inward_share: float = 0.0,
        start_span: ArrayLike | None = None,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be None or one of {self.metadata['render_modes']}, "
                f"got {render_mode!r}"
            )
        self.harder, self.upright = bool(harder), bool(upright)
        self.upright_share = check_upright_share(self.upright, upright_share)
        self.inward_share = check_probability("inward_share", inward_share)
        self.start_span = check_start_span(self.harder, start_span)
        self.max_episode_steps = require_integral(max_episode_steps, "max_episode_steps")
        self.render_mode = render_mode
        # Both Boxes are float32, which the Box type does not carry.
        self.observation_space = cast(Float32Space, swingup_observation_space())
        self.action_space = cast(Float32Space, swingup_action_space())
        self.state: FloatArray | None = None
        self.steps = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[NDArray[np.float32], dict[str, Any]]:
        super().reset(seed=seed)
        state = state_option(options, (4,))
        if state is None:
            shares = self.upright_share, self.inward_share, self.start_span
            state = draw_starts(self.np_random, 1, self.harder, self.upright, *shares)[0]
        self.state = state
        self.steps = 0
        return swingup_observation(self.state), {}

    def step(
        self, action: ArrayLike
    ) -> tuple[NDArray[np.float32], float, bool, bool, dict[str, Any]]:
        if self.state is None:
            raise ResetNeeded("Call reset() before step().")
        a = np.asarray(action, dtype=np.float64)
        if a.size != 1:
            raise ValueError(f"action must hold exactly one value, got shape {a.shape}")
        self.state = swingup_dynamics(self.state, a.reshape(()))
        self.steps += 1
        terminated = bool(abs(self.state[0]) > X_THRESHOLD)
        truncated = self.steps >= self.max_episode_steps
        reward = float(swingup_reward(self.state))
        return swingup_observation(self.state), reward, terminated, truncated, {}

    def render(self) -> NDArray[np.uint8] | None:
        if self.render_mode is None:
            gym.logger.warn("render() called without render_mode; pass render_mode='rgb_array'.")
            return None
        if self.state is None:
            raise ResetNeeded("Call reset() before render().")
        return render_frame(self.state)
