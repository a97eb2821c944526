"""Tests for attn_envs.feedback (previous action in the observation, seed 001)."""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from _contract import assert_env_contract, tree_equal
from gymnasium import spaces
from gymnasium.vector import SyncVectorEnv
from hypothesis import given, settings
from hypothesis import strategies as st
from stable_baselines3 import PPO

from attn_envs.feedback import PreviousActionObservation, action_feature_space


class DictMultiDiscrete(gym.Env):
    """Dict observation, MultiDiscrete actions; the obs echoes the step count and last action."""

    metadata = {"render_modes": []}

    def __init__(self, nvec=(3, 2, 4), start=(1, 0, -1), horizon: int = 12) -> None:
        self.action_space = spaces.MultiDiscrete(nvec, start=start)
        self.observation_space = spaces.Dict(
            {
                "pos": spaces.Box(-10.0, 10.0, (2,), np.float32),
                "echo": spaces.Box(-5, 5, (len(nvec),), np.int64),
            }
        )
        self.horizon = horizon

    def _obs(self, echo):
        pos = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return {"pos": pos, "echo": np.array(echo, np.int64)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(self.action_space.start), {}

    def step(self, action):
        self.t += 1
        return self._obs(action), float(np.sum(action)), False, self.t >= self.horizon, {}


class SpaceEnv(gym.Env):
    """Any action space, a trivial observation; accepts every action without checking."""

    metadata = {"render_modes": []}

    def __init__(self, action_space: spaces.Space) -> None:
        self.action_space = action_space
        self.observation_space = spaces.Box(0, 1, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 0.0, False, False, {}


def cartpole() -> gym.Env:
    return PreviousActionObservation(gym.make("CartPole-v1"))


def pendulum() -> gym.Env:
    return PreviousActionObservation(gym.make("Pendulum-v1"), key="a_prev", obs_key="state")


def dict_multidiscrete() -> gym.Env:
    return PreviousActionObservation(DictMultiDiscrete())


# --------------------------------------------------------------------------- contract


@pytest.mark.parametrize("factory", [cartpole, pendulum, dict_multidiscrete])
def test_contract(factory) -> None:
    assert_env_contract(factory, n_steps=40)


def test_spaces():
    env = cartpole()
    assert env.observation_space == spaces.Dict(
        {
            "observation": gym.make("CartPole-v1").observation_space,
            "prev_action": spaces.Box(0, 1, (2,), np.float32),
        }
    )
    pend = pendulum()
    assert pend.observation_space["a_prev"] == spaces.Box(-2.0, 2.0, (1,), np.float32)
    md = dict_multidiscrete()
    assert set(md.observation_space.spaces) == {"pos", "echo", "prev_action"}
    assert md.observation_space["prev_action"] == spaces.Box(0, 1, (9,), np.float32)
    assert md.observation_space["pos"] == DictMultiDiscrete().observation_space["pos"]


# --------------------------------------------------------------------------- behaviour


def test_discrete_feature_is_one_hot_of_previous_action():
    env, raw = cartpole(), gym.make("CartPole-v1")
    obs, _ = env.reset(seed=3)
    raw_obs, _ = raw.reset(seed=3)
    np.testing.assert_array_equal(obs["observation"], raw_obs)
    np.testing.assert_array_equal(obs["prev_action"], [0.0, 0.0])
    rng = np.random.default_rng(0)
    for _ in range(30):
        a = int(rng.integers(0, 2))
        obs, r, term, trunc, _ = env.step(a)
        raw_obs, raw_r, *_ = raw.step(a)
        np.testing.assert_array_equal(obs["observation"], raw_obs)
        assert r == raw_r
        assert obs["prev_action"].dtype == np.float32
        np.testing.assert_array_equal(obs["prev_action"], np.eye(2)[a])
        if term or trunc:
            break
    obs, _ = env.reset(seed=4)
    np.testing.assert_array_equal(obs["prev_action"], [0.0, 0.0])


def test_box_feature_is_the_clipped_action():
    env = pendulum()
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(obs["a_prev"], [0.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the passive checker warns about out-of-bound actions
        for a in (0.5, -1.25, 3.0, -7.0, np.float64(1.9999)):
            obs, *_ = env.step(np.array([a]))
            np.testing.assert_array_equal(obs["a_prev"], np.float32([np.clip(a, -2, 2)]))
            assert obs["a_prev"].dtype == np.float32
    assert np.asarray(env.reset(seed=1)[0]["a_prev"]).tolist() == [0.0]


def test_multidiscrete_feature_is_concatenated_one_hots():
    env = dict_multidiscrete()
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(obs["prev_action"], np.zeros(9))
    action = np.array([3, 0, 1])  # starts (1, 0, -1) -> indices (2, 0, 2)
    obs, *_ = env.step(action)
    expected = np.zeros(9, np.float32)
    expected[[0 + 2, 3 + 0, 5 + 2]] = 1
    np.testing.assert_array_equal(obs["prev_action"], expected)
    np.testing.assert_array_equal(obs["echo"], action)  # the original entries pass through


def test_box_feature_space_includes_zero_for_reset():
    env = gym.make("CarRacing-v3")  # gas and brake live in [0, 1]; steer in [-1, 1]
    space = action_feature_space(env.action_space)
    assert space == spaces.Box(np.float32([-1, 0, 0]), np.float32([1, 1, 1]), dtype=np.float32)
    shifted = spaces.Box(np.float32([0.5, -3]), np.float32([2, -1]))
    space = action_feature_space(shifted)
    np.testing.assert_array_equal(space.low, [0.0, -3.0])
    np.testing.assert_array_equal(space.high, [2.0, 0.0])
    assert space.contains(np.zeros(2, np.float32))


def test_vector_autoreset_zeroes_the_feature():
    """Gymnasium's next-step autoreset calls reset(): the finished env's feature is zero."""
    venv = SyncVectorEnv([cartpole, cartpole])
    obs, _ = venv.reset(seed=0)
    assert not obs["prev_action"].any()
    pending_reset = np.zeros(2, bool)
    checked = 0
    for t in range(400):
        actions = np.array([t % 2, 1])
        obs, _, term, trunc, _ = venv.step(actions)
        for i in range(2):
            if pending_reset[i]:
                np.testing.assert_array_equal(obs["prev_action"][i], [0, 0])
                checked += 1
            else:
                np.testing.assert_array_equal(obs["prev_action"][i], np.eye(2)[actions[i]])
        pending_reset = term | trunc
        if checked >= 2:
            break
    venv.close()
    assert checked >= 2


@pytest.mark.parametrize("factory", [cartpole, pendulum])
def test_sb3_multi_input_policy_learns_a_few_steps(factory):
    model = PPO("MultiInputPolicy", factory(), n_steps=32, batch_size=16, n_epochs=1, seed=0)
    model.learn(64)
    obs, _ = factory().reset(seed=0)
    action, _ = model.predict(obs, deterministic=True)
    assert model.action_space.contains(np.asarray(action, model.action_space.dtype))


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_property_encoding_round_trips(data):
    n = data.draw(st.integers(1, 6))
    start = data.draw(st.integers(-3, 3))
    disc = PreviousActionObservation(SpaceEnv(spaces.Discrete(n, start=start)))
    a = data.draw(st.integers(start, start + n - 1))
    f = disc.encode(a)
    assert disc.feature_space.contains(f)
    assert f.sum() == 1 and int(np.argmax(f)) == a - start

    nvec = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    md = PreviousActionObservation(DictMultiDiscrete(nvec, [0] * len(nvec)))
    action = np.array([data.draw(st.integers(0, k - 1)) for k in nvec])
    f = md.encode(action)
    assert md.feature_space.contains(f)
    segments = np.split(f, np.cumsum(nvec)[:-1])
    assert [int(np.argmax(s)) for s in segments] == action.tolist()
    assert all(s.sum() == 1 for s in segments)


def test_features_are_fresh_arrays():
    env = cartpole()
    first, _ = env.reset(seed=0)
    second, *_ = env.step(1)
    third, *_ = env.step(0)
    assert not np.shares_memory(second["prev_action"], third["prev_action"])
    np.testing.assert_array_equal(second["prev_action"], [0, 1])
    assert not first["prev_action"].any()


def test_seeded_runs_are_identical():
    def run() -> list[Any]:
        env = dict_multidiscrete()
        env.action_space.seed(5)
        out = [env.reset(seed=5)[0]]
        out += [env.step(env.action_space.sample())[0] for _ in range(10)]
        return out

    assert tree_equal(run(), run())


# --------------------------------------------------------------------------- errors


def test_rejects_unsupported_action_space():
    env = DictMultiDiscrete()
    env.action_space = spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3)))
    with pytest.raises(TypeError, match="Discrete, MultiDiscrete or Box action space, got Tuple"):
        PreviousActionObservation(env)
    env.action_space = spaces.MultiBinary(3)
    with pytest.raises(TypeError, match="got MultiBinary"):
        PreviousActionObservation(env)


def test_rejects_existing_dict_key():
    with pytest.raises(ValueError, match=r"already has a 'pos' entry \(keys \['echo', 'pos'\]\)"):
        PreviousActionObservation(DictMultiDiscrete(), key="pos")


def test_rejects_equal_keys():
    with pytest.raises(ValueError, match="key and obs_key must differ, both are 'x'"):
        PreviousActionObservation(gym.make("CartPole-v1"), key="x", obs_key="x")


def test_stacking_with_another_key_keeps_both():
    env = PreviousActionObservation(cartpole(), key="prev_action_2")
    obs, _ = env.reset(seed=0)
    assert set(obs) == {"observation", "prev_action", "prev_action_2"}
    obs, *_ = env.step(1)
    np.testing.assert_array_equal(obs["prev_action"], obs["prev_action_2"])
    with pytest.raises(ValueError, match="already has a 'prev_action' entry"):
        PreviousActionObservation(cartpole())


def test_out_of_range_action_is_an_error():
    env = PreviousActionObservation(DictMultiDiscrete())
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"action \[9, 0, 0\] is outside MultiDiscrete"):
        env.step(np.array([9, 0, 0]))
    env = PreviousActionObservation(SpaceEnv(spaces.Discrete(3, start=1)))
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"action 0 is outside Discrete\(3, start=1\)"):
        env.step(0)
