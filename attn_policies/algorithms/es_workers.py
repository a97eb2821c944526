"""Population slices on worker processes or Ray actors, each a :class:`BatchedEvaluator`.

:class:`ProcessEvaluator` is a local pool of worker processes, :class:`RayEvaluator` the same
slices on Ray actors (a local Ray instance or an existing cluster: ``address="auto"`` or
``"ray://host:10001"``). Slices are computed row by row exactly as in the single batch
(:mod:`attn_policies.algorithms.es_eval`), so every evaluator gives the same fitness for the
same seeds. A worker that crashes or raises is replaced and its slice retried
(``max_retries`` times) before the error reaches the trainer. :func:`make_evaluator` picks
one of the three by name.
"""

from __future__ import annotations

import inspect
import itertools
import os
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from attn_policies.algorithms.es_eval import BatchedEvaluator, Evaluator, RolloutSpec

if TYPE_CHECKING:  # ray is an optional extra
    from ray.actor import ActorHandle

__all__ = ["EVALUATORS", "ProcessEvaluator", "RayEvaluator", "make_evaluator", "timed"]

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


def _handle(
    started: ActorHandle[_RayWorker] | type[_RayWorker],
) -> ActorHandle[_RayWorker]:
    """The handle ``ActorClass.remote`` returns (ray's hint also admits the class itself)."""
    from ray.actor import ActorHandle

    assert isinstance(started, ActorHandle)
    return started


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
        self.actors = [_handle(actor.remote(spec)) for _ in range(self.n_workers)]
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


def timed(
    evaluator: Evaluator, solutions: np.ndarray, seeds: Sequence[int]
) -> tuple[np.ndarray, float]:
    """``(returns, seconds)`` of one ``evaluate`` call."""
    start = time.perf_counter()
    returns = evaluator.evaluate(solutions, seeds)
    return returns, time.perf_counter() - start
