"""Tests for attn_policies.algorithms.double_dqn (the Double-Q target and DoubleDQN.train)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gymnasium import spaces
from stable_baselines3 import DQN
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.type_aliases import ReplayBufferSamples
from torch import nn

from attn_policies.algorithms import DoubleDQN, double_q_target, dqn_target

# Hand-built Q networks on 2-D observations, 3 actions (rows of W are the actions' weights).
# On s'=e1 the online net picks action 0, where the target net is worth 2 (its max is 7);
# on s'=e2 the online net picks action 1, worth 0 to the target net (its max is 5).
W_ONLINE = [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]
W_TARGET = [[2.0, 5.0], [3.0, 0.0], [7.0, 1.0]]
NEXT_OBS = [[1.0, 0.0], [0.0, 1.0]]
REWARDS = [[0.5], [-1.0]]


def linear_q(weight: list[list[float]]) -> nn.Linear:
    q = nn.Linear(2, 3, bias=False)
    with torch.no_grad():
        q.weight.copy_(torch.tensor(weight))
    return q


def tensors(*rows: list[list[float]]) -> list[torch.Tensor]:
    return [torch.tensor(r) for r in rows]


class PointEnv(gym.Env):
    """A 2-D Box observation, 3 actions; only its spaces matter to these tests."""

    observation_space = spaces.Box(-10.0, 10.0, (2,), np.float32)
    action_space = spaces.Discrete(3)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        return np.zeros(2, np.float32), 0.0, False, False, {}


# --- the targets ------------------------------------------------------------------------------


def test_double_q_target_uses_online_argmax_and_target_value() -> None:
    next_obs, rewards = tensors(NEXT_OBS, REWARDS)
    dones = torch.zeros(2, 1)
    target = double_q_target(linear_q(W_ONLINE), linear_q(W_TARGET), next_obs, rewards, dones, 0.9)
    assert target.shape == (2, 1)
    torch.testing.assert_close(target, torch.tensor([[0.5 + 0.9 * 2.0], [-1.0 + 0.9 * 0.0]]))
    assert not target.requires_grad


def test_dqn_target_uses_max_of_target_and_exceeds_double_by_gamma_gap() -> None:
    next_obs, rewards = tensors(NEXT_OBS, REWARDS)
    dones = torch.zeros(2, 1)
    online, target_net = linear_q(W_ONLINE), linear_q(W_TARGET)
    plain = dqn_target(target_net, next_obs, rewards, dones, 0.9)
    double = double_q_target(online, target_net, next_obs, rewards, dones, 0.9)
    torch.testing.assert_close(plain, torch.tensor([[0.5 + 0.9 * 7.0], [-1.0 + 0.9 * 5.0]]))
    # gamma * (max_a Q_t(s', a) - Q_t(s', argmax_a Q_o(s', a))): 0.9 * (7 - 2), 0.9 * (5 - 0).
    torch.testing.assert_close(plain - double, torch.tensor([[4.5], [4.5]]))


def test_targets_agree_when_online_and_target_nets_agree() -> None:
    next_obs, rewards = tensors(NEXT_OBS, REWARDS)
    dones = torch.zeros(2, 1)
    net = linear_q(W_TARGET)
    torch.testing.assert_close(
        double_q_target(net, net, next_obs, rewards, dones, 0.9),
        dqn_target(net, next_obs, rewards, dones, 0.9),
    )


def test_dones_zero_the_bootstrap() -> None:
    next_obs, rewards = tensors(NEXT_OBS, REWARDS)
    dones = torch.tensor([[1.0], [0.0]])
    online, target_net = linear_q(W_ONLINE), linear_q(W_TARGET)
    double = double_q_target(online, target_net, next_obs, rewards, dones, 0.9)
    plain = dqn_target(target_net, next_obs, rewards, dones, 0.9)
    torch.testing.assert_close(double, torch.tensor([[0.5], [-1.0]]))
    torch.testing.assert_close(plain, torch.tensor([[0.5], [-1.0 + 0.9 * 5.0]]))


def test_per_sample_discounts() -> None:
    next_obs, rewards = tensors(NEXT_OBS, REWARDS)
    gamma = torch.tensor([[0.5], [0.25]])
    double = double_q_target(
        linear_q(W_ONLINE), linear_q(W_TARGET), next_obs, rewards, torch.zeros(2, 1), gamma
    )
    torch.testing.assert_close(double, torch.tensor([[0.5 + 0.5 * 2.0], [-1.0]]))


# --- DoubleDQN.train --------------------------------------------------------------------------


def make_model(loss: str = "mse", lr: float = 0.1) -> DoubleDQN:
    """A DoubleDQN whose Q nets are single bias-free Linear layers set to W_ONLINE / W_TARGET."""
    model = DoubleDQN(
        "MlpPolicy",
        PointEnv(),
        loss=loss,  # type: ignore[arg-type]
        learning_rate=lr,
        learning_starts=10**6,
        max_grad_norm=1e9,  # no clipping, so the manual step is plain SGD
        gamma=0.9,
        policy_kwargs={"net_arch": [], "optimizer_class": torch.optim.SGD},
        seed=0,
    )
    for net, weight in ((model.q_net, W_ONLINE), (model.q_net_target, W_TARGET)):
        (layer,) = [m for m in net.q_net.modules() if isinstance(m, nn.Linear)]
        with torch.no_grad():
            layer.weight.copy_(torch.tensor(weight))
            layer.bias.zero_()
    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def fixed_batch(discounts: torch.Tensor | None = None) -> ReplayBufferSamples:
    # On s the online net would pick different actions than on s' (the book's argmax-on-s slip).
    return ReplayBufferSamples(
        observations=torch.tensor([[0.0, 2.0], [3.0, 0.0]]),
        actions=torch.tensor([[2], [0]]),
        next_observations=torch.tensor(NEXT_OBS),
        dones=torch.tensor([[0.0], [0.0]]),
        rewards=torch.tensor(REWARDS),
        discounts=discounts,
    )


def use_batch(model: DoubleDQN, batch: ReplayBufferSamples, mp: pytest.MonkeyPatch) -> None:
    """Make every replay sample ``batch`` (SB3 samples with global numpy otherwise)."""
    mp.setattr(model.replay_buffer, "sample", lambda batch_size, env=None: batch)


def manual_step(
    model: DoubleDQN, batch: ReplayBufferSamples, target_fn: str, loss: str, lr: float
) -> tuple[dict[str, torch.Tensor], float]:
    """One SGD step on a copy of the online net with the given target; (new params, loss)."""
    online, target_net = copy.deepcopy(model.q_net), copy.deepcopy(model.q_net_target)
    gamma = batch.discounts if batch.discounts is not None else model.gamma
    args = (batch.next_observations, batch.rewards, batch.dones, gamma)
    with torch.no_grad():
        if target_fn == "double":
            target = double_q_target(online, target_net, *args)
        else:
            target = dqn_target(target_net, *args)
    current = online(batch.observations).gather(1, batch.actions.long())
    value = (F.mse_loss if loss == "mse" else F.smooth_l1_loss)(current, target)
    value.backward()
    with torch.no_grad():
        new = {n: p - lr * p.grad for n, p in online.named_parameters()}
    return new, value.item()


@pytest.mark.parametrize("loss", ["mse", "huber"])
@pytest.mark.parametrize("discounts", [None, torch.tensor([[0.5], [0.25]])])
def test_train_takes_one_step_on_the_double_q_loss(
    loss: str, discounts: torch.Tensor | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = make_model(loss)
    batch = fixed_batch(discounts)
    use_batch(model, batch, monkeypatch)
    expected, expected_loss = manual_step(model, batch, "double", loss, 0.1)
    plain, plain_loss = manual_step(model, batch, "dqn", loss, 0.1)
    target_before = copy.deepcopy(model.q_net_target.state_dict())

    model.train(gradient_steps=1, batch_size=2)

    got = dict(model.q_net.named_parameters())
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value)
    assert model.logger.name_to_value["train/loss"] == pytest.approx(expected_loss)
    # The plain-DQN target gives another loss (and, but for Huber's flat gradient, another
    # step), so the checks above tell the two targets apart.
    assert plain_loss != pytest.approx(expected_loss)
    if loss == "mse":
        assert any(not torch.allclose(got[n], v) for n, v in plain.items())
    assert model._n_updates == 1
    for name, value in model.q_net_target.state_dict().items():
        torch.testing.assert_close(value, target_before[name])


def test_train_clips_the_gradient_norm(monkeypatch: pytest.MonkeyPatch) -> None:
    """With max_grad_norm the SGD step is the clipped gradient's: the step's norm is
    lr * max_grad_norm along the unclipped gradient's direction (removing the clip fails)."""
    model = make_model("mse")
    model.max_grad_norm = 0.05
    batch = fixed_batch()
    use_batch(model, batch, monkeypatch)
    unclipped, _ = manual_step(model, batch, "double", "mse", 0.1)
    before = {n: p.detach().clone() for n, p in model.q_net.named_parameters()}
    model.train(gradient_steps=1, batch_size=2)
    step = torch.cat([(p.detach() - before[n]).ravel() for n, p in model.q_net.named_parameters()])
    full = torch.cat([(unclipped[n] - before[n]).ravel() for n in before])
    assert full.norm() > 10 * 0.1 * 0.05  # the clip really binds on this batch
    torch.testing.assert_close(step.norm(), torch.tensor(0.1 * 0.05), rtol=1e-4, atol=0)
    torch.testing.assert_close(step / step.norm(), full / full.norm(), rtol=1e-4, atol=1e-6)


def test_mse_and_huber_losses_differ_on_large_td_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    losses = {}
    for loss in ("mse", "huber"):
        model = make_model(loss)
        use_batch(model, fixed_batch(), monkeypatch)
        model.train(gradient_steps=1, batch_size=2)
        losses[loss] = model.logger.name_to_value["train/loss"]
    # TD errors are 0 - 2.3 and 3 - (-1.0): beyond 1, where Huber grows linearly.
    assert losses["mse"] > losses["huber"] + 1.0


def test_default_loss_is_huber() -> None:
    assert DoubleDQN("MlpPolicy", PointEnv(), seed=0).loss == "huber"


@pytest.mark.parametrize("loss", ["l1", "MSE", "", None])
def test_bad_loss_raises(loss: Any) -> None:
    with pytest.raises(ValueError, match="loss must be"):
        DoubleDQN("MlpPolicy", PointEnv(), loss=loss)


def test_save_load_keeps_loss_and_weights(tmp_path: Path) -> None:
    model = make_model("mse")
    model.save(tmp_path / "model.zip")
    loaded = DoubleDQN.load(tmp_path / "model.zip", device="cpu")
    assert isinstance(loaded, DoubleDQN)
    assert loaded.loss == "mse"
    for (name, p), q in zip(
        model.q_net.state_dict().items(), loaded.q_net.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(p, q, msg=name)


def test_is_a_dqn_and_learns_end_to_end() -> None:
    model = DoubleDQN(
        "MlpPolicy", PointEnv(), learning_starts=8, batch_size=4, train_freq=1, seed=0
    )
    assert isinstance(model, DQN)
    model.learn(24)
    assert model.num_timesteps == 24
    assert model._n_updates > 0
