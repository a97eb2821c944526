"""Tests for attn_policies.algorithms.bc_collect (teacher rollouts for behaviour cloning)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

from attn_policies.algorithms.bc_collect import (
    RolloutCollector,
    Teacher,
    as_teacher,
    collect_rollouts,
)
from attn_policies.algorithms.bc_data import BCDataset


def test_collect_rollouts_from_an_sb3_teacher_and_a_callable() -> None:
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    teacher = PPO("MlpPolicy", env, n_steps=16, batch_size=16, seed=0)
    data = collect_rollouts(teacher, env, n_steps=10)
    assert data.obs.shape == (20, 4) and data.targets.shape == (20, 2) and len(data) == 20
    np.testing.assert_array_equal(data.targets.argmax(axis=1), data.actions)  # logits, greedy

    def always_left(obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(len(obs), np.int64), np.tile([1.0, -1.0], (len(obs), 1))

    scripted = collect_rollouts(always_left, env, n_steps=5, student_obs=lambda o: o * 2)
    assert (scripted.actions == 0).all() and scripted.obs.shape == (10, 4)
    assert gym.spaces.Box(-10, 10, (4,)).contains(scripted.obs[0] / 2)
    with pytest.raises(ValueError, match="n_steps must be a positive integer"):
        collect_rollouts(always_left, env, n_steps=0)
    with pytest.raises(TypeError, match="SB3 model or a callable"):
        as_teacher(3)


def test_the_teacher_sees_its_own_view_and_the_student_the_env_observation() -> None:
    env = make_vec_env("CartPole-v1", n_envs=1, seed=0)
    seen: list[np.ndarray] = []

    def teacher(obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        seen.append(obs)
        return (obs[:, 0] > 0).astype(np.int64), obs[:, :2]

    data = collect_rollouts(teacher, env, n_steps=6, teacher_obs=lambda o: o * 10)
    np.testing.assert_allclose(np.concatenate(seen), data.obs * 10, rtol=1e-6)
    np.testing.assert_allclose(data.targets, data.obs[:, :2] * 10, rtol=1e-6)


def test_an_actor_steps_the_env_while_the_teacher_labels_every_step() -> None:
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)

    def push_right(obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.ones(len(obs), np.int64), np.tile([-1.0, 1.0], (len(obs), 1))

    pushed_left = []

    def push_left(obs: np.ndarray) -> np.ndarray:
        pushed_left.append(obs)
        return np.zeros(len(obs), np.int64)

    collector = RolloutCollector(push_right, env, student_obs=lambda o: o * 2, actor=push_left)
    data = collector.collect(6)
    assert (data.actions == 1).all() and (data.targets.argmax(axis=1) == 1).all()
    np.testing.assert_array_equal(np.concatenate(pushed_left), data.obs)  # the student's view
    # the cart moves as the actor pushed it: its velocity falls (obs[1], doubled by the view)
    velocity = data.obs[:, 1].reshape(6, 2)
    assert (np.diff(velocity, axis=0) < 0).all()
    env.seed(0)
    right = collect_rollouts(push_right, env, n_steps=6)
    assert (np.diff(right.obs[:, 1].reshape(6, 2), axis=0) > 0).all()


def test_a_sampling_teacher_steps_with_its_softmax_and_labels_with_its_argmax() -> None:
    def labels_right(logits: list[float]) -> Teacher:  # labels every step 1 whatever its logits say
        def act(obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return np.ones(len(obs), np.int64), np.tile(logits, (len(obs), 1))

        return act

    def velocity_steps(logits: list[float], seed: int) -> tuple[BCDataset, np.ndarray]:
        env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
        rng = np.random.default_rng(seed)
        data = RolloutCollector(labels_right(logits), env, sample_teacher=rng).collect(6)
        return data, np.diff(data.obs[:, 1].reshape(6, 2), axis=0)  # > 0: pushed right

    # a teacher almost sure of "left" pushes left every step, yet every label is its 1
    data, dv = velocity_steps(np.log([0.999999, 0.000001]).tolist(), seed=0)
    assert (data.actions == 1).all() and (dv < 0).all()
    # an undecided one pushes both ways; the same generator seed, the same steps
    data, dv = velocity_steps([0.0, 0.0], seed=0)
    assert (dv < 0).any() and (dv > 0).any() and (data.actions == 1).all()
    again, _ = velocity_steps([0.0, 0.0], seed=0)
    np.testing.assert_array_equal(again.obs, data.obs)
    assert not np.array_equal(velocity_steps([0.0, 0.0], seed=1)[1] > 0, dv > 0)
    with pytest.raises(ValueError, match="not both"):
        RolloutCollector(
            labels_right([0.0, 0.0]), make_vec_env("CartPole-v1", n_envs=1),
            actor=lambda o: np.zeros(len(o), np.int64), sample_teacher=np.random.default_rng(0),
        )  # fmt: skip


def test_rollout_collector_chunks_equal_one_collection() -> None:
    def teacher(obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        logits = np.stack([obs[:, 2], -obs[:, 2]], axis=1)
        return logits.argmin(axis=1), logits

    whole = collect_rollouts(teacher, make_vec_env("CartPole-v1", n_envs=2, seed=3), 30)
    collector = RolloutCollector(teacher, make_vec_env("CartPole-v1", n_envs=2, seed=3))
    parts = BCDataset.concatenate([collector.collect(n) for n in (7, 1, 22)])
    np.testing.assert_array_equal(parts.obs, whole.obs)  # episodes go on across chunks
    np.testing.assert_array_equal(parts.targets, whole.targets)
    assert len(np.unique(whole.obs[:, 0])) > 30  # not a constant stream
