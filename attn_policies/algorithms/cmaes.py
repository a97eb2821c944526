"""CMA-ES over a policy's flat parameter vector (seed 001's E3 / E4 / E6 trainer).

:class:`CMAESTrainer` runs pycma's ask/tell loop from ``x0 = 0`` with step size ``sigma0``;
each generation draws ``repeats`` task seeds shared by the whole population, scores every
solution by its mean return over them (an :class:`~attn_policies.algorithms.es_eval.Evaluator`:
batched, process pool or Ray) and tells pycma the negated fitness (pycma minimises). The
*favourite* solution (pycma's ``xfavorite``, the distribution mean) is the model, as in the
authors' code; the best individual ever sampled is kept too.

Checkpoints (:meth:`CMAESTrainer.save` / :meth:`CMAESTrainer.restore`) hold

- ``cma_state-<generation>.pkl``: the pycma object, pickled; it is read back with an
  unpickler that only admits pycma, numpy and builtin container classes, so a tampered file
  cannot run code;
- ``solutions-<generation>.pt``: favourite and best parameter vectors
  (``torch.load(weights_only=True)``);
- ``trainer.json``, written last: generation, env steps, best fitness, the task-seed
  generator state and the names of the two files above.

pycma samples from its ``randn`` option, which is given a ``RandomState`` owned by the
optimiser (and pickled with it), so a restored run continues bit for bit.

Example:
    >>> from attn_policies.algorithms.es_eval import BatchedEvaluator, PolicyFactory, RolloutSpec
    >>> spec = RolloutSpec(
    ...     PolicyFactory("attn_policies.neuron:FNNPolicy", {"obs_dim": 5, "action_dim": 1}),
    ...     env_id="attn_envs:attn_envs/CartPoleSwingUpHarder-v0",
    ...     max_steps=20,
    ... )
    >>> trainer = CMAESTrainer(BatchedEvaluator(spec), CMAESConfig(population=8, repeats=2))
    >>> record = trainer.step()
    >>> record["generation"], trainer.favourite.shape
    (1, (113,))
"""

from __future__ import annotations

import io
import json
import pickle
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import cma
import numpy as np
import torch

from attn_policies.algorithms.es_eval import Evaluator

__all__ = ["CMAES", "CMAESConfig", "CMAESTrainer", "safe_unpickle"]


@dataclass
class CMAESConfig:
    """CMA-ES settings; seed 001 used ``population=256, repeats=16, sigma0=0.1``.

    Args:
        population: pycma ``popsize`` (lambda).
        repeats: episodes per solution; their task seeds are shared by the population.
        sigma0: initial step size around ``x0 = 0``.
        seed: seeds pycma's sampler and the task-seed generator.
        options: more pycma options, e.g. ``{"CMA_diagonal": True}`` for separable CMA-ES.
    """

    population: int = 256
    repeats: int = 16
    sigma0: float = 0.1
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.population < 2 or self.repeats < 1 or not self.sigma0 > 0:
            raise ValueError(
                f"need population >= 2, repeats >= 1, sigma0 > 0; got {self.population}, "
                f"{self.repeats}, {self.sigma0}"
            )


class _SafeUnpickler(pickle.Unpickler):
    """Only pycma, numpy and builtin containers: what a pickled ``CMAEvolutionStrategy`` uses."""

    BUILTINS = frozenset(
        {"dict", "list", "tuple", "set", "frozenset", "int", "float", "complex", "str",
         "bytes", "bool", "slice", "range", "object", "getattr"}
    )  # fmt: skip

    def find_class(self, module: str, name: str) -> Any:
        root = module.split(".")[0]
        if root in ("cma", "numpy") or (module, name) == ("collections", "OrderedDict"):
            if name in ("eval", "exec", "system", "__import__") or name.startswith("_load"):
                raise pickle.UnpicklingError(f"refusing {module}.{name}")
            return super().find_class(module, name)
        if module == "builtins" and name in self.BUILTINS:
            return super().find_class(module, name)
        if module == "copyreg" and name == "_reconstructor":
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"checkpoint refers to {module}.{name}, which is not allowed")


def safe_unpickle(data: bytes) -> Any:
    """Unpickle a CMA state, refusing anything but pycma, numpy and builtin containers."""
    return _SafeUnpickler(io.BytesIO(data)).load()


class CMAES:
    """pycma's ``CMAEvolutionStrategy`` on ``[0] * dim`` with a private, picklable sampler."""

    def __init__(self, dim: int, config: CMAESConfig) -> None:
        self.sampler = np.random.RandomState(config.seed)
        options = {
            "popsize": config.population,
            "seed": config.seed + 1,  # pycma reseeds numpy's global RNG with this; unused here
            "randn": self.sampler.randn,
            "verbose": -9,
            **config.options,
        }
        self.es = cma.CMAEvolutionStrategy(np.zeros(dim), config.sigma0, options)

    def ask(self) -> np.ndarray:
        return np.asarray(self.es.ask(), dtype=np.float64)

    def tell(self, solutions: np.ndarray, fitness: np.ndarray) -> None:
        """``fitness`` is maximised (pycma is told its negation)."""
        self.es.tell(list(solutions), (-np.asarray(fitness, dtype=np.float64)).tolist())

    @property
    def favourite(self) -> np.ndarray:
        return np.asarray(self.es.result.xfavorite, dtype=np.float64)

    @property
    def sigma(self) -> float:
        return float(self.es.sigma)

    def dumps(self) -> bytes:
        return pickle.dumps(self.es, protocol=pickle.HIGHEST_PROTOCOL)

    @classmethod
    def loads(cls, data: bytes) -> CMAES:
        self = cls.__new__(cls)
        self.es = safe_unpickle(data)
        self.sampler = self.es.opts["randn"].__self__
        return self


class CMAESTrainer:
    """One CMA-ES generation per :meth:`step`; save and restore between any two steps.

    Attributes:
        generation: generations done.
        env_steps: env steps of all fitness evaluations so far.
        favourite: the current favourite solution (the model).
        best, best_fitness: the best individual sampled so far and its fitness.
    """

    def __init__(self, evaluator: Evaluator, config: CMAESConfig) -> None:
        self.evaluator, self.config = evaluator, config
        self.optimizer = CMAES(evaluator.num_parameters, config)
        self.tasks = np.random.default_rng(config.seed)
        self.generation = 0
        self.env_steps = 0
        self.best = np.zeros(evaluator.num_parameters)
        self.best_fitness = -np.inf

    @property
    def favourite(self) -> np.ndarray:
        return self.optimizer.favourite

    def step(self) -> dict[str, Any]:
        """Ask, evaluate, tell; returns the generation's record (fitness stats and timings)."""
        seeds = self.tasks.integers(0, 2**31 - 1, size=self.config.repeats).tolist()
        t0 = time.perf_counter()
        solutions = self.optimizer.ask()
        t1 = time.perf_counter()
        steps_before = self.evaluator.env_steps
        returns = self.evaluator.evaluate(solutions.astype(np.float32), seeds)
        t2 = time.perf_counter()
        fitness = returns.mean(axis=1)
        self.optimizer.tell(solutions, fitness)
        t3 = time.perf_counter()
        self.generation += 1
        self.env_steps += self.evaluator.env_steps - steps_before
        top = int(np.argmax(fitness))
        if fitness[top] > self.best_fitness:
            self.best, self.best_fitness = solutions[top].copy(), float(fitness[top])
        return {
            "generation": self.generation,
            "env_steps": self.env_steps,
            "fitness_best": float(fitness[top]),
            "fitness_mean": float(fitness.mean()),
            "fitness_worst": float(fitness.min()),
            "best_ever": self.best_fitness,
            "sigma": self.optimizer.sigma,
            "time_ask_tell": (t1 - t0) + (t3 - t2),
            "time_evaluate": t2 - t1,
        }

    def save(self, directory: str | Path) -> None:
        """Write a checkpoint into ``directory``; a kill at any moment leaves a usable one.

        The CMA state and solutions go to files named after the generation, then
        ``trainer.json`` (written atomically, last) points at them; older files are removed.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        files = {
            "cma_state": f"cma_state-{self.generation}.pkl",
            "solutions": f"solutions-{self.generation}.pt",
        }
        meta = {
            "generation": self.generation,
            "env_steps": self.env_steps,
            "best_fitness": self.best_fitness,
            "tasks": self.tasks.bit_generator.state,
            "config": asdict(self.config),
            "files": files,
        }
        solutions = {
            "favourite": torch.from_numpy(self.favourite),
            "best": torch.from_numpy(self.best),
        }
        _atomic(directory / files["cma_state"], self.optimizer.dumps())
        buffer = io.BytesIO()
        torch.save(solutions, buffer)
        _atomic(directory / files["solutions"], buffer.getvalue())
        _atomic(directory / "trainer.json", json.dumps(meta, indent=1).encode())
        for old in [*directory.glob("cma_state*.pkl"), *directory.glob("solutions*.pt")]:
            if old.name not in files.values():
                old.unlink()

    def restore(self, directory: str | Path) -> None:
        """Continue from a checkpoint written by :meth:`save` (same evaluator and config)."""
        directory = Path(directory)
        meta = json.loads((directory / "trainer.json").read_text())
        files = meta.get("files", {"cma_state": "cma_state.pkl", "solutions": "solutions.pt"})
        self.optimizer = CMAES.loads((directory / files["cma_state"]).read_bytes())
        solutions = torch.load(directory / files["solutions"], weights_only=True)
        self.best = solutions["best"].numpy()
        self.generation, self.env_steps = int(meta["generation"]), int(meta["env_steps"])
        self.best_fitness = float(meta["best_fitness"])
        self.tasks.bit_generator.state = meta["tasks"]


def _atomic(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
