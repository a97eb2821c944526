"""A2C whose update reuses the rollout's forward passes instead of running them again.

SB3's :class:`~stable_baselines3.A2C` acts with the network under ``no_grad`` and, at the
update, runs it again over the whole rollout (``evaluate_actions``) to get a graph to
differentiate. The weights do not change between the two (one update per rollout), so the
second forward recomputes what the first already had. :class:`RolloutGraphA2C` acts with
the graph kept and differentiates that: the same loss of the same weights at the same
inputs, one forward pass per sample fewer (E8's Atari step: the update's forward is ~18% of
it). The numbers are those of SB3's A2C up to rounding: the acting batches (one step of all
envs) and the update's batch (the whole rollout) reach the kernels in other shapes.
"""

from __future__ import annotations

import torch as th
import torch.nn.functional as F
from stable_baselines3 import A2C
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.utils import explained_variance
from stable_baselines3.common.vec_env import VecEnv
from torch import Tensor, nn

#: Modules that act differently in training and evaluation mode: SB3 acts in evaluation
#: mode and updates in training mode, so their acting graph is not the update's.
MODE_DEPENDENT = (nn.modules.batchnorm._BatchNorm, nn.Dropout)


class RolloutGraphA2C(A2C):
    """SB3 :class:`A2C` that differentiates the graphs of its acting forward passes.

    Everything else (rollout collection, returns and advantages, losses, clipping, logging,
    saving) is SB3's A2C, so the class works wherever ``A2C`` does; a saved model loads as
    either class. If anything but the rollout calls the policy's ``forward`` while it
    collects (a callback evaluating through it), the update falls back to SB3's second
    forward pass, so the result stays the A2C update.

    Args: those of :class:`A2C`.

    Raises:
        ValueError: for a policy with batch norm or dropout (their acting graph, in
            evaluation mode, is not the update's).

    Example:
        >>> import gymnasium as gym
        >>> model = RolloutGraphA2C("MlpPolicy", gym.make("CartPole-v1"), n_steps=8, seed=0)
        >>> model.learn(32).num_timesteps, model.reused_updates
        (32, 4)
    """

    #: updates that reused the rollout's graphs (the others ran SB3's second forward)
    reused_updates: int = 0

    def _setup_model(self) -> None:
        super()._setup_model()
        bad = [type(m).__name__ for m in self.policy.modules() if isinstance(m, MODE_DEPENDENT)]
        if bad:
            raise ValueError(
                f"RolloutGraphA2C cannot reuse acting graphs of a policy with {bad[0]}: it acts "
                "differently in evaluation and training mode; use A2C"
            )
        # (values, log_prob, entropy) per acting step, graphs attached; A2C's own __init__
        # is kept, so a config's hyper-parameters are checked against A2C's signature
        self._graphs: list[tuple[Tensor, Tensor, Tensor | None]] = []

    def _excluded_save_params(self) -> list[str]:
        # a checkpoint saved by a callback mid-rollout must not try to pickle live graphs
        return [*super()._excluded_save_params(), "_graphs"]

    def _acting_forward(
        self, obs: Tensor, deterministic: bool = False
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``ActorCriticPolicy.forward`` with the graph kept and recorded for the update."""
        policy = self.policy
        with th.enable_grad():
            features = policy.extract_features(obs)
            if policy.share_features_extractor:
                latent_pi, latent_vf = policy.mlp_extractor(features)
            else:
                pi_features, vf_features = features
                latent_pi = policy.mlp_extractor.forward_actor(pi_features)
                latent_vf = policy.mlp_extractor.forward_critic(vf_features)
            values = policy.value_net(latent_vf)
            distribution = policy._get_action_dist_from_latent(latent_pi)
            actions = distribution.get_actions(deterministic=deterministic)
            log_prob = distribution.log_prob(actions)
            entropy = distribution.entropy()
            # inside the block: a view taken under SB3's no_grad would drop the graph
            self._graphs.append((values.flatten(), log_prob, entropy))
        actions = actions.reshape((-1, *policy.action_space.shape))  # type: ignore[misc]
        return actions.detach(), values.detach(), log_prob.detach()

    def collect_rollouts(
        self,
        env: VecEnv,
        callback: BaseCallback,
        rollout_buffer: RolloutBuffer,
        n_rollout_steps: int,
    ) -> bool:
        self._graphs = []
        # an instance attribute shadows the class's forward for SB3's `self.policy(obs)`
        self.policy.forward = self._acting_forward  # type: ignore[method-assign]
        try:
            return super().collect_rollouts(env, callback, rollout_buffer, n_rollout_steps)
        finally:
            del self.policy.forward

    def train(self) -> None:
        graphs, self._graphs = self._graphs, []
        if len(graphs) != self.rollout_buffer.buffer_size:
            super().train()  # something else called forward during the rollout
            return
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        buffer = self.rollout_buffer
        values = th.stack([g[0] for g in graphs])  # (n_steps, n_envs), as the buffer's rows
        log_prob = th.stack([g[1] for g in graphs])
        entropies = [g[2] for g in graphs]
        advantages = th.as_tensor(buffer.advantages, device=self.device)
        returns = th.as_tensor(buffer.returns, device=self.device)

        if self.normalize_advantage:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        policy_loss = -(advantages * log_prob).mean()
        value_loss = F.mse_loss(returns, values)
        if any(e is None for e in entropies):
            entropy_loss = -th.mean(-log_prob)  # no analytical entropy, as SB3
        else:
            entropy_loss = -th.mean(th.stack(entropies))  # type: ignore[arg-type]
        loss = policy_loss + self.ent_coef * entropy_loss + self.vf_coef * value_loss

        self.policy.optimizer.zero_grad()
        loss.backward()
        th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
        self.policy.optimizer.step()

        explained_var = explained_variance(buffer.values.flatten(), buffer.returns.flatten())
        self._n_updates += 1
        self.reused_updates += 1
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/explained_variance", explained_var)
        self.logger.record("train/entropy_loss", entropy_loss.item())
        self.logger.record("train/policy_loss", policy_loss.item())
        self.logger.record("train/value_loss", value_loss.item())
        if hasattr(self.policy, "log_std"):
            self.logger.record("train/std", th.exp(self.policy.log_std).mean().item())
