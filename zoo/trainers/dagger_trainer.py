"""DAgger behaviour cloning of an ES policy from a teacher run (``algo: dagger``, issue 12).

The E3 warm start: clone the FNN teacher into the permutation-invariant AttentionNeuron
agent (inputs shuffled once per episode for the student), then fine-tune it with CMA-ES
(``algo: cmaes`` with ``init:`` naming this run's folder). E4's behaviour cloning as the
article did it (``ant_pi_bc`` in zoo/configs/ant_bc.yml) is the same trainer with
``beta: teacher``, ``collect_rounds``, ``batch_episodes`` and ``prev_action_noise``. See
:mod:`attn_policies.algorithms.dagger` for the algorithm.

Keys besides the common ones: :class:`DAggerKeys` (their table: ``docs/trainer_keys.md``);
``eval.freq`` counts rounds.

The run folder holds ``model.pt`` (the last student) and ``best_model.pt`` (the one with the
best test return), both state dicts of the policy, so a CMA-ES run's ``init:`` can name the
folder; ``metrics.csv`` (:mod:`zoo.metrics`), ``progress.csv`` (round, env steps, beta,
loss, test return; rounds that only collect are not tested), ``evaluations.json``,
``eval.json`` and ``checkpoints/`` (student and Adam state as tensors, the kept rounds' data
as ``.npz``, written after every round). ``--resume`` continues bit for bit from the last
finished round.
"""

from __future__ import annotations

import pickle
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

import zoo
from attn_policies.algorithms.dagger import DAgger, DAggerConfig
from attn_policies.algorithms.es_eval import BatchedEvaluator
from zoo import progress as zoo_progress
from zoo.config_checks import ConfigError, RunConfig
from zoo.metrics import DAGGER_METRICS, MetricsLogger, renamed
from zoo.trainers import base, es_rollout, keys
from zoo.trainers.base import ProgressTable, read_json, save_state_dict
from zoo.trainers.cmaes_trainer import CMAESZooTrainer
from zoo.trainers.contract import RunHandle, register
from zoo.trainers.keys import key


@dataclass(frozen=True)
class DAggerKeys:
    """The keys of ``algo: dagger`` runs (defaults of the algorithm's from
    :class:`~attn_policies.algorithms.dagger.DAggerConfig`)."""

    teacher: str | dict[str, Any] | None = key(
        None,
        "a zoo run folder of an ES-style policy (its best model, read as tensors only), or "
        "`{experiment: NAME, budget: B}` trained into RUN/teacher first (null: give it with "
        "`--set teacher=FOLDER`)",
    )
    teacher_temperature: float | int | None = key(
        None, "T: the teacher's output tanh(z) becomes tanh(z / T), a softer target"
    )
    env: str = key(doc="a Gymnasium env id", required=True)
    env_kwargs: dict[str, Any] = key({}, "kwargs of the env")
    env_wrapper: Any = key([], "Gymnasium wrappers, as for algo: cmaes")
    policy: str = key(doc="the student, named as for algo: cmaes", required=True)
    policy_kwargs: dict[str, Any] = key({}, "the student's kwargs")
    action_fn: str | None = key(None, "import path mapping raw outputs to env actions")
    n_rounds: int = key(doc="DAgger rounds (collect n_envs episodes, then train)", required=True)
    n_envs: int = key(DAggerConfig.n_envs, "episodes per round")
    window: int = key(DAggerConfig.window, "truncated-BPTT steps per update")
    learning_rate: float | int = key(DAggerConfig.learning_rate, "Adam's step size")
    max_grad_norm: float | int = key(DAggerConfig.max_grad_norm, "gradient clipping norm")
    keep_rounds: int = key(DAggerConfig.keep_rounds, "train on the last this many rounds' data")
    shuffle_inputs: bool = key(
        DAggerConfig.shuffle_inputs, "one input permutation per episode for the student"
    )
    max_episode_steps: int | None = key(None, "cap on collected and test episode steps")
    collect_steps: int | None = key(None, "cap on collected episode steps only (E4: 500)")
    beta: Literal["dagger", "teacher"] | float | int = key(
        DAggerConfig.beta,
        "teacher share per round: dagger (1, 0.5, 0, 0.5, ...), teacher (1 always: behaviour "
        "cloning) or a number",
    )
    collect_rounds: int = key(
        DAggerConfig.collect_rounds,
        "K > 0: rounds 1..K only collect (all kept); each later round is one epoch over them",
    )
    batch_episodes: int = key(
        DAggerConfig.batch_episodes, "trajectories per minibatch (0: a round's data at once)"
    )
    prev_action_noise: float | int = key(
        DAggerConfig.prev_action_noise, "std of the noise on the previous action fed in training"
    )
    handover: int = key(
        DAggerConfig.handover,
        "H > 0: teacher-driven copies hand over to the student at a step drawn from [0, H)",
    )
    teacher_action_noise: float | int = key(
        DAggerConfig.teacher_action_noise,
        "std of Gaussian noise on the actions the teacher plays (DART); targets stay clean",
    )
    torch_threads: int | None = key(None, "torch threads (null: one)")


# What a truncated or tampered checkpoint raises (torch.load with weights_only, np.load, JSON).
CHECKPOINT_ERRORS = (
    OSError,
    EOFError,
    KeyError,
    ValueError,
    RuntimeError,
    pickle.UnpicklingError,
    zipfile.BadZipFile,
)
TEACHER_ALGOS = ("cmaes", "dagger")  # runs whose model is an ES policy module
PROGRESS_FIELDS = ["round", "env_steps", "beta", "loss", "seconds", "test_mean", "test_std"]


def dagger_config(run: RunConfig) -> DAggerConfig:
    given = keys.values(DAggerKeys, run)
    beta = given.beta
    try:
        return DAggerConfig(
            n_envs=int(given.n_envs),
            # else the env's own limit
            max_steps=int(given.collect_steps or given.max_episode_steps or 10**6),
            window=int(given.window),
            learning_rate=float(given.learning_rate),
            max_grad_norm=float(given.max_grad_norm),
            keep_rounds=int(given.keep_rounds),
            shuffle_inputs=bool(given.shuffle_inputs),
            seed=run.seed,
            beta=beta if isinstance(beta, str) else float(beta),
            collect_rounds=int(given.collect_rounds),
            batch_episodes=int(given.batch_episodes),
            prev_action_noise=float(given.prev_action_noise),
            handover=given.handover,
            teacher_action_noise=float(given.teacher_action_noise),
        )
    except ValueError as err:
        raise ConfigError(f"{run.name}: {err}") from None


def soften(model: nn.Module, temperature: float) -> nn.Module:
    """Divide the input of ``model``'s last ``nn.Tanh`` by ``temperature`` (in place).

    A bang-bang teacher (tanh of a large pre-activation) becomes a smooth one with the same
    switching surface, for a student to fit with MSE. E3's FNN scores 610 ± 418 with
    ``T = 300`` and 643 ± 420 without, over 100 episodes
    (the softened-teacher route: ``docs/lab_notes/e3_cartpole.md``).

    Raises:
        ValueError: ``temperature <= 0``, or ``model`` has no ``nn.Tanh``.

    Example:
        >>> net = nn.Sequential(nn.Linear(1, 1), nn.Tanh())
        >>> with torch.no_grad():
        ...     _ = net[0].weight.fill_(10.0), net[0].bias.zero_()
        >>> round(soften(net, 20.0)(torch.ones(1, 1)).item(), 4)  # tanh(10 / 20)
        0.4621
    """
    if not temperature > 0:
        raise ValueError(f"teacher_temperature must be > 0, got {temperature!r}")
    tanhs = [m for m in model.modules() if isinstance(m, nn.Tanh)]
    if not tanhs:
        raise ValueError(
            f"teacher_temperature needs a teacher ending in a tanh ({type(model).__name__})"
        )
    tanhs[-1].register_forward_pre_hook(lambda _module, args: (args[0] / temperature,))
    return model


def teacher_folder(run: RunConfig, path: Path | None = None) -> Path:
    """The teacher's run folder: ``teacher`` itself, or for an experiment mapping the run's
    ``teacher/`` (trained there first when ``path``, the run folder, is given)."""
    spec = run.body.get("teacher")
    if spec is None:
        raise ConfigError(
            f"{run.name}: no 'teacher': name a trained run folder with --set teacher=FOLDER"
            " (or a zoo experiment to train first: teacher: {experiment: NAME})"
        )
    if not isinstance(spec, dict):
        return Path(str(spec))
    if path is None:
        raise ConfigError(f"{run.name}: the teacher experiment is trained with the run")
    return base.train_teacher_experiment(run, spec, path / "teacher")


def load_teacher(run: RunConfig, path: Path | None = None) -> nn.Module:
    """The ``teacher`` run's best model (tensors only), softened by ``teacher_temperature``
    when given (:func:`soften`); any failure is one ConfigError. A teacher experiment is
    trained into ``path / "teacher"`` first."""
    source = teacher_folder(run, path)
    if not source.exists():
        hint = (
            f"make it with `attn-zoo import <the authors' AttentionNeuron/pretrained/"
            f"{source.name}> --out {source}`"
            if source.parent.name == "pretrained"
            else "train it first (attn-zoo train ...) or point 'teacher' at a run folder"
        )
        raise ConfigError(f"{run.name}: 'teacher': no run folder {source}; {hint}")
    try:
        teacher = zoo.load(source)
        if teacher.config.algo not in TEACHER_ALGOS:  # refused before any file is loaded
            raise ConfigError(
                f"{source} is an algo: {teacher.config.algo} run; a teacher is a run of "
                f"{' or '.join(TEACHER_ALGOS)}"
            )
        model = teacher.model()
    except (FileNotFoundError, ConfigError, ValueError) as err:
        raise ConfigError(f"{run.name}: 'teacher': {err}") from None
    if not isinstance(model, nn.Module):
        raise ConfigError(f"{run.name}: 'teacher': {source} is not a torch policy run")
    if run.body.get("teacher_temperature") is not None:
        try:
            soften(model, float(run.body["teacher_temperature"]))
        except ValueError as err:
            raise ConfigError(f"{run.name}: {err}") from None
    return model.eval()


@register("dagger")
class DAggerZooTrainer(CMAESZooTrainer):
    """Trains an ES policy by DAgger; loading and evaluation are those of ``algo: cmaes``."""

    config_model: type = DAggerKeys

    def check_resume(self, path: Path, run: RunConfig) -> None:
        """No read ahead (CMA-ES's would misread a DAgger checkpoint): :meth:`train` reads
        the checkpoint, after building the teacher it needs."""

    def validate(self, run: RunConfig) -> None:
        # A config may leave `teacher` to the command line (--set teacher=FOLDER: E4's is the
        # authors' checkpoint, imported on the user's machine); probe asks for it.
        keys.check(DAggerKeys, run)
        es_rollout.policy_builder(run)
        es_rollout.check_policy_memory(run)  # before anything builds the student
        dagger_config(run)
        teacher = run.body.get("teacher")
        if teacher is None:
            pass
        elif isinstance(teacher, dict):
            base.check_teacher_experiment(run, teacher)
        # A misfit teacher fails here; a missing one (the git-ignored imported ant_mlp) in
        # probe, still before anything is written, as algo: cmaes treats `init`.
        elif Path(str(teacher)).exists():
            load_teacher(run)

    def probe(self, run: RunConfig) -> None:
        """The student fits the env (one step), and so does the teacher (one trained with
        the run is built when it has been trained)."""
        super().probe(run)
        if isinstance(run.body.get("teacher"), dict):
            return
        teacher, spec = load_teacher(run), es_rollout.rollout_spec(run)
        env = spec.make_vector_env(1)
        try:
            obs, _ = env.reset(seed=0)
            with torch.no_grad():
                out = teacher(torch.as_tensor(obs, dtype=torch.float32))
            action = out[0] if isinstance(out, tuple) else out
            env.step(action.numpy())
        except Exception as err:
            raise ConfigError(f"{run.name}: the teacher does not fit the env: {err}") from err
        finally:
            env.close()

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
        n_rounds = int(run.body["n_rounds"])
        spec = es_rollout.rollout_spec(run)
        with torch.random.fork_rng():  # the student's initial weights follow the run's seed
            torch.manual_seed(run.seed)
            student = es_rollout.policy_factory(run)()
        teacher = load_teacher(run, path)
        dagger = DAgger(student, teacher, spec.make_vector_env, dagger_config(run))
        evaluations: list[dict[str, Any]] = []
        if resume and (ckpt / "trainer.json").exists():  # killed before round 1: start over
            try:
                dagger.restore(ckpt)
            except CHECKPOINT_ERRORS as err:
                raise ConfigError(f"{ckpt}: unreadable DAgger checkpoint ({err})") from None
            if (path / "evaluations.json").exists():
                evaluations = read_json(path / "evaluations.json")
            evaluations = [e for e in evaluations if e["round"] <= dagger.round]
            # a stop between the checkpoint and the status write left the status behind it
            handle.write_status(num_timesteps=dagger.env_steps, round=dagger.round)
        done = dagger.round if resume else None
        progress = ProgressTable(path / "progress.csv", PROGRESS_FIELDS, "round", done)
        metrics = MetricsLogger(path, dagger.env_steps if resume else None)
        tester = BatchedEvaluator(spec) if run.eval.freq else None
        zoo_progress.announce(path, resume=resume)
        lines = zoo_progress.lines(run.experiment, n_rounds, "rounds", dagger.round)
        seeds = [run.eval.seed + i for i in range(run.eval.n_episodes)]
        try:
            while dagger.round < n_rounds:
                start = time.perf_counter()
                record: dict[str, Any] = dagger.step()
                record["seconds"] = round(time.perf_counter() - start, 3)
                trained = dagger.cfg.trains(dagger.round - 1)
                if tester is not None and trained and dagger.round % run.eval.freq == 0:
                    base.periodic_test(
                        tester,
                        student,
                        seeds,
                        record,
                        evaluations,
                        ("round", dagger.round),
                        dagger.env_steps,
                        path,
                    )
                progress.write(record)
                metrics.log(dagger.env_steps, renamed(record, DAGGER_METRICS))
                dagger.save(ckpt)
                handle.write_status(num_timesteps=dagger.env_steps, round=dagger.round)
                if lines is not None:
                    lines.update(dagger.round, _latest(record, evaluations))
                if not all(cb(record) is not False for cb in callbacks):
                    break
        finally:
            metrics.close()
            if tester is not None:
                tester.close()
        if lines is not None:
            lines.close(dagger.round)
        save_state_dict(student, path / "model.pt")
        return dagger.env_steps


def _latest(record: dict[str, Any], evaluations: list[dict[str, Any]]) -> str:
    text = f"loss {record['loss']:.4f}"
    if evaluations:
        text += f", test {evaluations[-1]['test_mean']:.1f} at round {evaluations[-1]['round']}"
    return text
