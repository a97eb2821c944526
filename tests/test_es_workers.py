"""Tests for attn_policies.algorithms.es_workers (process pool and Ray evaluators)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from _es import ENV, FNN, PI, SEEDS, population

from attn_policies.algorithms.es_eval import BatchedEvaluator, RolloutSpec
from attn_policies.algorithms.es_workers import ProcessEvaluator, RayEvaluator, make_evaluator


def crash_once_env(marker: str, n: int) -> gym.vector.VectorEnv:
    """Kills its worker process the first time it is built (while ``marker`` exists)."""
    if os.path.exists(marker):
        os.remove(marker)
        os._exit(1)
    return gym.make_vec("attn_envs/CartPoleSwingUpHarder-v0", n, "vector_entry_point")


class CrashOnce:
    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __call__(self, n: int) -> gym.vector.VectorEnv:
        import attn_envs  # noqa: F401 - registers the ids in the spawned worker

        return crash_once_env(self.marker, n)


def test_process_pool_equals_batched_and_survives_a_crashed_worker(tmp_path: Path) -> None:
    marker = tmp_path / "crash"
    spec = RolloutSpec(PI, vector_env_fn=CrashOnce(marker), max_steps=40)
    batched = BatchedEvaluator(spec)
    solutions = population(5, batched.num_parameters, seed=1)
    expected = batched.evaluate(solutions, SEEDS)
    marker.touch()
    pool = ProcessEvaluator(spec, n_workers=2, max_retries=2)
    try:
        np.testing.assert_array_equal(pool.evaluate(solutions, SEEDS), expected)
        assert pool.retries == 1 and not marker.exists()
        assert pool.env_steps == batched.env_steps
        np.testing.assert_array_equal(pool.evaluate(solutions[:1], SEEDS), expected[:1])
    finally:
        pool.close()


def test_process_pool_retries_a_worker_that_died_while_idle() -> None:
    spec = RolloutSpec(FNN, env_id="attn_envs:attn_envs/CartPoleSwingUpHarder-v0", max_steps=5)
    pool = ProcessEvaluator(spec, n_workers=1, max_retries=1)
    solutions = np.zeros((2, pool.num_parameters), np.float32)
    try:
        expected = pool.evaluate(solutions, [0])
        for process in list(pool._pool._processes.values()):  # killed between generations
            os.kill(process.pid, signal.SIGKILL)
            process.join()
        np.testing.assert_array_equal(pool.evaluate(solutions, [0]), expected)
        assert pool.retries == 1
    finally:
        pool.close()


WORKER_PARENT = """
import sys, numpy as np
from attn_policies.algorithms.es_eval import PolicyFactory, RolloutSpec
from attn_policies.algorithms.es_workers import ProcessEvaluator
fnn = PolicyFactory("attn_policies.es_policies:FNNPolicy", {"obs_dim": 5, "action_dim": 1})
spec = RolloutSpec(fnn, env_id="attn_envs:attn_envs/CartPoleSwingUpHarder-v0", max_steps=5)
pool = ProcessEvaluator(spec, n_workers=1)
pool.evaluate(np.zeros((1, pool.num_parameters), np.float32), [0])
print(*[p.pid for p in pool._pool._processes.values()], flush=True)
sys.stdin.read()
"""


def test_workers_exit_when_the_main_process_is_sigkilled() -> None:
    import subprocess
    import sys
    import time

    parent = subprocess.Popen(
        [sys.executable, "-c", WORKER_PARENT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    workers = [int(pid) for pid in parent.stdout.readline().split()]
    assert workers
    parent.kill()
    parent.wait()

    def running(pid: int) -> bool:  # zombies (exited, not yet reaped) count as gone
        try:
            return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
        except OSError:
            return False

    deadline = time.time() + 5
    alive = workers
    while alive and time.time() < deadline:
        time.sleep(0.1)
        alive = [pid for pid in workers if running(pid)]
    assert not alive, f"orphaned workers {alive}"


class AlwaysCrash:
    def __call__(self, n: int) -> gym.vector.VectorEnv:
        raise RuntimeError("broken env")


def test_process_pool_gives_up_after_max_retries() -> None:
    pool = ProcessEvaluator(
        RolloutSpec(FNN, vector_env_fn=AlwaysCrash()), n_workers=1, max_retries=1
    )
    try:
        with pytest.raises(RuntimeError, match=r"failed 2 times.*broken env"):
            pool.evaluate(np.zeros((2, 113), np.float32), [0])
    finally:
        pool.close()


def test_ray_equals_batched() -> None:
    import ray

    spec = RolloutSpec(PI, env_id=ENV, max_steps=40)
    solutions = population(5, BatchedEvaluator(spec).num_parameters, seed=2)
    expected = BatchedEvaluator(spec).evaluate(solutions, SEEDS)
    evaluator = RayEvaluator(spec, n_workers=2)
    try:
        np.testing.assert_array_equal(evaluator.evaluate(solutions, SEEDS), expected)
        pids = ray.get([actor.pid.remote() for actor in evaluator.actors])
        assert len(set(pids)) == 2 and os.getpid() not in pids
    finally:
        evaluator.close()
        ray.shutdown()


def test_make_evaluator_validates() -> None:
    spec = RolloutSpec(FNN, env_id=ENV)
    assert isinstance(make_evaluator("batched", spec), BatchedEvaluator)
    with pytest.raises(ValueError, match="evaluator must be one of"):
        make_evaluator("threads", spec)
    with pytest.raises(TypeError, match="n_workers"):
        make_evaluator("batched", spec, n_workers=2)
    with pytest.raises(ValueError, match=r"solutions must be \(population, 113\)"):
        BatchedEvaluator(spec).evaluate(np.zeros((2, 7)), [0])
