"""Tests for attn_envs.envs.cartpole_swingup (E3 CartPoleSwingUp: physics, starts, single env)."""

from __future__ import annotations

import math
from functools import partial

import gymnasium as gym
import numpy as np
import pytest
from _contract import assert_env_contract
from _swingup import REST, assert_fills_the_harder_box, assert_gaussian_around_hanging
from gymnasium.error import ResetNeeded
from gymnasium.utils.env_checker import check_env as gym_check_env
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_envs.envs.cartpole_swingup import (
    CartPoleSwingUpEnv,
    render_frame,
    swingup_observation,
)

# --- independent scalar reference, written from the E3 formulas in plain Python -------------


def reference_step(
    state: tuple[float, float, float, float], action: float
) -> tuple[tuple[float, float, float, float], float, bool]:
    g, m_cart, m_pole, length, b, dt = 9.82, 0.5, 0.5, 0.6, 0.1, 0.01
    total_m, m_p_l = m_cart + m_pole, m_pole * length
    force = max(-1.0, min(1.0, action)) * 10.0
    x, x_dot, theta, theta_dot = state
    s, c = math.sin(theta), math.cos(theta)
    xdot_update = (
        -2 * m_p_l * theta_dot**2 * s + 3 * m_pole * g * s * c + 4 * force - 4 * b * x_dot
    ) / (4 * total_m - 3 * m_pole * c**2)
    thetadot_update = (
        -3 * m_p_l * theta_dot**2 * s * c + 6 * total_m * g * s + 6 * (force - b * x_dot) * c
    ) / (4 * length * total_m - 3 * m_p_l * c**2)
    x, theta = x + x_dot * dt, theta + theta_dot * dt
    x_dot, theta_dot = x_dot + xdot_update * dt, theta_dot + thetadot_update * dt
    reward = ((math.cos(theta) + 1) / 2) * math.cos((x / 2.4) * (math.pi / 2))
    return (x, x_dot, theta, theta_dot), reward, x < -2.4 or x > 2.4


def reference_obs(state: tuple[float, float, float, float]) -> np.ndarray:
    x, x_dot, theta, theta_dot = state
    return np.array([x, x_dot, math.cos(theta), math.sin(theta), theta_dot], dtype=np.float32)


# --- factories (module level so they pickle for AsyncVectorEnv / SubprocVecEnv) -------------


def make_easy() -> gym.Env:
    return CartPoleSwingUpEnv()


make_harder = partial(CartPoleSwingUpEnv, harder=True)
make_upright = partial(CartPoleSwingUpEnv, upright=True)


# --- (h) contract ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make_env", [make_easy, make_harder, make_upright], ids=["easy", "harder", "upright"]
)
def test_env_contract(make_env) -> None:
    assert_env_contract(make_env)


def test_gym_check_env_with_render() -> None:
    env = CartPoleSwingUpEnv(harder=True, render_mode="rgb_array")
    with pytest.warns(UserWarning, match="spec"):  # no spec: alternative modes are not tried
        gym_check_env(env)


# --- (a) single env vs the scalar reference ---------------------------------------------------


@pytest.mark.parametrize(
    "start",
    [(0.0, 0.0, math.pi, 0.0), (0.5, -1.0, 2.0, 3.0), (-1.2, 4.0, 4.0, -8.0), (0.0, 0.0, 0.1, 0.0)],
)
def test_single_env_matches_reference(start: tuple[float, float, float, float]) -> None:
    env = CartPoleSwingUpEnv(max_episode_steps=10_000)
    obs, _ = env.reset(options={"state": start})
    np.testing.assert_array_equal(obs, reference_obs(start))
    actions = np.random.default_rng(1).uniform(-1.5, 1.5, size=400)  # also exercises clipping
    ref = start
    for t, a in enumerate(actions):
        ref, ref_reward, ref_term = reference_step(ref, float(a))
        obs, reward, term, trunc, _ = env.step(np.array([a]))
        np.testing.assert_allclose(env.state, ref, rtol=1e-9, atol=1e-9, err_msg=f"step {t}")
        np.testing.assert_allclose(obs, reference_obs(ref), rtol=1e-6, atol=1e-6)
        assert reward == pytest.approx(ref_reward, rel=1e-9, abs=1e-9)
        assert term == ref_term and not trunc
        if term:
            break


def test_float32_action_acts_like_its_float64_value() -> None:
    env = CartPoleSwingUpEnv()
    a32 = np.array([0.3], dtype=np.float32)
    env.reset(options={"state": REST})
    env.step(a32)
    ref, _, _ = reference_step(tuple(REST), float(a32[0]))
    np.testing.assert_allclose(env.state, ref, rtol=1e-12, atol=1e-12)


# --- (c) reset distributions -------------------------------------------------------------------


def _single_starts(harder: bool, n: int = 2000) -> np.ndarray:
    env = CartPoleSwingUpEnv(harder=harder)
    env.reset(seed=123)
    starts = [env.state]
    for _ in range(n - 1):
        env.reset()
        starts.append(env.state)
    return np.array(starts)


def test_harder_reset_fills_the_box() -> None:
    assert_fills_the_harder_box(_single_starts(harder=True))


def test_easy_reset_is_gaussian_around_hanging() -> None:
    assert_gaussian_around_hanging(_single_starts(harder=False))


def test_upright_start_pays_about_one_a_step() -> None:
    env = CartPoleSwingUpEnv(upright=True)
    obs, _ = env.reset(seed=0)
    assert obs[2] > 0.9  # within 0.2 std of upright
    assert env.step(np.zeros(1, np.float32))[1] > 0.9


# --- (d) seeding -------------------------------------------------------------------------------


def test_single_reset_sequence_is_reproducible() -> None:
    env = CartPoleSwingUpEnv(harder=True)

    def starts() -> list[np.ndarray]:
        first = env.reset(seed=11)[0]
        return [first] + [env.reset()[0] for _ in range(3)]

    a, b = starts(), starts()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a[0], a[1])


# --- (e) truncation and termination ------------------------------------------------------------


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_terminates_when_cart_leaves_track(sign: float) -> None:
    env = CartPoleSwingUpEnv()
    env.reset(options={"state": [sign * 2.39, sign * 5.0, math.pi, 0.0]})
    _, reward, term, trunc, _ = env.step(np.zeros(1))
    assert term and not trunc and abs(env.state[0]) > 2.4
    assert reward <= 0.0  # paid on the terminating step, from the state beyond the edge


def test_exactly_at_the_edge_is_not_terminal() -> None:
    env = CartPoleSwingUpEnv()
    env.reset(options={"state": [2.4, 0.0, math.pi, 0.0]})
    assert not env.step(np.zeros(1))[2]


# --- (f) reward and (g) clipping ---------------------------------------------------------------


def test_upright_centred_pole_earns_one_hanging_earns_zero() -> None:
    env = CartPoleSwingUpEnv()
    env.reset(options={"state": [0.0, 0.0, 0.0, 0.0]})
    assert env.step(np.zeros(1))[1] == 1.0
    env.reset(options={"state": REST})
    assert env.step(np.zeros(1))[1] == pytest.approx(0.0, abs=1e-12)
    env.reset(options={"state": [2.4, 0.0, 0.0, 0.0]})  # upright but at the track's end
    assert env.step(np.zeros(1))[1] == pytest.approx(0.0, abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(
    state=st.tuples(st.floats(-2.4, 2.4), st.floats(-10, 10), st.floats(-7, 7), st.floats(-10, 10)),
    action=st.floats(-1, 1),
)
def test_reward_is_the_formula_of_the_returned_observation(state, action) -> None:
    env = CartPoleSwingUpEnv()
    env.reset(options={"state": state})
    obs, reward, *_ = env.step([action])
    x, cos_theta = float(obs[0]), float(obs[2])
    expected = ((cos_theta + 1) / 2) * math.cos(x / 2.4 * math.pi / 2)
    assert reward == pytest.approx(expected, abs=1e-5)


def test_out_of_range_action_differs_from_in_range_only_up_to_the_clip() -> None:
    env = CartPoleSwingUpEnv()
    obs = []
    for a in (0.5, 1.0, 3.0):
        env.reset(options={"state": REST})
        obs.append(env.step([a])[0])
    assert not np.array_equal(obs[0], obs[1])  # force does scale with the action
    np.testing.assert_array_equal(obs[1], obs[2])


# --- spaces, rendering, errors -----------------------------------------------------------------


def test_render_draws_pole_where_the_state_says() -> None:
    env = CartPoleSwingUpEnv(render_mode="rgb_array")
    frames = {}
    states = {"up": [0, 0, 0, 0], "down": REST, "left": [-1.5, 0, 0, 0], "tilt": [0, 0, 0.5, 0]}
    for name, state in states.items():
        env.reset(options={"state": state})
        frames[name] = env.render()
    assert frames["up"].shape == (400, 600, 3) and frames["up"].dtype == np.uint8

    def blue_rows_cols(img: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.nonzero((img[..., 2] > 200) & (img[..., 0] < 50) & (img[..., 1] < 50))

    up_rows, up_cols = blue_rows_cols(frames["up"])
    down_rows, _ = blue_rows_cols(frames["down"])
    _, left_cols = blue_rows_cols(frames["left"])
    assert up_rows.max() < down_rows.min()  # upright pole above the axle, hanging one below
    assert left_cols.mean() < up_cols.mean() - 100  # cart at x=-1.5 drawn to the left
    _, tilt_cols = blue_rows_cols(frames["tilt"])
    assert tilt_cols.mean() < up_cols.mean() - 10  # +theta leans the pole to the left
    np.testing.assert_array_equal(render_frame(np.zeros(4)), frames["up"])


def test_render_without_mode_warns_and_returns_none() -> None:
    env = CartPoleSwingUpEnv()
    env.reset(seed=0)
    with pytest.warns(UserWarning, match="render_mode"):
        assert env.render() is None


def test_observation_layout() -> None:
    state = np.array([[0.5, -1.0], [2.0, 3.0], [0.3, 4.0], [-7.0, 1.5]])
    obs = swingup_observation(state)
    assert obs.shape == (2, 5)
    np.testing.assert_allclose(obs[1], [-1.0, 3.0, math.cos(4.0), math.sin(4.0), 1.5], rtol=1e-6)


def test_errors() -> None:
    with pytest.raises(ValueError, match="max_episode_steps must be a positive int"):
        CartPoleSwingUpEnv(max_episode_steps=0)
    with pytest.raises(ValueError, match="render_mode must be None or one of"):
        CartPoleSwingUpEnv(render_mode="human")
    for bad in (True, 2.5, "4"):
        with pytest.raises(ValueError, match="max_episode_steps must be a positive integer"):
            CartPoleSwingUpEnv(max_episode_steps=bad)
    with pytest.raises(ResetNeeded):
        CartPoleSwingUpEnv().step(np.zeros(1))
    env = CartPoleSwingUpEnv()
    with pytest.raises(ValueError, match=r"options\['state'\] must have shape \(4,\)"):
        env.reset(options={"state": np.zeros(3)})
    with pytest.raises(ValueError, match="must be finite"):
        env.reset(options={"state": [0.0, np.nan, 0.0, 0.0]})
    env.reset(seed=0)
    with pytest.raises(ValueError, match="exactly one value"):
        env.step(np.zeros(2))


def test_bad_upright_share_is_refused() -> None:
    with pytest.raises(ValueError, match=r"upright_share must be in \[0, 1\], got 1.5"):
        CartPoleSwingUpEnv(upright_share=1.5)
    with pytest.raises(ValueError, match="not both"):
        CartPoleSwingUpEnv(upright=True, upright_share=0.5)


def test_bad_inward_share_is_refused() -> None:
    with pytest.raises(ValueError, match=r"inward_share must be in \[0, 1\], got -0.1"):
        CartPoleSwingUpEnv(inward_share=-0.1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"start_span": [1.0, 1.0, 1.0, 1.0]}, "give harder=True"),
        ({"harder": True, "start_span": [1.0, 1.0, 1.0]}, "4 finite half-widths"),
        ({"harder": True, "start_span": [1.0, -1.0, 1.0, 1.0]}, "4 finite half-widths"),
        ({"harder": True, "start_span": [1.0, np.nan, 1.0, 1.0]}, "4 finite half-widths"),
        ({"harder": True, "start_span": "wide"}, "4 finite half-widths"),
    ],
)
def test_bad_start_span_is_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CartPoleSwingUpEnv(**kwargs)
