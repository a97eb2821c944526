"""Tests for attn_policies.capture (attention_maps: the capture API)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _attention import (
    TokenEnv,
    TokenNet,
    Tokens,
    ppo,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from stable_baselines3 import PPO
from torch import Tensor, nn

import attn_envs  # noqa: F401  (registers attn_envs/...)
from attn_policies.attention import MultiHeadSelfAttention, capture_attention
from attn_policies.capture import as_numpy, attention_maps, is_sb3, select_layer
from attn_policies.saliency import attention_saliency


class DictNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention = MultiHeadSelfAttention(3, n_heads=1, head_dim=4)

    def forward(self, obs: dict[str, Tensor], scale: float = 1.0) -> Tensor:
        return self.attention(obs["tokens"] * scale + obs["bias"][:, None, :])


def manual_weights(attn: MultiHeadSelfAttention, x: Tensor) -> Tensor:
    """softmax(Q K^T / sqrt(d)) from the layer's own projections."""
    q, k, _ = attn.project(x)
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(attn.head_dim), dim=-1)


def test_plain_module_maps_are_the_layers_softmax() -> None:
    torch.manual_seed(0)
    net = TokenNet()
    x = torch.randn(4, 6, 3)
    maps = attention_maps(net, x)
    assert list(maps) == ["first", "second"]
    assert maps["first"].shape == (4, 2, 6, 6) and maps["second"].shape == (4, 3, 6, 6)
    with torch.no_grad():
        h = net.embed(x)
        torch.testing.assert_close(maps["first"], manual_weights(net.first, h))
        # eval mode: dropout is the identity between the layers
        torch.testing.assert_close(maps["second"], manual_weights(net.second, net.first(h)))
    assert not maps["first"].requires_grad


def test_plain_module_inputs_are_converted() -> None:
    torch.manual_seed(0)
    net = TokenNet()
    x = np.random.default_rng(0).normal(size=(2, 6, 3))  # float64 numpy
    maps = attention_maps(net, x)
    torch.testing.assert_close(maps["first"], attention_maps(net, torch.tensor(x).float())["first"])
    # integer tensors become floats; dicts are converted entry by entry; args/kwargs pass on
    assert attention_maps(net, torch.ones(1, 6, 3, dtype=torch.int64))[
        "first"
    ].dtype.is_floating_point
    dnet = DictNet()
    obs = {"tokens": np.ones((2, 4, 3), np.uint8), "bias": np.zeros((2, 3))}
    maps = attention_maps(dnet, obs, scale=2.0)
    tokens = torch.full((2, 4, 3), 2.0)
    torch.testing.assert_close(maps["attention"], manual_weights(dnet.attention, tokens))


def test_capture_leaves_forward_outputs_and_modes_unchanged() -> None:
    torch.manual_seed(0)
    net = TokenNet().eval()
    x = torch.randn(3, 6, 3)
    with torch.no_grad():
        before = net(x)
        with capture_attention(net):
            captured = net(x)  # explicit-weights path
    torch.testing.assert_close(captured, before, rtol=1e-5, atol=1e-6)
    net.train()
    net.drop.eval()  # a submodule in its own mode must keep it
    attention_maps(net, x)
    assert net.training and net.first.training and not net.drop.training
    assert not net.first.capturing and not net.second.capturing
    net.eval()
    with torch.no_grad():
        torch.testing.assert_close(net(x), before, rtol=0, atol=0)


@settings(max_examples=15, deadline=None)
@given(
    batch=st.integers(1, 3),
    n_tokens=st.integers(1, 9),
    n_heads=st.integers(1, 3),
    compatibility=st.sampled_from(["dot", "additive"]),
    seed=st.integers(0, 2**16),
)
def test_maps_are_stochastic_and_capture_is_invisible(
    batch: int, n_tokens: int, n_heads: int, compatibility: str, seed: int
) -> None:
    torch.manual_seed(seed)
    attn = MultiHeadSelfAttention(
        4, n_heads=n_heads, head_dim=3, compatibility=compatibility, n_tokens=n_tokens
    )
    x = torch.randn(batch, n_tokens, 4)
    with torch.no_grad():
        before = attn(x)
    w = attention_maps(attn, x)["self"]
    assert w.shape == (batch, n_heads, n_tokens, n_tokens)
    torch.testing.assert_close(w.sum(-1), torch.ones(batch, n_heads, n_tokens))
    # every query spreads one unit of attention: the saliency is a distribution over keys
    torch.testing.assert_close(attention_saliency(w).sum(-1), torch.ones(batch))
    with torch.no_grad():
        torch.testing.assert_close(attn(x), before, rtol=0, atol=0)
        with capture_attention(attn):
            torch.testing.assert_close(attn(x), before, rtol=1e-5, atol=1e-6)


def test_self_attention_module_is_named_self() -> None:
    attn = MultiHeadSelfAttention(3, n_heads=2, head_dim=4)
    assert list(attention_maps(attn, torch.rand(1, 5, 3))) == ["self"]


def test_model_without_attention_raises() -> None:
    with pytest.raises(ValueError, match="no attention layer"):
        attention_maps(nn.Sequential(nn.Linear(3, 4)), torch.zeros(1, 3))
    with pytest.raises(ValueError, match="ActorCriticPolicy has no attention layer"):
        no_attention = PPO("MlpPolicy", TokenEnv(), n_steps=16, batch_size=16, device="cpu")
        attention_maps(no_attention, np.zeros((5, 3)))
    with pytest.raises(TypeError, match=r"nn\.Module"):
        attention_maps(lambda x: x, torch.zeros(1))  # type: ignore[arg-type]


def test_sb3_ppo_unbatched_and_batched_observations() -> None:
    env = TokenEnv()
    model = ppo(env)
    obs = np.stack([env.observation_space.sample() for _ in range(4)])
    single = attention_maps(model, obs[0])
    assert list(single) == ["features_extractor.attention"]
    assert single["features_extractor.attention"].shape == (1, 2, 5, 5)
    batch = attention_maps(model, obs)["features_extractor.attention"]
    assert batch.shape == (4, 2, 5, 5)
    torch.testing.assert_close(batch[:1], single["features_extractor.attention"])
    # the same map as the extractor's own layer on the same input; policy alone works too
    ext = model.policy.features_extractor
    with torch.no_grad():
        expected = manual_weights(ext.attention, ext.embed(torch.as_tensor(obs)))
    torch.testing.assert_close(batch, expected)
    torch.testing.assert_close(
        attention_maps(model.policy, obs)["features_extractor.attention"], batch
    )
    # torch tensors are accepted as observations too
    torch.testing.assert_close(
        attention_maps(model, torch.as_tensor(obs))["features_extractor.attention"], batch
    )


def test_sb3_capture_leaves_policy_outputs_and_mode_unchanged() -> None:
    env = TokenEnv()
    model = ppo(env)
    obs = np.stack([env.observation_space.sample() for _ in range(8)])
    policy = model.policy
    obs_t = torch.as_tensor(obs)
    policy.set_training_mode(True)
    with torch.no_grad():
        logits = policy.get_distribution(obs_t).distribution.logits
        values = policy.predict_values(obs_t)
    attention_maps(model, obs)
    assert policy.training and policy.features_extractor.training
    with torch.no_grad():
        torch.testing.assert_close(policy.get_distribution(obs_t).distribution.logits, logits)
        torch.testing.assert_close(policy.predict_values(obs_t), values)
        with capture_attention(policy):
            captured = policy.get_distribution(obs_t).distribution.logits
    torch.testing.assert_close(captured, logits, rtol=1e-5, atol=1e-6)


def test_sb3_names_separate_extractors_and_image_preprocessing() -> None:
    env = TokenEnv(shape=(3, 4, 4), dtype=np.uint8)  # an SB3 image space: divided by 255
    model = ppo(env, layout="grid", share_features_extractor=False)
    obs = env.observation_space.sample()
    maps = attention_maps(model, obs)
    # pi_features_extractor is features_extractor itself: named_modules keeps the first name
    assert list(maps) == ["features_extractor.attention", "vf_features_extractor.attention"]
    ext = model.policy.pi_features_extractor
    with torch.no_grad():
        x = torch.as_tensor(obs[None], dtype=torch.float32) / 255.0
        expected = manual_weights(ext.attention, ext.embed(ext.tokens(x)))
    torch.testing.assert_close(maps["features_extractor.attention"], expected)


def test_sb3_recurrent_policy_goes_through_predict() -> None:
    from sb3_contrib import RecurrentPPO

    env = TokenEnv()
    kwargs = {"features_extractor_class": Tokens, "lstm_hidden_size": 8}
    model = RecurrentPPO(
        "MlpLstmPolicy", env, n_steps=16, batch_size=16, policy_kwargs=kwargs, device="cpu"
    )
    obs = np.stack([env.observation_space.sample() for _ in range(3)])
    maps = attention_maps(model, obs)
    assert list(maps) == ["features_extractor.attention"]
    assert maps["features_extractor.attention"].shape == (3, 2, 5, 5)
    # predict's own arguments pass through (here: a fresh episode start)
    again = attention_maps(model, obs, episode_start=np.ones(3, bool))
    torch.testing.assert_close(
        again["features_extractor.attention"], maps["features_extractor.attention"]
    )


def test_select_layer_by_name_position_or_first() -> None:
    maps = {"first": torch.ones(1), "second": torch.zeros(1)}
    assert select_layer(maps, None) == "first"
    assert select_layer(maps, "second") == select_layer(maps, -1) == select_layer(maps, 1)
    with pytest.raises(ValueError, match=r"recorded layers: \['first', 'second'\]"):
        select_layer(maps, "third")
    with pytest.raises(ValueError, match="out of range"):
        select_layer(maps, 2)
    with pytest.raises(ValueError, match="recorded no attention"):
        select_layer({}, None)


def test_as_numpy_and_is_sb3() -> None:
    out = as_numpy({"a": torch.ones(2), "b": 3})
    assert isinstance(out["a"], np.ndarray) and out["b"] == 3
    model = ppo(TokenEnv())
    assert is_sb3(model) and is_sb3(model.policy) and not is_sb3(TokenNet())
