"""Seeded, vectorised evaluation of agents (SB3's ``predict``) and a keep-best callback (rl-zoo3's).

A *policy mode* is how actions are taken: ``"deterministic"`` (greedy), ``"stochastic"``
(the policy's own sampling) or an ε in ``[0, 1]`` (ε-greedy around the deterministic action,
with ε-actions drawn from a generator seeded by the evaluation seed, never global numpy).
"""

from __future__ import annotations

import json
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecEnv, VecNormalize, sync_envs_normalization

from attn_policies.agents import Agent
from attn_policies.atomic import atomic_write
from zoo.config_checks import EvalConfig, RunConfig, read_json

Mode = str | float


def evaluate_policy(
    model: Agent,
    env: VecEnv,
    n_episodes: int,
    mode: Mode = "deterministic",
    seed: int = 0,
    success: str | None = None,
) -> dict[str, Any]:
    """Run exactly ``n_episodes`` episodes, split evenly across the envs, and summarise them.

    Episodes are counted from the Monitor's ``info["episode"]``, so life-loss resets of Atari
    wrappers do not end an episode. The env is reseeded with ``seed`` first: the same seed
    gives the same episodes.

    Args:
        model: an :class:`~attn_policies.agents.Agent` (an SB3 algorithm, a BC student, an
            ES policy's ``PolicyAgent``).
        env: a VecEnv whose envs are wrapped in ``Monitor``.
        n_episodes: episodes to run.
        mode: ``"deterministic"``, ``"stochastic"`` or ε.
        seed: seed of the env resets and of the ε draws.
        success: ``"terminated"``, ``"is_success"`` or None (no success rate).

    Returns:
        ``mean_reward``, ``std_reward``, ``mean_length``, ``std_length``, ``success_rate``
        (None without ``success``), ``n_episodes``, and per-episode ``rewards``/``lengths``.
    """
    n_envs = env.num_envs
    targets = np.array([(n_episodes + i) // n_envs for i in range(n_envs)])
    counts = np.zeros(n_envs, int)
    rng = np.random.default_rng(seed)
    action_space = env.action_space
    action_space.seed(int(rng.integers(2**31)))
    env.seed(seed)
    obs = env.reset()
    state, starts = None, np.ones(n_envs, bool)
    rewards: list[float] = []
    lengths: list[int] = []
    solved: list[bool] = []
    epsilon = None if isinstance(mode, str) else float(mode)
    while (counts < targets).any():
        # VecEnvObs admits tuples, which predict does not take (SB3's evaluate_policy
        # ignores the same hint)
        actions, state = model.predict(
            obs,
            state=state,
            episode_start=starts,
            deterministic=mode != "stochastic",
        )
        if epsilon:
            explore = rng.random(n_envs) < epsilon
            for i in np.flatnonzero(explore):
                actions[i] = action_space.sample()
        obs, _, dones, infos = env.step(actions)
        starts = dones
        for i in np.flatnonzero(dones):
            episode = infos[i].get("episode")
            if episode is None or counts[i] >= targets[i]:
                continue
            counts[i] += 1
            rewards.append(float(episode["r"]))
            lengths.append(int(episode["l"]))
            if success == "terminated":
                solved.append(not infos[i].get("TimeLimit.truncated", False))
            elif success == "is_success":
                solved.append(bool(infos[i].get("is_success", False)))
    return {"mode": mode, **episode_stats(rewards, lengths, solved if success else None)}


def episode_stats(
    rewards: list[float], lengths: list[int] | list[float], solved: list[bool] | None = None
) -> dict[str, Any]:
    """Mean and spread of test episodes, with the per-episode lists (as in ``eval.json``).

    Example:
        >>> stats = episode_stats([1.0, 3.0], [10, 20])
        >>> stats["mean_reward"], stats["std_length"], stats["success_rate"]
        (2.0, 5.0, None)
    """
    return {
        "n_episodes": len(rewards),
        "mean_reward": float(np.mean(rewards)),
        "std_reward": float(np.std(rewards)),
        "mean_length": float(np.mean(lengths)),
        "std_length": float(np.std(lengths)),
        "success_rate": float(np.mean(solved)) if solved is not None else None,
        "rewards": list(rewards),
        "lengths": list(lengths),
    }


def eval_json(
    run: RunConfig,
    path: Path,
    file: Path,
    seed: int,
    n: int,
    results: dict[str, Any],
    **fields: Any,
) -> dict[str, Any]:
    """The head of a run's ``eval.json``: the run, the model file tested, ``fields`` (step
    counts), the test seed and size, the :func:`float_environment` it ran in and each
    mode's :func:`summary`."""
    return {
        "experiment": run.experiment,
        "tag": run.tag,
        "budget": run.budget,
        "model": file.relative_to(path).as_posix(),
        **fields,
        "test_seed": seed,
        "n_episodes": n,
        "float_environment": float_environment(),
        "policies": summary(results),
    }


def float_environment() -> dict[str, Any]:
    """What decides a test's floating-point arithmetic besides the code and the seeds.

    Chaotic tasks (E3's swing-up over 1,000 steps) turn a last-bit difference in a matrix
    product into a different episode, so the same model and seeds can score a few tenths of a
    percent apart on CPUs whose kernels differ (AVX-512 vs AVX2) or at another thread count.
    Recording these lets a replay tell such a difference from a change in behaviour.
    """
    return {
        "torch": torch.__version__,
        "numpy": np.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": torch.get_num_threads(),
        "machine": platform.machine(),
    }


def episode_lists(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, list[Any]]]:
    """Each mode's per-episode ``rewards`` and ``lengths`` (the tail of ``eval.json``)."""
    return {k: {"rewards": r["rewards"], "lengths": r["lengths"]} for k, r in results.items()}


def final_steps_return(
    monitor_dir: str | Path, n_steps: int = 10_000, prefix: str = "train_"
) -> dict[str, Any]:
    r"""Mean return of the training episodes that end in the final ``n_steps`` time steps.

    Seed 003's table 1 metric ("average of rewards over final 10000 timesteps"), read from the
    run's Monitor logs (``<prefix>*.monitor.csv``) the way OpenAI baselines' results_plotter
    and rl-zoo3's plots read them: the episodes of all envs (and of every resumed part) in
    order of their end time, time steps = their cumulative lengths ``x``; an episode counts
    when its end lies in ``(x_last - n_steps, x_last]``. Lengths are in the Monitor's steps,
    which under SB3's ``AtariWrapper`` (Monitor innermost) are emulator frames. Returns are
    the Monitor's, i.e. unclipped game scores.

    Returns:
        ``final_steps``, ``mean_reward``, ``std_reward`` (None without episodes),
        ``n_episodes`` and ``total_steps`` (``x_last``).

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> rows = "r,l,t\n1.0,6000,1.0\n5.0,3000,2.0\n7.0,4000,3.0\n"
        >>> _ = (folder / "train_0.monitor.csv").write_text('#{"t_start": 0}\n' + rows)
        >>> r = final_steps_return(folder, 5_000)  # ends at 6000, 9000, 13000: the last two
        >>> r["mean_reward"], r["n_episodes"], r["total_steps"]
        (6.0, 2, 13000)
    """
    if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps < 1:
        raise ValueError(f"n_steps must be a positive integer, got {n_steps!r}")
    ends, returns, lengths = [], [], []
    for file in sorted(Path(monitor_dir).glob(f"{prefix}*.monitor.csv")):
        first, header, *rows = file.read_text().splitlines()
        if not rows:
            continue
        t_start = float(json.loads(first.lstrip("#"))["t_start"])
        cols = [header.split(",").index(c) for c in ("r", "l", "t")]
        table = np.array([[float(row.split(",")[c]) for c in cols] for row in rows])
        returns.append(table[:, 0])
        lengths.append(table[:, 1])
        ends.append(t_start + table[:, 2])
    empty = {"final_steps": n_steps, "mean_reward": None, "std_reward": None}
    if not returns or not sum(len(r) for r in returns):
        return {**empty, "n_episodes": 0, "total_steps": 0}
    order = np.argsort(np.concatenate(ends), kind="stable")
    r = np.concatenate(returns)[order]
    x = np.cumsum(np.concatenate(lengths)[order])
    window = r[x > x[-1] - n_steps]
    return {
        "final_steps": n_steps,
        "mean_reward": float(window.mean()),
        "std_reward": float(window.std()),
        "n_episodes": int(window.size),
        "total_steps": int(x[-1]),
    }


def evaluate_modes(
    model: Agent,
    env: VecEnv,
    cfg: EvalConfig,
    n_episodes: int,
    seed: int,
    final: bool = False,
) -> dict[str, dict[str, Any]]:
    """:func:`evaluate_policy` for every policy mode of ``cfg`` (and its ``final_policies``
    when ``final``), on the same episode seeds."""
    modes = {**cfg.policies, **cfg.final_policies} if final else cfg.policies
    return {
        name: evaluate_policy(model, env, n_episodes, mode, seed, cfg.success)
        for name, mode in modes.items()
    }


def select_score(results: dict[str, dict[str, Any]], select: str) -> float:
    """The model-selection score; episode length counts negatively (shorter is better)."""
    policy, _, metric = select.partition("/")
    value = float(results[policy][metric])
    return -value if metric == "mean_length" else value


def summary(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``results`` without the per-episode lists."""
    return {
        name: {k: v for k, v in r.items() if k not in ("rewards", "lengths")}
        for name, r in results.items()
    }


class KeepBestCallback(BaseCallback):
    """Evaluate every ``cfg.freq`` env steps and save the best model, as rl-zoo3's EvalCallback.

    Evaluations are appended to ``evaluations.json`` in the run folder; the model with the
    best ``cfg.select`` score so far is saved as ``best_model.zip`` (ties go to the later
    model). Evaluation points are the multiples of ``freq`` the step counter crosses, so a
    resumed run evaluates where an uninterrupted one would.

    Args:
        eval_env: a VecEnv of Monitor-wrapped envs, built like the training env.
        cfg: the run's evaluation block.
        run_dir: the run folder.
        on_eval: optional hook called with ``(num_timesteps, results)``.
    """

    def __init__(
        self,
        eval_env: VecEnv,
        cfg: EvalConfig,
        run_dir: str | Path,
        on_eval: Callable[[int, dict[str, Any]], None] | None = None,
    ) -> None:
        super().__init__()
        self.eval_env = eval_env
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.on_eval = on_eval
        self.history_path = self.run_dir / "evaluations.json"
        self.history: list[dict[str, Any]] = []
        if self.history_path.exists():
            self.history = read_json(self.history_path)
        self.best = max((h["score"] for h in self.history), default=-np.inf)
        self._last_bucket: int | None = None

    def _on_training_start(self) -> None:
        self._last_bucket = self.num_timesteps // self.cfg.freq
        # A resumed run restarts from its checkpoint: evaluations after it will be redone.
        kept = [h for h in self.history if h["step"] <= self.num_timesteps]
        if len(kept) != len(self.history):
            self.history = kept
            self.best = max((h["score"] for h in kept), default=-np.inf)
        # An evaluation cut short by an interrupt (the checkpoint is from its step) runs now.
        done = kept[-1]["step"] // self.cfg.freq if kept else 0
        if self._last_bucket > done:
            self.evaluate()

    def _on_step(self) -> bool:
        bucket = self.num_timesteps // self.cfg.freq
        if self._last_bucket is None or bucket <= self._last_bucket:
            return True
        self._last_bucket = bucket
        self.evaluate()
        return True

    def evaluate(self) -> dict[str, Any]:
        if isinstance(self.eval_env, VecNormalize):
            sync_envs_normalization(self.training_env, self.eval_env)
        results = evaluate_modes(
            self.model, self.eval_env, self.cfg, self.cfg.n_episodes, self.cfg.seed
        )
        assert self.cfg.select is not None  # EvalConfig.__post_init__ fills it in
        score = select_score(results, self.cfg.select)
        record = {"step": int(self.num_timesteps), "score": score, **summary(results)}
        if score >= self.best:
            self.best = score
            record["best"] = True
            from zoo.trainers.sb3_state import save_model, save_vecnormalize

            if isinstance(self.eval_env, VecNormalize):
                save_vecnormalize(self.eval_env, self.run_dir / "best_vecnormalize.npz")
            save_model(self.model, self.run_dir / "best_model.zip")
        self.history.append(record)
        atomic_write(self.history_path, json.dumps(self.history, indent=1))
        for name, r in summary(results).items():
            for metric in ("mean_reward", "mean_length", "success_rate"):
                if r[metric] is not None:
                    self.logger.record(f"eval/{name}/{metric}", r[metric])
        self.logger.dump(self.num_timesteps)
        if self.on_eval is not None:
            self.on_eval(self.num_timesteps, results)
        return record
