"""Tests for attn_policies.algorithms.es_eval: batched, process-pool and Ray evaluators."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from attn_envs.envs.cartpole_swingup import CartPoleSwingUpEnv
from attn_policies.algorithms.es_eval import (
    BatchedEvaluator,
    PolicyFactory,
    ProcessEvaluator,
    RayEvaluator,
    RolloutSpec,
    default_action_fn,
    make_evaluator,
)

ENV = "attn_envs:attn_envs/CartPoleSwingUpHarder-v0"
PI = PolicyFactory("attn_policies.neuron:AttentionNeuronPolicy.cartpole")
FNN = PolicyFactory("attn_policies.neuron:FNNPolicy", {"obs_dim": 5, "action_dim": 1})
SEEDS = [11, 12, 13]


def population(n: int, dim: int, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((n, dim)) * 0.3).astype(np.float32)


def loop_returns(policy_fn: PolicyFactory, solution: np.ndarray, seed: int, steps: int) -> float:
    """The original per-individual evaluation: one env, one network, batch 1."""
    policy = policy_fn()
    torch.nn.utils.vector_to_parameters(torch.as_tensor(solution), policy.parameters())
    env = CartPoleSwingUpEnv(harder=True)
    obs, _ = env.reset(seed=seed)
    state, total = None, 0.0
    with torch.no_grad():
        for _ in range(steps):
            action, state = policy(torch.as_tensor(obs)[None], state)
            obs, reward, terminated, truncated, _ = env.step(action[0].numpy())
            total += float(reward)
            if terminated or truncated:
                break
    return total


@pytest.mark.parametrize("policy_fn", [PI, FNN], ids=["attention_neuron", "fnn"])
def test_batched_matches_per_individual_loop(policy_fn: PolicyFactory) -> None:
    evaluator = BatchedEvaluator(RolloutSpec(policy_fn, env_id=ENV, max_steps=60))
    solutions = population(4, evaluator.num_parameters)
    returns = evaluator.evaluate(solutions, SEEDS)
    assert returns.shape == (4, 3)
    expected = [[loop_returns(policy_fn, s, seed, 60) for seed in SEEDS] for s in solutions]
    np.testing.assert_allclose(returns, expected, rtol=1e-4, atol=1e-4)
    assert len(np.unique(returns.round(6))) > 4  # individuals and seeds really differ


def test_seeds_are_shared_by_the_population() -> None:
    evaluator = BatchedEvaluator(RolloutSpec(FNN, env_id=ENV, max_steps=40))
    one = population(1, evaluator.num_parameters)
    same = evaluator.evaluate(np.repeat(one, 3, axis=0), [5, 6])
    np.testing.assert_array_equal(same[0], same[1])
    np.testing.assert_array_equal(same[0], same[2])
    assert same[0, 0] != same[0, 1]  # different task seeds, different episodes
    again = evaluator.evaluate(one, [5, 6])
    np.testing.assert_array_equal(again[0], same[0])  # population size does not matter


def test_lengths_and_env_steps_count_live_steps() -> None:
    evaluator = BatchedEvaluator(RolloutSpec(FNN, env_id=ENV, max_steps=25))
    solutions = population(3, evaluator.num_parameters, seed=3) * 10  # wild pushes end early
    evaluator.evaluate(solutions, SEEDS)
    lengths = evaluator.last_lengths
    assert lengths.shape == (3, 3) and lengths.max() <= 25
    assert evaluator.env_steps == lengths.sum()


def test_population_path_matches_vmap_and_skips_nothing_alive() -> None:
    """The AttentionNeuron's own population step gives vmap's returns, lengths and steps."""
    fast = BatchedEvaluator(RolloutSpec(PI, env_id=ENV, max_steps=80))
    slow = BatchedEvaluator(RolloutSpec(PI, env_id=ENV, max_steps=80, population_path=False))
    assert fast.population_path and not slow.population_path
    solutions = population(6, fast.num_parameters, seed=5)
    solutions[:3] *= 10  # wild pushes: some episodes end early, so rows get dropped
    returns = fast.evaluate(solutions, SEEDS)
    np.testing.assert_allclose(returns, slow.evaluate(solutions, SEEDS), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(fast.last_lengths, slow.last_lengths)
    assert fast.env_steps == slow.env_steps == fast.last_lengths.sum()
    assert fast.last_lengths.min() < 40 and fast.last_lengths.max() == 80  # rows did end early


def test_population_path_does_not_depend_on_the_batch() -> None:
    """Rows are computed independently: any subset or order of the population scores alike."""
    evaluator = BatchedEvaluator(RolloutSpec(PI, env_id=ENV, max_steps=60))
    solutions = population(5, evaluator.num_parameters, seed=2)
    solutions[::2] *= 8
    full = evaluator.evaluate(solutions, SEEDS)
    np.testing.assert_array_equal(evaluator.evaluate(solutions[::-1], SEEDS), full[::-1])
    np.testing.assert_array_equal(evaluator.evaluate(solutions[3:4], SEEDS), full[3:4])


def test_population_path_with_obs_fn_and_more_inputs() -> None:
    """obs_fn may change N (duplicated channels); both paths agree."""

    def dup(obs: np.ndarray) -> np.ndarray:
        return np.concatenate([obs, obs[:, ::-1]], axis=1)

    fast = BatchedEvaluator(RolloutSpec(PI, env_id=ENV, max_steps=40))
    slow = BatchedEvaluator(RolloutSpec(PI, env_id=ENV, max_steps=40, population_path=False))
    solutions = population(3, fast.num_parameters, seed=7)
    np.testing.assert_allclose(
        fast.evaluate(solutions, SEEDS, obs_fn=dup),
        slow.evaluate(solutions, SEEDS, obs_fn=dup),
        rtol=1e-4,
        atol=1e-4,
    )


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
from attn_policies.algorithms.es_eval import PolicyFactory, ProcessEvaluator, RolloutSpec
fnn = PolicyFactory("attn_policies.neuron:FNNPolicy", {"obs_dim": 5, "action_dim": 1})
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


def test_default_action_fn() -> None:
    out = np.array([[0.1, 0.9, -1.0], [2.0, -3.0, 0.5]])
    np.testing.assert_array_equal(default_action_fn(spaces.Discrete(3, start=1))(out), [2, 1])
    box = default_action_fn(spaces.Box(-1.0, 1.0, (3,)))(out)
    np.testing.assert_array_equal(box, np.clip(out, -1, 1).astype(np.float32))
    with pytest.raises(TypeError, match="action_fn"):
        default_action_fn(spaces.MultiBinary(2))


def test_generic_vector_env_path_matches_numpy_env() -> None:
    """A SyncVectorEnv of single envs gives the numpy batched env's episodes."""

    def sync(n: int) -> gym.vector.VectorEnv:
        return gym.vector.SyncVectorEnv([lambda: CartPoleSwingUpEnv(harder=True)] * n)

    numpy_env = BatchedEvaluator(RolloutSpec(FNN, env_id=ENV, max_steps=30))
    generic = BatchedEvaluator(RolloutSpec(FNN, vector_env_fn=sync, max_steps=30))
    solutions = population(2, 113, seed=4)
    np.testing.assert_allclose(
        generic.evaluate(solutions, SEEDS), numpy_env.evaluate(solutions, SEEDS), rtol=1e-6
    )
