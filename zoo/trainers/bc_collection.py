"""Where a BC run's samples come from: the teacher's steps, recorded in :data:`DATA_PARTS`
files so a killed run records only the rest, and DAgger rounds played by the student and
labelled by the teacher. See :mod:`zoo.trainers.bc_trainer` for the keys.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from attn_policies.algorithms.bc_collect import RolloutCollector
from attn_policies.algorithms.bc_data import BCDataset, Obs
from attn_policies.algorithms.bc_student import StudentAgent
from zoo import factory
from zoo.config_checks import RunConfig
from zoo.trainers.bc_keys import BCKeys
from zoo.trainers.keys import value, values

DATA_PARTS = 10  # files the teacher data is recorded in (a resume redoes at most one)


def _steps_per_env(run: RunConfig) -> int:
    """``n_timesteps`` split over the envs, rounded up like SB3's ``learn``."""
    n_envs = int(value(BCKeys, run, "n_envs"))
    return -(-int(value(BCKeys, run, "n_timesteps")) // n_envs)


def dagger_schedule(run: RunConfig) -> tuple[int, int, int]:
    """``(rounds, steps per env per round, epochs per round)``."""
    given = values(BCKeys, run)
    steps = -(-int(given.dagger_steps) // int(given.n_envs))
    return int(given.dagger_rounds), steps, int(given.dagger_epochs)


def run_samples(run: RunConfig) -> int:
    """Samples of a finished run: the teacher's steps and every DAgger round's."""
    rounds, steps, _ = dagger_schedule(run)
    return (_steps_per_env(run) + rounds * steps) * int(value(BCKeys, run, "n_envs"))


def collect_steps(
    run: RunConfig,
    teacher: Any,
    view: Callable[[Obs], Obs] | None,
    n_steps: int,
    seed: int,
    agent: StudentAgent | None = None,
) -> BCDataset:
    """``n_steps`` steps of every env of the run's collecting env (seeded ``seed``), labelled
    by the teacher; ``agent`` (a student) plays them instead of the teacher when given,
    sampling its actions (seeded ``seed``) with ``dagger_actions: stochastic``."""
    env = factory.make_vec_env(collect_run(run), training=False)
    deterministic = value(BCKeys, run, "dagger_actions") == "deterministic"
    try:
        env.seed(seed)
        actor = None
        if agent is not None:
            agent.seed(seed)
            actor = lambda obs: agent.predict(obs, deterministic=deterministic)[0]  # noqa: E731
        collector = RolloutCollector(
            teacher, env, _student_view(run, env.observation_space), view, actor
        )
        return collector.collect(n_steps)
    finally:
        env.close()


def dagger_data(
    run: RunConfig,
    file: Path,
    round_: int,
    teacher: Any,
    view: Callable[[Obs], Obs] | None,
    agent: StudentAgent,
) -> BCDataset:
    """Round ``round_``'s samples: the student plays (env seeded ``seed + 1000 * round_``),
    the teacher labels; loaded from ``file`` when a resumed run recorded it already."""
    if file.exists():
        return BCDataset.load(file)
    data = collect_steps(
        run, teacher, view, dagger_schedule(run)[1], run.seed + 1000 * round_, agent
    )
    data.save(file)
    return data


def collect_parts(
    run: RunConfig, folder: Path, teacher: Any, view: Callable[[Obs], Obs] | None
) -> list[BCDataset]:
    """The run's teacher data: ``n_timesteps`` steps in :data:`DATA_PARTS` files under
    ``folder``, the parts already there loaded, the others recorded (and saved).

    Parts recorded in one go continue the env's episodes, so an uninterrupted run's data is
    one :func:`~attn_policies.algorithms.bc_collect.collect_rollouts` of all the steps; the
    first part recorded after saved ones starts from a reset seeded ``seed + part`` (and, with
    ``teacher_actions: stochastic``, draws the teacher's actions from a generator seeded
    ``[seed, part]``).
    """
    n_steps = _steps_per_env(run)
    sizes = [len(a) for a in np.array_split(np.arange(n_steps), min(DATA_PARTS, n_steps))]
    parts: list[BCDataset] = []
    env = None
    student_view: Callable[[Obs], Obs] | None = None
    collector: RolloutCollector | None = None
    try:
        for i, size in enumerate(sizes):
            file = folder / f"part-{i:03d}.npz"
            if file.exists():
                parts.append(BCDataset.load(file))
                collector = None
                continue
            if collector is None:
                if env is None:
                    env = factory.make_vec_env(collect_run(run), training=False)
                    student_view = _student_view(run, env.observation_space)
                env.seed(run.seed + i)
                sample = run.body.get("teacher_actions") == "stochastic"
                collector = RolloutCollector(
                    teacher, env, student_view, view,
                    sample_teacher=np.random.default_rng([run.seed, i]) if sample else None,
                )  # fmt: skip
            parts.append(collector.collect(size))
            parts[-1].save(file)
    finally:
        if env is not None:
            env.close()
    return parts


def _student_view(run: RunConfig, collected: spaces.Space) -> Callable[[Obs], Obs] | None:
    """Drops the Dict entries that only the collecting env has (``collect_env_kwargs`` may
    add the teacher's own input, e.g. Puzzle Pong's ``ram_features``)."""
    if not isinstance(collected, spaces.Dict):
        return None
    env = factory.make_single_env(run)
    try:
        space = env.observation_space
    finally:
        env.close()
    if not isinstance(space, spaces.Dict):  # the student's Box is the Dict's "observation"
        return (lambda obs: obs["observation"]) if "observation" in collected.spaces else None
    keys = list(space.spaces)
    if keys == list(collected.spaces):
        return None
    return lambda obs: {k: obs[k] for k in keys}


def collect_run(run: RunConfig) -> RunConfig:
    """The run with ``collect_env_kwargs`` merged into ``env_kwargs``."""
    env_kwargs = {
        **(run.body.get("env_kwargs") or {}),
        **(run.body.get("collect_env_kwargs") or {}),
    }
    return dataclasses.replace(run, body={**run.body, "env_kwargs": env_kwargs})
