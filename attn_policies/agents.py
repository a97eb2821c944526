"""What acts in an env: the :class:`Agent` protocol, and :class:`PolicyAgent` for ES policies.

An agent is anything with SB3's ``predict``: an SB3 algorithm itself, a behaviour-cloning
student (:class:`~attn_policies.algorithms.bc_student.StudentAgent`) or an ES policy wrapped
in a :class:`PolicyAgent`. The recurrent state is carried by the caller, as in SB3: ``predict``
returns it and takes it back with the next observations, and ``episode_start`` puts the rows
of envs that just reset back at the initial state, so an agent needs no ``reset`` of its own
(``state=None`` starts every row afresh).

``zoo.runs.Run.agent`` loads the agent of any run folder.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.vec_env.base_vec_env import VecEnvObs
from torch import nn

from attn_policies.algorithms.es_eval import default_action_fn

__all__ = ["Agent", "PolicyAgent"]


@runtime_checkable
class Agent(Protocol):
    """Something that acts: SB3's ``predict`` (an SB3 algorithm, a BC student, a
    :class:`PolicyAgent`)."""

    def predict(
        self,
        observation: Any,
        /,
        state: Any = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
    ) -> tuple[np.ndarray, Any]:
        """Actions for a batch of observations, and the state to pass with the next ones
        (None for a feed-forward agent); rows where ``episode_start`` is True act from the
        initial state."""
        ...


@runtime_checkable
class _ResetsState(Protocol):
    """A recurrent policy that can put some rows of its state back at the start."""

    def reset_state(self, state: Any, done: torch.Tensor) -> object: ...


class PolicyAgent(nn.Module):
    """An ES run's policy (``forward(obs, state) -> (output, state)``) as an :class:`Agent`.

    :meth:`predict` acts as SB3's does (state carried by the caller, zeroed where
    ``episode_start``); :meth:`forward` maps one batch of observations to the raw output from
    :attr:`state`, so attention figures see the policy as it acts. Integer observations
    (raw screens) reach the policy as integers, as in training, even after
    :func:`~attn_policies.capture.attention_maps` turned them into floats.

    Example:
        >>> from gymnasium import spaces
        >>> from attn_policies.es_policies import AttentionNeuronPolicy
        >>> _ = torch.manual_seed(0)
        >>> agent = PolicyAgent(AttentionNeuronPolicy.cartpole(), spaces.Box(-1, 1, (1,)))
        >>> action, state = agent.predict(np.zeros((2, 5), np.float32))
        >>> action.shape, type(state).__name__
        ((2, 1), 'PolicyState')
    """

    def __init__(
        self,
        policy: nn.Module,
        action_space: gym.Space,
        action_fn: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> None:
        super().__init__()
        self.policy = policy.eval()
        self.action_fn = action_fn or default_action_fn(action_space)
        self.state: Any = None
        self.obs_dtype: torch.dtype | None = None

    def start_state(self, state: Any, episode_start: np.ndarray | None = None) -> Any:
        """``state`` with the rows where ``episode_start`` is True back at the initial state."""
        if state is None or episode_start is None or not np.any(episode_start):
            return state
        if np.all(episode_start) or not isinstance(self.policy, _ResetsState):
            return None
        return self.policy.reset_state(state, torch.as_tensor(np.asarray(episode_start)))

    def observe(
        self,
        obs: VecEnvObs | torch.Tensor,
        state: Any = None,
        episode_start: np.ndarray | None = None,
    ) -> None:
        """Make :meth:`forward` act on ``obs`` as :meth:`predict` would: from ``state``
        (restarted where ``episode_start``) and with ``obs``'s dtype (even before the first
        ``predict``)."""
        self.state = self.start_state(state, episode_start)
        self.obs_dtype = self._input(obs).dtype

    def _input(self, obs: VecEnvObs | torch.Tensor) -> torch.Tensor:
        x = torch.as_tensor(np.asarray(obs)) if not isinstance(obs, torch.Tensor) else obs
        return x.float() if x.is_floating_point() else x

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.obs_dtype is not None and not self.obs_dtype.is_floating_point:
            obs = obs.round().to(self.obs_dtype)  # exact: the floats came from these integers
        return self.policy(obs, self.state)[0]

    @torch.no_grad()
    def predict(
        self,
        observation: Any,
        /,
        state: Any = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = True,
    ) -> tuple[np.ndarray, Any]:
        """Env actions for a batch of observations, and the state for the next ones (an ES
        policy acts deterministically: ``deterministic`` is accepted and ignored)."""
        x = self._input(observation)
        self.obs_dtype = x.dtype
        out, state = self.policy(x, self.start_state(state, episode_start))
        return self.action_fn(out.numpy()), state
