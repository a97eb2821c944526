"""Tests for attn_policies.algorithms.es_eval: batched, process-pool and Ray evaluators."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from _es import ENV, FNN, PI, SEEDS, population
from gymnasium import spaces

from attn_envs.envs.cartpole_swingup import CartPoleSwingUpEnv
from attn_policies.algorithms.es_eval import (
    BatchedEvaluator,
    PolicyFactory,
    RolloutSpec,
    default_action_fn,
)


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
    fast = BatchedEvaluator(RolloutSpec(PI, env_id=ENV, max_steps=80, compiled=False))
    slow = BatchedEvaluator(RolloutSpec(PI, env_id=ENV, max_steps=80, population_path=False))
    assert fast.population_path and not slow.population_path and not fast.compiled
    solutions = population(6, fast.num_parameters, seed=5)
    solutions[:3] *= 10  # wild pushes: some episodes end early, so rows get dropped
    returns = fast.evaluate(solutions, SEEDS)
    np.testing.assert_allclose(returns, slow.evaluate(solutions, SEEDS), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(fast.last_lengths, slow.last_lengths)
    assert fast.env_steps == slow.env_steps == fast.last_lengths.sum()
    assert fast.last_lengths.min() < 40 and fast.last_lengths.max() == 80  # rows did end early


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "torch"])
def test_population_path_does_not_depend_on_the_batch(compiled: bool) -> None:
    """Rows are computed independently: any subset or order of the population scores alike."""
    evaluator = BatchedEvaluator(RolloutSpec(PI, env_id=ENV, max_steps=60, compiled=compiled))
    assert evaluator.compiled == compiled
    solutions = population(5, evaluator.num_parameters, seed=2)
    solutions[::2] *= 8
    full = evaluator.evaluate(solutions, SEEDS)
    np.testing.assert_array_equal(evaluator.evaluate(solutions[::-1], SEEDS), full[::-1])
    np.testing.assert_array_equal(evaluator.evaluate(solutions[3:4], SEEDS), full[3:4])


@pytest.mark.parametrize(
    ("fast_kwargs", "slow_kwargs", "rtol"),
    [
        ({"compiled": False}, {"population_path": False}, 1e-4),  # torch step vs vmap
        ({}, {"compiled": False}, 1e-5),  # the compiled step vs the torch step
    ],
    ids=["torch_vs_vmap", "compiled_vs_torch"],
)
def test_population_path_with_obs_fn_and_more_inputs(
    fast_kwargs: dict, slow_kwargs: dict, rtol: float
) -> None:
    """obs_fn may change N (duplicated channels); the paths agree."""

    def dup(obs: np.ndarray) -> np.ndarray:
        return np.concatenate([obs, obs[:, ::-1]], axis=1)

    fast = BatchedEvaluator(RolloutSpec(PI, env_id=ENV, max_steps=40, **fast_kwargs))
    slow = BatchedEvaluator(RolloutSpec(PI, env_id=ENV, max_steps=40, **slow_kwargs))
    solutions = population(3, fast.num_parameters, seed=7)
    np.testing.assert_allclose(
        fast.evaluate(solutions, SEEDS, obs_fn=dup),
        slow.evaluate(solutions, SEEDS, obs_fn=dup),
        rtol=rtol,
        atol=rtol,
    )


def test_compiled_step_matches_the_torch_step() -> None:
    """The compiled AttentionNeuron step (the default) scores a population as the torch
    population step does, rows dropped as they end, with the same lengths and live steps.

    Over a short horizon: the swing-up under these wild weights is chaotic, so the paths'
    float32-ulp differences (tanh32, summation order) grow, by 30 steps, to 1e-4 of a
    return in one episode (measured), as between two BLAS builds.
    """
    fast = BatchedEvaluator(RolloutSpec(PI, env_id=ENV, max_steps=25))
    torch_path = BatchedEvaluator(RolloutSpec(PI, env_id=ENV, max_steps=25, compiled=False))
    assert fast.compiled and not torch_path.compiled
    solutions = population(8, fast.num_parameters, seed=11)
    solutions[:4] *= 10  # wild pushes: some episodes end early, so rows get dropped
    returns = fast.evaluate(solutions, SEEDS)
    np.testing.assert_allclose(returns, torch_path.evaluate(solutions, SEEDS), rtol=1e-5)
    np.testing.assert_array_equal(fast.last_lengths, torch_path.last_lengths)
    assert fast.env_steps == torch_path.env_steps == fast.last_lengths.sum()
    assert fast.last_lengths.min() < 15 and fast.last_lengths.max() == 25
    assert len(np.unique(returns.round(4))) > 10  # individuals and seeds really differ


def test_compiled_step_needs_float32() -> None:
    evaluator = BatchedEvaluator(RolloutSpec(PI, env_id=ENV, max_steps=5, dtype=torch.float64))
    assert evaluator.population_path and not evaluator.compiled


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
