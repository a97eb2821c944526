"""Policies, env and population shared by the ES evaluator tests (test_es_eval, test_es_workers)."""

from __future__ import annotations

import numpy as np

from attn_policies.algorithms.es_eval import PolicyFactory

ENV = "attn_envs:attn_envs/CartPoleSwingUpHarder-v0"
PI = PolicyFactory("attn_policies.es_policies:AttentionNeuronPolicy.cartpole")
FNN = PolicyFactory("attn_policies.es_policies:FNNPolicy", {"obs_dim": 5, "action_dim": 1})
SEEDS = [11, 12, 13]


def population(n: int, dim: int, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((n, dim)) * 0.3).astype(np.float32)
