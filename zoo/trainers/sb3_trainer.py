"""Training SB3 algorithms (PPO, A2C, DQN, Double DQN, ...) into a run folder.

The run's keys, curriculum stages and memory bound are :mod:`zoo.trainers.sb3_config`'s, its
checkpoints :mod:`zoo.trainers.sb3_checkpoint`'s, its files' format
:mod:`zoo.trainers.sb3_state`'s; this module wires them to SB3's ``learn``, loading and
evaluation.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import configure
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.vec_env import VecEnv, VecNormalize

from attn_policies.atomic import make_folder
from zoo import factory, progress
from zoo.config_checks import ConfigError, RunConfig
from zoo.evaluation import (
    KeepBestCallback,
    episode_lists,
    eval_json,
    evaluate_modes,
    evaluate_policy,
    final_steps_return,
    summary,
)
from zoo.metrics import MetricsLogger
from zoo.trainers import SB3_ALGOS, keys
from zoo.trainers.contract import KeyTypes, RunHandle, register
from zoo.trainers.sb3_checkpoint import CheckpointCallback, checkpoint_files, default_save_freq
from zoo.trainers.sb3_config import RL_KEYS, SB3Keys, check_curriculum, check_memory_of, stages
from zoo.trainers.sb3_state import (
    ArtefactError,
    check_replay_buffer,
    load_model,
    load_replay_buffer,
    load_vecnormalize,
    read_counters,
    read_logger_state,
    refuse_pickle,
    restore_logger,
    save_model,
    save_vecnormalize,
)


def build_model(
    run: RunConfig, env: VecEnv, file: Path | None = None, probe: bool = False
) -> BaseAlgorithm:
    """The run's model rebuilt from its config, with ``file``'s tensors loaded (never
    unpickled; see :mod:`zoo.trainers.sb3_state`)."""
    model = factory.make_model(run, env, probe=probe)
    if file is not None:
        load_model(model, file)
    return model


def _norm_env(env: VecEnv, norm: Path) -> VecEnv:
    """Evaluation env with the run's saved statistics (``.npz``); a pickle is refused."""
    if not isinstance(env, VecNormalize):
        return env
    if norm.with_suffix(".pkl").exists() and not norm.exists():
        raise refuse_pickle(norm.with_suffix(".pkl"), "VecNormalize")
    if norm.exists():
        load_vecnormalize(env, norm)
        env.training, env.norm_reward = False, False
    return env


class RunLogInterval(BaseCallback):
    """Dump an on-policy model's logs when the run's rollout count is a multiple of
    ``interval``, as SB3's ``learn(log_interval=...)`` does, but counting rollouts from the
    run's start instead of from the ``learn`` call: a resumed run (or a curriculum's later
    stage) then logs at the steps an uninterrupted run logs at. Goes last in the callback
    list (every other callback's ``on_rollout_end`` values land in this dump, as in SB3's),
    with ``learn(log_interval=None)``."""

    def __init__(self, interval: int) -> None:
        super().__init__()
        self.interval = interval

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        model = self.model
        assert isinstance(model, OnPolicyAlgorithm)
        rollouts = model.num_timesteps // (model.n_steps * model.n_envs)
        if rollouts % self.interval == 0:
            model.dump_logs(rollouts)


def _log_interval(model: BaseAlgorithm) -> int | None:
    """The ``log_interval`` ``model.learn`` uses by default (A2C 100, PPO 1)."""
    default = inspect.signature(type(model).learn).parameters["log_interval"].default
    return default if isinstance(default, int) else None


def _latest_eval(callbacks: Sequence[Any]) -> str | None:
    """``eval <select> <score> at <step>`` of the latest periodic evaluation, for progress."""
    keep = next((cb for cb in callbacks if isinstance(cb, KeepBestCallback)), None)
    if keep is None or not keep.history:
        return None
    last = keep.history[-1]
    return f"eval {keep.cfg.select} {last['score']:.3g} at {last['step']:,}"


@register(*SB3_ALGOS, import_paths=True)
class SB3Trainer:
    """Any SB3 algorithm (``ppo``, ``a2c``, ``dqn``, ``double_dqn``, ``qrdqn``, ...)."""

    config_model: type = SB3Keys  # and the algorithm's hyper-parameters

    def config_keys(self, body: dict[str, Any]) -> KeyTypes:
        try:
            algo = factory.resolve("algo", str(body.get("algo")))
        except ValueError as err:
            raise ConfigError(f"'algo': {err}") from None
        return {**RL_KEYS, **dict.fromkeys(factory.hyperparameter_names(algo))}

    def validate(self, run: RunConfig) -> None:
        """Static checks: types, required keys, classes and keyword arguments resolve."""
        keys.check(SB3Keys, run)
        if keys.value(SB3Keys, run, "vec_env") not in keys.choices(SB3Keys, "vec_env"):
            raise ConfigError(f"{run.name}: 'vec_env' must be 'dummy' or 'subproc'")
        algo = factory.algo_class(run)
        policy = factory.policy_class(run, algo)
        factory.resolve_policy_kwargs(run, policy)
        factory.resolve_hyperparams(run, algo)
        check_curriculum(run)
        for stage, _ in stages(run):
            factory.resolve_wrappers(factory.wrapper_specs(stage.body.get("env_wrapper")))

    def probe(self, run: RunConfig) -> None:
        """Build each stage's env and the model once: a wrapper or extractor that does not
        fit the env's spaces fails here, before any file is written."""
        spaces = None
        for stage, _ in stages(run):
            try:
                env = factory.make_vec_env(stage, n_envs=1)
            except ConfigError:
                raise
            except Exception as err:  # gym id typos, wrappers that do not fit the spaces, ...
                raise ConfigError(f"{stage.name}: the env stack does not build: {err}") from err
            try:
                if spaces is None:
                    spaces = (env.observation_space, env.action_space)
                    check_memory_of(stage, *spaces)
                    probe_model = factory.make_model(stage, env, probe=True)
                    if run.body.get("init"):
                        self._init(probe_model, env, run)
                elif (env.observation_space, env.action_space) != spaces:
                    raise ConfigError(
                        f"{stage.name}: curriculum stage {stage.body['env']} has spaces "
                        f"{env.observation_space}, {env.action_space}; the first stage has "
                        f"{spaces[0]}, {spaces[1]}"
                    )
            except ConfigError:
                raise
            except Exception as err:
                raise ConfigError(f"{run.name}: the model does not fit the env: {err}") from err
            finally:
                env.close()
        factory.probe_eval_envs(stages(run)[-1][0])  # the checks run on the last stage

    def train(
        self,
        handle: RunHandle,
        callbacks: Sequence[Any] = (),
        progress_bar: bool = False,
        resume: bool = False,
    ) -> int:
        run: RunConfig = handle.config
        path: Path = handle.path
        plan = stages(run)
        # One Monitor file set per start or resume (Monitor overwrites existing files). SB3's
        # logger opens progress.csv with "w": its folder is made here, inside the run folder
        # (a linked logs/ is replaced, never written through) and always a new one.
        logs = make_folder(path / "logs", inside=path)
        part = len(list(logs.glob("part*")))
        while (logs / f"part{part}").exists() or (logs / f"part{part}").is_symlink():
            part += 1  # a planted part folder (with links in it) is never reused
        make_folder(logs / f"part{part}", inside=path)
        ckpt = path / "checkpoints"
        model: BaseAlgorithm | None = None
        # A run killed before its first checkpoint resumes from step 0.
        restore = resume and (ckpt / "last.zip").exists()
        done = int(read_counters(ckpt / "last.zip").get("num_timesteps", 0)) if restore else 0
        logger = configure(str(logs / f"part{part}"), ["csv", "tensorboard"])
        metrics = MetricsLogger(path, done if resume else None)  # resumed: rows past `done` go
        logger.output_formats.append(metrics.sb3_writer())
        if restore:  # what the interrupted run had recorded but not yet written
            restore_logger(logger, read_logger_state(ckpt / "last.zip"))

        n_timesteps = plan[-1][1]
        save_freq = int(run.body.get("save_freq") or default_save_freq(n_timesteps))
        checkpoint = CheckpointCallback(path, save_freq)
        cbs: list[BaseCallback] = [metrics.episode_callback()]
        eval_env = None
        if run.eval.freq:
            # Curricula are evaluated on their last (target) task throughout.
            eval_env = factory.make_vec_env(
                plan[-1][0], n_envs=run.eval.n_envs, training=False, env_kwargs=run.eval.env_kwargs
            )
            cbs.append(KeepBestCallback(eval_env, run.eval, path))
        cbs.append(checkpoint)  # after the evaluation of its step (see CheckpointCallback)
        cbs.extend(callbacks)
        progress.announce(path, resume=resume)
        lines = progress.sb3_callback(run.experiment, n_timesteps, lambda: _latest_eval(cbs))
        if lines is not None:
            cbs.append(lines)
        first_learn = not restore
        try:
            for i, (stage, end) in enumerate(plan):
                if (model.num_timesteps if model is not None else done) >= end:
                    continue
                prefix = f"train_p{part}_" if len(plan) == 1 else f"train_p{part}_s{i}_"
                venv = factory.make_vec_env(stage, monitor_dir=path / "monitor", prefix=prefix)
                if model is None:
                    model = factory.make_model(stage, venv)
                    if restore:
                        self._restore(model, ckpt, venv)
                    elif run.body.get("init"):
                        self._init(model, venv, run)
                else:
                    stats_file = checkpoint_files(ckpt, int(model.num_timesteps))[1]
                    if isinstance(venv, VecNormalize) and stats_file.exists():
                        load_vecnormalize(venv, stats_file)
                    model.set_env(venv)
                model.set_logger(logger)
                learn_cbs: list[BaseCallback] = cbs
                extra: dict[str, Any] = {}
                interval = _log_interval(model)
                if isinstance(model, OnPolicyAlgorithm) and interval:
                    learn_cbs, extra = [*cbs, RunLogInterval(interval)], {"log_interval": None}
                try:
                    model.learn(
                        end - model.num_timesteps,
                        callback=learn_cbs,
                        reset_num_timesteps=first_learn,
                        progress_bar=progress_bar,
                        **extra,
                    )
                finally:
                    venv.close()
                first_learn = False
                checkpoint.save_now()
        except KeyboardInterrupt:
            if model is not None and checkpoint.save_interrupted():
                handle.write_status(num_timesteps=int(model.num_timesteps))
            raise
        finally:
            metrics.close()
            if eval_env is not None:
                eval_env.close()
        if model is None:  # resumed after the last step (e.g. cut during the final test)
            venv = factory.make_vec_env(plan[-1][0], n_envs=1)
            model = factory.make_model(plan[-1][0], venv)
            self._restore(model, ckpt, venv)
            venv.close()
        stats = model.get_vec_normalize_env()
        if isinstance(stats, VecNormalize):
            save_vecnormalize(stats, path / "vecnormalize.npz")
        save_model(model, path / "model.zip")
        return int(model.num_timesteps)

    def _init(self, model: BaseAlgorithm, venv: VecEnv, run: RunConfig) -> None:
        """A warm start: ``init``'s weights and optimiser state (a run folder's best model,
        else its last; or an SB3 ``.zip``), and its ``VecNormalize`` statistics (the folder's
        ``.npz``) where the run normalises; the step counters start at 0. Read as tensors and
        arrays only; anything that does not fit is one :class:`ConfigError` naming ``init``."""
        source = Path(run.body["init"])
        if not source.exists():
            raise ConfigError(f"{run.name}: 'init': {source} does not exist")
        try:
            file, stats = self.model_file(source, "best") if source.is_dir() else (source, None)
        except FileNotFoundError as err:
            raise ConfigError(f"{run.name}: 'init': {err}") from None
        try:
            load_model(model, file, counters=False)
            if isinstance(venv, VecNormalize) and stats is not None and stats.exists():
                load_vecnormalize(venv, stats)
        except (ArtefactError, OSError, ValueError, KeyError) as err:
            one_line = " ".join(str(err).split())  # torch lists each misfit on its own line
            raise ConfigError(f"{run.name}: 'init': {one_line}") from None

    def check_resume(self, path: Path, run: RunConfig) -> None:
        """Read the checkpoint as :meth:`train` will resume it, writing nothing, so that a
        refused one (pickled, tampered, of another model) leaves the run folder as it was.

        The model is the run's (its replay buffer shrunk: the buffer file is checked by its
        array names, types and shapes, read from the ``.npz`` headers)."""
        ckpt = path / "checkpoints"
        if not (ckpt / "last.zip").exists():
            return  # a resume from step 0
        done = int(read_counters(ckpt / "last.zip").get("num_timesteps", 0))
        plan = stages(run)
        stage = next((s for s, end in plan if done < end), plan[-1][0])
        env = factory.make_vec_env(stage, n_envs=1)  # no Monitor files
        try:
            model = factory.make_model(stage, env, probe=True)
            self._restore(model, ckpt, env, buffer=False)
            buffer_file = checkpoint_files(ckpt, int(model.num_timesteps))[0]
            if isinstance(model, OffPolicyAlgorithm) and buffer_file.exists():
                assert model.replay_buffer is not None  # built with the model
                check_replay_buffer(model.replay_buffer, buffer_file)
            read_logger_state(ckpt / "last.zip")
        finally:
            env.close()

    @staticmethod
    def _restore(model: BaseAlgorithm, ckpt: Path, venv: VecEnv, buffer: bool = True) -> None:
        """Checkpoint tensors, counters, replay buffer and statistics into a model built
        from the config (no file is unpickled)."""
        for old in ("last_replay_buffer.pkl", "last_vecnormalize.pkl"):
            if (ckpt / old).exists():
                raise refuse_pickle(ckpt / old, "checkpoint file")
        load_model(model, ckpt / "last.zip")
        buffer_file, stats_file = checkpoint_files(ckpt, int(model.num_timesteps))
        if buffer and isinstance(model, OffPolicyAlgorithm) and buffer_file.exists():
            assert model.replay_buffer is not None  # built with the model
            load_replay_buffer(model.replay_buffer, buffer_file)
        if isinstance(venv, VecNormalize) and stats_file.exists():
            load_vecnormalize(venv, stats_file)

    def model_file(self, path: Path, which: str) -> tuple[Path, Path]:
        """The model file and its VecNormalize statistics file (which may not exist)."""
        if which not in ("best", "last"):
            raise ValueError(f"which must be 'best' or 'last', got {which!r}")
        last = path / "checkpoints" / "last.zip"
        step = int(read_counters(last).get("num_timesteps", 0)) if last.exists() else 0
        last_stats = checkpoint_files(Path("checkpoints"), step)[1].as_posix()
        candidates = [
            ("model.zip", "vecnormalize.npz"),
            ("checkpoints/last.zip", last_stats),
        ]
        if which == "best":
            candidates.insert(0, ("best_model.zip", "best_vecnormalize.npz"))
        for model, norm in candidates:
            if (path / model).exists():
                return path / model, path / norm
        raise FileNotFoundError(f"{path} holds no trained model (model.zip or best_model.zip)")

    def load(self, path: Path, run: RunConfig, which: str = "best") -> BaseAlgorithm:
        """The model rebuilt from the run's config with the file's tensors (no unpickling;
        the env is a throw-away one of the run's, replay buffers shrunk)."""
        file, _ = self.model_file(Path(path), which)
        env = factory.make_vec_env(stages(run)[-1][0], n_envs=1, training=False)
        try:
            return build_model(stages(run)[-1][0], env, file, probe=True)
        finally:
            env.close()

    def agent(self, path: Path, run: RunConfig, which: str = "best") -> BaseAlgorithm:
        """The model itself: SB3 algorithms act through their own ``predict``."""
        return self.load(path, run, which)

    def _evaluate_file(
        self, run: RunConfig, model_file: Path, norm: Path, n: int, seed: int
    ) -> tuple[int, dict[str, dict[str, Any]]]:
        env = factory.make_vec_env(stages(run)[-1][0], n_envs=run.eval.n_envs, training=False)
        try:
            model = build_model(stages(run)[-1][0], env, model_file, probe=True)
            env = _norm_env(env, norm)
            results = evaluate_modes(model, env, run.eval, n, seed, final=True)
            return int(model.num_timesteps), results
        finally:
            env.close()

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
        """Deterministic test episodes with ``wrappers`` after the run's own ``env_wrapper``.

        SB3 policies have no test-time settings: a non-empty ``policy_kwargs`` raises
        ``ValueError``.
        """
        if policy_kwargs:
            raise ValueError(f"SB3 policies take no test-time settings, got {policy_kwargs}")
        file, norm = self.model_file(Path(path), which)
        env = factory.make_vec_env(
            stages(run)[-1][0],
            n_envs=n_envs or run.eval.n_envs,
            training=False,
            extra_wrappers=wrappers,
        )
        try:
            model = build_model(stages(run)[-1][0], env, file, probe=True)
            env = _norm_env(env, norm)
            result = evaluate_policy(model, env, n_episodes, "deterministic", seed)
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
        """Test episodes (``eval.test_seed``) for every policy mode; with ``which="best"``
        the last model is evaluated on the same episodes too (``last_model``)."""
        path = Path(path)
        n = int(n_episodes or run.eval.final_episodes)
        seed = run.eval.test_seed if seed is None else int(seed)
        file, norm = self.model_file(path, which)
        steps, results = self._evaluate_file(run, file, norm, n, seed)
        out = eval_json(run, path, file, seed, n, results, num_timesteps=steps)
        if run.eval.final_steps:  # seed 003's metric leads, the test episodes beside it
            training = final_steps_return(path / "monitor", run.eval.final_steps)
            out = {"training_return": training, **out}
        if which == "best" and file.name == "best_model.zip":
            last, last_norm = self.model_file(path, "last")
            steps, last_results = self._evaluate_file(run, last, last_norm, n, seed)
            out["last_model"] = {
                "model": last.relative_to(path).as_posix(),
                "num_timesteps": steps,
                "policies": summary(last_results),
            }
        out["episodes"] = episode_lists(results)
        return out
