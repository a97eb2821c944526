"""Tests for attn_policies.algorithms.dagger (DAgger cloning of a recurrent ES policy)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from attn_envs.envs.cartpole_swingup import CartPoleSwingUpVectorEnv
from attn_policies.algorithms.dagger import (
    DAgger,
    DAggerConfig,
    beta_of,
    collect,
    fit_epoch,
)
from attn_policies.es_policies import AttentionNeuronPolicy, FNNPolicy


def env_fn(n: int) -> CartPoleSwingUpVectorEnv:
    return CartPoleSwingUpVectorEnv(n, harder=True, max_episode_steps=1000, autoreset=False)


CFG = DAggerConfig(n_envs=6, max_steps=40, window=8, seed=3)


def make(seed: int = 0) -> tuple[AttentionNeuronPolicy, FNNPolicy]:
    torch.manual_seed(seed)
    return AttentionNeuronPolicy.cartpole(), FNNPolicy(5, 1, 8)


def test_beta_schedule_is_teacher_first_then_half_and_none() -> None:
    assert [beta_of(r) for r in range(5)] == [1.0, 0.5, 0.0, 0.5, 0.0]


def test_collect_mixes_as_told_and_shuffles_once_per_episode() -> None:
    student, teacher = make()
    led = collect(student, teacher, env_fn, CFG, beta=1.0, seed=0)
    np.testing.assert_array_equal(led.actions, led.targets)  # the teacher drives every copy
    own = collect(student, teacher, env_fn, CFG, beta=0.0, seed=0)
    assert not np.allclose(own.actions, own.targets)
    assert own.obs.shape == (40, 6, 5) and own.actions.shape == own.targets.shape == (40, 6, 1)
    assert (np.sort(own.perm, axis=1) == np.arange(5)).all()  # a permutation per copy
    assert len({tuple(p) for p in own.perm}) > 1  # ... drawn per copy
    assert (np.diff(own.alive.astype(int), axis=0) <= 0).all()  # alive only ever ends
    np.testing.assert_array_equal(own.obs[0], led.obs[0])  # same seed, same starts
    flat = collect(student, teacher, env_fn, dataclasses.replace(CFG, shuffle_inputs=False), 0, 0)
    assert (flat.perm == np.arange(5)).all()


def test_fit_replays_collection_exactly() -> None:
    """Training unrolls the student on the same shuffled inputs, carrying its state across
    windows, as collection did: with its own actions as targets the loss is zero (lr 0); a
    state reset between windows breaks this (checked by mutation)."""
    student, teacher = make()
    data = collect(student, teacher, env_fn, CFG, beta=0.0, seed=1)
    data.targets = data.actions.copy()
    optimizer = torch.optim.SGD(student.parameters(), lr=0.0)
    assert fit_epoch(student, optimizer, data, CFG) == pytest.approx(0.0, abs=1e-10)


def test_fit_feeds_the_played_previous_action() -> None:
    student, teacher = make()
    data = collect(student, teacher, env_fn, CFG, beta=1.0, seed=1)  # the teacher played
    optimizer = torch.optim.SGD(student.parameters(), lr=0.0)
    played = fit_epoch(student, optimizer, data, CFG)
    data.actions = np.zeros_like(data.actions)
    assert fit_epoch(student, optimizer, data, CFG) != pytest.approx(played, rel=1e-4)


def test_fit_epochs_reduce_the_imitation_loss() -> None:
    student, teacher = make()
    data = collect(student, teacher, env_fn, CFG, beta=1.0, seed=2)
    optimizer = torch.optim.Adam(student.parameters(), lr=CFG.learning_rate)
    losses = [fit_epoch(student, optimizer, data, CFG) for _ in range(15)]
    assert losses[-1] < 0.5 * losses[0], losses


def test_save_and_restore_continue_bit_for_bit(tmp_path: Path) -> None:
    cfg = dataclasses.replace(CFG, keep_rounds=2)
    straight = DAgger(*make(), env_fn, cfg)
    records = [straight.step() for _ in range(3)]
    assert [r["beta"] for r in records] == [1.0, 0.5, 0.0]
    assert records[-1]["env_steps"] == straight.env_steps > 0

    first = DAgger(*make(), env_fn, cfg)
    first.step(), first.step()
    first.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "round-1.npz",
        "round-2.npz",
        "student-2.pt",
        "trainer.json",
    ]
    student = make(seed=9)[0]  # other weights: the student's must come from the checkpoint
    resumed = DAgger(student, make()[1], env_fn, cfg)
    resumed.restore(tmp_path)
    assert resumed.step() == records[-1]
    for a, b in zip(straight.student.parameters(), resumed.student.parameters(), strict=True):
        assert torch.equal(a, b)
    resumed.save(tmp_path)  # the dropped round's data goes
    assert sorted(p.name for p in tmp_path.glob("*.npz")) == ["round-2.npz", "round-3.npz"]
    assert [p.name for p in tmp_path.glob("student-*.pt")] == ["student-3.pt"]


def test_teacher_may_return_action_or_action_and_state() -> None:
    student, teacher = make()
    plain = collect(student, lambda o: teacher(o)[0], env_fn, CFG, beta=1.0, seed=4)
    paired = collect(student, teacher, env_fn, CFG, beta=1.0, seed=4)
    np.testing.assert_array_equal(plain.targets, paired.targets)


@pytest.mark.parametrize(
    "field, value",
    [
        ("n_envs", 0),
        ("window", 0),
        ("max_steps", 1.5),
        ("keep_rounds", True),
        ("learning_rate", 0.0),
        ("max_grad_norm", -1),
    ],
)
def test_bad_config_is_a_value_error(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"DAggerConfig.{field}"):
        DAggerConfig(**{field: value})
