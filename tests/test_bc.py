"""Tests for attn_policies.algorithms.bc (behaviour cloning, seed 001 E4/E5)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from torch import nn

from attn_policies.algorithms.bc import (
    BCConfig,
    BCDataset,
    _augment,
    as_teacher,
    collect_rollouts,
    occlude_tokens,
    train_bc,
)

W = np.array([[1.0, -2.0], [0.5, 0.0], [0.0, 1.5], [-1.0, 1.0]], np.float32)


def linear_data(n: int = 512, seed: int = 0) -> BCDataset:
    obs = np.random.default_rng(seed).normal(size=(n, 4)).astype(np.float32)
    logits = obs @ W
    return BCDataset(obs, logits, logits.argmax(axis=1))


def test_mse_loss_decreases_and_the_student_matches_the_teacher() -> None:
    torch.manual_seed(0)
    student = nn.Linear(4, 2)
    history = train_bc(student, linear_data(), BCConfig(epochs=30, learning_rate=0.02))
    assert history[-1]["loss"] < 0.01 * history[0]["loss"]
    np.testing.assert_allclose(student.weight.detach().numpy(), W.T, atol=0.05)
    frozen = nn.Linear(4, 2)
    flat = train_bc(frozen, linear_data(), BCConfig(epochs=3, learning_rate=1e-9))
    assert flat[-1]["loss"] == pytest.approx(flat[0]["loss"], rel=1e-3)  # no learning, no drop


def test_cross_entropy_on_teacher_actions() -> None:
    torch.manual_seed(0)
    student = nn.Linear(4, 2)
    data = linear_data()
    config = BCConfig(epochs=30, learning_rate=0.05, loss="cross_entropy", grad_clip=0.0)
    history = train_bc(student, data, config)
    assert history[-1]["loss"] < 0.5 * history[0]["loss"]
    predicted = student(torch.as_tensor(data.obs)).argmax(dim=1).numpy()
    assert (predicted == data.actions).mean() > 0.95


def test_prev_action_noise_is_seeded_and_touches_only_that_entry() -> None:
    obs = {"obs": torch.ones(4000, 3), "prev_action": torch.zeros(4000, 2)}
    config = BCConfig(prev_action_noise=0.03)
    a = _augment(obs, config, torch.Generator().manual_seed(1))
    b = _augment(obs, config, torch.Generator().manual_seed(1))
    assert torch.equal(a["prev_action"], b["prev_action"])
    assert a["prev_action"].std().item() == pytest.approx(0.03, rel=0.05)
    assert torch.equal(a["obs"], obs["obs"]) and torch.equal(
        obs["prev_action"], torch.zeros(4000, 2)
    )


def test_occlusion_keeps_the_same_number_of_tokens_per_sample_in_order() -> None:
    tokens = torch.arange(2 * 10 * 3, dtype=torch.float32).view(2, 10, 3)
    kept = occlude_tokens(tokens, 0.7, torch.Generator().manual_seed(0))
    assert kept.shape == (2, 3, 3)
    for sample, original in zip(kept, tokens, strict=True):
        rows = [int(r[0]) // 3 % 10 for r in sample]
        assert rows == sorted(set(rows))  # distinct tokens, original order
        assert all(torch.equal(r, original[i]) for r, i in zip(sample, rows, strict=True))
    assert occlude_tokens(tokens, 0.0, torch.Generator()).shape == (2, 10, 3)
    obs = {"tokens": tokens, "prev_action": torch.zeros(2, 1)}
    config = BCConfig(occlusion=(0.5, 0.5), tokens_key="tokens")
    assert _augment(obs, config, torch.Generator())["tokens"].shape == (2, 5, 3)
    ranged = BCConfig(occlusion=(0.2, 0.6), tokens_key="tokens")
    g = torch.Generator().manual_seed(3)
    kept = {_augment(obs, ranged, g)["tokens"].shape[1] for _ in range(200)}
    assert kept == {4, 5, 6, 7, 8}  # one ratio per batch, drawn in [0.2, 0.6]
    a, b = (occlude_tokens(tokens, 0.5, torch.Generator().manual_seed(9)) for _ in range(2))
    assert torch.equal(a, b)  # seeded


class MeanPoolStudent(nn.Module):
    """A token-count-agnostic student: mean over tokens, then linear."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(3, 1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(tokens.mean(dim=1))


def test_training_with_occlusion_on_token_inputs() -> None:
    rng = np.random.default_rng(0)
    tokens = rng.normal(size=(256, 12, 3)).astype(np.float32)
    targets = tokens.mean(axis=1) @ np.array([[2.0], [-1.0], [0.5]], np.float32)
    torch.manual_seed(0)
    data = BCDataset(tokens, targets, np.zeros(256, np.int64))
    history = train_bc(
        MeanPoolStudent(), data, BCConfig(epochs=40, learning_rate=0.05, occlusion=0.25)
    )
    assert history[-1]["loss"] < 0.5 * history[0]["loss"]


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


def test_config_validation() -> None:
    for field, bad in (("batch_size", 0), ("epochs", True), ("epochs", 2.5)):
        with pytest.raises(ValueError, match=f"{field} must be a positive integer"):
            BCConfig(**{field: bad})
    with pytest.raises(ValueError, match="learning_rate must be > 0"):
        BCConfig(learning_rate=0.0)
    with pytest.raises(ValueError, match="loss must be"):
        BCConfig(loss="l1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="occlusion"):
        BCConfig(occlusion=1.0)
    with pytest.raises(ValueError, match="prev_action_noise"):
        BCConfig(prev_action_noise=-0.1)
    tokens = {"tokens": np.zeros((4, 5, 3), np.float32), "prev": np.zeros((4, 2), np.float32)}
    data = BCDataset(tokens, np.zeros((4, 1), np.float32), np.zeros(4, np.int64))
    with pytest.raises(ValueError, match="tokens_key"):  # would silently not occlude
        train_bc(MeanPoolStudent(), data, BCConfig(occlusion=0.5))
    with pytest.raises(ValueError, match="'prev_action'"):  # would silently not add noise
        train_bc(MeanPoolStudent(), data, BCConfig(prev_action_noise=0.03))
    empty = BCDataset(np.zeros((0, 5, 3)), np.zeros((0, 1)), np.zeros(0))
    with pytest.raises(ValueError, match="empty"):
        train_bc(MeanPoolStudent(), empty, BCConfig())
    with pytest.raises(ValueError, match="one length"):
        BCDataset(tokens, np.zeros((3, 1)), np.zeros(4))
