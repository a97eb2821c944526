"""Fitness evaluation for evolution strategies: one interface, three back ends.

An ES generation scores ``P`` parameter vectors, each over the same ``R`` task seeds (one
task per repeat, shared by the whole population, so individuals are compared on equal
terms). Every evaluator returns the ``(P, R)`` episode returns of ``evaluate(solutions,
seeds)``:

* :class:`BatchedEvaluator`: the whole population in one vectorised rollout. The ``P``
  parameter vectors are stacked and the policy runs under ``torch.func.vmap`` +
  ``functional_call`` over a vector env of ``P * R`` copies (the numpy
  ``CartPoleSwingUpVectorEnv``, or any gymnasium ``VectorEnv``); recurrent state is batched
  the same way. A policy with ``population_weights`` / ``population_step`` (the
  AttentionNeuron agents) runs its own batched step instead, on the copies still alive only,
  with per-generation constants computed once per individual.
* :class:`~attn_policies.algorithms.es_workers.ProcessEvaluator` and
  :class:`~attn_policies.algorithms.es_workers.RayEvaluator` (in ``es_workers``):
  contiguous population slices on worker processes or Ray actors,
  each a :class:`BatchedEvaluator`, with the same fitness for the same seeds.

Example:
    >>> import gymnasium as gym
    >>> fnn = PolicyFactory("attn_policies.es_policies:FNNPolicy", {"obs_dim": 5, "action_dim": 1})
    >>> spec = RolloutSpec(
    ...     policy_fn=fnn,
    ...     env_id="attn_envs:attn_envs/CartPoleSwingUpHarder-v0",
    ...     max_steps=50,
    ... )
    >>> evaluator = BatchedEvaluator(spec)
    >>> solutions = np.zeros((3, evaluator.num_parameters), dtype=np.float32)
    >>> evaluator.evaluate(solutions, seeds=[0, 1]).shape
    (3, 2)
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor, nn
from torch.func import functional_call, vmap

from attn_policies._es_support import keep_large_allocations
from attn_policies.catalog import import_object
from attn_policies.neuron_kernels import population_step

__all__ = [
    "BatchedEvaluator",
    "Evaluator",
    "PolicyFactory",
    "RolloutSpec",
    "default_action_fn",
]


Params = dict[str, Tensor]  # name -> (population, *shape)
Prepare = Callable[..., Tensor]  # (obs, rows=None) -> the policy's input
Step = Callable[[Any, np.ndarray], np.ndarray]  # (obs, alive) -> one value per env copy


@dataclass(frozen=True)
class PolicyFactory:
    """A picklable recipe for a policy: ``import path`` + kwargs (+ an optional classmethod).

    ``"attn_policies.es_policies:AttentionNeuronPolicy.cartpole"`` names a classmethod preset.
    """

    target: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __call__(self) -> nn.Module:
        return import_object(self.target)(**self.kwargs)


def default_action_fn(space: spaces.Space) -> Callable[[np.ndarray], np.ndarray]:
    """Map raw policy outputs ``(B, A)`` to actions: argmax for Discrete, clip for Box."""
    if isinstance(space, spaces.Discrete):
        return lambda out: out.argmax(axis=-1) + space.start
    if isinstance(space, spaces.Box):
        low, high = space.low, space.high
        return lambda out: np.clip(out.reshape(-1, *space.shape), low, high).astype(space.dtype)
    raise TypeError(f"no default action map for {type(space).__name__}; give action_fn")


@dataclass(frozen=True)
class RolloutSpec:
    """Everything needed to build an evaluator in any process (picklable).

    Args:
        policy_fn: builds the policy, an ``nn.Module`` with ``num_parameters``-long flat
            parameters (registration order) whose ``forward(obs, state)`` returns
            ``(output, state)`` and accepts ``state=None`` as the initial state.
        env_id: a gymnasium id made with ``gym.make_vec`` (``vector_entry_point`` when the
            id has one, the numpy CartPoleSwingUp; sync otherwise). ``"module:id"`` imports
            ``module`` first, in every worker, to register the id.
        env_kwargs: kwargs of ``gym.make_vec`` (``vector_kwargs``, ``wrappers``, ...).
        vector_env_fn: instead of ``env_id``: ``n -> VectorEnv`` with ``n`` copies.
        max_steps: stop after this many steps even if episodes continue (None: run until
            every copy has ended).
        action_fn: raw outputs ``(B, A)`` numpy -> env actions; default
            :func:`default_action_fn` of the single action space.
        dtype: the rollout's float dtype.
        torch_threads: threads for each worker's torch (process pool, Ray).
        population_path: use the policy's ``population_weights`` / ``population_step`` when
            it has them (:meth:`AttentionNeuronPolicy.population_step`): finished episodes
            are skipped and per-generation constants computed once; False forces ``vmap``.
        compiled: on the population path, step a policy that has ``kernel_weights`` (the
            AttentionNeuron agents) with its compiled step
            (:func:`attn_policies.neuron_kernels.population_step`, float32 only) rather than
            its torch ``population_step``; equal to float tolerance, several times faster.
    """

    policy_fn: Callable[[], nn.Module]
    env_id: str | None = None
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    vector_env_fn: Callable[[int], gym.vector.VectorEnv] | None = None
    max_steps: int | None = None
    action_fn: Callable[[np.ndarray], np.ndarray] | None = None
    dtype: torch.dtype = torch.float32
    torch_threads: int = 1
    population_path: bool = True
    compiled: bool = True

    def make_vector_env(self, n: int) -> gym.vector.VectorEnv:
        if self.vector_env_fn is not None:
            return self.vector_env_fn(n)
        if self.env_id is None:
            raise ValueError("RolloutSpec needs env_id or vector_env_fn")
        module, _, env_id = self.env_id.rpartition(":")
        if module:  # gymnasium's "module:id": import what registers the id (in every worker)
            importlib.import_module(module)
        spec = gym.spec(env_id)
        mode = "vector_entry_point" if spec.vector_entry_point else "sync"
        kwargs = dict(self.env_kwargs)
        if mode == "vector_entry_point":
            kwargs.setdefault("autoreset", False)  # ended copies freeze: nothing to reset
        return gym.make_vec(env_id, num_envs=n, vectorization_mode=mode, **kwargs)


class Evaluator(Protocol):
    """Scores a population: ``(P, D)`` solutions -> ``(P, R)`` returns, one column per seed."""

    num_parameters: int
    env_steps: int

    def evaluate(self, solutions: np.ndarray, seeds: Sequence[int]) -> np.ndarray: ...

    def close(self) -> None: ...


class BatchedEvaluator:
    """The whole population x repeats as one vectorised rollout (``vmap`` over parameters).

    Attributes:
        env_steps: env steps taken by live (not yet ended) copies since construction.
        last_lengths: ``(P, R)`` episode lengths of the last :meth:`evaluate`.
    """

    def __init__(self, spec: RolloutSpec) -> None:
        keep_large_allocations()
        self.spec = spec
        self.policy = spec.policy_fn().to(spec.dtype).eval()
        self.names = [name for name, _ in self.policy.named_parameters()]
        self.shapes = [p.shape for _, p in self.policy.named_parameters()]
        self.num_parameters = sum(p.numel() for p in self.policy.parameters())
        self.env_steps = 0
        self.last_lengths = np.zeros((0, 0), dtype=np.int64)
        self._envs: dict[int, gym.vector.VectorEnv] = {}
        self._steps: dict[bool, Callable[..., Any]] | None = None
        # A policy with population_weights / population_step runs its own batched step on the
        # live rows only; others (and spec.population_path=False) go through vmap.
        self.population_path = spec.population_path and all(
            callable(getattr(self.policy, name, None))
            for name in ("population_weights", "population_step")
        )
        self.compiled = (
            self.population_path
            and spec.compiled
            and spec.dtype == torch.float32
            and callable(getattr(self.policy, "kernel_weights", None))
        )

    def _forward(self, params: dict[str, Tensor], obs: Tensor, state: Any) -> Any:
        return functional_call(self.policy, params, (obs, state))

    def _vmapped(self, obs: Tensor) -> dict[bool, Callable[..., Any]]:
        """The vmapped step, keyed by ``state is None`` (a None state is not batched)."""
        if self._steps is None:
            _, state = self.policy(obs[:1], None)  # dry call: does the policy carry state?
            out_state = None if state is None else 0
            self._steps = {
                # torch's out_dims hint omits the None entries vmap takes (unbatched output)
                True: vmap(self._forward, in_dims=(0, 0, None), out_dims=(0, out_state)),  # type: ignore[arg-type]
                False: vmap(self._forward, in_dims=(0, 0, 0), out_dims=(0, out_state)),  # type: ignore[arg-type]
            }
        return self._steps

    def _env(self, n: int) -> gym.vector.VectorEnv:
        if n not in self._envs:
            self._envs[n] = self.spec.make_vector_env(n)
        return self._envs[n]

    def unflatten(self, solutions: Tensor) -> dict[str, Tensor]:
        """``(P, D)`` flat vectors -> ``{name: (P, *shape)}`` (views, registration order)."""
        chunks = solutions.split([int(np.prod(s)) for s in self.shapes], dim=1)
        return {
            name: chunk.reshape(len(solutions), *shape)
            for name, chunk, shape in zip(self.names, chunks, self.shapes, strict=True)
        }

    @torch.no_grad()
    def evaluate(
        self,
        solutions: np.ndarray,
        seeds: Sequence[int],
        obs_fn: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> np.ndarray:
        """Returns ``(P, R)``: solution ``p`` on the episode seeded ``seeds[r]``.

        ``obs_fn`` maps the batched observations ``(P * R, ...)`` before the policy sees
        them (robustness tests: shuffles, extra channels).
        """
        solutions = np.asarray(solutions)
        if solutions.ndim != 2 or solutions.shape[1] != self.num_parameters:
            raise ValueError(
                f"solutions must be (population, {self.num_parameters}), got {solutions.shape}"
            )
        n_pop, n_rep = len(solutions), len(seeds)
        if n_pop == 0:
            return np.zeros((0, n_rep))
        env = self._env(n_pop * n_rep)
        action_fn = self.spec.action_fn or default_action_fn(env.single_action_space)
        # ascontiguousarray: torch.tensor refuses negative strides (e.g. solutions[::-1])
        params = self.unflatten(
            torch.tensor(np.ascontiguousarray(solutions), dtype=self.spec.dtype)
        )
        # a seed per copy: Sync/AsyncVectorEnv take a list; VectorEnv's hint says int only
        obs, _ = env.reset(seed=[int(s) for s in seeds] * n_pop)  # type: ignore[arg-type]
        rows_path = self.population_path and isinstance(obs, np.ndarray) and obs.ndim == 2
        if rows_path and self.compiled:
            step = self._kernel_outputs(params, n_pop, n_rep, obs_fn)
        else:
            outputs = self._row_outputs if rows_path else self._vmap_outputs
            prepare = functools.partial(self._policy_input, obs_fn=obs_fn)
            step = outputs(params, n_pop, n_rep, prepare)
        return self._rollout(env, obs, n_pop, n_rep, lambda o, alive: action_fn(step(o, alive)))

    def _rollout(
        self,
        env: gym.vector.VectorEnv,
        obs: Any,
        n_pop: int,
        n_rep: int,
        act: Step,
    ) -> np.ndarray:
        """Step ``env`` with ``act(obs, alive)`` until every copy ended (or ``max_steps``);
        only live copies count toward returns, lengths and ``env_steps``."""
        n = n_pop * n_rep
        returns = np.zeros(n)
        alive = np.ones(n, dtype=bool)
        lengths = np.zeros(n, dtype=np.int64)
        t = 0
        while alive.any() and (self.spec.max_steps is None or t < self.spec.max_steps):
            obs, rewards, terminated, truncated, _ = env.step(act(obs, alive))
            self.env_steps += int(alive.sum())
            lengths += alive
            returns += np.where(alive, rewards, 0.0)
            alive &= ~(terminated | truncated)
            t += 1
        self.last_lengths = lengths.reshape(n_pop, n_rep)
        return returns.reshape(n_pop, n_rep)

    def _policy_input(
        self,
        obs: Any,
        rows: np.ndarray | None = None,
        *,
        obs_fn: Callable[[np.ndarray], np.ndarray] | None,
    ) -> Tensor:
        """The batched observations as the policy takes them (``rows``: only those rows)."""
        x = obs_fn(obs) if obs_fn is not None else obs
        x = torch.as_tensor(x if rows is None else x[rows])
        # integer screens stay integers: policies rescale them
        return x.to(self.spec.dtype) if x.is_floating_point() else x

    def _vmap_outputs(self, params: Params, n_pop: int, n_rep: int, prepare: Prepare) -> Step:
        """Raw outputs of every copy from the policy under ``vmap`` over the individuals."""
        state = None

        def act(obs: Any, alive: np.ndarray) -> np.ndarray:
            nonlocal state
            x = prepare(obs)
            x = x.reshape(n_pop, n_rep, *x.shape[1:])
            out, state = self._vmapped(x[0])[state is None](params, x, state)
            return out.reshape(n_pop * n_rep, *out.shape[2:]).numpy()

        return act

    def _row_outputs(self, params: Params, n_pop: int, n_rep: int, prepare: Prepare) -> Step:
        """Raw outputs from the policy's own population step on the rows still alive (see
        ``population_path``).

        Rows are ``individual * n_rep + repeat``; each keeps its individual's weights. Ended
        rows are dropped from the policy batch once they are a quarter of it (weights and
        state are re-indexed then, not every step); the env gets their last action again,
        which a frozen (``autoreset=False``) copy ignores and whose reward is not counted.
        Every row's arithmetic is independent of the others, so the result does not depend on
        the population size or on slicing.
        """
        n = n_pop * n_rep
        policy: Any = self.policy
        owner = torch.arange(n_pop).repeat_interleave(n_rep)
        weights = tuple(w.index_select(0, owner) for w in policy.population_weights(params))
        rows = np.arange(n)  # env rows the policy batch holds, ascending
        out_full: np.ndarray | None = None
        state = None

        def act(obs: Any, alive: np.ndarray) -> np.ndarray:
            nonlocal weights, rows, out_full, state
            live = alive[rows]
            if live.sum() <= 0.75 * len(rows):  # compact: drop the rows that ended
                keep = torch.from_numpy(np.flatnonzero(live))
                rows = rows[live]
                weights = tuple(w.index_select(0, keep) for w in weights)
                if state is not None:
                    state = tuple(s.index_select(0, keep) for s in state)
            x = prepare(obs, rows)
            out, state = policy.population_step(weights, x, state)
            out = out.numpy()
            if out_full is None:
                out_full = np.zeros((n, *out.shape[1:]), dtype=out.dtype)
            out_full[rows] = out  # ended rows keep stale outputs: a frozen copy ignores them
            return out_full

        return act

    def _kernel_outputs(
        self,
        params: Params,
        n_pop: int,
        n_rep: int,
        obs_fn: Callable[[np.ndarray], np.ndarray] | None,
    ) -> Step:
        """Raw outputs from the policy's compiled step on the rows still alive (``compiled``).

        As :meth:`_row_outputs`, but the weights stay one copy per individual (each row reads
        its ``owner``'s) and the state is numpy, so dropping ended rows re-indexes only the
        state and the owners.
        """
        n = n_pop * n_rep
        policy: Any = self.policy
        weights = policy.kernel_weights(params)
        owner = np.repeat(np.arange(n_pop, dtype=np.int64), n_rep)
        rows = np.arange(n)
        out_full = np.zeros((n, weights.w_act.shape[1]), dtype=np.float32)
        state: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

        def act(obs: Any, alive: np.ndarray) -> np.ndarray:
            nonlocal owner, rows, state
            live = alive[rows]
            if state is not None and live.sum() <= 0.75 * len(rows):  # drop the ended rows
                owner, rows = owner[live], rows[live]
                state = tuple(np.ascontiguousarray(s[live]) for s in state)  # type: ignore[assignment]
            x = obs_fn(obs) if obs_fn is not None else obs
            x = np.ascontiguousarray(x[rows], dtype=np.float32)
            if state is None:
                h = np.zeros((len(rows), x.shape[1], weights.w_hh.shape[1]), dtype=np.float32)
                state = (h, h.copy(), np.zeros((len(rows), out_full.shape[1]), np.float32))
            h, c, prev = state
            population_step(weights, x, owner, h, c, prev)
            out_full[rows] = prev  # ended rows keep stale outputs: a frozen copy ignores them
            return out_full

        return act

    def close(self) -> None:
        for env in self._envs.values():
            env.close()
        self._envs.clear()
