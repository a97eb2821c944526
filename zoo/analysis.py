"""What an AttentionNeuron's output ``m_t`` knows about its inputs (seed 001, E3).

The article fits a linear regression from the 16-dim ``m_t`` of its CartPole agent back to
each of the 5 observations, in their original order, while the agent sees them shuffled,
and reports the R² per input (x .354, x_dot .620, cos .626, sin .233, theta_dot .550).
:func:`input_regression` repeats that for any trained zoo agent whose policy contains an
:class:`~attn_policies.attention_neuron.AttentionNeuron` and whose env has vector observations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from attn_policies.attention_neuron import AttentionNeuron
from zoo.config_checks import ConfigError
from zoo.runs import Run, load
from zoo.trainers import get_trainer

__all__ = ["CARTPOLE_INPUTS", "input_regression", "r_squared"]

CARTPOLE_INPUTS = ("x", "x_dot", "cos_theta", "sin_theta", "theta_dot")


def r_squared(features: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """In-sample R² of a least-squares fit (with intercept) of each target column.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> f = rng.normal(size=(200, 3))
        >>> y = np.stack([f @ [1.0, 2.0, 0.0], rng.normal(size=200)], axis=1)
        >>> r_squared(f, y).round(2).tolist()
        [1.0, 0.02]
    """
    design = np.hstack([features, np.ones((len(features), 1))])
    coef, *_ = np.linalg.lstsq(design, targets, rcond=None)
    residual = ((targets - design @ coef) ** 2).sum(axis=0)
    total = ((targets - targets.mean(axis=0)) ** 2).sum(axis=0)
    return 1.0 - residual / np.where(total > 0, total, 1.0)


@torch.no_grad()
def input_regression(
    run: Run | str | Path,
    n_episodes: int = 100,
    seed: int = 0,
    shuffle: bool = True,
    which: str = "best",
) -> dict[str, Any]:
    """R² of each observation (original order) regressed on ``m_t`` over test episodes.

    The agent plays ``n_episodes`` episodes (seeds ``seed, seed+1, ...``) in one batch; with
    ``shuffle`` each episode feeds it its observation in a fixed random order, while the
    regression targets stay in the env's order. Every live step of every episode is a sample.

    Returns:
        ``{"inputs": {name: R²}, "n_samples": int, "n_episodes": int, "shuffle": bool}``.
    """
    from zoo.trainers.es_rollout import rollout_spec

    # a recipe's agent is its final stage's: that run's config builds the policy and the env
    handle = (run if isinstance(run, Run) else load(run)).acting()
    policy = get_trainer(handle.config.algo).load(handle.path, handle.config, which)
    modules = policy.modules() if isinstance(policy, nn.Module) else ()
    neurons = [m for m in modules if isinstance(m, AttentionNeuron)]
    if not isinstance(policy, nn.Module) or not neurons:
        raise ConfigError(f"{handle.path}: the policy has no AttentionNeuron layer to regress")
    codes: list[torch.Tensor] = []
    hook = neurons[0].register_forward_hook(lambda _m, _i, out: codes.append(out[0]))
    env = rollout_spec(handle.config).make_vector_env(n_episodes)
    try:
        # a seed per copy: Sync/AsyncVectorEnv take a list; VectorEnv's hint says int only
        obs, _ = env.reset(seed=[seed + i for i in range(n_episodes)])  # type: ignore[arg-type]
        if obs.ndim != 2:
            raise ConfigError(f"input_regression needs vector observations, got {obs.shape}")
        rng = np.random.default_rng(seed)
        n_inputs = obs.shape[1]
        order = np.stack(
            [rng.permutation(n_inputs) if shuffle else np.arange(n_inputs) for _ in obs]
        )
        rows = np.arange(n_episodes)[:, None]
        alive = np.ones(n_episodes, dtype=bool)
        samples_m: list[np.ndarray] = []
        samples_o: list[np.ndarray] = []
        state = None
        limit = handle.config.body.get("max_episode_steps")
        t = 0
        while alive.any() and (limit is None or t < limit):
            action, state = policy(torch.as_tensor(obs[rows, order]), state)
            samples_m.append(codes.pop().numpy()[alive])
            samples_o.append(obs[alive])
            obs, _, terminated, truncated, _ = env.step(action.numpy())
            alive &= ~(terminated | truncated)
            t += 1
    finally:
        hook.remove()
        env.close()
    m, o = np.concatenate(samples_m), np.concatenate(samples_o)
    names = (
        CARTPOLE_INPUTS
        if n_inputs == len(CARTPOLE_INPUTS)
        else tuple(f"obs_{i}" for i in range(n_inputs))
    )
    scores = r_squared(m, o)
    return {
        "inputs": {name: float(r) for name, r in zip(names, scores, strict=True)},
        "n_samples": len(m),
        "n_episodes": n_episodes,
        "shuffle": shuffle,
    }
