"""Tests for attn_policies.algorithms.apg: analytic policy gradients through torch physics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from attn_envs.envs.cartpole_swingup_torch import CartPoleHoldTask
from attn_policies.algorithms.apg import APGConfig, APGTrainer
from attn_policies.es_policies import AttentionNeuronPolicy, FNNPolicy


def fnn_trainer(**config: object) -> APGTrainer:
    torch.manual_seed(0)
    settings = {"batch_size": 16, "window": 10, "episode_steps": 50, **config}
    return APGTrainer(FNNPolicy(5, 1, hidden=8), CartPoleHoldTask(), APGConfig(**settings))


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"window": 0}, "window must be a positive int"),
        ({"batch_size": 2.5}, "batch_size must be a positive int"),
        ({"window": 30, "episode_steps": 100}, r"multiple of window \(30\)"),
        ({"learning_rate": 0.0}, "must be positive"),
        ({"decay_updates": -1}, "decay_updates must be >= 0"),
        ({"decay_updates": 2.0}, "decay_updates must be an int"),
    ],
)
def test_bad_config_is_refused(settings: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        APGConfig(**settings)


def test_cosine_step_falls_from_the_rate_to_zero_and_is_used() -> None:
    config = APGConfig(learning_rate=0.01, decay_updates=100)
    steps = [config.step_size(u) for u in (0, 50, 100, 150)]
    assert steps == pytest.approx([0.01, 0.005, 0.0, 0.0])
    assert APGConfig(learning_rate=0.01).step_size(10**6) == 0.01
    trainer = fnn_trainer(learning_rate=0.01, decay_updates=4)
    used = [trainer.step()["learning_rate"] for _ in range(4)]
    assert used == pytest.approx(
        [0.01, 0.01 * (1 + np.cos(np.pi / 4)) / 2, 0.005, 0.01 * (1 + np.cos(3 * np.pi / 4)) / 2]
    )
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(used[-1])


def test_gradient_steps_teach_an_fnn_to_hold_the_pole() -> None:
    """The FNN starts with the pole falling; a few dozen updates lower the hold cost a lot."""
    trainer = fnn_trainer(learning_rate=0.01, shuffle_inputs=False)
    costs = [trainer.step()["cost"] for _ in range(60)]
    assert np.mean(costs[-10:]) < 0.5 * np.mean(costs[:5])


def test_counts_restarts_and_episodes() -> None:
    trainer = fnn_trainer()
    records = [trainer.step() for _ in range(6)]
    assert [r["update"] for r in records] == [1, 2, 3, 4, 5, 6]
    assert records[-1]["env_steps"] == 6 * 10 * 16
    assert all(0.0 <= r["restarts"] <= 1.0 for r in records)
    assert not trainer.at_episode_start  # update 6 of episodes of 5
    assert trainer.updates_per_episode == 5


def test_each_copy_sees_its_own_order_of_the_inputs() -> None:
    trainer = fnn_trainer(batch_size=64)
    trainer.step()
    order = trainer._order.numpy()
    assert (np.sort(order, axis=1) == np.arange(5)).all()  # permutations
    assert len({tuple(o) for o in order}) > 20
    plain = fnn_trainer(shuffle_inputs=False)
    plain.step()
    assert (plain._order.numpy() == np.arange(5)).all()


def test_save_and_restore_continue_bit_for_bit(tmp_path: Path) -> None:
    straight = fnn_trainer()
    for _ in range(10):
        straight.step()
    first = fnn_trainer()
    for _ in range(5):
        first.step()
    first.save(tmp_path)
    resumed = fnn_trainer(seed=99)  # everything that matters comes from the checkpoint
    resumed.restore(tmp_path)
    records = [resumed.step() for _ in range(5)]
    assert records[-1]["update"] == 10
    for a, b in zip(straight.policy.parameters(), resumed.policy.parameters(), strict=True):
        assert torch.equal(a, b)


def test_save_between_episodes_only(tmp_path: Path) -> None:
    trainer = fnn_trainer()
    trainer.step()
    with pytest.raises(RuntimeError, match="only between episodes"):
        trainer.save(tmp_path)


def test_trains_the_recurrent_attention_neuron_policy() -> None:
    torch.manual_seed(0)
    policy = AttentionNeuronPolicy.cartpole()
    before = [p.detach().clone() for p in policy.parameters()]
    trainer = APGTrainer(policy, CartPoleHoldTask(), APGConfig(8, 5, 10))
    for _ in range(4):  # across an episode boundary, with the LSTM state carried and reset
        record = trainer.step()
    assert np.isfinite(record["cost"]) and record["grad_norm"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.parameters(), strict=True))
