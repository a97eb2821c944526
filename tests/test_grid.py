"""Tests for attn_envs.grid (MiniGrid DoorKey pieces of E2)."""

from __future__ import annotations

from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from _contract import assert_env_contract
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st
from minigrid.core.constants import COLOR_TO_IDX, OBJECT_TO_IDX, STATE_TO_IDX
from minigrid.wrappers import ImgObsWrapper

from attn_envs.grid import (
    GRID_CHANNEL_MAX,
    RAW_GRID_KEY,
    ActionSubset,
    EgocentricGridObservation,
    StepPenalty,
    make_egocentric_doorkey,
)

DOORKEY = "MiniGrid-DoorKey-5x5-v0"


def doorkey(**kwargs: Any) -> gym.Env:
    return gym.make(DOORKEY, **kwargs)


class ImageOnly(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """``ImgObsWrapper`` that gym.make can recreate (minigrid's does not record its args,
    which gymnasium's check_env needs)."""

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        self.observation_space = env.observation_space["image"]

    def observation(self, observation):
        return observation["image"]


def egocentric(scale: Any = "max", image_only: bool = False) -> gym.Env:
    env = ImageOnly(doorkey()) if image_only else doorkey()
    return EgocentricGridObservation(env, scale=scale)


def subset(actions: tuple[int, ...] = (0, 1, 2, 3, 5)) -> gym.Env:
    return ActionSubset(ImageOnly(doorkey()), actions=actions)


def penalised(penalty: float = -0.01) -> gym.Env:
    return StepPenalty(ImageOnly(doorkey()), penalty=penalty)


class RecordAction(gym.Wrapper):
    """Remembers every action that reaches the wrapped env."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.actions: list[Any] = []

    def step(self, action):
        self.actions.append(action)
        return self.env.step(action)


class ScriptedRewards(gym.Env):
    """Pays a fixed sequence of rewards, one per step."""

    metadata = {"render_modes": []}

    def __init__(self, rewards: list[Any]) -> None:
        self.rewards = rewards
        self.observation_space = spaces.Box(0, 1, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        r = self.rewards[self.t]
        self.t += 1
        return np.zeros(2, np.float32), r, self.t >= len(self.rewards), False, {}


# --------------------------------------------------------------------------- contract


@pytest.mark.parametrize(
    "factory",
    [
        egocentric,
        partial(egocentric, "fixed"),
        partial(egocentric, None, True),
        subset,
        penalised,
        make_egocentric_doorkey,
        partial(make_egocentric_doorkey, 6, 50, -0.1, (0, 1, 2), "fixed"),
    ],
    ids=["ego-max", "ego-fixed", "ego-raw-box", "subset", "penalty", "doorkey", "doorkey-6"],
)
def test_contract(factory) -> None:
    assert_env_contract(factory, n_steps=30)


# --------------------------------------------------------------------------- observation


def _paired_images(n_steps: int = 40, seed: int = 3):
    """Raw MiniGrid images and the wrapped observations for the same seeded rollout."""
    raw_env, envs = doorkey(), {s: egocentric(s) for s in ("max", "fixed", None)}
    raw, _ = raw_env.reset(seed=seed)
    outs = {s: [e.reset(seed=seed)[0]] for s, e in envs.items()}
    raws = [raw["image"]]
    rng = np.random.default_rng(seed)
    for _ in range(n_steps):
        a = int(rng.integers(0, 7))
        raw, _, term, trunc, _ = raw_env.step(a)
        raws.append(raw["image"])
        for s, e in envs.items():
            outs[s].append(e.step(a)[0])
        if term or trunc:
            break
    return raws, outs


def test_scaled_values_match_the_book():
    raws, outs = _paired_images()
    for raw, by_max, fixed, rawf in zip(raws, outs["max"], outs["fixed"], outs[None],
                                        strict=True):  # fmt: skip
        chw = raw.transpose(2, 0, 1).astype(np.float32)
        assert by_max.shape == fixed.shape == rawf.shape == (3, 7, 7)
        assert by_max.dtype == fixed.dtype == rawf.dtype == np.float32
        np.testing.assert_array_equal(rawf, chw)
        np.testing.assert_allclose(by_max, chw / raw.max(), rtol=1e-6)
        assert by_max.max() == 1.0
        np.testing.assert_allclose(fixed, chw / np.array([10, 5, 3.0])[:, None, None], rtol=1e-6)
    # The egocentric view really changes while the agent moves.
    assert len({r.tobytes() for r in raws}) > 3


class InfoImage(gym.Env):
    """A float (H, W, 3) image Box whose reset and step infos carry their own entry."""

    metadata = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0.0, 10.0, (7, 7, 3), np.float32)
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.full((7, 7, 3), 2.0, np.float32), {"mine": 1}

    def step(self, action):
        return np.full((7, 7, 3), 4.0, np.float32), 0.0, False, False, {"mine": 2}


@pytest.mark.parametrize("scale", ["max", "fixed", None])
def test_raw_grid_in_info_at_reset_and_step(scale):
    raw_env, env = doorkey(), egocentric(scale)
    raw, _ = raw_env.reset(seed=5)
    obs, info = env.reset(seed=5)
    assert RAW_GRID_KEY == "raw_grid"
    rng = np.random.default_rng(5)
    for _ in range(25):
        grid = info[RAW_GRID_KEY]
        assert grid.shape == (3, 7, 7) and grid.dtype == np.uint8
        np.testing.assert_array_equal(grid, raw["image"].transpose(2, 0, 1))
        if scale == "max":
            np.testing.assert_allclose(obs, grid / grid.max(), rtol=1e-6)
        a = int(rng.integers(0, 7))
        raw, *_ = raw_env.step(a)
        obs, _, term, trunc, info = env.step(a)
        if term or trunc:
            break


def test_raw_grid_keeps_the_inner_info_and_the_factory_passes_it_on():
    env = EgocentricGridObservation(InfoImage(), scale="max")
    _, info = env.reset(seed=0)
    assert info["mine"] == 1 and info[RAW_GRID_KEY].dtype.kind == "i"
    np.testing.assert_array_equal(info[RAW_GRID_KEY], np.full((3, 7, 7), 2))
    info = env.step(0)[-1]
    assert info["mine"] == 2 and (info[RAW_GRID_KEY] == 4).all()
    doorkey_env = make_egocentric_doorkey()
    obs, info = doorkey_env.reset(seed=0)
    np.testing.assert_allclose(obs, info[RAW_GRID_KEY] / info[RAW_GRID_KEY].max(), rtol=1e-6)
    obs, *_, info = doorkey_env.step(2)
    np.testing.assert_allclose(obs, info[RAW_GRID_KEY] / info[RAW_GRID_KEY].max(), rtol=1e-6)


def test_fixed_scale_uses_minigrid_constants():
    assert GRID_CHANNEL_MAX[0] == max(OBJECT_TO_IDX.values()) == 10
    assert GRID_CHANNEL_MAX[1] == max(COLOR_TO_IDX.values()) == 5
    assert GRID_CHANNEL_MAX[2] >= max(STATE_TO_IDX.values())


def test_dict_and_image_only_inputs_agree():
    a = egocentric("max")
    b = EgocentricGridObservation(ImgObsWrapper(doorkey()), scale="max")
    np.testing.assert_array_equal(a.reset(seed=1)[0], b.reset(seed=1)[0])
    for act in (2, 0, 2, 1, 3):
        np.testing.assert_array_equal(a.step(act)[0], b.step(act)[0])


def test_spaces():
    assert egocentric("max").observation_space == spaces.Box(0, 1, (3, 7, 7), np.float32)
    assert egocentric("fixed").observation_space == spaces.Box(0, 1, (3, 7, 7), np.float32)
    assert egocentric(None).observation_space == spaces.Box(0, 255, (3, 7, 7), np.float32)


class _Cells(gym.Env):
    """Serves given (H, W, 3) cell arrays in a MiniGrid-like Dict."""

    def __init__(self, shape=(4, 5, 3), high=255):
        self.observation_space = spaces.Dict(
            {"image": spaces.Box(0, high, shape, np.uint8), "direction": spaces.Discrete(4)}
        )
        self.action_space = spaces.Discrete(3)


@settings(max_examples=50, deadline=None)
@given(
    cells=st.lists(st.integers(0, 12), min_size=60, max_size=60),
    scale=st.sampled_from(["max", "fixed"]),
)
def test_property_scaled_obs_in_space_and_order_preserving(cells, scale):
    wrapper = EgocentricGridObservation(_Cells(), scale=scale)
    img = np.array(cells, np.uint8).reshape(4, 5, 3)
    out = wrapper.observation({"image": img, "direction": 0})
    assert out.shape == (3, 4, 5) and out.dtype == np.float32
    assert wrapper.observation_space.contains(out)
    chw = img.transpose(2, 0, 1)
    for c in range(3):  # scaling is monotone per channel: equal cells stay equal, order kept
        flat_in, flat_out = chw[c].ravel(), out[c].ravel()
        order = np.argsort(flat_in, kind="stable")
        assert np.all(np.diff(flat_out[order]) >= 0)
    if scale == "max" and img.max() > 0:
        assert out.max() == 1.0


def test_all_zero_view_stays_zero():
    wrapper = EgocentricGridObservation(_Cells(), scale="max")
    out = wrapper.observation({"image": np.zeros((4, 5, 3), np.uint8), "direction": 0})
    assert not np.any(out) and np.all(np.isfinite(out))


@pytest.mark.parametrize(
    ("space", "error", "match"),
    [
        (spaces.Discrete(3), TypeError, "Dict observation with an 'image' Box.*Discrete"),
        (spaces.Dict({"obs": spaces.Box(0, 1, (7, 7, 3))}), TypeError, r"keys \['obs'\]"),
        (spaces.Box(0, 255, (7, 7), np.uint8), ValueError, r"3-D Box.*\(7, 7\)"),
        (spaces.Box(0, 255, (7, 7, 4), np.uint8), ValueError, r"\(H, W, 3\).*\(7, 7, 4\)"),
        (spaces.Box(-1, 1, (7, 7, 3), np.float32), ValueError, "non-negative"),
    ],
)
def test_egocentric_bad_space(space, error, match):
    env = _Cells()
    env.observation_space = space
    with pytest.raises(error, match=match):
        EgocentricGridObservation(env)


def test_egocentric_bad_scale():
    with pytest.raises(ValueError, match="scale must be 'max', 'fixed' or None, got 'min'"):
        EgocentricGridObservation(doorkey(), scale="min")


# --------------------------------------------------------------------------- actions


def test_action_subset_maps_indices_to_env_actions():
    inner = RecordAction(ImgObsWrapper(doorkey()))
    env = ActionSubset(inner)
    env.reset(seed=0)
    for i in range(5):
        env.step(i)
    assert inner.actions == [0, 1, 2, 3, 5]
    assert env.action_space == spaces.Discrete(5)


def test_toggle_index_equals_raw_toggle():
    """Index 4 is 'toggle' (5): same trajectory as the raw env fed mapped actions."""
    sub, raw = subset(), ImgObsWrapper(doorkey())
    np.testing.assert_array_equal(sub.reset(seed=4)[0], raw.reset(seed=4)[0])
    mapping = (0, 1, 2, 3, 5)
    rng = np.random.default_rng(0)
    for i in [4, *rng.integers(0, 5, 60).tolist()]:
        ra = sub.step(i)
        rb = raw.step(mapping[i])
        np.testing.assert_array_equal(ra[0], rb[0])
        assert ra[1:4] == rb[1:4]
        if ra[2] or ra[3]:
            break


def test_identity_subset_changes_nothing():
    full, raw = subset(tuple(range(7))), ImgObsWrapper(doorkey())
    np.testing.assert_array_equal(full.reset(seed=2)[0], raw.reset(seed=2)[0])
    for a in (2, 0, 2, 3, 5, 1, 2):
        np.testing.assert_array_equal(full.step(a)[0], raw.step(a)[0])


@pytest.mark.parametrize(
    ("actions", "error", "match"),
    [
        ((), ValueError, "at least one action"),
        ((0, 1, 1), ValueError, r"distinct, got \[1\]"),
        ((0, 7), ValueError, r"\[7\] are outside.*valid 0..6"),
        ((-1, 0), ValueError, r"\[-1\] are outside"),
        ((0, 1.0), TypeError, "must be integers"),
        ((True, 1), TypeError, "must be integers"),
    ],
)
def test_action_subset_bad_actions(actions, error, match):
    with pytest.raises(error, match=match):
        ActionSubset(doorkey(), actions=actions)


def test_action_subset_respects_discrete_start():
    env = ScriptedRewards([0.0])
    env.action_space = spaces.Discrete(3, start=10)
    assert ActionSubset(env, actions=(12, 10)).action(0) == 12
    with pytest.raises(ValueError, match=r"\[9\] are outside.*valid 10..12"):
        ActionSubset(env, actions=(9,))


def test_action_subset_needs_discrete():
    env = gym.make("Pendulum-v1")
    with pytest.raises(TypeError, match="needs a Discrete action space, got Box"):
        ActionSubset(env)


@pytest.mark.parametrize("index", [-1, 5])
def test_action_subset_rejects_out_of_range_index(index):
    env = subset()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="outside Discrete\\(5\\)"):
        env.step(index)


# --------------------------------------------------------------------------- rewards


def test_penalty_only_on_exactly_zero_reward():
    rewards = [0, 0.0, 0.5, -1.0, 1e-9, np.float32(0.0), 2]
    env = StepPenalty(ScriptedRewards(rewards), penalty=-0.25)
    env.reset(seed=0)
    got = [env.step(0)[1] for _ in rewards]
    assert got == [-0.25, -0.25, 0.5, -1.0, 1e-9, -0.25, 2]


def test_penalty_zero_is_identity():
    rewards = [0, 0.5, -1.0]
    env = StepPenalty(ScriptedRewards(rewards), penalty=0.0)
    env.reset()
    assert [env.step(0)[1] for _ in rewards] == [0, 0.5, -1.0]


def test_real_doorkey_zero_rewards_become_penalty():
    env, raw = penalised(-0.01), ImgObsWrapper(doorkey())
    env.reset(seed=0)
    raw.reset(seed=0)
    for a in [0, 1, 2, 2, 0, 3, 5] * 3:
        r = env.step(a)[1]
        assert raw.step(a)[1] == 0
        assert r == -0.01


def test_real_doorkey_success_reward_passes_through():
    """Put the agent next to the goal so one 'forward' earns DoorKey's positive reward."""
    env = make_egocentric_doorkey()
    env.reset(seed=0)
    grid = env.unwrapped.grid
    goal = next(
        (x, y) for x in range(grid.width) for y in range(grid.height)
        if grid.get(x, y) is not None and grid.get(x, y).type == "goal"
    )  # fmt: skip
    env.unwrapped.agent_pos = (goal[0], goal[1] - 1)
    env.unwrapped.agent_dir = 1  # facing down, towards the goal
    _, reward, terminated, _, _ = env.step(2)  # forward
    assert terminated
    assert reward == pytest.approx(1 - 0.9 * (1 / 400))


def test_penalty_must_be_finite():
    with pytest.raises(ValueError, match="finite number, got nan"):
        StepPenalty(ScriptedRewards([0]), penalty=float("nan"))


# --------------------------------------------------------------------------- factory


def test_factory_truncates_at_max_steps():
    env = make_egocentric_doorkey(max_steps=400)
    env.reset(seed=0)
    for t in range(1, 401):
        _, reward, terminated, truncated, _ = env.step(0)  # turn left forever
        assert not terminated
        assert reward == -0.01
        assert truncated == (t == 400), t


@pytest.mark.parametrize("size", [5, 6, 8, 16])
def test_factory_sizes(size):
    env = make_egocentric_doorkey(size=size, max_steps=17)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (3, 7, 7)
    assert env.unwrapped.width == size and env.unwrapped.max_steps == 17
    assert isinstance(env, StepPenalty)
    assert env.action_space == spaces.Discrete(5)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"size": 7}, r"size must be one of \(5, 6, 8, 16\), got 7"),
        ({"max_steps": 0}, "max_steps must be a positive integer, got 0"),
        ({"max_steps": 2.5}, "max_steps must be a positive integer"),
    ],
)
def test_factory_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_egocentric_doorkey(**kwargs)
