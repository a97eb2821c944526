"""Tests for attn_policies.cnn_layers (channels-last NatureCNN)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.torch_layers import NatureCNN

from attn_policies.cnn_layers import ChannelsLastNatureCNN
from zoo.registry import resolve

SPACE = spaces.Box(0, 255, (4, 84, 84), np.uint8)


@pytest.mark.parametrize("batch", [1, 7])
def test_same_parameters_and_outputs_as_nature_cnn(batch: int) -> None:
    torch.manual_seed(0)
    fast, plain = ChannelsLastNatureCNN(SPACE, features_dim=64), NatureCNN(SPACE, features_dim=64)
    assert fast.state_dict().keys() == plain.state_dict().keys()
    plain.load_state_dict(fast.state_dict())
    x = torch.rand(batch, 4, 84, 84)
    torch.testing.assert_close(fast(x), plain(x), atol=1e-5, rtol=1e-4)
    fast(x).square().sum().backward()
    plain(x).square().sum().backward()
    for (name, a), b in zip(fast.named_parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-4, rtol=1e-3, msg=name)
    # the parameters keep the usual layout (SB3's orthogonal init and Adam see plain tensors)
    assert fast.cnn[0].weight.is_contiguous() and fast.cnn[0].weight.grad.is_contiguous()


def test_registered_and_usable_in_sb3_ppo() -> None:
    assert resolve("extractor", "channels_last_nature_cnn") is ChannelsLastNatureCNN
    import ale_py
    import gymnasium as gym
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    env = VecFrameStack(make_atari_env("ALE/Pong-v5", n_envs=2, seed=0), 4)
    model = PPO("CnnPolicy", env, n_steps=16, batch_size=16, n_epochs=1, seed=0,
                policy_kwargs={"features_extractor_class": ChannelsLastNatureCNN})  # fmt: skip
    model.learn(32)
    assert model.num_timesteps == 32
    assert isinstance(model.policy.features_extractor, ChannelsLastNatureCNN)
    env.close()
