"""Double DQN (van Hasselt et al. 2016) as a drop-in subclass of SB3's :class:`DQN`.

SB3's DQN bootstraps from ``max_a Q_target(s', a)``; Double DQN picks the action with the
online net and reads its value from the target net, which removes the max-operator's
overestimation bias. The book's listing (seed 000, sec. 10.5) takes the argmax on ``s``
instead of ``s'``; this is the corrected form. Everything else (exploration, target sync,
replay, saving) is SB3's, so the class works wherever ``DQN`` does.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
import torch as th
import torch.nn.functional as F
from stable_baselines3 import DQN
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import PyTorchObs
from stable_baselines3.dqn.policies import CnnPolicy, DQNPolicy, MlpPolicy, MultiInputPolicy
from torch import Tensor, nn

LossName = Literal["huber", "mse"]


def dqn_target(
    q_target: nn.Module, next_obs: PyTorchObs, rewards: Tensor, dones: Tensor, gamma: Tensor | float
) -> Tensor:
    """The plain DQN target ``r + gamma (1 - done) max_a Q_target(s', a)``, shape ``(B, 1)``."""
    next_q = q_target(next_obs).max(dim=1, keepdim=True).values
    return rewards + (1 - dones) * gamma * next_q


def double_q_target(
    q_online: nn.Module,
    q_target: nn.Module,
    next_obs: PyTorchObs,
    rewards: Tensor,
    dones: Tensor,
    gamma: Tensor | float,
) -> Tensor:
    """The Double DQN target ``r + gamma (1 - done) Q_target(s', argmax_a Q_online(s', a))``.

    Args:
        q_online: the network being trained (selects the action).
        q_target: the periodically synchronised copy (evaluates it).
        next_obs: batch of next observations ``s'``.
        rewards: ``(B, 1)`` rewards.
        dones: ``(B, 1)`` termination flags (1 where ``s'`` is terminal).
        gamma: discount, scalar or ``(B, 1)`` (n-step returns).

    Returns:
        ``(B, 1)`` targets; no gradient flows through them.
    """
    with th.no_grad():
        best = q_online(next_obs).argmax(dim=1, keepdim=True)
        next_q = q_target(next_obs).gather(1, best)
        return rewards + (1 - dones) * gamma * next_q


class DoubleDQN(DQN):
    """SB3 :class:`DQN` with the Double-Q target and a choice of TD loss.

    Args:
        policy: as for :class:`DQN` (``"MlpPolicy"``, ``"CnnPolicy"``, a class, ...).
        env: as for :class:`DQN`.
        loss: ``"huber"`` (SB3's smooth L1, the default) or ``"mse"`` (the book's loss).
        **kwargs: every other :class:`DQN` argument. Constant ε-greedy exploration as in the
            book is ``exploration_initial_eps=exploration_final_eps=0.5``.

    Example:
        >>> import gymnasium as gym
        >>> model = DoubleDQN("MlpPolicy", gym.make("CartPole-v1"), learning_starts=0, seed=0)
        >>> model.learn(64).num_timesteps
        64
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "MlpPolicy": MlpPolicy,
        "CnnPolicy": CnnPolicy,
        "MultiInputPolicy": MultiInputPolicy,
    }

    def __init__(self, policy: str | type[DQNPolicy], env: Any, loss: LossName = "huber", **kwargs):
        if loss not in ("huber", "mse"):
            raise ValueError(f"loss must be 'huber' or 'mse', got {loss!r}")
        self.loss = loss
        super().__init__(policy, env, **kwargs)

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        loss_fn = F.smooth_l1_loss if self.loss == "huber" else F.mse_loss

        losses = []
        for _ in range(gradient_steps):
            data = self.replay_buffer.sample(batch_size, env=self._vec_normalize_env)  # type: ignore[union-attr]
            gamma = data.discounts if data.discounts is not None else self.gamma
            target = double_q_target(
                self.q_net,
                self.q_net_target,
                data.next_observations,
                data.rewards,
                data.dones,
                gamma,
            )
            current = self.q_net(data.observations).gather(1, data.actions.long())
            loss = loss_fn(current, target)
            losses.append(loss.item())

            self.policy.optimizer.zero_grad()
            loss.backward()
            th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
            self.policy.optimizer.step()

        self._n_updates += gradient_steps
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/loss", np.mean(losses))
