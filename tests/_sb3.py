"""Shared checks every SB3 feature extractor in attn_policies must pass, and torch helpers.

``assert_extractor_contract`` checks output shape, gradient flow into every parameter and
seeded determinism; ``assert_sb3_roundtrip`` trains a few hundred steps with PPO, A2C or DQN,
saves, loads, and checks the loaded model predicts the same actions.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3 import A2C, DQN, PPO
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.preprocessing import preprocess_obs
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

ALGOS: dict[str, type[BaseAlgorithm]] = {"ppo": PPO, "a2c": A2C, "dqn": DQN}

# Tiny settings: enough updates to move every weight, fast enough for CI.
_ALGO_KWARGS: dict[str, dict[str, Any]] = {
    "ppo": {"n_steps": 64, "batch_size": 32, "n_epochs": 1},
    "a2c": {"n_steps": 8},
    "dqn": {"learning_starts": 32, "buffer_size": 500, "batch_size": 16, "train_freq": 4},
}


def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def perturb_(module: nn.Module, scale: float = 0.3, seed: int = 1) -> nn.Module:
    """Move every parameter off its initial value (LayerNorm weights are 1/0 at init)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn(p.shape, generator=gen))
    return module


def sample_batch(space: spaces.Space, batch: int, seed: int = 0) -> Any:
    """A preprocessed float batch as the policy would see it (images scaled to [0, 1])."""
    space.seed(seed)
    raw = [space.sample() for _ in range(batch)]
    if isinstance(space, spaces.Dict):
        stacked: Any = {k: torch.as_tensor(np.stack([r[k] for r in raw])) for k in space.spaces}
    else:
        stacked = torch.as_tensor(np.stack(raw))
    return preprocess_obs(stacked, space, normalize_images=True)


def assert_extractor_contract(
    make_extractor: Callable[[], BaseFeaturesExtractor], batch: int = 3, seed: int = 0
) -> BaseFeaturesExtractor:
    """Shape, gradient into every parameter, and same weights + output given the seed."""
    torch.manual_seed(seed)
    ext = make_extractor()
    obs = sample_batch(ext._observation_space, batch, seed)
    out = ext(obs)
    assert out.shape == (batch, ext.features_dim), (out.shape, ext.features_dim)
    assert torch.isfinite(out).all()
    if out.requires_grad:
        out.square().sum().backward()
    dead = [n for n, p in ext.named_parameters() if p.requires_grad and p.grad is None]
    assert not dead, f"no gradient reaches {dead}"
    torch.manual_seed(seed)
    again = make_extractor()
    with torch.no_grad():
        torch.testing.assert_close(again(obs), out.detach(), rtol=0, atol=0)
    return ext


def assert_sb3_roundtrip(
    make_env: Callable[[], gym.Env],
    extractor_class: type[BaseFeaturesExtractor],
    extractor_kwargs: dict[str, Any],
    algo: str,
    tmp_path: Path,
    n_timesteps: int = 200,
    policy: str | type | None = None,
    policy_kwargs: dict[str, Any] | None = None,
    seed: int = 0,
) -> BaseAlgorithm:
    """Learn ``n_timesteps`` with ``algo``, save, load; loaded and trained predict alike."""
    env = make_env()
    if policy is None:
        policy = (
            "MultiInputPolicy" if isinstance(env.observation_space, spaces.Dict) else "MlpPolicy"
        )
    kwargs = {
        "features_extractor_class": extractor_class,
        "features_extractor_kwargs": extractor_kwargs,
        **(policy_kwargs or {}),
    }
    cls = ALGOS[algo]
    model = cls(policy, env, policy_kwargs=kwargs, seed=seed, device="cpu", **_ALGO_KWARGS[algo])
    before = {k: v.clone() for k, v in model.policy.state_dict().items()}
    model.learn(n_timesteps)
    changed = [k for k, v in model.policy.state_dict().items() if not torch.equal(v, before[k])]
    assert changed, f"{algo} learn() changed no weight"
    path = tmp_path / f"{algo}.zip"
    model.save(path)
    loaded = cls.load(path, device="cpu")
    obs_space = env.observation_space
    obs_space.seed(seed + 1)
    for _ in range(5):
        obs = obs_space.sample()
        a, _ = model.predict(obs, deterministic=True)
        b, _ = loaded.predict(obs, deterministic=True)
        np.testing.assert_array_equal(a, b)
    env.close()
    return model
