"""Tests for attn_policies.algorithms.replay (the oversampling replay buffer)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3 import DQN
from stable_baselines3.common.buffers import ReplayBuffer

from attn_policies.algorithms import DoubleDQN, OversamplingReplayBuffer

OBS_SPACE = spaces.Box(-1e6, 1e6, (2,), np.float32)
ACTION_SPACE = spaces.Discrete(4)


def make_buffer(
    size: int = 200, n_envs: int = 1, copies: int = 5, threshold: float = 0.0
) -> OversamplingReplayBuffer:
    # buffer_size counts transitions over all envs (SB3 divides it by n_envs into rows).
    return OversamplingReplayBuffer(
        size * n_envs,
        OBS_SPACE,
        ACTION_SPACE,
        n_envs=n_envs,
        copies=copies,
        threshold=threshold,
    )


def add_step(buf: ReplayBuffer, ids: list[int], rewards: list[float]) -> None:
    """Add one vectorised step; transition ``k`` has obs ``(k, -k)``, next obs ``(k + 0.5, 0)``,
    action ``k % 4`` and done ``k % 2``, so every field of a stored copy can be checked."""
    ids_arr = np.asarray(ids, np.float32)
    obs = np.stack([ids_arr, -ids_arr], axis=1)
    next_obs = np.stack([ids_arr + 0.5, np.zeros_like(ids_arr)], axis=1)
    actions = (np.asarray(ids) % 4).reshape(-1, 1)
    dones = np.asarray(ids) % 2 == 1
    buf.add(obs, next_obs, actions, np.asarray(rewards, np.float32), dones, [{} for _ in ids])


def stored(buf: ReplayBuffer) -> list[tuple[float, ...]]:
    """Every stored transition as ``(id, next_obs0, action, reward, done)``."""
    end = buf.buffer_size if buf.full else buf.pos
    obs = buf.observations[:end].reshape(-1, 2)
    nxt = buf.next_observations[:end].reshape(-1, 2)
    return list(
        zip(
            obs[:, 0].tolist(),
            nxt[:, 0].tolist(),
            buf.actions[:end].reshape(-1).tolist(),
            buf.rewards[:end].reshape(-1).tolist(),
            buf.dones[:end].reshape(-1).tolist(),
            strict=True,
        )
    )


def counts(buf: ReplayBuffer) -> Counter[int]:
    return Counter(int(t[0]) for t in stored(buf))


def assert_copies_consistent(buf: ReplayBuffer, rewards: dict[int, float]) -> None:
    """Every stored copy of transition k carries k's next obs, action, reward and done."""
    for k, next0, action, reward, done in stored(buf):
        k = int(k)
        assert (next0, action, done) == (k + 0.5, k % 4, float(k % 2 == 1))
        assert reward == pytest.approx(rewards[k])


def test_single_env_rewarding_transition_inserted_copies_times() -> None:
    buf = make_buffer(copies=5)
    add_step(buf, [1], [0.0])
    add_step(buf, [2], [1.0])
    add_step(buf, [3], [-1.0])
    add_step(buf, [4], [0.25])
    assert counts(buf) == {1: 1, 2: 5, 3: 1, 4: 5}
    assert buf.size() == 12
    assert_copies_consistent(buf, {1: 0.0, 2: 1.0, 3: -1.0, 4: 0.25})
    # Copies follow their original, in order: 1, 2 x 5, 3, 4 x 5.
    assert [int(t[0]) for t in stored(buf)] == [1, 2, 2, 2, 2, 2, 3, 4, 4, 4, 4, 4]


@pytest.mark.parametrize("copies", [2, 5, 50])
def test_three_envs_one_rewarding(copies: int) -> None:
    buf = make_buffer(n_envs=3, copies=copies)
    add_step(buf, [10, 11, 12], [0.0, 1.0, -0.5])
    found = counts(buf)
    # Extra copies fill whole rows of 3: each rewarding transition gets at least `copies`,
    # less than `copies + n_envs`.
    assert found[10] == 1 and found[12] == 1
    assert found[11] == 1 + 3 * -(-(copies - 1) // 3)
    assert copies <= found[11] < copies + 3
    assert_copies_consistent(buf, {10: 0.0, 11: 1.0, 12: -0.5})


@pytest.mark.parametrize("copies", [2, 5, 50])
def test_three_envs_two_rewarding(copies: int) -> None:
    buf = make_buffer(n_envs=3, copies=copies)
    add_step(buf, [20, 21, 22], [2.0, 0.0, 1.0])
    found = counts(buf)
    assert found[21] == 1
    assert min(found[20], found[22]) >= copies
    assert max(found[20], found[22]) < copies + 3
    # Cycling through the hits keeps them within one insertion of each other.
    assert abs(found[20] - found[22]) <= 1
    extra_rows = -(-2 * (copies - 1) // 3)
    assert buf.pos == 1 + extra_rows
    assert_copies_consistent(buf, {20: 2.0, 21: 0.0, 22: 1.0})


def test_three_envs_without_reward_is_one_row() -> None:
    buf = make_buffer(n_envs=3, copies=50)
    add_step(buf, [1, 2, 3], [0.0, -1.0, 0.0])
    assert buf.pos == 1
    assert counts(buf) == {1: 1, 2: 1, 3: 1}


def test_threshold_is_strict() -> None:
    buf = make_buffer(copies=4, threshold=0.5)
    add_step(buf, [1], [0.5])
    add_step(buf, [2], [0.51])
    add_step(buf, [3], [0.3])
    assert counts(buf) == {1: 1, 2: 4, 3: 1}


def test_negative_threshold_counts_zero_rewards() -> None:
    buf = make_buffer(copies=3, threshold=-0.1)
    add_step(buf, [1], [0.0])
    add_step(buf, [2], [-0.2])
    assert counts(buf) == {1: 3, 2: 1}


@pytest.mark.parametrize("n_envs", [1, 3])
def test_copies_one_is_a_plain_buffer(n_envs: int) -> None:
    over = make_buffer(size=30, n_envs=n_envs, copies=1)
    plain = ReplayBuffer(30 * n_envs, OBS_SPACE, ACTION_SPACE, n_envs=n_envs)
    rng = np.random.default_rng(0)
    for step in range(40):  # wraps around the 30 rows
        ids = list(range(step * n_envs, (step + 1) * n_envs))
        rewards = rng.choice([0.0, 1.0], n_envs).tolist()
        add_step(over, ids, rewards)
        add_step(plain, ids, rewards)
    assert (over.pos, over.full) == (plain.pos, plain.full)
    for name in ("observations", "next_observations", "actions", "rewards", "dones"):
        np.testing.assert_array_equal(getattr(over, name), getattr(plain, name), err_msg=name)


def test_wraps_around_at_capacity() -> None:
    buf = make_buffer(size=10, copies=4)
    for k in (1, 2, 3):
        add_step(buf, [k], [0.0])
    add_step(buf, [4], [1.0])  # rows 3..6
    assert (buf.pos, buf.full) == (7, False)
    add_step(buf, [5], [1.0])  # rows 7, 8, 9, then 0
    assert (buf.pos, buf.full) == (1, True)
    assert buf.size() == 10
    ids = buf.observations[:, 0, 0].astype(int).tolist()
    assert ids == [5, 2, 3, 4, 4, 4, 4, 5, 5, 5]


def test_more_copies_than_capacity_fill_the_buffer() -> None:
    buf2 = make_buffer(size=3, copies=7)
    add_step(buf2, [9], [1.0])
    assert buf2.full and counts(buf2) == {9: 3}


@pytest.mark.parametrize("copies", [0, -3, 2.5, True, "5", None])
def test_bad_copies_raise(copies: Any) -> None:
    with pytest.raises(ValueError, match="copies"):
        OversamplingReplayBuffer(10, OBS_SPACE, ACTION_SPACE, copies=copies)


def test_numpy_integer_copies_are_accepted() -> None:
    buf = OversamplingReplayBuffer(10, OBS_SPACE, ACTION_SPACE, copies=np.int64(3))
    assert buf.copies == 3 and type(buf.copies) is int


def test_numpy_integer_copies_accepted() -> None:
    assert make_buffer(copies=np.int64(3)).copies == 3  # type: ignore[arg-type]


def test_defaults_are_the_books() -> None:
    buf = OversamplingReplayBuffer(100, OBS_SPACE, ACTION_SPACE)
    assert (buf.copies, buf.threshold) == (50, 0.0)


@pytest.mark.parametrize("algo", [DQN, DoubleDQN])
def test_usable_from_dqn_via_replay_buffer_class(algo: type[DQN]) -> None:
    # CartPole pays +1 every step, so every transition is stored `copies` times.
    model = algo(
        "MlpPolicy",
        gym.make("CartPole-v1"),
        replay_buffer_class=OversamplingReplayBuffer,
        replay_buffer_kwargs={"copies": 3},
        learning_starts=1000,
        buffer_size=1000,
        seed=0,
    )
    model.learn(20)
    buf = model.replay_buffer
    assert isinstance(buf, OversamplingReplayBuffer)
    assert buf.copies == 3
    assert buf.pos == 60
    obs = buf.observations[:60, 0]
    # Consecutive triples are the same transition.
    np.testing.assert_array_equal(obs[0::3], obs[1::3])
    np.testing.assert_array_equal(obs[0::3], obs[2::3])
    assert len(np.unique(obs[0::3], axis=0)) > 1


REFUSED = "OversamplingReplayBuffer cannot use optimize_memory_usage=True"
OPTIMIZED = {"optimize_memory_usage": True, "handle_timeout_termination": False}


def test_optimize_memory_usage_is_refused() -> None:
    # That layout stores s' of row i as s of row i + 1: consecutive copies would get s' = s.
    with pytest.raises(ValueError, match="cannot use optimize_memory_usage=True"):
        OversamplingReplayBuffer(200, OBS_SPACE, ACTION_SPACE, copies=5, **OPTIMIZED)
    with pytest.raises(ValueError, match=REFUSED):
        OversamplingReplayBuffer(200, OBS_SPACE, ACTION_SPACE, "cpu", 1, True, False)
    env = gym.make("CartPole-v1")
    with pytest.raises(ValueError, match=REFUSED):
        DQN(
            "MlpPolicy",
            env,
            buffer_size=1000,
            replay_buffer_class=OversamplingReplayBuffer,
            replay_buffer_kwargs={"copies": 5, "handle_timeout_termination": False},
            optimize_memory_usage=True,
        )
    env.close()
    # one copy is a plain buffer, which the layout handles
    plain = OversamplingReplayBuffer(200, OBS_SPACE, ACTION_SPACE, copies=1, **OPTIMIZED)
    add_step(plain, [3], [1.0])
    add_step(plain, [4], [0.0])
    assert plain.size() == 2


def test_sampled_copies_keep_their_next_observation() -> None:
    buf = make_buffer(copies=5)
    add_step(buf, [7], [1.0])
    batch = buf.sample(64)
    np.testing.assert_array_equal(batch.next_observations[:, 0].numpy(), 7.5)
    np.testing.assert_array_equal(batch.observations[:, 0].numpy(), 7.0)
