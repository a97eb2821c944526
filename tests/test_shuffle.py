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

from attn_envs import DuplicateObservation, NoiseChannelsObservation, ShuffleObservation

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
