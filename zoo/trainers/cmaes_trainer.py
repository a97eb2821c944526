"""CMA-ES runs (``algo: cmaes``): E3 CartPoleSwingUpHarder, E6 CarRacing, any flat-vector policy.

Keys besides the common ones: :class:`CMAESKeys` (their table: ``docs/trainer_keys.md``);
``eval.freq`` counts generations.

An env id with a ``vector_entry_point`` (the numpy CartPoleSwingUp) runs as one batched env
when the run has no ``env_wrapper``; otherwise copies of ``gym.make(env) + wrappers`` run in a
``SyncVectorEnv``. The run folder holds ``model.pt`` (the final favourite solution as a state
dict), ``best_model.pt`` (the favourite with the best test return), ``metrics.csv`` (see
:mod:`zoo.metrics`), ``progress.csv`` and TensorBoard events in ``logs/`` (best/mean/worst
fitness, sigma, timings, tests), ``evaluations.json``, ``checkpoints/`` and ``eval.json``.
``--resume`` continues bit for bit from the last finished generation.

The policy and its episodes are built from the config by :mod:`zoo.trainers.es_rollout`
(shared with APG and DAgger); this module adds the search (CMA-ES or PGPE settings, the
evaluator, the population's memory bound) and the training loop.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from attn_policies.agents import PolicyAgent
from attn_policies.algorithms.cmaes import CMAESConfig, CMAESTrainer
from attn_policies.algorithms.cmaes_state import StateFormatError
from attn_policies.algorithms.es_eval import BatchedEvaluator, Evaluator
from attn_policies.algorithms.es_workers import EVALUATORS, make_evaluator
from attn_policies.algorithms.pgpe import PGPEConfig
from attn_policies.atomic import atomic_write, make_folder
from zoo import factory
from zoo import progress as zoo_progress
from zoo.config_checks import ConfigError, RunConfig, check_memory, nearest
from zoo.evaluation import episode_lists, episode_stats, eval_json, summary
from zoo.metrics import CMAES_METRICS, MetricsLogger, renamed
from zoo.registry import resolve_function
from zoo.trainers import base, keys, state_dict_file
from zoo.trainers.base import (
    ProgressTable,
    load_state_dict,
    read_json,
    save_state_dict,
    tensorboard,
)
from zoo.trainers.contract import KeyTypes, RunHandle, register
from zoo.trainers.es_rollout import (
    apply_policy_kwargs,
    count_parameters,
    init_vector,
    policy_builder,
    policy_factory,
    rollout_spec,
    run_spaces,
)
from zoo.trainers.keys import key, value


@dataclass(frozen=True)
class CMAESKeys:
    """The keys of ``algo: cmaes`` runs."""

    env: str = key(doc="a Gymnasium env id", required=True)
    env_kwargs: dict[str, Any] = key({}, "kwargs of the env")
    train_env_kwargs: dict[str, Any] = key(
        {}, "more env kwargs for fitness rollouts only, not tests (E3: `{upright_share: 0.5}`)"
    )
    env_wrapper: Any = key([], "Gymnasium wrappers, as for SB3 runs")
    train_env_wrapper: Any = key([], "more wrappers for fitness rollouts only, not tests")
    policy: str = key(doc="a policy name or an import path (`module:Class`)", required=True)
    policy_kwargs: dict[str, Any] = key(
        {}, "the policy's kwargs (`obs_dim` / `action_dim` are filled in when it takes them)"
    )
    action_fn: str | None = key(None, "import path mapping raw outputs (B, A) to env actions")
    n_generations: int = key(doc="generations to train", required=True)
    population: int = key(CMAESConfig.population, "solutions per generation")
    repeats: int = key(
        CMAESConfig.repeats, "episodes per solution (task seeds shared per generation)"
    )
    sigma0: float | int = key(CMAESConfig.sigma0, "initial step size (PGPE: initial stdev)")
    init: str | None = key(
        None,
        "warm start: a run folder (its best model) or a state dict .pt of the same policy, "
        "read as tensors only (null: x0 = 0)",
    )
    cma_options: dict[str, Any] = key({}, "pycma options, e.g. `{CMA_diagonal: true}`")
    es: Literal["cmaes", "pgpe"] = key("cmaes", "the search: CMA-ES, or PGPE in the same loop")
    pgpe: dict[str, Any] = key(
        {}, "PGPEConfig fields, e.g. `{center_learning_rate: 0.037, stdev_learning_rate: 0.078}`"
    )
    evaluator: str = key(
        "batched", "`batched`, `processes` or `ray` (local; RAY_ADDRESS joins a cluster)"
    )
    n_workers: int = key(2, "processes or Ray actors of the evaluator")
    max_episode_steps: int | None = key(None, "cap on rollout steps (null: the env's own limit)")
    torch_threads: int | None = key(None, "torch threads (null: one)")


PROGRESS_FIELDS = [
    "generation",
    "env_steps",
    "fitness_best",
    "fitness_mean",
    "fitness_worst",
    "best_ever",
    "sigma",
    "time_ask_tell",
    "time_evaluate",
    "test_mean",
    "test_std",
]


def check_search_memory(run: RunConfig) -> None:
    """Refuse a population or policy too large for memory before anything is allocated
    (:func:`zoo.config.check_memory`): each generation holds ``population`` float64
    solutions and their float32 copies, CMA-ES also an ``n x n`` covariance (with its
    eigenvectors) unless ``cma_options: {CMA_diagonal: true}``."""
    n = count_parameters(run)
    if n is None:
        return
    population = int(value(CMAESKeys, run, "population"))
    need = population * n * (8 + 4) + n * 4 * 4  # solutions; policy, mean, steps
    what = f"a population of {population:,} x {n:,} parameters"
    diagonal = value(CMAESKeys, run, "cma_options").get("CMA_diagonal") is True
    if value(CMAESKeys, run, "es") == "cmaes" and not diagonal:
        need += 3 * n * n * 8
        what += f" with a {n:,} x {n:,} covariance"
    check_memory(run.name, need, what, "lower population or the policy's size")


ES_METHODS = keys.choices(CMAESKeys, "es")
PGPE_KEYS = tuple(
    f.name
    for f in dataclasses.fields(PGPEConfig)
    if f.name not in ("population", "repeats", "sigma0", "seed", "x0")
)


def cma_config(run: RunConfig, x0: np.ndarray | None = None) -> CMAESConfig | PGPEConfig:
    """The run's search settings (``es: cmaes`` or ``pgpe``); ``x0`` (see
    :func:`init_vector`) is read only to train."""
    method = value(CMAESKeys, run, "es")
    if method not in ES_METHODS:
        raise ConfigError(
            f"{run.name}: es must be one of {', '.join(ES_METHODS)}, got {method!r}."
            f"{nearest(method, ES_METHODS)}"
        )
    common: dict[str, Any] = {
        "population": int(value(CMAESKeys, run, "population")),
        "repeats": int(value(CMAESKeys, run, "repeats")),
        "sigma0": float(value(CMAESKeys, run, "sigma0")),
        "seed": run.seed,
        "x0": x0,
    }
    if method == "pgpe":
        return _pgpe_config(run, common)
    if run.body.get("pgpe"):
        raise ConfigError(f"{run.name}: 'pgpe' settings need es: pgpe (this run is es: cmaes)")
    try:
        return CMAESConfig(options=dict(value(CMAESKeys, run, "cma_options")), **common)
    except ValueError as err:
        raise ConfigError(f"{run.name}: {err}") from None


def _pgpe_config(run: RunConfig, common: dict[str, Any]) -> PGPEConfig:
    if run.body.get("cma_options"):
        raise ConfigError(f"{run.name}: 'cma_options' are pycma's; this run is es: pgpe")
    settings = dict(run.body.get("pgpe") or {})
    for name in settings:
        if name not in PGPE_KEYS:
            raise ConfigError(
                f"{run.name}: unknown pgpe setting {name!r}.{nearest(str(name), PGPE_KEYS)} "
                f"Known: {', '.join(PGPE_KEYS)}"
            )
    try:
        return PGPEConfig(**common, **settings)
    except (ValueError, TypeError) as err:
        raise ConfigError(f"{run.name}: pgpe: {err}") from None


def make_run_evaluator(run: RunConfig) -> Evaluator:
    kind = value(CMAESKeys, run, "evaluator")
    kwargs: dict[str, Any] = {}
    if kind in ("processes", "ray"):
        kwargs["n_workers"] = int(value(CMAESKeys, run, "n_workers"))
    if kind == "ray":  # the cluster is the user's (RAY_ADDRESS), never the config's
        from zoo.ray_grid import cluster_address

        kwargs["address"] = cluster_address(None)
    return make_evaluator(kind, rollout_spec(run, training=True), **kwargs)


def _test_seeds(seed: int, n: int) -> list[int]:
    return [seed + i for i in range(n)]


@register("cmaes")
class CMAESZooTrainer:
    """Trains a flat-vector policy with :class:`~attn_policies.algorithms.cmaes.CMAESTrainer`."""

    config_model: type = CMAESKeys

    def config_keys(self, body: dict[str, Any]) -> KeyTypes:
        return keys.key_types(self.config_model)

    def validate(self, run: RunConfig) -> None:
        keys.check(CMAESKeys, run)
        kind = value(CMAESKeys, run, "evaluator")
        if kind not in EVALUATORS:
            raise ConfigError(
                f"{run.name}: evaluator must be one of {', '.join(EVALUATORS)}, got {kind!r}"
                f".{nearest(kind, EVALUATORS)}"
            )
        policy_builder(run)
        cma_config(run)
        check_search_memory(run)  # before init_vector builds the policy for real
        # A misfit warm start fails here; a missing one in probe (still before anything is
        # written), so a config may name a run that an earlier step of its recipe makes.
        if not run.body.get("init") or Path(run.body["init"]).exists():
            init_vector(run)
        if run.body.get("action_fn"):
            try:
                resolve_function(run.body["action_fn"], "action_fn")
            except ValueError as err:
                raise ConfigError(f"{run.name}: 'action_fn': {err}") from None
        for name in ("env_wrapper", "train_env_wrapper"):
            factory.resolve_wrappers(factory.wrapper_specs(run.body.get(name), name))

    def probe(self, run: RunConfig) -> None:
        """Dry build: policy and env fit together (one short rollout of one solution)."""
        init_vector(run)
        spec = rollout_spec(run, training=True)
        evaluator = BatchedEvaluator(dataclasses.replace(spec, max_steps=1))
        try:
            evaluator.evaluate(np.zeros((1, evaluator.num_parameters), np.float32), [0])
        except Exception as err:
            raise ConfigError(f"{run.name}: the policy does not fit the env: {err}") from err
        finally:
            evaluator.close()

    def check_resume(self, path: Path, run: RunConfig) -> None:
        """Read the checkpoint and ``evaluations.json`` as :meth:`train` will resume them,
        writing nothing, so that a refused one leaves the run folder as it was. (Subclasses
        with their own ``train`` and checkpoint set their own, or None.)"""
        ckpt = Path(path) / "checkpoints"
        if not (ckpt / "trainer.json").exists():
            return  # a resume from generation 0
        spec = rollout_spec(run, training=True)
        evaluator = BatchedEvaluator(dataclasses.replace(spec, max_steps=1))
        try:
            CMAESTrainer(evaluator, cma_config(run, init_vector(run))).restore(ckpt)
        except StateFormatError as err:
            raise ConfigError(str(err)) from None
        finally:
            evaluator.close()
        if (Path(path) / "evaluations.json").exists():
            read_json(Path(path) / "evaluations.json")

    # -- training --------------------------------------------------------------------------

    def train(
        self,
        handle: RunHandle,
        callbacks: Sequence[Any] = (),
        progress_bar: bool = False,
        resume: bool = False,
    ) -> int:
        run: RunConfig = handle.config
        path = Path(handle.path)
        ckpt = path / "checkpoints"
        n_generations = int(run.body["n_generations"])
        evaluator = make_run_evaluator(run)
        trainer = CMAESTrainer(evaluator, cma_config(run, init_vector(run)))
        evaluations: list[dict[str, Any]] = []
        # A run killed before its first checkpoint resumes from generation 0.
        if resume and (ckpt / "trainer.json").exists():
            try:
                trainer.restore(ckpt)
            except StateFormatError as err:
                raise ConfigError(str(err)) from None
            if (path / "evaluations.json").exists():
                evaluations = read_json(path / "evaluations.json")
            evaluations = [e for e in evaluations if e["generation"] <= trainer.generation]
            # a stop between the checkpoint and the status write left the status behind it
            handle.write_status(num_timesteps=trainer.env_steps, generation=trainer.generation)
        done = trainer.generation if resume else None
        progress = ProgressTable(path / "progress.csv", PROGRESS_FIELDS, "generation", done)
        metrics = MetricsLogger(path, trainer.env_steps if resume else None)
        board = tensorboard(make_folder(path / "logs", inside=path))  # a link replaced
        tester = BatchedEvaluator(rollout_spec(run)) if run.eval.freq else None
        bar = base.progress_bar(progress_bar, n_generations, trainer.generation, "gen")
        zoo_progress.announce(path, resume=resume)
        lines = zoo_progress.lines(run.experiment, n_generations, "generations", trainer.generation)
        policy = policy_factory(run)()

        def test(record: dict[str, Any]) -> None:
            """Test the favourite; keep it as the best model if no earlier test beat it."""
            assert tester is not None  # called only when periodic tests are on
            returns = tester.evaluate(
                trainer.favourite[None].astype(np.float32),
                _test_seeds(run.eval.seed, run.eval.n_episodes),
            )[0]
            record["test_mean"], record["test_std"] = returns.mean(), returns.std()
            best = max((e["test_mean"] for e in evaluations), default=-np.inf)
            evaluations.append(
                {k: record[k] for k in ("generation", "env_steps", "test_mean", "test_std")}
            )
            if record["test_mean"] >= best:  # ties go to the later, more trained model
                _save_policy(policy, trainer.favourite, path / "best_model.pt")
            atomic_write(path / "evaluations.json", json.dumps(evaluations, indent=1))

        try:
            # A warm start is tested before any search, so that the run's best model is never
            # one its start beats on the test episodes (a restart first scatters its mean).
            if tester is not None and run.body.get("init") and not evaluations:
                test({"generation": 0, "env_steps": trainer.env_steps})
            while trainer.generation < n_generations:
                record = trainer.step()
                if tester is not None and trainer.generation % run.eval.freq == 0:
                    test(record)
                progress.write(record)
                metrics.log(record["env_steps"], renamed(record, CMAES_METRICS))
                if board is not None:
                    for key, value in record.items():
                        if key not in ("generation", "env_steps") and value is not None:
                            board.add_scalar(f"cmaes/{key}", value, record["env_steps"])
                trainer.save(ckpt)
                handle.write_status(num_timesteps=trainer.env_steps, generation=trainer.generation)
                if lines is not None:
                    lines.update(trainer.generation, _latest_line(record, evaluations))
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(
                        best=f"{record['fitness_best']:.1f}", mean=f"{record['fitness_mean']:.1f}"
                    )
                if not all(cb(record) is not False for cb in callbacks):
                    break
        finally:
            metrics.close()
            if bar is not None:
                bar.close()
            if board is not None:
                board.close()
            evaluator.close()
            if tester is not None:
                tester.close()
        if lines is not None:
            lines.close(trainer.generation)
        _save_policy(policy, trainer.favourite, path / "model.pt")
        return trainer.env_steps

    # -- loading and evaluation ------------------------------------------------------------

    def model_file(self, path: Path, which: str) -> Path:
        return state_dict_file(path, which)

    def load(self, path: Path, run: RunConfig, which: str = "best") -> nn.Module:
        return load_state_dict(policy_factory(run)(), self.model_file(path, which), "policy").eval()

    def agent(self, path: Path, run: RunConfig, which: str = "best") -> PolicyAgent:
        """The policy acting as the evaluator plays it: through the run's ``action_fn``
        (default: argmax / clip to the action bounds)."""
        action_fn = run.body.get("action_fn")
        return PolicyAgent(
            self.load(path, run, which),
            run_spaces(run)[1],
            resolve_function(action_fn, "action_fn") if action_fn else None,
        )

    def episode_returns(
        self,
        path: Path,
        run: RunConfig,
        *,
        wrappers: Sequence[Callable[[gym.Env], gym.Env]] = (),
        n_episodes: int,
        seed: int,
        which: str = "best",
        policy_kwargs: dict[str, Any] | None = None,
        n_envs: int | None = None,
    ) -> dict[str, list[float]]:
        """Returns and lengths of ``n_episodes`` test episodes seeded ``seed, seed+1, ...``.

        All episodes run as one batch (``n_envs`` is accepted for the common signature and
        ignored); ``wrappers`` go after the run's own ``env_wrapper``.
        """
        policy = self.load(path, run, which)
        apply_policy_kwargs(policy, policy_kwargs)
        spec = rollout_spec(run, extra_wrappers=wrappers)
        evaluator = BatchedEvaluator(dataclasses.replace(spec, policy_fn=lambda: policy))
        try:
            flat = torch.cat([p.detach().reshape(-1) for p in policy.parameters()])
            returns = evaluator.evaluate(flat[None].numpy(), _test_seeds(seed, n_episodes))[0]
            return {"rewards": returns.tolist(), "lengths": evaluator.last_lengths[0].tolist()}
        finally:
            evaluator.close()

    def evaluate(
        self,
        path: Path,
        run: RunConfig,
        n_episodes: int | None = None,
        which: str = "best",
        seed: int | None = None,
    ) -> dict[str, Any]:
        """``eval.final_episodes`` test episodes (``eval.test_seed``) of the best and the last
        model, in the same shape as SB3 runs' ``eval.json``."""
        path = Path(path)
        n = int(n_episodes or run.eval.final_episodes)
        seed = run.eval.test_seed if seed is None else int(seed)
        status = read_json(path / "status.json") if (path / "status.json").exists() else {}

        def results(file_which: str) -> dict[str, Any]:
            out = self.episode_returns(path, run, n_episodes=n, seed=seed, which=file_which)
            return {"deterministic": episode_stats(out["rewards"], out["lengths"])}

        file = self.model_file(path, which)
        tested = results(which)
        steps = {
            "num_timesteps": status.get("num_timesteps"),
            "generations": status.get("generation"),
        }
        out = eval_json(run, path, file, seed, n, tested, **steps)
        # an interrupted run has a best model but no final model.pt yet
        if which == "best" and file.name == "best_model.pt" and (path / "model.pt").exists():
            out["last_model"] = {"model": "model.pt", "policies": summary(results("last"))}
        out["episodes"] = episode_lists(tested)
        return out


def _latest_line(record: dict[str, Any], evaluations: list[dict[str, Any]]) -> str:
    """Fitness of this generation and the latest test, for progress lines."""
    text = f"fitness best {record['fitness_best']:.1f} mean {record['fitness_mean']:.1f}"
    if evaluations:
        last = evaluations[-1]
        text += f", test {last['test_mean']:.1f} at generation {last['generation']}"
    return text


def _save_policy(policy: nn.Module, flat: np.ndarray, file: Path) -> None:
    torch.nn.utils.vector_to_parameters(
        torch.as_tensor(flat, dtype=torch.float32), policy.parameters()
    )
    save_state_dict(policy, file)
