"""Behaviour-cloning runs (``algo: bc``): E4 Ant and E5 Puzzle Pong students.

Keys besides the common ones::

    env: Ant-v5                       # the student's env (its env_wrapper adds a_{t-1}, ...)
    env_kwargs: {}
    env_wrapper: [PreviousActionObservation]
    n_envs: 4
    teacher: {experiment: ant_teacher, budget: full}  # trained into RUN/teacher first
    # teacher: teachers/ant.zip + teacher_algo: ppo   # or a saved SB3 model
    # teacher: my_pkg.teachers:scripted               # or a callable obs -> (actions, targets)
    teacher_obs: observation          # Dict entry the teacher sees (or an import path)
    collect_env_kwargs: {}            # env_kwargs changes while collecting (shuffle: false)
    n_rollout_steps: 500              # steps per env of teacher data
    policy_kwargs:                    # the student: extractor + MLP head
      features_extractor_class: attention_neuron_vector
      features_extractor_kwargs: {n_queries: 32}
      net_arch: [32]
    loss: mse                         # teacher logits / means; cross_entropy: its actions
    epochs: 10
    batch_size: 64
    learning_rate: 1.0e-3
    grad_clip: 0.5
    prev_action_noise: 0.03
    occlusion: 0.0                    # or [low, high]: tokens dropped per batch
    tokens_key: null                  # Dict entry of the patch tokens to occlude
    eval: {freq: 2, n_episodes: 5, final_episodes: 100}   # freq counts epochs

The run folder holds ``teacher/`` (when trained here), ``progress.csv`` (epoch, loss, test
return), ``model.pt`` / ``best_model.pt`` (student state dicts) and ``eval.json``.
"""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from attn_policies.algorithms.bc import BCConfig, collect_rollouts, train_bc
from attn_policies.extractors import import_object
from zoo import factory
from zoo.config import ConfigError, RunConfig, check_type
from zoo.evaluation import evaluate_policy, summary
from zoo.registry import resolve

KEYS: dict[str, tuple[type, ...] | None] = {
    "env": (str,),
    "env_kwargs": (dict,),
    "env_wrapper": None,
    "n_envs": (int,),
    "teacher": (str, dict),
    "teacher_algo": (str,),
    "teacher_obs": (str,),
    "collect_env_kwargs": (dict,),
    "n_rollout_steps": (int,),
    "policy_kwargs": (dict,),
    "loss": (str,),
    "epochs": (int,),
    "batch_size": (int,),
    "learning_rate": (float,),
    "grad_clip": (float, int),
    "prev_action_noise": (float, int),
    "occlusion": (float, int, list),
    "tokens_key": (str,),
    "torch_threads": (int,),
}
STUDENT_KEYS = {"features_extractor_class", "features_extractor_kwargs", "net_arch"}


class BCStudent(nn.Module):
    """Extractor (``BaseFeaturesExtractor``) -> [Linear + tanh]* -> Linear to the action size."""

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        features_extractor_class: type[nn.Module],
        features_extractor_kwargs: dict[str, Any] | None = None,
        net_arch: Sequence[int] = (),
    ) -> None:
        super().__init__()
        self.extractor = features_extractor_class(
            observation_space, **(features_extractor_kwargs or {})
        )
        width = int(self.extractor.features_dim)
        layers: list[nn.Module] = []
        for size in net_arch:
            layers += [nn.Linear(width, size), nn.Tanh()]
            width = size
        discrete = isinstance(action_space, spaces.Discrete)
        out = int(action_space.n) if discrete else int(np.prod(action_space.shape))
        self.head = nn.Sequential(*layers, nn.Linear(width, out))

    def forward(self, obs: Any) -> torch.Tensor:
        return self.head(self.extractor(obs))


class StudentAgent:
    """``predict`` in SB3's signature, so :func:`zoo.evaluation.evaluate_policy` can play it."""

    def __init__(self, student: nn.Module, action_space: spaces.Space) -> None:
        self.student, self.action_space = student.eval(), action_space

    @torch.no_grad()
    def predict(self, obs: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = True) -> tuple[np.ndarray, None]:  # fmt: skip
        if isinstance(obs, dict):
            x: Any = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in obs.items()}
        else:
            x = torch.as_tensor(obs, dtype=torch.float32)
        out = self.student(x).numpy()
        if isinstance(self.action_space, spaces.Discrete):
            return out.argmax(axis=-1), None
        return np.clip(out, self.action_space.low, self.action_space.high), None


def bc_config(run: RunConfig) -> BCConfig:
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
    name = kwargs.get(
        "features_extractor_class", "stable_baselines3.common.torch_layers:FlattenExtractor"
    )
    try:
        kwargs["features_extractor_class"] = (
            resolve("extractor", name) if isinstance(name, str) else name
        )
    except (ValueError, ConfigError) as err:
        raise ConfigError(f"{run.name}: features_extractor_class: {err}") from None
    return kwargs


def make_student(run: RunConfig) -> tuple[BCStudent, spaces.Space]:
    env = factory.make_single_env(run)
    try:
        student = BCStudent(env.observation_space, env.action_space, **_student_parts(run))
        return student, env.action_space
    finally:
        env.close()


def _teacher_view(run: RunConfig) -> Callable[[Any], Any] | None:
    view = run.body.get("teacher_obs")
    if not view:
        return None
    if "." in view or ":" in view:
        return import_object(view)
    return lambda obs: obs[view]


def _teacher(run: RunConfig, path: Path) -> Any:
    spec = run.body["teacher"]
    if isinstance(spec, dict):
        import zoo

        folder = path / "teacher"
        if not (folder / "eval.json").exists():
            overrides = dict(spec.get("overrides") or {})
            zoo.train(spec["experiment"], budget=spec.get("budget", run.budget),
                      overrides=overrides, seed=run.seed, run_dir=folder)  # fmt: skip
        return zoo.load(folder).model("best")
    if spec.endswith(".zip"):
        algo = resolve("algo", run.body.get("teacher_algo", "ppo"))
        return algo.load(spec, device="cpu")
    return import_object(spec)


class BCTrainer:
    """Collects teacher data and fits the student with :func:`train_bc`."""

    def config_keys(self, body: dict[str, Any]) -> dict[str, Any]:
        return KEYS

    def validate(self, run: RunConfig) -> None:
        for key, types in KEYS.items():
            check_type(run.name, key, run.body.get(key), types)
        for key in ("env", "teacher"):
            if key not in run.body:
                raise ConfigError(f"{run.name}: missing required key {key!r}")
        teacher = run.body["teacher"]
        if isinstance(teacher, dict) and "experiment" not in teacher:
            raise ConfigError(f"{run.name}: teacher: a mapping needs 'experiment'")
        bc_config(run)
        _student_parts(run)
        factory.resolve_wrappers(factory.wrapper_specs(run.body.get("env_wrapper")))

    def probe(self, run: RunConfig) -> None:
        student, _ = make_student(run)  # the extractor fits the env's observation space
        del student

    def train(
        self,
        handle: Any,
        callbacks: Sequence[Any] = (),
        progress_bar: bool = False,
        resume: bool = False,
    ) -> int:
        run: RunConfig = handle.config
        path = Path(handle.path)
        if resume:
            raise ConfigError("bc runs cannot be resumed; train again")
        torch.manual_seed(run.seed)
        teacher = _teacher(run, path)
        view = _teacher_view(run)
        act = teacher
        if view is not None:
            from attn_policies.algorithms.bc import sb3_teacher

            inner = teacher if not hasattr(teacher, "predict") else sb3_teacher(teacher)

            def act(obs: Any) -> Any:
                return inner(view(obs))

        collect = dict(run.body.get("collect_env_kwargs") or {})
        collect_run = dataclasses.replace(
            run, body={**run.body, "env_kwargs": {**(run.body.get("env_kwargs") or {}), **collect}}
        )
        env = factory.make_vec_env(collect_run, training=False)
        env.seed(run.seed)
        try:
            data = collect_rollouts(act, env, int(run.body.get("n_rollout_steps", 500)))
        finally:
            env.close()
        student, action_space = make_student(run)
        agent = StudentAgent(student, action_space)
        eval_env = factory.make_vec_env(run, n_envs=run.eval.n_envs, training=False)
        log = path / "progress.csv"
        best = -np.inf

        def on_epoch(row: dict[str, float]) -> bool:
            nonlocal best
            row = dict(row)
            if run.eval.freq and int(row["epoch"]) % run.eval.freq == 0:
                result = evaluate_policy(agent, eval_env, run.eval.n_episodes, seed=run.eval.seed)
                row["test_mean"] = result["mean_reward"]
                if result["mean_reward"] >= best:
                    best = result["mean_reward"]
                    torch.save(student.state_dict(), path / "best_model.pt")
                student.train()
            new = not log.exists()
            with log.open("a", newline="") as fh:
                writer = csv.DictWriter(fh, fieldnames=["epoch", "loss", "test_mean"])
                if new:
                    writer.writeheader()
                writer.writerow(row)
            handle.write_status(num_timesteps=len(data), epoch=int(row["epoch"]))
            if progress_bar:
                print(f"epoch {int(row['epoch'])}: loss {row['loss']:.4f}", flush=True)
            return all(cb(row) is not False for cb in callbacks)

        try:
            train_bc(student, data, bc_config(run), callback=on_epoch)
        finally:
            eval_env.close()
        torch.save(student.state_dict(), path / "model.pt")
        return len(data)

    def model_file(self, path: Path, which: str) -> Path:
        if which not in ("best", "last"):
            raise ValueError(f"which must be 'best' or 'last', got {which!r}")
        names = ["best_model.pt", "model.pt"] if which == "best" else ["model.pt"]
        for name in names:
            if (Path(path) / name).exists():
                return Path(path) / name
        raise FileNotFoundError(f"{path} holds no trained student (model.pt)")

    def load(self, path: Path, run: RunConfig, which: str = "best") -> StudentAgent:
        student, action_space = make_student(run)
        state = torch.load(self.model_file(path, which), map_location="cpu", weights_only=True)
        student.load_state_dict(state)
        return StudentAgent(student, action_space)

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
        """Deterministic student episodes with ``wrappers`` after the run's ``env_wrapper``."""
        if policy_kwargs:
            raise ValueError(f"BC students take no test-time settings, got {policy_kwargs}")
        agent = self.load(path, run, which)
        env = factory.make_vec_env(run, n_envs=n_envs or run.eval.n_envs, training=False,
                                   extra_wrappers=wrappers)  # fmt: skip
        try:
            result = evaluate_policy(agent, env, n_episodes, seed=seed)
        finally:
            env.close()
        return {"rewards": result["rewards"], "lengths": result["lengths"]}

    def evaluate(
        self,
        path: Path,
        run: RunConfig,
        n_episodes: int | None = None,
        which: str = "best",
        seed: int | None = None,
    ) -> dict[str, Any]:
        path = Path(path)
        n = int(n_episodes or run.eval.final_episodes)
        seed = run.eval.test_seed if seed is None else int(seed)
        file = self.model_file(path, which)
        env = factory.make_vec_env(run, n_envs=run.eval.n_envs, training=False)
        try:
            result = evaluate_policy(self.load(path, run, which), env, n, seed=seed)
        finally:
            env.close()
        return {
            "experiment": run.experiment,
            "tag": run.tag,
            "budget": run.budget,
            "model": file.relative_to(path).as_posix(),
            "test_seed": seed,
            "n_episodes": n,
            "policies": summary({"deterministic": result}),
            "episodes": {
                "deterministic": {"rewards": result["rewards"], "lengths": result["lengths"]}
            },
        }
