"""Training SB3 algorithms (PPO, A2C, DQN, Double DQN, ...) into a run folder."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import configure
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.vec_env import VecNormalize

from zoo import factory
from zoo.config import ConfigError, RunConfig
from zoo.evaluation import KeepBestCallback, evaluate_modes, summary

RL_KEYS: dict[str, tuple[type, ...] | None] = {
    "env": (str,),
    "env_kwargs": (dict,),
    "env_wrapper": (list, str, dict),
    "n_envs": (int,),
    "vec_env": (str,),
    "frame_stack": (int,),
    "normalize": (bool, dict),
    "policy": (str,),
    "policy_kwargs": (dict,),
    "torch_threads": (int,),
}


class CheckpointCallback(BaseCallback):
    """Save ``checkpoints/last*`` every ``save_freq`` steps, at a point a resume can continue.

    Off-policy algorithms are saved on the step (the replay buffer holds everything). On-policy
    algorithms are saved at the next rollout start, after the update, so the checkpoint never
    holds a half-collected rollout; an interrupt likewise records the step count at the start
    of the current rollout, so a resumed run collects it again and ends where an
    uninterrupted run would.
    """

    def __init__(self, run_dir: Path, save_freq: int) -> None:
        super().__init__()
        self.dir = run_dir / "checkpoints"
        self.save_freq = save_freq
        self.rollout_start = 0
        self._last_bucket = 0
        self._pending = False

    def _on_training_start(self) -> None:
        self.rollout_start = self.num_timesteps
        if self.save_freq:
            self._last_bucket = self.num_timesteps // self.save_freq

    def _on_rollout_start(self) -> None:
        self.rollout_start = self.num_timesteps
        if self._pending:
            self._pending = False
            save_checkpoint(self.model, self.dir)

    def _on_step(self) -> bool:
        if self.save_freq and self.num_timesteps // self.save_freq > self._last_bucket:
            self._last_bucket = self.num_timesteps // self.save_freq
            if isinstance(self.model, OffPolicyAlgorithm):
                save_checkpoint(self.model, self.dir)
            else:
                self._pending = True
        return True


def save_checkpoint(model: BaseAlgorithm, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    model.save(directory / "last.zip")
    if isinstance(model, OffPolicyAlgorithm):
        model.save_replay_buffer(directory / "last_replay_buffer.pkl")
    env = model.get_vec_normalize_env()
    if env is not None:
        env.save(str(directory / "last_vecnormalize.pkl"))


class SB3Trainer:
    """Any SB3 algorithm (``ppo``, ``a2c``, ``dqn``, ``double_dqn``, ``qrdqn``, ...)."""

    def config_keys(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            algo = factory.resolve("algo", str(body.get("algo")))
        except ValueError as err:
            raise ConfigError(f"'algo': {err}") from None
        return {**RL_KEYS, **dict.fromkeys(factory.hyperparameter_names(algo))}

    def validate(self, run: RunConfig) -> None:
        """Static checks: types, required keys, classes and keyword arguments resolve."""
        from zoo.config import check_type

        for key, types in RL_KEYS.items():
            check_type(run.name, key, run.body.get(key), types)
        for key in ("env", "policy", "n_timesteps"):
            if key not in run.body:
                raise ConfigError(f"{run.name}: missing required key {key!r}")
        if run.body.get("vec_env", "dummy") not in ("dummy", "subproc"):
            raise ConfigError(f"{run.name}: 'vec_env' must be 'dummy' or 'subproc'")
        algo = factory.algo_class(run)
        policy = factory.policy_class(run, algo)
        factory.resolve_policy_kwargs(run, policy)
        factory.resolve_hyperparams(run, algo)
        factory.resolve_wrappers(factory.wrapper_specs(run.body.get("env_wrapper")))

    def probe(self, run: RunConfig) -> None:
        """Build the env and the model once: a wrapper or extractor that does not fit the
        env's spaces fails here, before any file is written."""
        try:
            env = factory.make_vec_env(run, n_envs=1)
        except ConfigError:
            raise
        except Exception as err:  # gym id typos, wrappers that do not fit the spaces, ...
            raise ConfigError(f"{run.name}: the env stack does not build: {err}") from err
        try:
            factory.make_model(run, env, probe=True)
        except ConfigError:
            raise
        except Exception as err:
            raise ConfigError(f"{run.name}: the model does not fit the env: {err}") from err
        finally:
            env.close()

    def train(
        self,
        handle: Any,
        callbacks: Sequence[Any] = (),
        progress_bar: bool = False,
        resume: bool = False,
    ) -> int:
        run: RunConfig = handle.config
        path: Path = handle.path
        if run.body.get("torch_threads"):
            torch.set_num_threads(int(run.body["torch_threads"]))
        # One Monitor file set per start or resume: Monitor overwrites existing files.
        part = len(list((path / "logs").glob("part*"))) if (path / "logs").exists() else 0
        venv = factory.make_vec_env(run, monitor_dir=path / "monitor", prefix=f"train_p{part}_")
        ckpt = path / "checkpoints"
        if resume:
            if not (ckpt / "last.zip").exists():
                raise ConfigError(f"{path} has no checkpoint to resume from")
            if isinstance(venv, VecNormalize):
                venv = VecNormalize.load(str(ckpt / "last_vecnormalize.pkl"), venv.venv)
            model = factory.algo_class(run).load(
                ckpt / "last.zip", env=venv, device=run.body.get("device", "cpu")
            )
            if isinstance(model, OffPolicyAlgorithm) and (ckpt / "last_replay_buffer.pkl").exists():
                model.load_replay_buffer(ckpt / "last_replay_buffer.pkl")
        else:
            model = factory.make_model(run, venv)
        model.set_logger(configure(str(path / "logs" / f"part{part}"), ["csv", "tensorboard"]))

        n_timesteps = int(run.body["n_timesteps"])
        save_freq = int(run.body.get("save_freq", 0) or max(n_timesteps // 10, 1))
        checkpoint = CheckpointCallback(path, save_freq)
        cbs: list[Any] = [checkpoint]
        eval_env = None
        if run.eval.freq:
            eval_env = factory.make_vec_env(run, n_envs=run.eval.n_envs, training=False)
            cbs.append(KeepBestCallback(eval_env, run.eval, path))
        cbs.extend(callbacks)
        remaining = n_timesteps - model.num_timesteps
        try:
            if remaining > 0:
                model.learn(
                    remaining,
                    callback=cbs,
                    reset_num_timesteps=not resume,
                    progress_bar=progress_bar,
                )
        except KeyboardInterrupt:
            if not isinstance(model, OffPolicyAlgorithm):
                model.num_timesteps = checkpoint.rollout_start
            save_checkpoint(model, ckpt)
            handle.write_status(num_timesteps=int(model.num_timesteps))
            raise
        finally:
            venv.close()
            if eval_env is not None:
                eval_env.close()
        save_checkpoint(model, ckpt)
        model.save(path / "model.zip")
        if isinstance(model.get_vec_normalize_env(), VecNormalize):
            model.get_vec_normalize_env().save(str(path / "vecnormalize.pkl"))
        return int(model.num_timesteps)

    def model_file(self, path: Path, which: str) -> tuple[Path, Path]:
        """The model file and its VecNormalize statistics file (which may not exist)."""
        if which not in ("best", "last"):
            raise ValueError(f"which must be 'best' or 'last', got {which!r}")
        candidates = [
            ("model.zip", "vecnormalize.pkl"),
            ("checkpoints/last.zip", "checkpoints/last_vecnormalize.pkl"),
        ]
        if which == "best":
            candidates.insert(0, ("best_model.zip", "best_vecnormalize.pkl"))
        for model, norm in candidates:
            if (path / model).exists():
                return path / model, path / norm
        raise FileNotFoundError(f"{path} holds no trained model (model.zip or best_model.zip)")

    def load(self, path: Path, run: RunConfig, which: str = "best") -> BaseAlgorithm:
        file, _ = self.model_file(Path(path), which)
        return factory.algo_class(run).load(file, device=run.body.get("device", "cpu"))

    def _evaluate_file(
        self, run: RunConfig, model_file: Path, norm: Path, n: int, seed: int
    ) -> tuple[int, dict[str, dict[str, Any]]]:
        model = factory.algo_class(run).load(model_file, device=run.body.get("device", "cpu"))
        env = factory.make_vec_env(run, n_envs=run.eval.n_envs, training=False)
        if isinstance(env, VecNormalize) and norm.exists():
            env = VecNormalize.load(str(norm), env.venv)
            env.training, env.norm_reward = False, False
        try:
            return int(model.num_timesteps), evaluate_modes(model, env, run.eval, n, seed)
        finally:
            env.close()

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
        out: dict[str, Any] = {
            "experiment": run.experiment,
            "tag": run.tag,
            "budget": run.budget,
            "model": file.relative_to(path).as_posix(),
            "num_timesteps": steps,
            "test_seed": seed,
            "n_episodes": n,
            "policies": summary(results),
        }
        if which == "best" and file.name == "best_model.zip":
            last, last_norm = self.model_file(path, "last")
            steps, last_results = self._evaluate_file(run, last, last_norm, n, seed)
            out["last_model"] = {
                "model": last.relative_to(path).as_posix(),
                "num_timesteps": steps,
                "policies": summary(last_results),
            }
        out["episodes"] = {
            k: {"rewards": r["rewards"], "lengths": r["lengths"]} for k, r in results.items()
        }
        return out
