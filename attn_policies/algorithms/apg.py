"""Analytic policy gradients: Adam on a cost differentiated through a differentiable env model.

Where the env's physics can be written in torch (CartPoleSwingUp:
:mod:`attn_envs.envs.cartpole_swingup_torch`), the gradient of a rollout's cost with respect
to the policy's weights is exact: no sampling of actions, no value function. The loop is
truncated backpropagation through time: a batch of episodes of ``episode_steps`` steps, an
update every ``window`` steps on the mean cost of that window, the physical and the policy's
state carried (detached) into the next window. Copies that fail (the task says when: e.g. the
pole fell) start again from a fresh start at the end of the window, so every window trains on
the task. Inputs are shuffled once per episode and copy, so a permutation-invariant policy
learns from every ordering.

The policy is an ES-style recurrent policy (:class:`~attn_policies.es_policies.
AttentionNeuronPolicy`, :class:`~attn_policies.es_policies.FNNPolicy`): ``policy(obs, state)
-> (action, state)``, ``policy.initial_state(batch, n_inputs)`` and ``policy.reset_state(state,
done)``. Checkpoints are taken between episodes (:attr:`APGTrainer.at_episode_start`), and a
restored trainer continues bit for bit.

Example:
    >>> from attn_envs.envs.cartpole_swingup_torch import CartPoleHoldTask
    >>> from attn_policies.es_policies import FNNPolicy
    >>> _ = torch.manual_seed(0)
    >>> trainer = APGTrainer(FNNPolicy(5, 1), CartPoleHoldTask(), APGConfig(8, 5, 10))
    >>> record = trainer.step()
    >>> record["update"], record["env_steps"], trainer.at_episode_start
    (1, 40, False)
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np
import torch
from torch import Tensor, nn

from attn_policies.atomic import atomic_path, atomic_write, make_folder
from attn_policies.safe_reads import load_tensors, read_json

__all__ = ["APGConfig", "APGTrainer", "DifferentiableTask", "RecurrentPolicy"]


class DifferentiableTask(Protocol):
    """A differentiable model of an env: starts, step, observation, cost and failure."""

    @property
    def obs_dim(self) -> int: ...

    def starts(self, rng: np.random.Generator, n: int) -> np.ndarray: ...

    def step(self, state: Tensor, action: Tensor) -> Tensor: ...

    def observe(self, state: Tensor) -> Tensor: ...

    def cost(self, state: Tensor) -> Tensor: ...

    def failed(self, state: Tensor) -> Tensor: ...


@runtime_checkable
class RecurrentPolicy(Protocol):
    """What APG asks of its policy beyond ``nn.Module`` (the ES policies' state interface)."""

    def initial_state(self, batch: int, n_inputs: int) -> object: ...

    def reset_state(self, state: Any, done: Tensor) -> object: ...


@dataclasses.dataclass
class APGConfig:
    """Settings of :class:`APGTrainer`.

    Args:
        batch_size: episodes played side by side.
        window: steps per update (the truncation of backpropagation through time).
        episode_steps: steps of an episode, a multiple of ``window``.
        learning_rate: Adam's step.
        decay_updates: 0: a constant step; N > 0: the step falls from ``learning_rate`` to 0
            along a half cosine over updates 0..N (the LSTM policy's holding swings from
            check to check at a constant step; a falling one lets it settle).
        max_grad_norm: gradient norm clip.
        shuffle_inputs: a random order of the inputs per episode and copy.
        seed: seeds the starts and the orders.
    """

    batch_size: int = 128
    window: int = 100
    episode_steps: int = 1000
    learning_rate: float = 1e-3
    decay_updates: int = 0
    max_grad_norm: float = 1.0
    shuffle_inputs: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("batch_size", "window", "episode_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.episode_steps % self.window:
            raise ValueError(
                f"episode_steps ({self.episode_steps}) must be a multiple of window ({self.window})"
            )
        if not self.learning_rate > 0 or not self.max_grad_norm > 0:
            raise ValueError("learning_rate and max_grad_norm must be positive")
        if isinstance(self.decay_updates, bool) or not isinstance(self.decay_updates, int):
            raise ValueError(f"decay_updates must be an int, got {self.decay_updates!r}")
        if self.decay_updates < 0:
            raise ValueError(f"decay_updates must be >= 0, got {self.decay_updates}")

    def step_size(self, update: int) -> float:
        """Adam's step for update ``update`` (counted from 0)."""
        if not self.decay_updates:
            return self.learning_rate
        done = min(update / self.decay_updates, 1.0)
        return self.learning_rate * 0.5 * (1.0 + math.cos(math.pi * done))


class APGTrainer:
    """Truncated-BPTT Adam on ``task``'s cost through its differentiable physics.

    Args:
        policy: the recurrent policy to train (trained in place).
        task: the differentiable task (:class:`DifferentiableTask`).
        config: :class:`APGConfig`.
    """

    def __init__(self, policy: nn.Module, task: DifferentiableTask, config: APGConfig) -> None:
        if not isinstance(policy, RecurrentPolicy):
            raise TypeError(
                f"APGTrainer needs a policy with initial_state and reset_state, "
                f"got {type(policy).__name__}"
            )
        self.policy, self.task, self.config = policy, task, config
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=config.learning_rate)
        self.rng = np.random.default_rng(config.seed)
        self.updates = 0
        self._dtype = next(policy.parameters()).dtype
        self._state: Tensor | None = None
        self._order: Tensor | None = None
        self._memory: Any = None

    @property
    def updates_per_episode(self) -> int:
        return self.config.episode_steps // self.config.window

    @property
    def at_episode_start(self) -> bool:
        """True between episodes: the moment :meth:`save` keeps everything needed."""
        return self.updates % self.updates_per_episode == 0

    @property
    def env_steps(self) -> int:
        return self.updates * self.config.window * self.config.batch_size

    def _new_episode(self) -> None:
        n, d = self.config.batch_size, self.task.obs_dim
        self._state = torch.as_tensor(self.task.starts(self.rng, n), dtype=self._dtype)
        if self.config.shuffle_inputs:
            order = np.argsort(self.rng.random((n, d)), axis=1)
        else:
            order = np.broadcast_to(np.arange(d), (n, d))
        self._order = torch.as_tensor(np.ascontiguousarray(order))
        self._memory = self.policy.initial_state(n, d)

    def step(self) -> dict[str, Any]:
        """One update: ``window`` steps of every copy, Adam on their mean cost."""
        if self.at_episode_start:
            self._new_episode()
        assert self._state is not None and self._order is not None
        s, memory, cost = self._state, self._memory, torch.zeros((), dtype=self._dtype)
        for _ in range(self.config.window):
            obs = torch.gather(self.task.observe(s), 1, self._order)
            action, memory = self.policy(obs, memory)
            s = self.task.step(s, action)
            cost = cost + self.task.cost(s).mean()
        loss = cost / self.config.window
        for group in self.optimizer.param_groups:  # a function of the count: resumes exactly
            group["lr"] = self.config.step_size(self.updates)
        self.optimizer.zero_grad()
        loss.backward()
        grad_norm = nn.utils.clip_grad_norm_(self.policy.parameters(), self.config.max_grad_norm)
        self.optimizer.step()
        s = s.detach()
        memory = None if memory is None else _detach(memory)
        failed = self.task.failed(s)
        n_failed = int(failed.sum())
        if n_failed:
            fresh = self.task.starts(self.rng, n_failed)
            s[failed] = torch.as_tensor(fresh, dtype=s.dtype)
            memory = self.policy.reset_state(memory, failed)
        self._state, self._memory = s, memory
        self.updates += 1
        return {
            "update": self.updates,
            "env_steps": self.env_steps,
            "cost": loss.item(),
            "grad_norm": float(grad_norm),
            "restarts": n_failed / self.config.batch_size,
            "learning_rate": self.config.step_size(self.updates - 1),
        }

    # -- checkpoints -----------------------------------------------------------------------

    def save(self, directory: str | Path) -> None:
        """Policy, optimizer and generator state, between episodes only."""
        if not self.at_episode_start:
            raise RuntimeError("APGTrainer.save: only between episodes (at_episode_start)")
        directory = make_folder(directory)  # a symlink there is replaced, not followed
        with atomic_path(directory / "apg.pt") as tmp:
            torch.save(
                {"policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict()},
                tmp,
            )
        state = {"updates": self.updates, "rng": self.rng.bit_generator.state}
        atomic_write(directory / "trainer.json", json.dumps(state))

    def restore(self, directory: str | Path) -> None:
        """The state :meth:`save` wrote (tensors read with ``weights_only``)."""
        directory = Path(directory)
        tensors = load_tensors(directory / "apg.pt", map_location="cpu")  # zip sizes first
        self.policy.load_state_dict(tensors["policy"])
        self.optimizer.load_state_dict(tensors["optimizer"])
        state = read_json(directory / "trainer.json")  # size and nesting first
        self.updates = int(state["updates"])
        self.rng.bit_generator.state = state["rng"]
        self._state = self._order = self._memory = None
        if not self.at_episode_start:
            raise ValueError(f"{directory}: a checkpoint between episodes was expected")


_T = TypeVar("_T")


def _detach(memory: _T) -> _T:
    from torch.utils._pytree import tree_map

    return tree_map(lambda t: t.detach() if isinstance(t, Tensor) else t, memory)
