from __future__ import annotations

from functools import partial

import ale_py
import gymnasium as gym
import numpy as np
import pytest
from _contract import UniformBoxEnv, assert_deterministic, assert_env_contract, rollout
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_envs import (
    DuplicateObservation,
    NoiseChannelsObservation,
    PatchObservation,
    ShuffleObservation,
)

gym.register_envs(ale_py)


def cartpole_swingup() -> gym.Env:
    return gym.make("attn_envs/CartPoleSwingUpHarder-v0")


def shuffled(reshuffle_every: int | None = None) -> gym.Env:
    return ShuffleObservation(cartpole_swingup(), reshuffle_every=reshuffle_every)


def noisy(n: int = 5, std: float = 0.1) -> gym.Env:
    return NoiseChannelsObservation(cartpole_swingup(), n=n, std=std)


def duplicated(copies: int = 2) -> gym.Env:
    return DuplicateObservation(cartpole_swingup(), copies=copies)


class _Tokens(gym.Env):
    """Deterministic token env: obs[t] = arange(n) * 1000 + t, so positions are recoverable."""

    def __init__(self, n: int = 7, d: int = 3) -> None:
        self.n, self.d = n, d
        self.observation_space = spaces.Box(-np.inf, np.inf, (n, d), np.float32)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def _obs(self) -> np.ndarray:
        base = np.arange(self.n, dtype=np.float32)[:, None] * 1000 + self.t
        return np.repeat(base, self.d, axis=1)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), 0.0, False, self.t >= 50, {}


@pytest.mark.parametrize("factory", [shuffled, partial(shuffled, 3), noisy, duplicated])
def test_contract(factory) -> None:
    assert_env_contract(factory)


def test_shuffle_applies_reported_permutation() -> None:
    env = ShuffleObservation(_Tokens())
    obs, info = env.reset(seed=1)
    raw = _Tokens().reset()[0]
    np.testing.assert_array_equal(obs, raw[info["permutation"]])
    assert sorted(info["permutation"]) == list(range(7))


def test_new_permutation_each_reset_fixed_within_episode() -> None:
    env = ShuffleObservation(_Tokens(n=12))
    perms = []
    for episode in range(4):
        _, info = env.reset(seed=5) if episode == 0 else env.reset()
        first = info["permutation"]
        for _ in range(10):
            _, _, _, _, info = env.step(0)
            np.testing.assert_array_equal(info["permutation"], first)
        perms.append(tuple(first))
    assert len(set(perms)) == 4, "every reset should draw a new permutation"


@pytest.mark.parametrize("k", [1, 3, 25])
def test_reshuffle_every_k(k: int) -> None:
    env = ShuffleObservation(_Tokens(n=20), reshuffle_every=k)
    _, info = env.reset(seed=0)
    perms = [info["permutation"]]
    for _ in range(60):
        obs, _, _, trunc, info = env.step(0)
        perms.append(info["permutation"])
        # observation always follows the reported permutation
        np.testing.assert_array_equal(obs[:, 0] // 1000, info["permutation"])
        if trunc:
            break
    changes = [t for t in range(1, len(perms)) if not np.array_equal(perms[t], perms[t - 1])]
    assert changes == [t for t in range(1, len(perms)) if t % k == 0]


def test_same_seed_same_permutation_sequence() -> None:
    def perms(seed: int) -> list[list[int]]:
        env = ShuffleObservation(_Tokens(n=30), reshuffle_every=4)
        out = [env.reset(seed=seed)[1]["permutation"].tolist()]
        out += [env.step(0)[4]["permutation"].tolist() for _ in range(20)]
        out.append(env.reset()[1]["permutation"].tolist())
        return out

    assert perms(3) == perms(3)
    assert perms(3) != perms(4)


def test_shuffle_leaves_env_randomness_alone() -> None:
    # the wrapper owns its generator: the inner env's trajectory is unchanged
    plain = rollout(cartpole_swingup, seed=11, n_steps=20)
    wrapped = rollout(shuffled, seed=11, n_steps=20)
    for (o1, r1, *_), (o2, r2, _, _, info) in zip(plain, wrapped, strict=True):
        np.testing.assert_array_equal(o2, o1[info["permutation"]])
        assert r1 == r2


@settings(max_examples=30, deadline=None)
@given(low=st.lists(st.floats(-5, 0), min_size=1, max_size=6), spread=st.floats(0, 5))
def test_space_bounds_cover_any_permutation(low: list[float], spread: float) -> None:
    lo = np.array(low, dtype=np.float32)
    space = spaces.Box(lo, lo + spread + np.arange(len(lo), dtype=np.float32))
    env = ShuffleObservation(UniformBoxEnv(space), reshuffle_every=1)
    assert env.reset(seed=0)[0] in env.observation_space
    for _ in range(10):
        assert env.step(0)[0] in env.observation_space


def test_shuffle_errors() -> None:
    with pytest.raises(TypeError, match=r"ShuffleObservation needs a Box.*Discrete"):
        ShuffleObservation(gym.make("FrozenLake-v1"))
    with pytest.raises(ValueError, match="reshuffle_every must be a positive integer"):
        ShuffleObservation(cartpole_swingup(), reshuffle_every=0)
    with pytest.raises(ValueError, match="stacked_frames=2 does not divide the 3 values"):
        ShuffleObservation(_Tokens(d=3), stacked_frames=2)


class _Screens(gym.Env):
    """Random 12x12 screens (2x2 patches of 6x6); keeps every screen it showed."""

    observation_space = spaces.Box(0, 255, (12, 12), np.uint8)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.shown = [self.np_random.integers(0, 256, (12, 12), dtype=np.uint8)]
        return self.shown[-1], {}

    def step(self, action):
        self.shown.append(self.np_random.integers(0, 256, (12, 12), dtype=np.uint8))
        return self.shown[-1], 0.0, False, len(self.shown) > 40, {}


def _patches(screen: np.ndarray, perm: np.ndarray) -> np.ndarray:
    """The screen shuffled patch-wise *before* stacking, as seed 001's wrappers do: (4, 36)."""
    tiles = screen.reshape(2, 6, 2, 6).swapaxes(1, 2).reshape(4, 36)
    return tiles[perm]


@pytest.mark.parametrize("k", [1, 2, 3, 7])
def test_stacked_frames_equal_shuffling_each_screen_before_stacking(k: int) -> None:
    screens = _Screens()
    stack = PatchObservation(gym.wrappers.FrameStackObservation(screens, 4), patch_size=6)
    env = ShuffleObservation(stack, reshuffle_every=k, stacked_frames=4)
    obs, info = env.reset(seed=3)
    perms = [info["permutation"]]
    for t in range(12):
        if t:
            obs, _, _, _, info = env.step(0)
            perms.append(info["permutation"])
        # the reference: each frame shuffled when seen, then the last 4 stacked (the reset
        # screen repeated before the episode has 4)
        seen = [max(len(perms) - 4 + j, 0) for j in range(4)]
        frames = [_patches(screens.shown[i], perms[i]) for i in seen]
        expected = np.stack(frames, axis=-1).reshape(4, 144)
        np.testing.assert_array_equal(obs, expected)
    assert len({p.tobytes() for p in perms}) > 1  # it did reshuffle

    # without a reshuffle, the frames move together: the plain token shuffle
    def screen_stack() -> gym.Env:
        return PatchObservation(gym.wrappers.FrameStackObservation(_Screens(), 4), patch_size=6)

    plain = ShuffleObservation(screen_stack(), stacked_frames=None)
    fixed = ShuffleObservation(screen_stack(), stacked_frames=4)
    for seed in (0, 1):
        a, _ = plain.reset(seed=seed)
        b, _ = fixed.reset(seed=seed)
        np.testing.assert_array_equal(a, b)
        for _ in range(5):
            np.testing.assert_array_equal(plain.step(0)[0], fixed.step(0)[0])


def test_noise_channels() -> None:
    env = noisy(n=5, std=0.1)
    raw = cartpole_swingup()
    obs, _ = env.reset(seed=0)
    raw_obs, _ = raw.reset(seed=0)
    np.testing.assert_array_equal(obs[:5], raw_obs)
    noise = [obs[5:]]
    for _ in range(400):
        obs, *_ = env.step(np.zeros(1, np.float32))
        noise.append(obs[5:])
    noise = np.concatenate(noise)
    assert abs(noise.mean()) < 0.01 and abs(noise.std() - 0.1) < 0.005
    assert_deterministic(noisy)


def test_noise_identity_and_errors() -> None:
    a, b = rollout(cartpole_swingup, 2, 10), rollout(partial(noisy, n=0), 2, 10)
    assert all(np.array_equal(x[0], y[0]) for x, y in zip(a, b, strict=True))
    with pytest.raises(ValueError, match="n must be a non-negative integer"):
        noisy(n=-1)
    with pytest.raises(ValueError, match="std must be"):
        noisy(std=-0.1)
    with pytest.raises(TypeError, match="floating-point"):
        NoiseChannelsObservation(gym.make("ALE/Pong-v5", obs_type="ram"))
    with pytest.raises(ValueError, match="needs a 1-D Box observation, got shape"):
        NoiseChannelsObservation(gym.make("CarRacing-v3"))


def test_duplicate() -> None:
    env = duplicated(copies=3)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (15,)
    np.testing.assert_array_equal(obs.reshape(3, 5), np.tile(obs[:5], (3, 1)))
    a, b = rollout(cartpole_swingup, 2, 10), rollout(partial(duplicated, copies=1), 2, 10)
    assert all(np.array_equal(x[0], y[0]) for x, y in zip(a, b, strict=True))
    with pytest.raises(ValueError, match="copies must be a positive integer"):
        duplicated(copies=0)
    with pytest.raises(ValueError, match="1-D Box"):
        DuplicateObservation(gym.make("CarRacing-v3"))


def test_noise_stream_replays_after_seeded_reset_across_blocks() -> None:
    env = NoiseChannelsObservation(UniformBoxEnv(spaces.Box(-1, 1, (3,), np.float32)), n=4)

    def noise_after_reset(seed: int | None, steps: int) -> np.ndarray:
        first = env.reset(seed=seed)[0][3:]
        return np.stack([first] + [env.step(0)[0][3:] for _ in range(steps)])

    a = noise_after_reset(0, 1500)  # crosses the 1024-step draw block
    b = noise_after_reset(None, 50)  # unseeded reset continues the stream
    c = noise_after_reset(0, 1500)
    np.testing.assert_array_equal(a, c)
    assert not np.isin(b, a).any(), "an unseeded reset must not replay earlier noise"
    assert len(np.unique(a.round(6), axis=0)) == len(a)


def test_duplicate_copies_are_bounded_before_any_allocation() -> None:
    env = UniformBoxEnv(spaces.Box(-1.0, 1.0, (5,), np.float32))
    with pytest.raises(ValueError, match="copies=1000000000 of a 5-element observation"):
        DuplicateObservation(env, copies=10**9)
