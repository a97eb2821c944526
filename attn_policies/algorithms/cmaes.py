"""CMA-ES over a policy's flat parameter vector (seed 001's E3 / E4 / E6 trainer).

:class:`CMAESTrainer` runs pycma's ask/tell loop from ``x0 = 0`` with step size ``sigma0``;
each generation draws ``repeats`` task seeds shared by the whole population, scores every
solution by its mean return over them (an :class:`~attn_policies.algorithms.es_eval.Evaluator`:
batched, process pool or Ray) and tells pycma the negated fitness (pycma minimises). The
*favourite* solution (pycma's ``xfavorite``, the distribution mean) is the model, as in the
authors' code; the best individual ever sampled is kept too.

Checkpoints (:meth:`CMAESTrainer.save` / :meth:`CMAESTrainer.restore`) hold

- ``cma_state-<generation>.npz``: pycma's state as data only: arrays plus a JSON description
  of its object graph, read with ``allow_pickle=False``. Only pycma's own state classes may
  be named (created without running any of their code); options, the logger and every
  function come from the optimiser rebuilt from the config, so a tampered file cannot run
  code. Old pickled states are refused (:func:`convert_pickled_state` converts files you
  trust);
- ``solutions-<generation>.pt``: favourite and best parameter vectors
  (``torch.load(weights_only=True)``);
- ``trainer.json``, written last: generation, env steps, best fitness, the task-seed
  generator state and the names of the two files above.

pycma samples from its ``randn`` option, which is given a ``RandomState`` owned by the
optimiser (its state stored with it), so a restored run continues bit for bit.

Given a :class:`~attn_policies.algorithms.pgpe.PGPEConfig` instead of a :class:`CMAESConfig`,
the same trainer runs PGPE (state in ``pgpe_state-<generation>.npz``, data only too).

Example:
    >>> from attn_policies.algorithms.es_eval import BatchedEvaluator, PolicyFactory, RolloutSpec
    >>> spec = RolloutSpec(
    ...     PolicyFactory("attn_policies.es_policies:FNNPolicy", {"obs_dim": 5, "action_dim": 1}),
    ...     env_id="attn_envs:attn_envs/CartPoleSwingUpHarder-v0",
    ...     max_steps=20,
    ... )
    >>> trainer = CMAESTrainer(BatchedEvaluator(spec), CMAESConfig(population=8, repeats=2))
    >>> record = trainer.step()
    >>> record["generation"], trainer.favourite.shape
    (1, (113,))
"""

from __future__ import annotations

import difflib
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

from attn_policies.algorithms.cmaes_state import (
    StateDecoder,
    StateEncoder,
    StateFormatError,
)
from attn_policies.algorithms.es_eval import Evaluator
from attn_policies.algorithms.pgpe import PGPE, PGPEConfig
from attn_policies.atomic import atomic_write, make_folder
from attn_policies.checks import require_int
from attn_policies.safe_reads import check_archive, load_tensors, parse_json, read_json

__all__ = ["CMAES", "CMAESConfig", "CMAESTrainer", "convert_pickled_state"]


@dataclass
class CMAESConfig:
    """CMA-ES settings; seed 001 used ``population=256, repeats=16, sigma0=0.1``.

    Args:
        population: pycma ``popsize`` (lambda).
        repeats: episodes per solution; their task seeds are shared by the population.
        sigma0: initial step size around ``x0``.
        seed: seeds pycma's sampler and the task-seed generator.
        options: more pycma options, e.g. ``{"CMA_diagonal": True}`` for separable CMA-ES.
        x0: the start point (a warm start, e.g. a behaviour-cloned policy's flat
            parameters); ``None`` starts at zeros as seed 001.
    """

    population: int = 256
    repeats: int = 16
    sigma0: float = 0.1
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    x0: np.ndarray | None = None

    def __post_init__(self) -> None:
        require_int(self.population, "population", minimum=2)
        require_int(self.repeats, "repeats")
        if not 0 < self.sigma0 < float("inf"):
            raise ValueError(f"need a finite sigma0 > 0, got {self.sigma0}")
        if self.x0 is not None:
            self.x0 = np.array(self.x0, dtype=np.float64)
            if self.x0.ndim != 1 or not np.isfinite(self.x0).all():
                raise ValueError("x0 must be a finite 1-D vector")
        known = cma.CMAOptions.defaults()
        for key in self.options:
            if key not in known:
                close = difflib.get_close_matches(str(key), list(known), n=3)
                hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
                raise ValueError(f"unknown pycma option {key!r}.{hint}")


class CMAES:
    """pycma's ``CMAEvolutionStrategy`` from ``config.x0`` (zeros) with a private sampler.

    Its state is stored as data only (:meth:`dumps` / :meth:`loads`): an ``.npz`` of arrays
    plus a JSON description of pycma's object graph, read with ``allow_pickle=False``.
    """

    state_prefix = "cma_state"

    def __init__(self, dim: int, config: CMAESConfig) -> None:
        self.dim, self.config = int(dim), config
        self.sampler = np.random.RandomState(config.seed)
        options = {
            "popsize": config.population,
            "seed": config.seed + 1,  # pycma reseeds numpy's global RNG with this; unused here
            "randn": self.sampler.randn,
            "verbose": -9,
            **config.options,
        }
        if config.x0 is not None and config.x0.shape != (self.dim,):
            raise ValueError(f"x0 has {config.x0.size} values, the policy {self.dim} parameters")
        x0 = np.zeros(dim) if config.x0 is None else config.x0.copy()
        self.es = cma.CMAEvolutionStrategy(x0, config.sigma0, options)

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
        """The optimiser's state as ``.npz`` bytes (no pickles)."""
        encoder = StateEncoder(self.sampler)
        tree = encoder(self.es, top=True)
        state = self.sampler.get_state(legacy=True)  # the default, said for the type
        assert isinstance(state, tuple)  # legacy form of RandomState's MT19937
        kind, keys, pos, has_gauss, gauss = state
        meta = {
            "format": "attn-zoo cmaes state 1",
            "dim": self.dim,
            "es": tree,
            "sampler": [kind, pos, has_gauss, gauss],
        }
        arrays: dict[str, np.ndarray] = {**encoder.arrays, "sampler_keys": keys}
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        buffer = io.BytesIO()
        np.savez(buffer, allow_pickle=False, **arrays)  # numbers only (the encoder refuses objects)
        return buffer.getvalue()

    @classmethod
    def loads(cls, data: bytes, config: CMAESConfig, where: str = "CMA-ES state") -> CMAES:
        """Rebuild from :meth:`dumps`: a fresh optimiser from ``config``, its state from data.

        Raises:
            StateFormatError: the data is not such a state (a pickle, a truncated file, a
                class outside pycma's state classes, ...), naming ``where``.
        """
        if data[:2] == b"\x80\x04" or data[:1] == b"\x80":
            raise StateFormatError(
                f"{where}: a pickled pycma state (the old format), which can run code; it is "
                "not loaded. Convert a file you trust with "
                "attn_policies.algorithms.cmaes.convert_pickled_state"
            )
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
            meta = parse_json(arrays.pop("meta").tobytes(), f"{where}: meta", StateFormatError)
        except Exception as err:  # zip, npy or JSON damage
            raise StateFormatError(f"{where}: not a readable CMA-ES state ({err})") from None
        if not isinstance(meta, dict) or meta.get("format") != "attn-zoo cmaes state 1":
            raise StateFormatError(f"{where}: unknown CMA-ES state format")
        if meta.get("slim"):  # float32 on disk (slim_state): the optimiser works in float64
            arrays = {
                k: a.astype(np.float64) if a.dtype == np.float32 else a for k, a in arrays.items()
            }
        self = cls(int(meta["dim"]), config)
        try:
            kind, pos, has_gauss, gauss = meta["sampler"]
            self.sampler.set_state(
                (str(kind), arrays.pop("sampler_keys"), int(pos), int(has_gauss), float(gauss))
            )
            es = StateDecoder(arrays, self, where)(meta["es"])
        except StateFormatError:
            raise
        except Exception as err:
            raise StateFormatError(f"{where}: inconsistent CMA-ES state ({err})") from None
        if not isinstance(es, cma.CMAEvolutionStrategy):
            raise StateFormatError(f"{where}: the state is not a CMAEvolutionStrategy")
        self.es = es
        return self


def slim_state(data: bytes) -> bytes:
    """A :meth:`CMAES.dumps` state, small enough to commit: float64 arrays stored as float32,
    arrays pycma holds twice stored once (E3's 913-parameter state: 32 -> ~10 MB). Not
    compressed: an early covariance (near the identity) deflates past the zip-bomb check's
    ratio, and a trained one barely deflates.

    :meth:`CMAES.loads` reads it back into a float64 optimiser that goes on from where it
    was, though no longer bit for bit: its covariance and mean are rounded to float32.
    """
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    meta = json.loads(arrays.pop("meta").tobytes())
    seen: dict[tuple[Any, ...], str] = {}
    alias: dict[str, str] = {}
    for key in [k for k in arrays if k != "sampler_keys"]:
        array = arrays[key]
        if array.dtype == np.float64:
            array = arrays[key] = array.astype(np.float32)
        sig = (array.dtype.str, array.shape, array.tobytes()) if array.size > 1000 else None
        if sig is not None and sig in seen:
            alias[key] = seen[sig]
            del arrays[key]
        elif sig is not None:
            seen[sig] = key

    def relink(node: Any) -> Any:
        if isinstance(node, dict):
            if isinstance(node.get("__nd__"), str) and node["__nd__"] in alias:
                return {**node, "__nd__": alias[node["__nd__"]]}
            return {k: relink(v) for k, v in node.items()}
        if isinstance(node, list):
            return [relink(v) for v in node]
        return node

    meta = {**relink(meta), "slim": True}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=False, **arrays)
    return buffer.getvalue()


def slim_checkpoint(directory: str | Path) -> Path:
    """Rewrite the CMA-ES state of the checkpoint in ``directory`` (a run's ``checkpoints/``)
    with :func:`slim_state`, for committing an unfinished run; ``--resume`` reads it. Returns
    the state file."""
    directory = Path(directory)
    meta = read_json(directory / "trainer.json", StateFormatError)
    state_file = directory / Path(meta["files"]["cma_state"]).name
    check_archive(state_file, what="CMA-ES state", error=StateFormatError)
    atomic_write(state_file, slim_state(state_file.read_bytes()))
    return state_file


def convert_pickled_state(file: str | Path, config: CMAESConfig) -> Path:
    """Convert an old pickled ``cma_state-<k>.pkl`` you trust into the data-only format.

    This unpickles the file, which runs whatever code it names: only use it on files you
    wrote yourself. Returns the new ``.npz`` path (``trainer.json`` in the same folder is
    updated to point at it).
    """
    file = Path(file)
    es = pickle.loads(file.read_bytes())  # explicitly trusted by the caller
    opt = CMAES.__new__(CMAES)
    opt.dim, opt.config, opt.es = len(es.mean), config, es
    opt.sampler = es.opts["randn"].__self__
    target = file.with_suffix(".npz")
    atomic_write(target, opt.dumps())
    meta_file = file.parent / "trainer.json"
    if meta_file.exists():
        meta = read_json(meta_file)
        if meta.get("files", {}).get("cma_state") == file.name:
            meta["files"]["cma_state"] = target.name
            atomic_write(meta_file, json.dumps(meta, indent=1))
    return target


class CMAESTrainer:
    """One CMA-ES generation per :meth:`step`; save and restore between any two steps.

    Attributes:
        generation: generations done.
        env_steps: env steps of all fitness evaluations so far.
        favourite: the current favourite solution (the model).
        best, best_fitness: the best individual sampled so far and its fitness.
    """

    def __init__(self, evaluator: Evaluator, config: CMAESConfig | PGPEConfig) -> None:
        self.evaluator, self.config = evaluator, config
        self.optimizer: CMAES | PGPE = (
            PGPE(evaluator.num_parameters, config)
            if isinstance(config, PGPEConfig)
            else CMAES(evaluator.num_parameters, config)
        )
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
        directory = make_folder(directory)  # a symlink there is replaced, not followed
        files = {
            "cma_state": f"{self.optimizer.state_prefix}-{self.generation}.npz",
            "solutions": f"solutions-{self.generation}.pt",
        }
        meta = {
            "generation": self.generation,
            "env_steps": self.env_steps,
            "best_fitness": self.best_fitness,
            "tasks": self.tasks.bit_generator.state,
            # x0 is in the pycma state itself; the summary keeps this file plain JSON
            "config": {**asdict(self.config), "x0": None if self.config.x0 is None else "given"},
            "files": files,
        }
        solutions = {
            "favourite": torch.from_numpy(self.favourite),
            "best": torch.from_numpy(self.best),
        }
        atomic_write(directory / files["cma_state"], self.optimizer.dumps())
        buffer = io.BytesIO()
        torch.save(solutions, buffer)
        atomic_write(directory / files["solutions"], buffer.getvalue())
        atomic_write(directory / "trainer.json", json.dumps(meta, indent=1))
        stale = ("cma_state*.npz", "cma_state*.pkl", "pgpe_state*.npz", "solutions*.pt")
        for old in [p for pattern in stale for p in directory.glob(pattern)]:
            if old.name not in files.values():
                old.unlink()

    def restore(self, directory: str | Path) -> None:
        """Continue from a checkpoint written by :meth:`save` (same evaluator and config)."""
        directory = Path(directory)
        where = directory / "trainer.json"
        try:
            meta = read_json(where, StateFormatError)  # size and nesting checked first
            files = meta.get("files", {"cma_state": "cma_state.pkl", "solutions": "solutions.pt"})
            # Only names inside the checkpoint folder, whatever the file says.
            state_file = directory / Path(files["cma_state"]).name
            solutions_file = directory / Path(files["solutions"]).name
            generation, env_steps = int(meta["generation"]), int(meta["env_steps"])
            best_fitness, tasks = float(meta["best_fitness"]), dict(meta["tasks"])
        except StateFormatError:
            raise
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise StateFormatError(f"{where}: not a readable CMA-ES checkpoint ({err})") from None
        check_archive(state_file, what="CMA-ES state", error=StateFormatError)  # before inflating
        state, config = state_file.read_bytes(), self.config
        optimizer: CMAES | PGPE = (  # the kind __init__ chose for this config
            PGPE.loads(state, config, where=str(state_file))
            if isinstance(config, PGPEConfig)
            else CMAES.loads(state, config, where=str(state_file))
        )
        if optimizer.dim != self.evaluator.num_parameters:
            raise StateFormatError(
                f"{state_file}: the state has {optimizer.dim} parameters, the policy "
                f"{self.evaluator.num_parameters}"
            )
        try:
            solutions = load_tensors(solutions_file, error=StateFormatError)
            best = solutions["best"].numpy()
        except StateFormatError:
            raise
        except Exception as err:  # unpickling refused, truncated file, wrong content
            raise StateFormatError(
                f"{solutions_file}: not a readable solutions file ({err})"
            ) from None
        try:
            self.tasks.bit_generator.state = tasks
        except (ValueError, TypeError, KeyError) as err:
            raise StateFormatError(f"{where}: bad task-seed generator state ({err})") from None
        self.optimizer, self.best = optimizer, best
        self.generation, self.env_steps, self.best_fitness = generation, env_steps, best_fitness
