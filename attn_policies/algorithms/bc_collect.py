"""Teacher rollouts for behaviour cloning: a teacher plays an SB3 ``VecEnv`` and every step
becomes a :class:`~attn_policies.algorithms.bc_data.BCDataset` sample (what the student will
see, the teacher's targets and actions).

:class:`RolloutCollector` records a chunk of steps at a time, continuing the env's episodes,
so a long recording can be saved part by part; with an ``actor`` the student plays and the
teacher only labels (DAgger's relabelled states).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np
import torch

from attn_policies.algorithms.bc_data import BCDataset, Obs
from attn_policies.checks import require_int

__all__ = [
    "RolloutCollector",
    "Teacher",
    "as_teacher",
    "collect_rollouts",
    "sample_logits",
    "sb3_teacher",
]

Teacher = Callable[[Obs], tuple[np.ndarray, np.ndarray]]


def sb3_teacher(model: Any) -> Teacher:
    """An SB3 model as a teacher: its deterministic actions and its logits or action means.

    The targets come from ``model.policy.get_distribution``: ``logits`` for a categorical
    distribution (Discrete), ``mean`` for a Gaussian (Box). The actions are what
    ``model.predict(obs, deterministic=True)`` returns (clipped to the bounds for Box).

    Args:
        model: a trained ``stable_baselines3`` ``BaseAlgorithm`` (PPO, A2C, ...).
    """

    def act(obs: Obs) -> tuple[np.ndarray, np.ndarray]:
        with torch.no_grad():
            tensor, _ = model.policy.obs_to_tensor(obs)
            dist = model.policy.get_distribution(tensor).distribution
            target = dist.logits if hasattr(dist, "logits") else dist.mean
        actions, _ = model.predict(obs, deterministic=True)
        return actions, target.cpu().numpy()

    return act


def as_teacher(teacher: Teacher | Any) -> Teacher:
    """``teacher`` as a callable ``obs -> (actions, targets)`` (SB3 models are wrapped)."""
    if hasattr(teacher, "policy") and hasattr(teacher, "predict"):
        return sb3_teacher(teacher)
    if not callable(teacher):
        raise TypeError(
            f"teacher must be an SB3 model or a callable obs -> (actions, targets), got "
            f"{type(teacher).__name__}"
        )
    return teacher


class RolloutCollector:
    """Plays a teacher in an SB3 ``VecEnv``, a chunk of steps at a time.

    The first :meth:`collect` resets the env; later ones continue its episodes, so chunks of
    ``n`` and ``m`` steps hold the same samples as one call of ``n + m``. Episodes restart as
    the ``VecEnv`` resets them. The env's observation is what the student will see (e.g. with
    the ``"prev_action"`` entry of ``attn_envs.PreviousActionObservation``, which then holds
    the teacher's ``a_{t-1}``); ``teacher_obs`` maps it to what the teacher was trained on.

    Args:
        teacher: an SB3 model or a callable ``obs -> (actions, targets)`` on a batch.
        env: the ``VecEnv`` (seed it before for reproducible data).
        student_obs: maps the env's observation to the student's (default: the same).
        teacher_obs: maps the env's observation to the teacher's (default: the same).
        actor: ``student_obs -> actions`` of the policy that steps the env instead of the
            teacher, which still labels every step (DAgger's relabelled states: the samples
            then cover the states the student itself reaches).
        sample_teacher: a generator: the env is stepped with actions drawn from the softmax
            of the teacher's targets (its logits; Discrete actions) instead of its
            deterministic actions, which stay the labels. A deterministic teacher in a
            deterministic game replays the same states (E5's RAM teacher: 100k steps, 3.6k
            distinct screens); a sampling one visits the states of a stochastic expert.

    Example:
        >>> from stable_baselines3.common.env_util import make_vec_env
        >>> env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
        >>> push_right = lambda obs: (np.ones(len(obs), np.int64), np.ones((len(obs), 2)))
        >>> collector = RolloutCollector(push_right, env)
        >>> [len(collector.collect(n)) for n in (3, 5)]  # samples: steps x envs
        [6, 10]
    """

    def __init__(
        self,
        teacher: Teacher | Any,
        env: Any,
        student_obs: Callable[[Obs], Obs] | None = None,
        teacher_obs: Callable[[Obs], Obs] | None = None,
        actor: Callable[[Obs], np.ndarray] | None = None,
        sample_teacher: np.random.Generator | None = None,
    ) -> None:
        if actor is not None and sample_teacher is not None:
            raise ValueError("give an actor or sample_teacher, not both")
        self.act, self.env = as_teacher(teacher), env
        self.student_obs, self.teacher_obs, self.actor = student_obs, teacher_obs, actor
        self.sample_teacher = sample_teacher
        self._obs: Obs | None = None

    def collect(self, n_steps: int) -> BCDataset:
        """The next ``n_steps`` steps of every env: ``n_steps * num_envs`` samples.

        Raises:
            ValueError: ``n_steps < 1``.
        """
        require_int(n_steps, "n_steps")
        obs = self.env.reset() if self._obs is None else self._obs
        seen: list[Obs] = []
        targets: list[np.ndarray] = []
        actions: list[np.ndarray] = []
        for _ in range(n_steps):
            action, target = self.act(self.teacher_obs(obs) if self.teacher_obs else obs)
            student = self.student_obs(obs) if self.student_obs else obs
            seen.append(student)
            targets.append(np.asarray(target, dtype=np.float32))
            actions.append(np.asarray(action))
            if self.actor is not None:
                action = self.actor(student)
            elif self.sample_teacher is not None:
                action = sample_logits(targets[-1], self.sample_teacher)
            obs, _, _, _ = self.env.step(action)
        self._obs = obs
        if isinstance(seen[0], dict):
            stacked: Obs = {k: np.concatenate([o[k] for o in seen]) for k in seen[0]}
        else:
            stacked = np.concatenate(cast("list[np.ndarray]", seen))
        return BCDataset(stacked, np.concatenate(targets), np.concatenate(actions))


def sample_logits(logits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One action per row drawn from ``softmax(logits)`` (Gumbel-max: one uniform per logit).

    Example:
        >>> logits = np.log(np.array([[0.9, 0.1, 0.0], [0.0, 0.0, 1.0]]) + 1e-12)
        >>> draws = sample_logits(np.repeat(logits, 1000, axis=0), np.random.default_rng(0))
        >>> np.bincount(draws[:1000], minlength=3).tolist()[2], set(draws[1000:].tolist())
        (0, {2})
    """
    gumbel = -np.log(-np.log(rng.random(logits.shape)))
    return np.argmax(logits + gumbel, axis=-1)


def collect_rollouts(
    teacher: Teacher | Any,
    env: Any,
    n_steps: int,
    student_obs: Callable[[Obs], Obs] | None = None,
    teacher_obs: Callable[[Obs], Obs] | None = None,
) -> BCDataset:
    """Play ``teacher`` in an SB3 ``VecEnv`` for ``n_steps`` steps of every env, from a reset:
    one :meth:`RolloutCollector.collect` (see there for the arguments).

    Raises:
        ValueError: ``n_steps < 1``.
    """
    return RolloutCollector(teacher, env, student_obs, teacher_obs).collect(n_steps)
