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
* :class:`ProcessEvaluator`: a local pool of worker processes, each running a
  :class:`BatchedEvaluator` on a contiguous slice of the population.
* :class:`RayEvaluator`: the same slices on Ray actors, on a local Ray instance or an
  existing cluster (``address="auto"`` or ``"ray://host:10001"``).

Slices are computed row by row exactly as in the single batch, so the three give the same
fitness for the same seeds. A worker that crashes or raises is replaced and its slice
retried (``max_retries`` times) before the error reaches the trainer.

Example:
    >>> import gymnasium as gym
    >>> fnn = PolicyFactory("attn_policies.neuron:FNNPolicy", {"obs_dim": 5, "action_dim": 1})
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

import importlib
import inspect
import itertools
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
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

__all__ = [
    "BatchedEvaluator",
    "Evaluator",
    "PolicyFactory",
    "ProcessEvaluator",
    "RayEvaluator",
    "RolloutSpec",
    "default_action_fn",
    "make_evaluator",
]


@dataclass(frozen=True)
class PolicyFactory:
    """A picklable recipe for a policy: ``import path`` + kwargs (+ an optional classmethod).

    ``"attn_policies.neuron:AttentionNeuronPolicy.cartpole"`` names a classmethod preset.
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

    def _forward(self, params: dict[str, Tensor], obs: Tensor, state: Any) -> Any:
        return functional_call(self.policy, params, (obs, state))

    def _vmapped(self, obs: Tensor) -> dict[bool, Callable[..., Any]]:
        """The vmapped step, keyed by ``state is None`` (a None state is not batched)."""
        if self._steps is None:
            _, state = self.policy(obs[:1], None)  # dry call: does the policy carry state?
            out_state = None if state is None else 0
            self._steps = {
                True: vmap(self._forward, in_dims=(0, 0, None), out_dims=(0, out_state)),
                False: vmap(self._forward, in_dims=(0, 0, 0), out_dims=(0, out_state)),
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
        obs, _ = env.reset(seed=[int(s) for s in seeds] * n_pop)
        returns = np.zeros(n_pop * n_rep)
        alive = np.ones(n_pop * n_rep, dtype=bool)
        lengths = np.zeros(n_pop * n_rep, dtype=np.int64)
        if self.population_path and isinstance(obs, np.ndarray) and obs.ndim == 2:
            return self._evaluate_rows(params, n_pop, n_rep, env, obs, obs_fn, action_fn)
        state, t = None, 0
        while alive.any() and (self.spec.max_steps is None or t < self.spec.max_steps):
            x = obs_fn(obs) if obs_fn is not None else obs
            x = torch.as_tensor(x).reshape(n_pop, n_rep, *x.shape[1:])
            if x.is_floating_point():  # integer screens stay integers: policies rescale them
                x = x.to(self.spec.dtype)
            out, state = self._vmapped(x[0])[state is None](params, x, state)
            actions = action_fn(out.reshape(n_pop * n_rep, *out.shape[2:]).numpy())
            obs, rewards, terminated, truncated, _ = env.step(actions)
            self.env_steps += int(alive.sum())
            lengths += alive
            returns += np.where(alive, rewards, 0.0)
            alive &= ~(terminated | truncated)
            t += 1
        self.last_lengths = lengths.reshape(n_pop, n_rep)
        return returns.reshape(n_pop, n_rep)

    def _evaluate_rows(
        self,
        params: dict[str, Tensor],
        n_pop: int,
        n_rep: int,
        env: gym.vector.VectorEnv,
        obs: np.ndarray,
        obs_fn: Callable[[np.ndarray], np.ndarray] | None,
        action_fn: Callable[[np.ndarray], np.ndarray],
    ) -> np.ndarray:
        """The policy's own population step on the rows still alive (see ``population_path``).

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
        returns = np.zeros(n)
        alive = np.ones(n, dtype=bool)
        lengths = np.zeros(n, dtype=np.int64)
        out_full: np.ndarray | None = None
        state, t = None, 0
        while alive.any() and (self.spec.max_steps is None or t < self.spec.max_steps):
            live = alive[rows]
            if live.sum() <= 0.75 * len(rows):  # compact: drop the rows that ended
                keep = torch.from_numpy(np.flatnonzero(live))
                rows = rows[live]
                weights = tuple(w.index_select(0, keep) for w in weights)
                if state is not None:
                    state = tuple(s.index_select(0, keep) for s in state)
            x = obs_fn(obs) if obs_fn is not None else obs
            x = torch.as_tensor(x[rows])
            if x.is_floating_point():
                x = x.to(self.spec.dtype)
            out, state = policy.population_step(weights, x, state)
            out = out.numpy()
            if out_full is None:
                out_full = np.zeros((n, *out.shape[1:]), dtype=out.dtype)
            out_full[rows] = out  # ended rows keep stale outputs: a frozen copy ignores them
            obs, rewards, terminated, truncated, _ = env.step(action_fn(out_full))
            self.env_steps += int(alive.sum())
            lengths += alive
            returns += np.where(alive, rewards, 0.0)
            alive &= ~(terminated | truncated)
            t += 1
        self.last_lengths = lengths.reshape(n_pop, n_rep)
        return returns.reshape(n_pop, n_rep)

    def close(self) -> None:
        for env in self._envs.values():
            env.close()
        self._envs.clear()


# -- process pool ----------------------------------------------------------------------------

_WORKER: BatchedEvaluator | None = None


def _exit_with_parent(parent: int, period: float = 0.5) -> None:
    """End this worker when the process that started it is gone (even SIGKILLed, when no
    cleanup of its own runs): the worker is re-parented, so ``getppid`` changes."""
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(period)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _init_worker(spec: RolloutSpec, watch_parent: bool = False) -> None:
    global _WORKER
    if watch_parent:
        _exit_with_parent(os.getppid())
    torch.set_num_threads(spec.torch_threads)
    _WORKER = BatchedEvaluator(spec)


def _evaluate_slice(solutions: np.ndarray, seeds: Sequence[int]) -> tuple[np.ndarray, int]:
    assert _WORKER is not None, "worker not initialised"
    before = _WORKER.env_steps
    returns = _WORKER.evaluate(solutions, seeds)
    return returns, _WORKER.env_steps - before


def _slices(n: int, parts: int) -> list[slice]:
    bounds = np.linspace(0, n, min(parts, n) + 1).round().astype(int)
    return [slice(a, b) for a, b in itertools.pairwise(bounds)]


class ProcessEvaluator:
    """A local pool of ``n_workers`` processes, each scoring a contiguous population slice.

    Workers start with ``spawn`` (safe with torch threads) and keep their env and policy
    between generations. A slice whose worker crashed (``BrokenProcessPool``, also when it
    died while idle and the next ``submit`` finds the pool broken) or raised is retried on a
    fresh pool, up to ``max_retries`` times per generation. Workers exit on their own when
    this process dies, however it dies.
    """

    def __init__(self, spec: RolloutSpec, n_workers: int = 2, max_retries: int = 2) -> None:
        import multiprocessing as mp

        self.spec, self.n_workers, self.max_retries = spec, int(n_workers), int(max_retries)
        self._context = mp.get_context("spawn")
        self.num_parameters = sum(p.numel() for p in spec.policy_fn().parameters())
        self.env_steps = 0
        self.retries = 0
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                self.n_workers,
                mp_context=self._context,
                initializer=_init_worker,
                initargs=(self.spec, True),  # no orphans if this process is killed
            )
        return self._pool

    def evaluate(self, solutions: np.ndarray, seeds: Sequence[int]) -> np.ndarray:
        solutions = np.asarray(solutions)
        parts = _slices(len(solutions), self.n_workers)
        results: dict[int, np.ndarray] = {}
        attempt = 0
        while len(results) < len(parts):
            failure: BaseException | None = None
            futures = {}
            try:
                pool = self._executor()
                for i, s in enumerate(parts):
                    if i not in results:
                        futures[i] = pool.submit(_evaluate_slice, solutions[s], list(seeds))
            except BrokenProcessPool as err:  # a worker died while idle: retried like below
                failure = err
            for i, future in futures.items():
                try:
                    returns, steps = future.result()
                except (BrokenProcessPool, Exception) as err:  # retried below
                    failure = err
                    continue
                results[i] = returns
                self.env_steps += steps
            if failure is not None:
                attempt += 1
                self.retries += 1
                self._shutdown()
                if attempt > self.max_retries:
                    raise RuntimeError(
                        f"population slice failed {attempt} times; last error: {failure!r}"
                    ) from failure
        return np.concatenate([results[i] for i in range(len(parts))])

    def _shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def close(self) -> None:
        self._shutdown()


# -- Ray -------------------------------------------------------------------------------------


class _RayWorker:
    """Ray actor body: one :class:`BatchedEvaluator` kept between generations."""

    def __init__(self, spec: RolloutSpec) -> None:
        _init_worker(spec)

    def evaluate(self, solutions: np.ndarray, seeds: Sequence[int]) -> tuple[np.ndarray, int]:
        return _evaluate_slice(solutions, seeds)

    def pid(self) -> int:
        return os.getpid()


class RayEvaluator:
    """Population slices on Ray actors: a local Ray by default, or an existing cluster.

    Args:
        spec: the rollout recipe (shipped to every actor).
        n_workers: actors, one CPU each.
        address: ``None`` starts (or reuses) a local Ray instance with ``n_workers`` CPUs;
            ``"auto"`` or ``"ray://host:port"`` joins a running cluster.
        max_retries: Ray restarts a dead actor and re-runs its task this many times.
        init_kwargs: more ``ray.init`` arguments.
    """

    def __init__(
        self,
        spec: RolloutSpec,
        n_workers: int = 2,
        address: str | None = None,
        max_retries: int = 2,
        init_kwargs: dict[str, Any] | None = None,
    ) -> None:
        try:
            import ray
        except ImportError as err:  # pragma: no cover - ray is an optional extra
            raise ImportError("the Ray evaluator needs ray: pip install 'attn-zoo[ray]'") from err
        self._ray = ray
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if address is None:
                kwargs["num_cpus"] = n_workers
                # Ray renices its workers to 15; they are this evaluator's compute, so a local
                # instance keeps them at the driver's priority unless the user says otherwise.
                os.environ.setdefault("RAY_worker_niceness", "0")
            ray.init(address=address, **{**kwargs, **(init_kwargs or {})})
        actor = ray.remote(num_cpus=1, max_restarts=max_retries, max_task_retries=max_retries)(
            _RayWorker
        )
        self.spec, self.n_workers = spec, int(n_workers)
        self.actors = [actor.remote(spec) for _ in range(self.n_workers)]
        self.num_parameters = sum(p.numel() for p in spec.policy_fn().parameters())
        self.env_steps = 0

    def evaluate(self, solutions: np.ndarray, seeds: Sequence[int]) -> np.ndarray:
        solutions = np.asarray(solutions)
        parts = _slices(len(solutions), self.n_workers)
        refs = [
            actor.evaluate.remote(solutions[s], list(seeds))
            for actor, s in zip(self.actors, parts, strict=False)
        ]
        outputs = self._ray.get(refs)
        self.env_steps += sum(steps for _, steps in outputs)
        return np.concatenate([returns for returns, _ in outputs])

    def close(self) -> None:
        for actor in self.actors:
            self._ray.kill(actor)
        self.actors = []


EVALUATORS: dict[str, type] = {
    "batched": BatchedEvaluator,
    "processes": ProcessEvaluator,
    "ray": RayEvaluator,
}


def make_evaluator(kind: str, spec: RolloutSpec, **kwargs: Any) -> Evaluator:
    """``"batched"``, ``"processes"`` or ``"ray"``; ``kwargs`` go to its constructor."""
    if kind not in EVALUATORS:
        raise ValueError(f"evaluator must be one of {sorted(EVALUATORS)}, got {kind!r}")
    cls = EVALUATORS[kind]
    accepted = inspect.signature(cls).parameters
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        raise TypeError(f"{cls.__name__} takes no argument(s) {unknown}")
    return cls(spec, **kwargs)


def timed(evaluator: Evaluator, solutions: np.ndarray, seeds: Sequence[int]) -> tuple[Any, float]:
    """``(returns, seconds)`` of one ``evaluate`` call."""
    start = time.perf_counter()
    returns = evaluator.evaluate(solutions, seeds)
    return returns, time.perf_counter() - start
