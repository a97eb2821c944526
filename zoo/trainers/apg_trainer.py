"""Analytic policy gradients through a differentiable env model (``algo: apg``, issue 12).

The first stage of E3's curriculum: an ES policy learns to hold the pole up on the balancing
task's starts by Adam through CartPoleSwingUp's torch physics
(:mod:`attn_envs.envs.cartpole_swingup_torch`), on a quadratic cost whose optimum is holding
(the task's reward pays a spinning pole almost as well); CMA-ES stages (``algo: cmaes`` with
``init:`` naming this run's folder) then learn the swing-up. See
:mod:`attn_policies.algorithms.apg` for the algorithm.

Keys besides the common ones: :class:`APGKeys` (their table: ``docs/trainer_keys.md``);
``eval.freq`` counts updates.

The run folder holds ``model.pt`` (the last policy) and ``best_model.pt`` (the best test
return), state dicts of the policy as ``algo: cmaes`` writes them, so ``attn-zoo evaluate``,
``record`` and a CMA-ES run's ``init:`` read it; ``metrics.csv``, ``progress.csv`` (update,
env steps, cost, gradient norm, share of copies restarted, test return),
``evaluations.json``, ``eval.json`` and ``checkpoints/`` (policy and Adam state, the
generator's state), written after every episode (``episode_steps / window`` updates).
``--resume`` continues bit for bit from the last finished episode.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from attn_envs.envs.cartpole_swingup import check_start_span
from attn_envs.envs.cartpole_swingup_torch import CartPoleHoldTask
from attn_policies.algorithms.apg import APGConfig, APGTrainer
from attn_policies.algorithms.es_eval import BatchedEvaluator
from zoo import factory
from zoo import progress as zoo_progress
from zoo.config_checks import ConfigError, RunConfig, check_type, nearest
from zoo.metrics import APG_METRICS, MetricsLogger, renamed
from zoo.trainers import base, es_rollout, keys
from zoo.trainers.base import ProgressTable, read_json, save_state_dict
from zoo.trainers.cmaes_trainer import CMAESZooTrainer
from zoo.trainers.contract import RunHandle, register
from zoo.trainers.keys import key


@dataclass(frozen=True)
class APGKeys:
    """The keys of ``algo: apg`` runs (defaults of the algorithm's from
    :class:`~attn_policies.algorithms.apg.APGConfig`)."""

    env: str = key(doc="a CartPoleSwingUp id (its physics has a torch twin)", required=True)
    env_kwargs: dict[str, Any] = key(
        {}, "the starts, e.g. `{upright: true}` (the balancing task; the tests play the same env)"
    )
    policy: str = key(doc="named as for algo: cmaes", required=True)
    policy_kwargs: dict[str, Any] = key({}, "the policy's kwargs")
    init: str | None = key(None, "warm start, as for algo: cmaes (null: fresh weights)")
    n_updates: int = key(doc="Adam updates to train", required=True)
    batch_size: int = key(APGConfig.batch_size, "episodes side by side")
    window: int = key(APGConfig.window, "steps per update (truncated backprop through time)")
    episode_steps: int = key(APGConfig.episode_steps, "steps per episode, a multiple of window")
    learning_rate: float | int = key(APGConfig.learning_rate, "Adam's step size")
    lr_schedule: Literal["constant", "cosine"] = key(
        "constant", "cosine: the step falls to 0 over the n_updates"
    )
    max_grad_norm: float | int = key(APGConfig.max_grad_norm, "gradient clipping norm")
    shuffle_inputs: bool = key(APGConfig.shuffle_inputs, "one input order per episode and copy")
    cost: dict[str, Any] = key(
        {}, "weights of the quadratic cost: x, theta_dot, x_dot (CartPoleHoldTask's if unset)"
    )
    max_episode_steps: int | None = key(None, "cap on test episode steps")
    torch_threads: int | None = key(None, "torch threads (null: one)")


SCHEDULES = keys.choices(APGKeys, "lr_schedule")
# env ids whose physics has a torch twin
DIFFERENTIABLE = ("attn_envs/CartPoleSwingUp-v0", "attn_envs/CartPoleSwingUpHarder-v0")
START_KWARGS = ("harder", "upright", "start_span")
COST_KEYS = {"x": "x_weight", "theta_dot": "theta_dot_weight", "x_dot": "x_dot_weight"}
PROGRESS_FIELDS = [
    "update",
    "env_steps",
    "cost",
    "grad_norm",
    "restarts",
    "learning_rate",
    "seconds",
    "test_mean",
    "test_std",
]
# What a damaged or foreign checkpoint raises (a pickle that is not weights: UnpicklingError).
CHECKPOINT_ERRORS = (
    OSError, ValueError, KeyError, RuntimeError, TypeError, EOFError, pickle.UnpicklingError
)  # fmt: skip


def hold_task(run: RunConfig) -> CartPoleHoldTask:
    """The differentiable twin of the run's env, with the run's cost weights."""
    env_id = run.body["env"]
    if env_id not in DIFFERENTIABLE:
        raise ConfigError(
            f"{run.name}: algo apg needs an env with torch physics ({', '.join(DIFFERENTIABLE)})"
            f", got {env_id!r}.{nearest(env_id, DIFFERENTIABLE)}"
        )
    kwargs = {**factory.env_spec(env_id).kwargs, **(run.body.get("env_kwargs") or {})}
    for name in kwargs:
        if name not in (*START_KWARGS, "max_episode_steps"):
            raise ConfigError(
                f"{run.name}: algo apg's env takes only {', '.join(START_KWARGS)} in "
                f"env_kwargs (the torch physics has no {name!r})"
            )
    weights: dict[str, float] = {}  # CartPoleHoldTask field -> weight
    for name, weight in (run.body.get("cost") or {}).items():
        if name not in COST_KEYS:
            raise ConfigError(
                f"{run.name}: unknown cost weight {name!r}.{nearest(str(name), COST_KEYS)} "
                f"Known: {', '.join(COST_KEYS)}"
            )
        check_type(run.name, f"cost.{name}", weight, (float, int))
        weights[COST_KEYS[name]] = float(weight)
    harder = bool(kwargs.get("harder"))
    try:  # the env's own check, so both sides take the same spans
        span = check_start_span(harder, kwargs.get("start_span"))
    except ValueError as error:
        raise ConfigError(f"{run.name}: env_kwargs: {error}") from None
    default = CartPoleHoldTask()  # the weights not given (COST_KEYS' fields)
    return CartPoleHoldTask(
        harder=harder,
        upright=bool(kwargs.get("upright")),
        span=None if span is None else _half_widths(span),
        x_weight=weights.get("x_weight", default.x_weight),
        theta_dot_weight=weights.get("theta_dot_weight", default.theta_dot_weight),
        x_dot_weight=weights.get("x_dot_weight", default.x_dot_weight),
    )


def _half_widths(span: np.ndarray) -> tuple[float, float, float, float]:
    """``check_start_span``'s ``(4,)`` array as the task's tuple."""
    x, x_dot, theta, theta_dot = (float(v) for v in span)
    return x, x_dot, theta, theta_dot


def apg_config(run: RunConfig) -> APGConfig:
    given = keys.values(APGKeys, run)
    schedule = given.lr_schedule
    if schedule not in SCHEDULES:
        raise ConfigError(
            f"{run.name}: lr_schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}."
            f"{nearest(schedule, SCHEDULES)}"
        )
    try:
        return APGConfig(
            batch_size=given.batch_size,
            window=given.window,
            episode_steps=given.episode_steps,
            learning_rate=float(given.learning_rate),
            decay_updates=int(given.n_updates) if schedule == "cosine" else 0,
            max_grad_norm=float(given.max_grad_norm),
            shuffle_inputs=bool(given.shuffle_inputs),
            seed=run.seed,
        )
    except ValueError as err:
        raise ConfigError(f"{run.name}: {err}") from None


def initial_policy(run: RunConfig) -> nn.Module:
    """Fresh weights drawn with the run's seed, or those ``init`` names."""
    with torch.random.fork_rng():
        torch.manual_seed(run.seed)
        policy = es_rollout.policy_factory(run)()
    if run.body.get("init"):
        base.load_init(policy, run.body["init"], run.name, "policy")
    return policy


def _restore(trainer: APGTrainer, ckpt: Path) -> None:
    try:
        trainer.restore(ckpt)
    except CHECKPOINT_ERRORS as err:
        raise ConfigError(f"{ckpt}: unreadable APG checkpoint ({err})") from None


@register("apg")
class APGZooTrainer(CMAESZooTrainer):
    """Trains an ES policy by analytic policy gradients; loading and evaluation are those of
    ``algo: cmaes``."""

    config_model: type = APGKeys

    def validate(self, run: RunConfig) -> None:
        keys.check(APGKeys, run)
        hold_task(run)
        apg_config(run)
        es_rollout.policy_builder(run)
        es_rollout.check_policy_memory(run)  # before initial_policy builds it for real
        if not run.body.get("init") or Path(run.body["init"]).exists():
            initial_policy(run)

    def probe(self, run: RunConfig) -> None:
        """The policy fits the env (one step of the numpy env and of its torch twin)."""
        super().probe(run)
        task, policy = hold_task(run), initial_policy(run)
        state = torch.as_tensor(task.starts(np.random.default_rng(0), 1), dtype=torch.float32)
        try:
            with torch.no_grad():
                action, _ = policy(task.observe(state), None)
                task.step(state, action)
        except Exception as err:
            raise ConfigError(f"{run.name}: the policy does not fit the torch env: {err}") from err

    def check_resume(self, path: Path, run: RunConfig) -> None:
        """Read the checkpoint as :meth:`train` will resume it, writing nothing, so that a
        refused one leaves the run folder as it was."""
        ckpt = Path(path) / "checkpoints"
        if (ckpt / "trainer.json").exists():
            _restore(APGTrainer(initial_policy(run), hold_task(run), apg_config(run)), ckpt)

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
        n_updates = int(run.body["n_updates"])
        policy = initial_policy(run)
        trainer = APGTrainer(policy, hold_task(run), apg_config(run))
        evaluations: list[dict[str, Any]] = []
        if resume and (ckpt / "trainer.json").exists():  # killed before episode 1: start over
            _restore(trainer, ckpt)
            if (path / "evaluations.json").exists():
                evaluations = read_json(path / "evaluations.json")
            evaluations = [e for e in evaluations if e["update"] <= trainer.updates]
            handle.write_status(num_timesteps=trainer.env_steps, update=trainer.updates)
        done = trainer.updates if resume else None
        progress = ProgressTable(path / "progress.csv", PROGRESS_FIELDS, "update", done)
        metrics = MetricsLogger(path, trainer.env_steps if resume else None)
        tester = BatchedEvaluator(es_rollout.rollout_spec(run)) if run.eval.freq else None
        bar = base.progress_bar(progress_bar, n_updates, trainer.updates, "update")
        zoo_progress.announce(path, resume=resume)
        lines = zoo_progress.lines(run.experiment, n_updates, "updates", trainer.updates)
        seeds = [run.eval.seed + i for i in range(run.eval.n_episodes)]
        try:
            while trainer.updates < n_updates:
                start = time.perf_counter()
                record = trainer.step()
                record["seconds"] = round(time.perf_counter() - start, 3)
                if tester is not None and trainer.updates % run.eval.freq == 0:
                    base.periodic_test(
                        tester,
                        policy,
                        seeds,
                        record,
                        evaluations,
                        ("update", trainer.updates),
                        trainer.env_steps,
                        path,
                    )
                progress.write(record)
                metrics.log(trainer.env_steps, renamed(record, APG_METRICS))
                if trainer.at_episode_start:
                    trainer.save(ckpt)
                    handle.write_status(num_timesteps=trainer.env_steps, update=trainer.updates)
                if lines is not None:
                    lines.update(trainer.updates, _latest(record, evaluations))
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(cost=f"{record['cost']:.3f}")
                if not all(cb(record) is not False for cb in callbacks):
                    break
        finally:
            metrics.close()
            if bar is not None:
                bar.close()
            if tester is not None:
                tester.close()
        if lines is not None:
            lines.close(trainer.updates)
        save_state_dict(policy, path / "model.pt")
        return trainer.env_steps

    def evaluate(
        self,
        path: Path,
        run: RunConfig,
        n_episodes: int | None = None,
        which: str = "best",
        seed: int | None = None,
    ) -> dict[str, Any]:
        """As ``algo: cmaes``, with the updates done in place of generations."""
        out = super().evaluate(path, run, n_episodes, which, seed)
        file = Path(path) / "status.json"
        updates = read_json(file).get("update") if file.exists() else None
        return {k: v for k, v in out.items() if k != "generations"} | {"updates": updates}


def _latest(record: dict[str, Any], evaluations: list[dict[str, Any]]) -> str:
    text = f"cost {record['cost']:.4f}"
    if evaluations:
        text += f", test {evaluations[-1]['test_mean']:.1f} at update {evaluations[-1]['update']}"
    return text
