"""Models, envs and checks shared by the tests of the attention-map modules
(capture, attention_plots, attention_rollouts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from einops import rearrange
from gymnasium import spaces
from minigrid.core.constants import OBJECT_TO_IDX
from stable_baselines3 import PPO
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import Tensor, nn

import attn_envs  # noqa: F401  (registers attn_envs/...)
from attn_policies.attention import MultiHeadSelfAttention

DOORKEY = "attn_envs/EgocentricDoorKey-5x5-v0"


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 1000, (path, len(data))


def tick_texts(labels: list[Any]) -> list[str]:
    return [t.get_text() for t in labels]


class TokenNet(nn.Module):
    """Embed tokens, two attention layers (2 and 3 heads), and a dropout in between."""

    def __init__(self, in_features: int = 3, dim: int = 8) -> None:
        super().__init__()
        self.embed = nn.Linear(in_features, dim)
        self.first = MultiHeadSelfAttention(dim, n_heads=2, head_dim=4)
        self.drop = nn.Dropout(0.5)
        self.second = MultiHeadSelfAttention(dim, n_heads=3, head_dim=4)

    def forward(self, x: Tensor) -> Tensor:
        return self.second(self.drop(self.first(self.embed(x))))


class Tokens(BaseFeaturesExtractor):
    """Attention over observation tokens: grid cells, one per feature, or one per (step, feature).

    ``layout``: ``"grid"`` for ``(C, H, W)`` (tokens ``(h w)``, MiniGrid's ``[x, y]``
    order), ``"features"`` for ``(T, L)`` (L tokens of T values), ``"steps"`` for ``(T, L)``
    (``T * L`` tokens, time-major), ``"rows"`` for ``(N, F)`` token rows.
    """

    def __init__(
        self, observation_space: spaces.Box, layout: str = "rows", n_heads: int = 2, dim: int = 8
    ) -> None:
        super().__init__(observation_space, features_dim=n_heads * 4)
        self.layout = layout
        with torch.no_grad():
            token_size = self.tokens(torch.zeros(1, *observation_space.shape)).shape[-1]
        self.embed = nn.Linear(token_size, dim)
        self.attention = MultiHeadSelfAttention(dim, n_heads=n_heads, head_dim=4)

    def tokens(self, x: Tensor) -> Tensor:
        if self.layout == "grid":
            return rearrange(x, "b c h w -> b (h w) c")
        if self.layout == "features":
            return rearrange(x, "b t l -> b l t") / 255.0
        if self.layout == "steps":
            return rearrange(x, "b t l -> b (t l) 1") / 255.0
        return x

    def forward(self, observations: Tensor) -> Tensor:
        return self.attention(self.embed(self.tokens(observations))).mean(dim=1)


class TokenEnv(gym.Env):
    """Observation: 5 tokens of 3 values; nothing else matters."""

    def __init__(self, shape: tuple[int, ...] = (5, 3), dtype: Any = np.float32) -> None:
        high = 255 if dtype == np.uint8 else 1.0
        self.observation_space = spaces.Box(0, high, shape, dtype)
        self.action_space = spaces.Discrete(3)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action: int) -> tuple:
        return self.observation_space.sample(), 0.0, False, False, {}


def ppo(env: gym.Env, layout: str = "rows", **policy_kwargs: Any) -> PPO:
    kwargs = {"features_extractor_class": Tokens, "features_extractor_kwargs": {"layout": layout}}
    return PPO(
        "MlpPolicy",
        env,
        n_steps=16,
        batch_size=16,
        policy_kwargs={**kwargs, **policy_kwargs},
        seed=0,
        device="cpu",
    )


def doorkey_view_with_key_and_door() -> tuple[gym.Env, np.ndarray, dict[str, Any]]:
    """A seeded DoorKey env stepped (seeded random actions) until key and door are in view;
    the env, its observation and the info returned with it."""
    env = gym.make(DOORKEY)
    for seed in range(20):
        obs, info = env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        for _ in range(30):
            objects = env.unwrapped.gen_obs()["image"][..., 0]
            if (objects == OBJECT_TO_IDX["key"]).any() and (objects == OBJECT_TO_IDX["door"]).any():
                return env, obs, info
            obs, *_, info = env.step(int(rng.integers(3)))  # left, right, forward
    raise AssertionError("no DoorKey view with both key and door")


class Screen(gym.Env):
    observation_space = spaces.Box(0, 255, (96, 96, 3), np.uint8)
    action_space = spaces.Discrete(2)
