"""The behaviour-cloning student and the agent that acts with it.

:class:`BCStudent` is the network :func:`~attn_policies.algorithms.bc.train_bc` fits (an SB3
features extractor and an MLP head); :class:`StudentAgent` gives it SB3's ``predict``, so the
code that plays SB3 models plays a student too (evaluation, DAgger rounds, videos).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.vec_env.base_vec_env import VecEnvObs
from torch import nn

from attn_policies.algorithms.es_eval import default_action_fn

__all__ = ["BCStudent", "StudentAgent"]


class BCStudent(nn.Module):
    """Extractor (``BaseFeaturesExtractor``) -> [Linear + tanh]* -> Linear to the action size.

    With ``attention_neuron`` and ``net_arch=[]`` this is the article's Puzzle Pong student
    (the extractor ends in FC 512 + ReLU, the head is FC 512 -> 6); with
    ``attention_neuron_vector`` (M=32) and ``net_arch=[32]`` the E4 Ant student.

    Args:
        observation_space: the student env's observation space.
        action_space: Discrete (outputs ``n`` logits) or Box (outputs the action).
        features_extractor_class: an SB3 ``BaseFeaturesExtractor`` class.
        features_extractor_kwargs: its keyword arguments.
        net_arch: widths of the hidden tanh layers of the head.

    Example:
        >>> from stable_baselines3.common.torch_layers import FlattenExtractor
        >>> student = BCStudent(spaces.Box(-1, 1, (3,)), spaces.Discrete(2), FlattenExtractor,
        ...                     net_arch=[8])
        >>> student(torch.zeros(5, 3)).shape
        torch.Size([5, 2])
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        features_extractor_class: type[BaseFeaturesExtractor],
        features_extractor_kwargs: dict[str, Any] | None = None,
        net_arch: Sequence[int] = (),
    ) -> None:
        super().__init__()
        self.extractor = features_extractor_class(
            observation_space, **(features_extractor_kwargs or {})
        )
        width = int(self.extractor.features_dim)
        layers: list[nn.Module] = []
        for size in net_arch:
            layers += [nn.Linear(width, size), nn.Tanh()]
            width = size
        if isinstance(action_space, spaces.Discrete):
            out = int(action_space.n)
        elif action_space.shape is not None:
            out = int(np.prod(action_space.shape))
        else:
            raise ValueError(
                f"a student needs a Discrete or a shaped action space, got {action_space}"
            )
        self.head = nn.Sequential(*layers, nn.Linear(width, out))

    def forward(self, obs: torch.Tensor | dict[str, torch.Tensor]) -> torch.Tensor:
        return self.head(self.extractor(obs))


class StudentAgent:
    """A student as an :class:`~attn_policies.agents.Agent` (SB3's ``predict``), so the code
    that plays SB3 models plays it.

    Deterministic actions are an ES policy's
    (:func:`~attn_policies.algorithms.es_eval.default_action_fn`): Discrete: the argmax of the
    logits; Box: the output clipped to the action bounds. Stochastic actions (Discrete only)
    are drawn from the softmax of the logits, the teacher's action distribution the student
    was cloned on, with a generator seeded by ``seed`` (and :meth:`seed`).
    """

    def __init__(self, student: nn.Module, action_space: spaces.Space, seed: int = 0) -> None:
        self.student, self.action_space = student.eval(), action_space
        self.action_fn = default_action_fn(action_space)
        self.rng = np.random.default_rng(seed)

    def seed(self, seed: int) -> None:
        """Restart the generator of stochastic actions (the same episodes draw the same)."""
        self.rng = np.random.default_rng(seed)

    @torch.no_grad()
    def predict(
        self,
        obs: VecEnvObs,
        state: Any = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = True,
    ) -> tuple[np.ndarray, None]:
        """Actions for a batch of observations.

        Raises:
            ValueError: ``deterministic=False`` on a Box action space (a student outputs one
                action there, not a distribution).
        """
        if isinstance(obs, dict):
            x: torch.Tensor | dict[str, torch.Tensor] = {
                k: torch.as_tensor(v, dtype=torch.float32) for k, v in obs.items()
            }
        else:
            x = torch.as_tensor(obs, dtype=torch.float32)
        out = self.student(x)
        if deterministic:
            return self.action_fn(out.numpy()), None
        if not isinstance(self.action_space, spaces.Discrete):
            raise ValueError(
                "stochastic actions need a Discrete action space; this student outputs one "
                f"action for {self.action_space} (test it deterministic)"
            )
        probs = torch.softmax(out.double(), dim=-1).numpy()
        draws = self.rng.random((len(probs), 1))
        # inverse CDF; the min guards draws above a last cumulative sum a hair below 1
        actions = (probs.cumsum(axis=1) < draws).sum(axis=1)
        return np.minimum(actions, probs.shape[1] - 1), None
