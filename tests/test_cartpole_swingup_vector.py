"""Tests for attn_envs.envs.cartpole_swingup_vector (E3 CartPoleSwingUp, numpy-batched):
each copy plays what the single env plays."""

from __future__ import annotations

import numpy as np
import pytest
from _swingup import HARDER_SPAN, REST, assert_fills_the_harder_box, assert_gaussian_around_hanging
from gymnasium.error import ResetNeeded
from gymnasium.vector import AutoresetMode
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_envs.envs.cartpole_swingup import (
    CartPoleSwingUpEnv,
    sample_initial_states,
    swingup_dynamics,
    swingup_observation,
    swingup_reward,
    swingup_trig,
)
from attn_envs.envs.cartpole_swingup_vector import CartPoleSwingUpVectorEnv, advance_copies

# --- (b) batched vs single ---------------------------------------------------------------------


def _start_states(n: int, seed: int) -> np.ndarray:
    return sample_initial_states(np.random.default_rng(seed), n, harder=True)


def test_vector_matches_single_with_next_step_autoreset() -> None:
    n, horizon, limit = 64, 400, 150
    venv = CartPoleSwingUpVectorEnv(n, harder=True, max_episode_steps=limit)
    assert venv.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    obs, _ = venv.reset(seed=0, options={"state": _start_states(n, 1)})
    singles = [CartPoleSwingUpEnv(harder=True, max_episode_steps=limit) for _ in range(n)]
    single_obs = np.stack(
        [e.reset(options={"state": s})[0] for e, s in zip(singles, venv.state, strict=True)]
    )
    np.testing.assert_array_equal(obs, single_obs)
    rng = np.random.default_rng(2)
    pending = np.zeros(n, dtype=bool)
    n_term = n_trunc = 0
    for _ in range(horizon):
        actions = rng.uniform(-1, 1, size=(n, 1)).astype(np.float32)
        obs, rew, term, trunc, _ = venv.step(actions)
        for i, env in enumerate(singles):
            if pending[i]:  # NEXT_STEP: this step reset copy i and ignored its action
                assert rew[i] == 0.0 and not term[i] and not trunc[i]
                start = venv.state[i]
                assert np.all(np.abs(start - REST) <= HARDER_SPAN)
                np.testing.assert_array_equal(obs[i], env.reset(options={"state": start})[0])
                continue
            o, r, te, tr, _ = env.step(actions[i])
            np.testing.assert_array_equal(obs[i], o)
            assert (rew[i], term[i], trunc[i]) == (r, te, tr)
        np.testing.assert_array_equal(venv.done, term | trunc)
        pending = term | trunc
        n_term, n_trunc = n_term + term.sum(), n_trunc + trunc.sum()
    assert n_term > n and n_trunc > 0  # copies ended at many different times, both ways


def test_next_step_autoreset_ignores_the_action_of_resetting_copies() -> None:
    runs = []
    for reset_action in (-1.0, 1.0):
        venv = CartPoleSwingUpVectorEnv(2, max_episode_steps=3)
        venv.reset(seed=5)
        for _ in range(3):
            venv.step(np.zeros(2))
        assert venv.done.all()
        runs.append(venv.step(np.full(2, reset_action))[0])
    np.testing.assert_array_equal(runs[0], runs[1])


def test_vector_without_autoreset_freezes_finished_copies() -> None:
    n, limit = 64, 300
    starts = _start_states(n, 3)
    venv = CartPoleSwingUpVectorEnv(n, harder=True, max_episode_steps=limit, autoreset=False)
    assert venv.metadata["autoreset_mode"] == AutoresetMode.DISABLED
    venv.reset(options={"state": starts})
    singles = [CartPoleSwingUpEnv(harder=True, max_episode_steps=limit) for _ in range(n)]
    for env, s in zip(singles, starts, strict=True):
        env.reset(options={"state": s})
    rng = np.random.default_rng(4)
    returns, single_returns = np.zeros(n), np.zeros(n)
    ended_at = np.full(n, -1)
    for t in range(limit + 20):
        before = venv.state
        actions = rng.uniform(-1, 1, size=n)
        obs, rew, term, trunc, _ = venv.step(actions)
        returns += rew
        for i, env in enumerate(singles):
            if ended_at[i] >= 0:
                np.testing.assert_array_equal(venv.state[i], before[i])
                assert rew[i] == 0.0 and not term[i] and not trunc[i]
                continue
            o, r, te, tr, _ = env.step(actions[i : i + 1])
            single_returns[i] += r
            np.testing.assert_array_equal(obs[i], o)
            assert (rew[i], term[i], trunc[i]) == (r, te, tr)
            if te or tr:
                ended_at[i] = t
        np.testing.assert_array_equal(venv.done, ended_at >= 0)
    np.testing.assert_array_equal(returns, single_returns)
    assert venv.done.all() and len(set(ended_at.tolist())) > 10
    np.testing.assert_array_equal(venv.steps, ended_at + 1)


def test_frozen_copies_keep_their_last_observation_and_outputs_stay_snapshots() -> None:
    """Only live copies are stepped; an ended copy repeats its final observation."""
    venv = CartPoleSwingUpVectorEnv(3, harder=True, max_episode_steps=5, autoreset=False)
    starts = np.array([[2.39, 9.0, np.pi, 0.0], [0.0, 0.0, np.pi, 0.0], [0.0, 1.0, 3.0, 0.0]])
    first, _ = venv.reset(options={"state": starts})
    kept = first.copy()
    obs, _, term, _, _ = venv.step(np.ones(3))
    assert term.tolist() == [True, False, False]
    final = obs[0].copy()
    for _ in range(3):
        later, rew, _, _, _ = venv.step(np.ones(3))
        np.testing.assert_array_equal(later[0], final)
        assert rew[0] == 0.0 and not np.array_equal(later[1], obs[1])
    np.testing.assert_array_equal(first, kept)  # earlier outputs were not written into
    venv.reset(options={"reset_mask": np.array([True, False, False]), "state": starts})
    single = CartPoleSwingUpEnv(harder=True, max_episode_steps=5)
    single.reset(options={"state": starts[0]})
    np.testing.assert_array_equal(venv.step(np.ones(3))[0][0], single.step(np.ones(1))[0])


def test_reset_mask_resets_only_the_masked_copies() -> None:
    venv = CartPoleSwingUpVectorEnv(4, harder=True, max_episode_steps=2, autoreset=False)
    venv.reset(seed=0)
    venv.step(np.zeros(4))
    venv.step(np.zeros(4))
    before = venv.state
    mask = np.array([True, False, True, False])
    venv.reset(seed=9, options={"reset_mask": mask})
    np.testing.assert_array_equal(venv.done, ~mask)
    np.testing.assert_array_equal(venv.state[~mask], before[~mask])
    np.testing.assert_array_equal(venv.state[mask], sample_initial_states(
        np.random.default_rng(9), 2, harder=True))  # fmt: skip
    np.testing.assert_array_equal(venv.steps, [0, 2, 0, 2])


@settings(max_examples=50, deadline=None)
@given(
    states=st.lists(
        st.tuples(
            st.floats(-2.4, 2.4),
            st.floats(-20, 20),
            st.floats(-20, 20),
            st.floats(-30, 30),
        ),
        min_size=1,
        max_size=8,
    ),
    data=st.data(),
)
def test_one_batched_step_equals_single_steps(states, data) -> None:
    n = len(states)
    actions = data.draw(st.lists(st.floats(-3, 3), min_size=n, max_size=n))
    venv = CartPoleSwingUpVectorEnv(n)
    venv.reset(options={"state": np.array(states)})
    obs, rew, term, trunc, _ = venv.step(np.array(actions))
    for i in range(n):
        env = CartPoleSwingUpEnv()
        env.reset(options={"state": states[i]})
        o, r, te, tr, _ = env.step([actions[i]])
        np.testing.assert_array_equal(obs[i], o)
        assert (rew[i], term[i], trunc[i]) == (r, te, tr)


def test_compiled_step_is_the_numpy_physics_to_the_bit() -> None:
    """advance_copies (the env's compiled step) gives swingup_dynamics' float64 state, and the
    trig, reward and observation of it, bit for bit, and leaves the other copies alone."""
    rng = np.random.default_rng(0)
    n = 100_000
    state = np.stack(
        [rng.uniform(-3, 3, n), rng.normal(0, 10, n), rng.uniform(-40, 40, n), rng.normal(0, 15, n)]
    )
    actions = rng.normal(0, 1.5, n)
    stepping = rng.random(n) < 0.8
    trig = swingup_trig(state)
    obs = swingup_observation(state, trig)
    new, new_trig, new_obs, rewards = state.copy(), trig.copy(), obs.copy(), np.zeros(n)
    advance_copies(new, new_trig, new_obs, rewards, actions, stepping)
    ref = swingup_dynamics(state, actions)
    np.testing.assert_array_equal(new[:, stepping], ref[:, stepping])
    np.testing.assert_array_equal(new_trig[:, stepping], swingup_trig(ref)[:, stepping])
    np.testing.assert_array_equal(rewards[stepping], swingup_reward(ref)[stepping])
    np.testing.assert_array_equal(new_obs[stepping], swingup_observation(ref)[stepping])
    np.testing.assert_array_equal(new[:, ~stepping], state[:, ~stepping])
    np.testing.assert_array_equal(new_obs[~stepping], obs[~stepping])
    assert (rewards[~stepping] == 0).all()


# --- (c) reset distributions -------------------------------------------------------------------


def _vector_starts(harder: bool, n: int = 2000) -> np.ndarray:
    venv = CartPoleSwingUpVectorEnv(n, harder=harder)
    venv.reset(seed=123)
    return venv.state


def test_harder_reset_fills_the_box() -> None:
    assert_fills_the_harder_box(_vector_starts(harder=True))


def test_easy_reset_is_gaussian_around_hanging() -> None:
    assert_gaussian_around_hanging(_vector_starts(harder=False))


@pytest.mark.parametrize("harder", [False, True])
def test_upright_reset_is_the_same_draws_around_the_pole_up(harder: bool) -> None:
    """``upright`` moves the centre from θ = π to θ = 0 and nothing else: same draws, and
    the single env, the vector env and seeded lists agree."""
    down = _vector_starts(harder)
    venv = CartPoleSwingUpVectorEnv(2000, harder=harder, upright=True)
    venv.reset(seed=123)
    up = venv.state
    np.testing.assert_allclose(up - down, np.tile([0.0, 0.0, -np.pi, 0.0], (2000, 1)), atol=1e-12)
    env = CartPoleSwingUpEnv(harder=harder, upright=True)
    np.testing.assert_array_equal(env.reset(seed=7)[0], venv.reset(seed=7)[0][0])
    listed = CartPoleSwingUpVectorEnv(3, harder=harder, upright=True)
    np.testing.assert_array_equal(listed.reset(seed=[7, 8, 9])[0][0], env.reset(seed=7)[0])
    assert listed.reset(seed=[7, 8, 9])[0][:, 2].mean() > 0  # cos θ: the pole is up


@pytest.mark.parametrize("harder", [False, True])
def test_upright_share_mixes_the_two_starts_with_the_same_draws(harder: bool) -> None:
    """``upright_share`` puts about that share of the starts around the pole up; each start is
    one of the two centres with the same offsets, and per-copy seeds give the single env's
    start, so an ES population shares its mixed tasks."""
    venv = CartPoleSwingUpVectorEnv(4000, harder=harder, upright_share=0.3)
    venv.reset(seed=5)
    theta = venv.state[:, 2]
    up = np.abs(theta) < np.pi / 2 + 1e-9 if harder else np.abs(theta) < 1.2
    assert abs(up.mean() - 0.3) < 0.03
    single = CartPoleSwingUpEnv(harder=harder, upright_share=0.3)
    listed = CartPoleSwingUpVectorEnv(4, harder=harder, upright_share=0.3)
    obs, _ = listed.reset(seed=[3, 4, 3, 9])
    for i, seed in enumerate([3, 4, 3, 9]):
        np.testing.assert_array_equal(obs[i], single.reset(seed=seed)[0])


@pytest.mark.parametrize("share, upright", [(0.0, False), (1.0, True)])
def test_upright_share_at_its_ends_is_the_old_setting(share: float, upright: bool) -> None:
    a = CartPoleSwingUpVectorEnv(50, harder=True, upright_share=share)
    b = CartPoleSwingUpVectorEnv(50, harder=True, upright=upright)
    np.testing.assert_array_equal(a.reset(seed=1)[0], b.reset(seed=1)[0])
    for _ in range(3):  # autoresets draw the same stream too
        a.step(np.ones(50))
        b.step(np.ones(50))
    np.testing.assert_array_equal(a.state, b.state)


def test_bad_upright_share_is_refused() -> None:
    with pytest.raises(ValueError, match=r"upright_share must be in \[0, 1\], got 1.5"):
        CartPoleSwingUpVectorEnv(2, upright_share=1.5)
    with pytest.raises(ValueError, match="not both"):
        CartPoleSwingUpVectorEnv(2, upright=True, upright_share=0.5)


def test_vector_seed_determines_all_copies() -> None:
    a, b = CartPoleSwingUpVectorEnv(16, harder=True), CartPoleSwingUpVectorEnv(16, harder=True)
    obs_a, _ = a.reset(seed=42)
    obs_b, _ = b.reset(seed=42)
    np.testing.assert_array_equal(obs_a, obs_b)
    assert len(np.unique(obs_a[:, 0])) == 16  # copies do not share a start
    assert not np.array_equal(b.reset(seed=43)[0], obs_a)
    np.testing.assert_array_equal(b.reset(seed=42)[0], obs_a)  # reseeding replays
    actions = np.random.default_rng(0).uniform(-1, 1, size=(300, 16, 1))
    for act in actions:  # autoresets draw from the seeded generator too
        out_a, out_b = a.step(act), b.step(act)
        for x, y in zip(out_a[:4], out_b[:4], strict=True):
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("harder", [False, True])
def test_first_vector_copy_starts_like_single_env(harder: bool) -> None:
    venv = CartPoleSwingUpVectorEnv(3, harder=harder)
    env = CartPoleSwingUpEnv(harder=harder)
    np.testing.assert_array_equal(venv.reset(seed=7)[0][0], env.reset(seed=7)[0])


def test_truncates_at_exactly_max_episode_steps() -> None:
    env = CartPoleSwingUpEnv(max_episode_steps=50)
    venv = CartPoleSwingUpVectorEnv(2, max_episode_steps=50)
    env.reset(options={"state": REST})  # hanging at rest never leaves the track
    venv.reset(options={"state": np.stack([REST, REST])})
    for t in range(1, 51):
        _, _, term, trunc, _ = env.step(np.zeros(1))
        _, _, vterm, vtrunc, _ = venv.step(np.zeros(2))
        assert not term and not vterm.any()
        assert trunc == (t == 50) and vtrunc.tolist() == [t == 50] * 2


@settings(max_examples=50, deadline=None)
@given(
    state=st.tuples(st.floats(-2, 2), st.floats(-10, 10), st.floats(-7, 7), st.floats(-10, 10)),
    action=st.floats(-1e6, 1e6),
)
def test_actions_are_clipped_to_unit_force(state, action) -> None:
    clipped = min(1.0, max(-1.0, action))
    env, venv = CartPoleSwingUpEnv(), CartPoleSwingUpVectorEnv(1)
    outs = []
    for a in (action, clipped):
        env.reset(options={"state": state})
        venv.reset(options={"state": [state]})
        outs.append((env.step([a])[0], venv.step([[a]])[0]))
    np.testing.assert_array_equal(outs[0][0], outs[1][0])
    np.testing.assert_array_equal(outs[0][1], outs[1][1])


def test_vector_spaces_and_shapes() -> None:
    venv = CartPoleSwingUpVectorEnv(5)
    env = CartPoleSwingUpEnv()
    assert venv.single_observation_space == env.observation_space
    assert venv.single_action_space == env.action_space
    assert venv.observation_space.shape == (5, 5) and venv.action_space.shape == (5, 1)
    obs, info = venv.reset(seed=0)
    assert obs in venv.observation_space and info == {}
    obs, rew, term, trunc, _ = venv.step(venv.action_space.sample())
    assert obs.dtype == np.float32 and obs in venv.observation_space
    assert rew.shape == term.shape == trunc.shape == (5,)
    assert term.dtype == trunc.dtype == np.bool_


def test_errors() -> None:
    with pytest.raises(ValueError, match="num_envs must be a positive int"):
        CartPoleSwingUpVectorEnv(0)
    for bad in (True, 2.5, "4"):
        with pytest.raises(ValueError, match="num_envs must be a positive integer"):
            CartPoleSwingUpVectorEnv(bad)
        with pytest.raises(ValueError, match="max_episode_steps must be a positive integer"):
            CartPoleSwingUpVectorEnv(2, max_episode_steps=bad)
    with pytest.raises(ResetNeeded):
        CartPoleSwingUpVectorEnv(2).step(np.zeros(2))
    venv = CartPoleSwingUpVectorEnv(3)
    with pytest.raises(ValueError, match=r"options\['state'\] must have shape \(3, 4\)"):
        venv.reset(options={"state": np.zeros((4, 3))})
    with pytest.raises(ResetNeeded, match="first reset"):
        venv.reset(options={"reset_mask": np.array([True, False, True])})
    venv.reset(seed=0)
    with pytest.raises(ValueError, match=r"actions must have shape \(3,\) or \(3, 1\)"):
        venv.step(np.zeros((3, 2)))
    with pytest.raises(TypeError, match="bool numpy array"):
        venv.reset(options={"reset_mask": [True, False, True]})
    with pytest.raises(ValueError, match=r"must have shape \(3,\)"):
        venv.reset(options={"reset_mask": np.ones(2, dtype=bool)})


@pytest.mark.parametrize("share", [0.4, 1.0])
def test_inward_share_points_that_share_of_the_carts_at_the_centre(share: float) -> None:
    """``inward_share`` keeps each start's drawn speed and position and turns about that share
    of the carts towards the centre; the rest keep their drawn direction, and per-copy seeds
    give the single env's start."""
    base = CartPoleSwingUpVectorEnv(4000, harder=True)
    base.reset(seed=11)
    venv = CartPoleSwingUpVectorEnv(4000, harder=True, inward_share=share)
    venv.reset(seed=11)
    drawn, turned = base.state, venv.state
    np.testing.assert_array_equal(np.abs(turned[:, 1]), np.abs(drawn[:, 1]))
    np.testing.assert_array_equal(turned[:, [0, 2, 3]], drawn[:, [0, 2, 3]])
    inward = turned[:, 0] * turned[:, 1] < 0
    kept = turned[:, 1] == drawn[:, 1]
    assert np.all(inward | kept)
    # drawn carts move inward half the time: a share s turns s of them, the rest half
    assert abs(inward.mean() - (share + (1 - share) / 2)) < 0.03
    single = CartPoleSwingUpEnv(harder=True, inward_share=share)
    listed = CartPoleSwingUpVectorEnv(3, harder=True, inward_share=share)
    obs, _ = listed.reset(seed=[3, 4, 3])
    for i, seed in enumerate([3, 4, 3]):
        np.testing.assert_array_equal(obs[i], single.reset(seed=seed)[0])


def test_inward_share_zero_and_upright_share_keep_their_streams() -> None:
    """A zero inward share draws nothing more: the default stream, autoresets included; with
    an upright share both apply, the upright draws first."""
    a = CartPoleSwingUpVectorEnv(50, harder=True, inward_share=0.0)
    b = CartPoleSwingUpVectorEnv(50, harder=True)
    np.testing.assert_array_equal(a.reset(seed=1)[0], b.reset(seed=1)[0])
    for _ in range(3):
        a.step(np.ones(50))
        b.step(np.ones(50))
    np.testing.assert_array_equal(a.state, b.state)
    up = CartPoleSwingUpVectorEnv(2000, harder=True, upright_share=0.5)
    both = CartPoleSwingUpVectorEnv(2000, harder=True, upright_share=0.5, inward_share=1.0)
    up.reset(seed=2)
    both.reset(seed=2)
    np.testing.assert_array_equal(both.state[:, 2], up.state[:, 2])
    assert np.all(both.state[:, 0] * both.state[:, 1] <= 0)


def test_bad_inward_share_is_refused() -> None:
    with pytest.raises(ValueError, match=r"inward_share must be in \[0, 1\], got -0.1"):
        CartPoleSwingUpVectorEnv(2, inward_share=-0.1)


def test_start_span_scales_the_harder_box_and_keeps_its_draws() -> None:
    """``start_span`` replaces the Harder box's half-widths: the same uniform draws, scaled, so
    the default span gives the default starts; single and vector envs agree."""
    span = [2.4, 6.0, 0.3, 2.0]
    base = CartPoleSwingUpVectorEnv(3000, harder=True, upright=True)
    base.reset(seed=5)
    venv = CartPoleSwingUpVectorEnv(3000, harder=True, upright=True, start_span=span)
    venv.reset(seed=5)
    unit = base.state / np.array([2.4, 10.0, np.pi / 2, 10.0])
    np.testing.assert_allclose(venv.state, unit * np.array(span), rtol=1e-12, atol=1e-12)
    assert np.all(np.abs(venv.state) <= np.array(span))
    assert np.abs(venv.state).max(axis=0) == pytest.approx(span, rel=0.01)
    same = CartPoleSwingUpVectorEnv(20, harder=True, start_span=[2.4, 10.0, np.pi / 2, 10.0])
    plain = CartPoleSwingUpVectorEnv(20, harder=True)
    np.testing.assert_array_equal(same.reset(seed=9)[0], plain.reset(seed=9)[0])
    single = CartPoleSwingUpEnv(harder=True, upright=True, start_span=span)
    listed = CartPoleSwingUpVectorEnv(2, harder=True, upright=True, start_span=span)
    np.testing.assert_array_equal(single.reset(seed=4)[0], listed.reset(seed=[4, 4])[0][1])


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
        CartPoleSwingUpVectorEnv(2, **kwargs)
