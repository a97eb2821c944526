"""Behaviour-cloning runs (``algo: bc``): E4 Ant and E5 Puzzle Pong students.

Keys besides the common ones: :class:`~zoo.trainers.bc_keys.BCKeys` (their table:
``docs/trainer_keys.md``); ``eval.freq`` counts epochs.

A run resumes stage by stage (``attn-zoo train --resume RUN``): a teacher trained into
``RUN/teacher`` continues from its own checkpoint; the teacher data is recorded in
:data:`~zoo.trainers.bc_collection.DATA_PARTS` files ``RUN/data/part-*.npz`` and a resumed
run loads the saved ones and records the rest (from a fresh reset of the env seeded
``seed + part``, so samples after the cut differ from an uninterrupted run's); the student
continues from
``RUN/checkpoints/bc_last.pt``, saved after every epoch, bit for bit.

With ``dagger_rounds`` (Ross et al. 2011, "A reduction of imitation learning to no-regret
online learning") the first ``epochs`` fit the teacher's own steps; then every round lets
the student play ``dagger_steps`` steps (the teacher labels each), saves them as
``RUN/data/dagger-RR.npz``, adds them to the data and trains ``dagger_epochs`` more epochs.
The epochs count on across rounds, so a resumed run finds its round from the checkpoint.
The rounds' data grows in one buffer allocated for all of it (no copy per round), and
``epoch_samples`` keeps an epoch's cost fixed as it grows.

The teacher acts on ``teacher_obs`` of the student env's observation: a Dict entry name
(the newest step when the student env stacks a window the teacher does not have) or an
import path to a function of the batched observation. A zoo teacher trained with
``normalize`` gets its ``VecNormalize`` statistics applied. The run folder holds
``teacher/`` (when trained here), ``metrics.csv`` (:mod:`zoo.metrics`), ``progress.csv``
(epoch, loss, test return),
``model.pt`` / ``best_model.pt`` (student state dicts, ``torch.load(weights_only=True)``)
and ``eval.json``.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
import random
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from attn_policies.algorithms.bc import BCConfig, train_bc
from attn_policies.algorithms.bc_data import DatasetBuffer
from attn_policies.algorithms.bc_student import BCStudent, StudentAgent
from zoo import factory, progress
from zoo.config_checks import ConfigError, RunConfig
from zoo.evaluation import episode_lists, eval_json, evaluate_policy, summary
from zoo.metrics import BC_METRICS, MetricsLogger, renamed
from zoo.registry import resolve
from zoo.trainers import keys, state_dict_file
from zoo.trainers.base import (
    ProgressTable,
    check_teacher_experiment,
    load_init,
    load_state_dict,
    save_state_dict,
)
from zoo.trainers.bc_collection import collect_parts, dagger_data, dagger_schedule, run_samples
from zoo.trainers.bc_keys import BCKeys
from zoo.trainers.bc_teacher import check_trusted, config_function, load_teacher
from zoo.trainers.contract import KeyTypes, RunHandle, register
from zoo.trainers.sb3_state import tensors_of

logger = logging.getLogger(__name__)

ACTION_MODES = keys.choices(BCKeys, "teacher_actions")
STUDENT_KEYS = {"features_extractor_class", "features_extractor_kwargs", "net_arch"}
DEFAULT_EXTRACTOR = "stable_baselines3.common.torch_layers:FlattenExtractor"


def _same_weights(a: Path, b: Path) -> bool:
    """Whether two saved state dicts hold equal tensors (``False`` if either is missing)."""
    if not (a.exists() and b.exists()):
        return False
    x, y = (tensors_of(f) for f in (a, b))  # a zip bomb is refused unread
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def bc_config(run: RunConfig) -> BCConfig:
    """The run's :class:`BCConfig` (its seed is the run's)."""
    names = {f.name for f in dataclasses.fields(BCConfig)} - {"seed"}
    kwargs = {k: run.body[k] for k in names if run.body.get(k) is not None}
    if isinstance(kwargs.get("occlusion"), list):
        kwargs["occlusion"] = tuple(kwargs["occlusion"])
    try:
        return BCConfig(seed=run.seed, **kwargs)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{run.name}: {err}") from None


def _student_parts(run: RunConfig) -> dict[str, Any]:
    kwargs = dict(run.body.get("policy_kwargs") or {})
    unknown = set(kwargs) - STUDENT_KEYS
    if unknown:
        raise ConfigError(
            f"{run.name}: policy_kwargs of a BC student take {sorted(STUDENT_KEYS)}, "
            f"got {sorted(unknown)}"
        )
    name = kwargs.get("features_extractor_class", DEFAULT_EXTRACTOR)
    try:
        kwargs["features_extractor_class"] = (
            resolve("extractor", name) if isinstance(name, str) else name
        )
    except ValueError as err:
        raise ConfigError(f"{run.name}: policy_kwargs.features_extractor_class: {err}") from None
    factory.check_kwargs(
        f"{run.name}: policy_kwargs.features_extractor_kwargs",
        kwargs["features_extractor_class"],
        kwargs.get("features_extractor_kwargs") or {},
        skip=2,
    )
    return kwargs


def init_student(run: RunConfig, student: BCStudent) -> BCStudent:
    """``student`` with the weights ``init`` names (a bc run folder's best model, or a state
    dict file of the same student, read as tensors only); unchanged without ``init``."""
    if not run.body.get("init"):
        return student
    return load_init(student, run.body["init"], run.name, "student")


def make_student(run: RunConfig) -> tuple[BCStudent, spaces.Space]:
    """A freshly initialised student for the run's env, and the env's action space."""
    env = factory.make_single_env(run)
    try:
        student = BCStudent(env.observation_space, env.action_space, **_student_parts(run))
        return student, env.action_space
    finally:
        env.close()


@register("bc")
class BCTrainer:
    """Collects teacher data and fits the student with :func:`train_bc`."""

    config_model: type = BCKeys

    def config_keys(self, body: dict[str, Any]) -> KeyTypes:
        return keys.key_types(BCKeys)

    def check_trusted(self, run: RunConfig, trusted: Collection[str | Path]) -> None:
        """Before training: every pickled teacher file is named in ``trusted``."""
        check_trusted(run, trusted)

    def validate(self, run: RunConfig) -> None:
        keys.check(BCKeys, run)  # types, then env and teacher given, then counts in range
        teacher = run.body["teacher"]
        if isinstance(teacher, dict):
            check_teacher_experiment(run, teacher)
        for key in ("teacher_actions", "dagger_actions"):
            if keys.value(BCKeys, run, key) not in ACTION_MODES:
                raise ConfigError(
                    f"{run.name}: {key} must be one of {list(ACTION_MODES)}, got {run.body[key]!r}"
                )
        for entry, stack in (run.body.get("frame_store") or {}).items():
            if not isinstance(stack, int) or isinstance(stack, bool) or stack < 1:
                raise ConfigError(
                    f"{run.name}: frame_store.{entry} must be the frames per token (>= 1), "
                    f"got {stack!r}"
                )
        if isinstance(teacher, str) and not teacher.endswith(".zip") and not Path(teacher).is_dir():
            config_function(run, "teacher", teacher)
        view_spec = run.body.get("teacher_obs")
        if view_spec and ("." in view_spec or ":" in view_spec):
            config_function(run, "teacher_obs", view_spec)
        bc_config(run)
        _student_parts(run)
        if run.body.get("init") and not Path(run.body["init"]).exists():
            raise ConfigError(f"{run.name}: 'init': {run.body['init']} does not exist")
        factory.resolve_wrappers(factory.wrapper_specs(run.body.get("env_wrapper")))

    def probe(self, run: RunConfig) -> None:
        """Build the student once: the extractor must fit the env's observation space, and
        sampled actions and the ``kl`` loss need a Discrete action space."""
        student, action_space = make_student(run)
        init_student(run, student)
        factory.probe_eval_envs(run)
        sampled = [
            k for k in ("teacher_actions", "dagger_actions") if run.body.get(k) == "stochastic"
        ]
        if sampled and not isinstance(action_space, spaces.Discrete):
            raise ConfigError(
                f"{run.name}: {sampled[0]}: stochastic needs a Discrete action space, the env "
                f"has {action_space}"
            )
        if run.body.get("loss") == "kl" and not isinstance(action_space, spaces.Discrete):
            raise ConfigError(
                f"{run.name}: loss: kl needs a Discrete action space (a softmax), the env has "
                f"{action_space}; use mse for continuous actions"
            )

    def train(
        self,
        handle: RunHandle,
        callbacks: Sequence[Any] = (),
        progress_bar: bool = False,
        resume: bool = False,
    ) -> int:
        """Teacher data (``n_timesteps`` steps), then epochs of :func:`train_bc`.

        Returns the number of samples (``n_timesteps`` rounded up to a multiple of ``n_envs``).

        ``callbacks`` are called with every epoch's row (``epoch``, ``loss``, ``test_mean``
        when evaluated); one returning ``False`` stops training.
        """
        run: RunConfig = handle.config
        path = Path(handle.path)
        checkpoint = path / "checkpoints" / "bc_last.pt"
        torch.manual_seed(run.seed)
        progress.announce(path, resume=resume)
        teacher, view = load_teacher(run, path, handle.trusted)
        # Seeded again after the teacher is loaded: the run must not depend on how it was
        # loaded (building and seeding a model from its config moves the global streams).
        random.seed(run.seed)
        np.random.seed(run.seed)  # noqa: NPY002
        torch.manual_seed(run.seed)
        rounds, _, round_epochs = dagger_schedule(run)
        # room for every round's samples
        buffer = DatasetBuffer(run_samples(run), run.body.get("frame_store") or None)
        for part in collect_parts(run, path / "data", teacher, view):
            buffer.append(part)
        data = buffer.data
        student, action_space = make_student(run)
        init_student(run, student)  # a resumed run's checkpoint replaces these weights
        agent = StudentAgent(student, action_space)
        done: int | None = None  # epochs in the checkpoint a resumed run continues from
        if resume and checkpoint.exists():
            done = len(json.loads(torch.load(checkpoint, weights_only=True)["history"]))
        eval_env = factory.make_vec_env(
            run, n_envs=run.eval.n_envs, training=False, env_kwargs=run.eval.env_kwargs
        )
        log = ProgressTable(path / "progress.csv", ["epoch", "loss", "test_mean"], "epoch", done)
        metrics = MetricsLogger(path, done)
        with (path / "progress.csv").open() as fh:  # the best test so far, when resumed
            tests = [float(r["test_mean"]) for r in csv.DictReader(fh) if r["test_mean"]]
        best = max(tests, default=-np.inf)
        config = bc_config(run)
        # the step size's schedule spans every epoch of the run, the rounds' included
        total = config.epochs + rounds * round_epochs
        config = dataclasses.replace(config, lr_epochs=config.lr_epochs or total)
        lines = progress.lines(run.experiment, total, "epochs", done or 0)
        stopped = False
        test_mode = next(iter(run.eval.policies.values()))  # the first mode picks the best

        def on_epoch(row: dict[str, float]) -> bool:
            nonlocal best, stopped
            row = dict(row)
            if run.eval.freq and int(row["epoch"]) % run.eval.freq == 0:
                agent.seed(run.eval.seed)  # the same episodes, the same draws, after a resume
                result = evaluate_policy(
                    agent, eval_env, run.eval.n_episodes, test_mode, seed=run.eval.seed
                )
                row["test_mean"] = result["mean_reward"]
                if result["mean_reward"] >= best:  # ties go to the later, more trained student
                    best = result["mean_reward"]
                    save_state_dict(student, path / "best_model.pt")
                student.train()
            log.write(row)
            metrics.log(row["epoch"], renamed(row, BC_METRICS))
            handle.write_status(num_timesteps=len(data), epoch=int(row["epoch"]))
            if progress_bar:
                logger.info("epoch %d: loss %.4f", int(row["epoch"]), row["loss"])
            if lines is not None:
                test = f", test {best:.2f} (best)" if best > -np.inf else ""
                lines.update(int(row["epoch"]), f"loss {row['loss']:.4f}{test}")
            stopped = not all(cb(row) is not False for cb in callbacks)
            return not stopped

        try:
            for round_ in range(rounds + 1):
                if round_:
                    file = path / "data" / f"dagger-{round_:02d}.npz"
                    buffer.append(dagger_data(run, file, round_, teacher, view, agent))
                    data = buffer.data
                epochs = config.epochs + round_ * round_epochs
                train_bc(student, data, dataclasses.replace(config, epochs=epochs),
                         callback=on_epoch, checkpoint=checkpoint)  # fmt: skip
                if stopped:
                    break
        finally:
            metrics.close()
            eval_env.close()
        if lines is not None:
            lines.close()
        save_state_dict(student, path / "model.pt")
        return len(data)

    def model_file(self, path: Path, which: str) -> Path:
        return state_dict_file(path, which)

    def load(self, path: Path, run: RunConfig, which: str = "best") -> StudentAgent:
        """The saved student, ready to :meth:`StudentAgent.predict`."""
        student, action_space = make_student(run)
        load_state_dict(student, self.model_file(path, which), "student")
        return StudentAgent(student, action_space)

    def agent(self, path: Path, run: RunConfig, which: str = "best") -> StudentAgent:
        """The student agent (:meth:`load`)."""
        return self.load(path, run, which)

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
        """Deterministic student episodes with ``wrappers`` after the run's ``env_wrapper``.

        Raises:
            ValueError: a non-empty ``policy_kwargs`` (students have no test-time settings).
        """
        if policy_kwargs:
            raise ValueError(f"BC students take no test-time settings, got {policy_kwargs}")
        agent = self.agent(path, run, which)
        env = factory.make_vec_env(run, n_envs=n_envs or run.eval.n_envs, training=False,
                                   extra_wrappers=wrappers)  # fmt: skip
        try:
            result = evaluate_policy(agent, env, n_episodes, seed=seed)
        finally:
            env.close()
        return {"rewards": result["rewards"], "lengths": result["lengths"]}

    def _test(
        self, path: Path, run: RunConfig, which: str, n: int, seed: int
    ) -> dict[str, dict[str, Any]]:
        """Every mode of ``eval.policies`` and ``eval.final_policies`` on the same episodes."""
        env = factory.make_vec_env(run, n_envs=run.eval.n_envs, training=False)
        agent = self.agent(path, run, which)
        results = {}
        try:
            for name, mode in {**run.eval.policies, **run.eval.final_policies}.items():
                agent.seed(seed)
                results[name] = evaluate_policy(agent, env, n, mode, seed, run.eval.success)
        finally:
            env.close()
        return results

    def evaluate(
        self,
        path: Path,
        run: RunConfig,
        n_episodes: int | None = None,
        which: str = "best",
        seed: int | None = None,
    ) -> dict[str, Any]:
        """``eval.json``: test episodes (``eval.test_seed``) of every policy mode of ``eval``
        (deterministic unless the run says otherwise), like SB3 runs.

        With ``which="best"`` and a ``best_model.pt``, the last student is tested on the same
        episodes too (``last_model``).
        """
        path = Path(path)
        n = int(n_episodes or run.eval.final_episodes)
        seed = run.eval.test_seed if seed is None else int(seed)
        file = self.model_file(path, which)
        results = self._test(path, run, which, n, seed)
        samples = run_samples(run)
        out = eval_json(run, path, file, seed, n, results, num_timesteps=samples)
        # a run committed with its best model alone tests that one
        if which == "best" and file.name == "best_model.pt" and (path / "model.pt").exists():
            # the last epoch was often the best: then the same episodes need no second run
            same = _same_weights(file, path / "model.pt")
            last = results if same else self._test(path, run, "last", n, seed)
            out["last_model"] = {
                "model": "model.pt",
                "num_timesteps": samples,
                "policies": summary(last),
            }
        out["episodes"] = episode_lists(results)
        return out
