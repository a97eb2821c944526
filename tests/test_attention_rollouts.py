"""Tests for attn_policies.attention_rollouts (the seeds' attention figures from a model)."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from _attention import (
    DOORKEY,
    Screen,
    TokenEnv,
    TokenNet,
    Tokens,
    assert_png,
    doorkey_view_with_key_and_door,
    ppo,
    tick_texts,
)
from gymnasium import spaces
from matplotlib.figure import Figure
from stable_baselines3 import DQN, PPO

import attn_envs  # noqa: F401  (registers attn_envs/...)
from attn_envs.atari_ram import DistractorFeatureObservation
from attn_envs.patches import PatchObservation
from attn_policies.attention import MultiHeadSelfAttention
from attn_policies.attention_plots import doorkey_nodes
from attn_policies.attention_rollouts import (
    doorkey_attention_figure,
    feature_attention_figure,
    saliency_figure,
    top_patches_figure,
)
from attn_policies.capture import attention_maps
from attn_policies.saliency import (
    attention_saliency,
    patch_grid_origins,
    patch_scores,
    upsample_saliency,
)


def test_doorkey_attention_figure_with_dqn(tmp_path: Path) -> None:
    env = gym.make(DOORKEY)
    model = DQN(
        "MlpPolicy",
        env,
        policy_kwargs={
            "features_extractor_class": Tokens,
            "features_extractor_kwargs": {"layout": "grid", "n_heads": 3},
        },
        learning_starts=10,
        buffer_size=100,
        seed=0,
        device="cpu",
    )
    obs, info = env.reset(seed=2)
    maps = attention_maps(model, obs)
    assert list(maps) == ["q_net.features_extractor.attention"]  # q_net_target is not run
    path = tmp_path / "doorkey.png"
    fig = doorkey_attention_figure(model, obs, info, path=path)
    assert_png(path)
    assert isinstance(fig, Figure) and len(fig.axes) == 3 * 3 + 1
    assert [ax.get_ylabel() for ax in fig.axes[:9:3]] == ["agent", "key", "door"]
    assert [ax.get_title() for ax in fig.axes[:3]] == ["head 1", "head 2", "head 3"]
    # panels are upright: agent's row, head 2 is the transposed 7x7 map of the agent node
    w = maps["q_net.features_extractor.attention"][0, 1, doorkey_nodes(info)["agent"]]
    np.testing.assert_allclose(fig.axes[1].images[-1].get_array(), w.reshape(7, 7).T.numpy())
    env.close()


def test_doorkey_attention_figure_reads_the_grid_not_the_scaled_observation() -> None:
    from attn_envs.grid import make_egocentric_doorkey

    torch.manual_seed(0)
    net = Tokens(spaces.Box(0, 1, (3, 7, 7), np.float32), layout="grid", n_heads=2)
    obs, info = gym.make(DOORKEY).reset(seed=2)
    with pytest.raises(ValueError, match="raw"):  # the max-scaled view alone is not decoded
        doorkey_attention_figure(net, obs)
    with pytest.raises(ValueError, match="shape"):
        doorkey_attention_figure(net, obs, info["raw_grid"][:, :5, :5])
    fig = doorkey_attention_figure(net, obs, info)
    assert [ax.get_ylabel() for ax in fig.axes[:6:2]] == ["agent", "key", "door"]
    # an unscaled observation is its own raw grid; the raw cells are what the frame shows
    raw_obs, raw_info = make_egocentric_doorkey(scale=None).reset(seed=2)
    np.testing.assert_array_equal(raw_obs, raw_info["raw_grid"])
    fig = doorkey_attention_figure(net, raw_obs)
    assert [ax.get_ylabel() for ax in fig.axes[:6:2]] == ["agent", "key", "door"]


PONG_FEATURES = (4, 16)  # (stack, 8 features x (1 + 1 distractor))


def distractor_pong() -> DistractorFeatureObservation:
    return DistractorFeatureObservation("ALE/Pong-v5", n_distractors=1, stack=4)


def test_feature_attention_figure_rollout(tmp_path: Path) -> None:
    model = ppo(TokenEnv(PONG_FEATURES), layout="features")  # same spaces, no emulator
    env = distractor_pong()
    path = tmp_path / "rollout.png"
    fig = feature_attention_figure(model, env, n_steps=4, head=0, seed=3, path=path)
    assert_png(path)
    # replay: the same seeded reset and deterministic actions give the plotted maps
    obs, _ = env.reset(seed=3)
    names = list(env.feature_names)
    assert names != env.unshuffled_feature_names  # the seed's shuffle labels the axes
    assert len(fig.axes) == 4 + 1
    for ax in fig.axes[:4]:
        assert tick_texts(ax.get_xticklabels()) == names
        w = attention_maps(model, obs)["features_extractor.attention"][0, 0]
        np.testing.assert_allclose(ax.images[0].get_array(), w.numpy(), rtol=1e-6)
        obs, *_ = env.step(model.predict(obs, deterministic=True)[0])
    assert tick_texts(fig.axes[0].get_yticklabels()) == names
    env.close()


def test_feature_attention_figure_time_blocks(tmp_path: Path) -> None:
    model = ppo(TokenEnv(PONG_FEATURES), layout="steps")
    env = distractor_pong()
    fig = feature_attention_figure(model, env, n_steps=2, layout="blocks", path=tmp_path / "b.png")
    assert_png(tmp_path / "b.png")
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step(model.predict(obs, deterministic=True)[0])
    w = attention_maps(model, obs)["features_extractor.attention"][0].mean(0)  # (64, 64)
    names = list(env.feature_names)
    assert len(fig.axes) == 4 + 1
    for t, ax in enumerate(fig.axes[:4]):
        assert tick_texts(ax.get_xticklabels()) == names
        np.testing.assert_allclose(ax.images[0].get_array(), w[48:, 16 * t : 16 * (t + 1)])
    # the rollout layout of a stacked-token model labels every token with its step
    fig = feature_attention_figure(model, env, n_steps=1)
    labels = tick_texts(fig.axes[0].get_xticklabels())
    assert labels[:16] == [f"{n}@t-3" for n in names] and labels[-1] == f"{names[-1]}@t"
    env.close()


def test_feature_attention_figure_rejects_envs_without_names() -> None:
    model = ppo(TokenEnv())
    with pytest.raises(ValueError, match="feature_names"):
        feature_attention_figure(model, TokenEnv())
    for bad in (0, True, 2.0):
        with pytest.raises(ValueError, match="n_steps must be a positive integer"):
            feature_attention_figure(model, TokenEnv(), n_steps=bad)
    per_feature, env = ppo(TokenEnv(PONG_FEATURES), "features"), distractor_pong()
    with pytest.raises(ValueError, match="blocks"):  # L tokens cannot be split by step
        feature_attention_figure(per_feature, env, 1, layout="blocks")
    env.close()


def test_top_patches_figure(tmp_path: Path) -> None:
    torch.manual_seed(0)
    attn = MultiHeadSelfAttention(3, n_heads=2, head_dim=4)
    tokens = torch.rand(1, 36, 3)  # a 6x6 grid of 4x4 patches on a 24x24 frame
    frame = np.zeros((24, 24), np.uint8)
    scores = patch_scores(attention_maps(attn, tokens)["self"])[0]
    fig = top_patches_figure(attn, tokens, frame, patch_size=4, k=5, path=tmp_path / "p.png")
    assert_png(tmp_path / "p.png")
    origins = patch_grid_origins((24, 24), 4)
    expected = [(c - 0.5, r - 0.5) for r, c in origins[np.argsort(-scores.numpy())[:5]]]
    assert [p.get_xy() for p in fig.axes[0].patches] == expected
    fig = top_patches_figure(attn, tokens, frame, patch_size=4, k=100, method="argmax")
    counts = patch_scores(attention_maps(attn, tokens)["self"], "argmax")[0]
    assert len(fig.axes[0].patches) == int((counts > 0).sum())


def test_saliency_figure(tmp_path: Path) -> None:
    torch.manual_seed(0)
    attn = MultiHeadSelfAttention(4, n_heads=2, head_dim=4)
    x = torch.rand(2, 12, 4)
    frame = np.zeros((30, 40, 3), np.uint8)
    fig = saliency_figure(attn, x, frame, grid_shape=(3, 4), path=tmp_path / "s.png")
    assert_png(tmp_path / "s.png")
    sal = attention_saliency(attention_maps(attn, x)["self"])[0]
    heat = upsample_saliency(sal, (30, 40), (3, 4))
    heat = (heat - heat.min()) / (heat.max() - heat.min())
    np.testing.assert_allclose(fig.axes[1].images[1].get_array(), heat, rtol=1e-5)
    # layers by name or position; unknown ones are named in the error
    net, tokens = TokenNet(), torch.rand(1, 6, 3)
    second = attention_saliency(attention_maps(net, tokens)["second"])[0]
    for layer in ("second", 1, -1):
        fig = saliency_figure(net, tokens, frame, layer=layer, grid_shape=(2, 3))
        expected = upsample_saliency(second, (30, 40), (2, 3))
        expected = (expected - expected.min()) / (expected.max() - expected.min())
        np.testing.assert_allclose(fig.axes[1].images[1].get_array(), expected, rtol=1e-5)
    with pytest.raises(ValueError, match=r"recorded layers: \['first', 'second'\]"):
        saliency_figure(net, tokens, frame, layer="third", grid_shape=(2, 3))
    with pytest.raises(ValueError, match="out of range"):
        saliency_figure(net, tokens, frame, layer=2, grid_shape=(2, 3))


class ImageEnv(gym.Env):
    """A fixed observation space and 3 actions; never stepped (the policy is only queried)."""

    def __init__(self, space: spaces.Space) -> None:
        self.observation_space = space
        self.action_space = spaces.Discrete(3)


def test_relational_extractor_doorkey_figure(tmp_path: Path) -> None:
    from attn_policies.relational import RelationalExtractor

    env = gym.make(DOORKEY)
    kwargs = {"features_extractor_class": RelationalExtractor, "net_arch": []}
    kwargs["features_extractor_kwargs"] = {"node_size": 16}
    model = DQN("MlpPolicy", env, policy_kwargs=kwargs, buffer_size=100, device="cpu", seed=0)
    _, obs, info = doorkey_view_with_key_and_door()
    maps = attention_maps(model, obs)
    name = "q_net.features_extractor.trunk.relational.attention"
    assert list(maps) == [name] and maps[name].shape == (1, 3, 49, 49)
    fig = doorkey_attention_figure(model, obs, info, path=tmp_path / "relational.png")
    assert_png(tmp_path / "relational.png")
    assert len(fig.axes) == 3 * 3 + 1
    key = doorkey_nodes(info)["key"]
    np.testing.assert_allclose(
        fig.axes[5].images[-1].get_array(), maps[name][0, 2, key].view(7, 7).T
    )
    env.close()


def test_nonlocal_cnn_saliency(tmp_path: Path) -> None:
    from attn_policies.nonlocal_cnn import NonLocalNatureCNN

    space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    kwargs = {"features_extractor_class": NonLocalNatureCNN}
    kwargs["features_extractor_kwargs"] = {"features_dim": 32, "form": "full"}
    model = PPO("CnnPolicy", ImageEnv(space), n_steps=16, batch_size=16, policy_kwargs=kwargs)
    obs = np.random.default_rng(0).integers(0, 256, (4, 84, 84), dtype=np.uint8)
    maps = attention_maps(model, obs)
    assert maps["features_extractor.cnn.attn_fc"].shape == (1, 1, 49, 49)
    fig = saliency_figure(model, obs, obs[-1], path=tmp_path / "nonlocal.png")
    assert_png(tmp_path / "nonlocal.png")
    heat = upsample_saliency(
        attention_saliency(maps["features_extractor.cnn.attn_fc"])[0], (84, 84)
    )
    heat = (heat - heat.min()) / (heat.max() - heat.min())
    np.testing.assert_allclose(fig.axes[1].images[1].get_array(), heat, rtol=1e-5, atol=1e-6)
    # the seed's row form: heads are (channel, row) pairs of the 7x7 map
    row_cnn = NonLocalNatureCNN(space, features_dim=32)
    row_maps = attention_maps(row_cnn, obs[None] / 255.0)
    assert row_maps["cnn.attn_fc"].shape == (1, 32 * 7, 7, 7)
    fig = saliency_figure(row_cnn, obs[None] / 255.0, obs[-1], rows=7)
    assert fig.axes[1].images[1].get_array().shape == (84, 84)


def test_attention_agent_top_patches(tmp_path: Path) -> None:
    from attn_policies.patch_agents import AttentionAgent

    torch.manual_seed(0)
    agent = AttentionAgent()
    frame = np.random.default_rng(0).integers(0, 256, (96, 96, 3), dtype=np.uint8)
    # attention_maps makes floats of the values as given: scale the screen as SB3 would
    fig = top_patches_figure(
        agent, frame[None] / 255.0, frame, patch_size=7, stride=4, path=tmp_path / "agent.png"
    )
    assert_png(tmp_path / "agent.png")
    origins = PatchObservation(Screen(), patch_size=7, stride=4, crop=True).patch_origins
    winners = agent.last_votes.indices[0].numpy()  # the agent's own top-10 in that pass
    expected = [(c - 0.5, r - 0.5) for r, c in origins[winners]]
    assert [p.get_xy() for p in fig.axes[0].patches] == expected


def test_attention_neuron_maps_and_argmax_patches(tmp_path: Path) -> None:
    from attn_policies.attention_neuron import AttentionNeuron
    from attn_policies.neuron_extractors import AttentionNeuronExtractor

    maps = attention_maps(AttentionNeuron(action_dim=1, n_queries=16), torch.randn(2, 5))
    assert list(maps) == ["self"] and maps["self"].shape == (2, 1, 16, 5)
    space = spaces.Box(0, 255, (196, 144), np.uint8)  # 84x84, 4 frames, 6x6 patches
    kwargs = {"features_extractor_class": AttentionNeuronExtractor}
    kwargs["features_extractor_kwargs"] = {"n_queries": 64, "features_dim": 16}
    model = PPO("MlpPolicy", ImageEnv(space), n_steps=16, batch_size=16, policy_kwargs=kwargs)
    space.seed(0)
    obs = space.sample()
    weights = attention_maps(model, obs)["features_extractor.neuron"]
    assert weights.shape == (1, 1, 64, 196)
    frame = np.zeros((84, 84), np.uint8)
    fig = top_patches_figure(
        model, obs, frame, patch_size=6, k=500, method="argmax", path=tmp_path / "neuron.png"
    )
    assert_png(tmp_path / "neuron.png")
    picked = set(weights[0, 0].argmax(dim=-1).tolist())  # the appendix: argmax of every query
    origins = patch_grid_origins((84, 84), 6)
    assert {p.get_xy() for p in fig.axes[0].patches} == {
        (c - 0.5, r - 0.5) for r, c in origins[sorted(picked)]
    }


def test_awrl_feature_attention(tmp_path: Path) -> None:
    from attn_policies.awrl import AWRLExtractor

    kwargs = {"features_extractor_class": AWRLExtractor}
    kwargs["features_extractor_kwargs"] = {"embed_dim": 16, "n_heads": 2, "head_dim": 8}
    model = PPO(
        "MlpPolicy", TokenEnv(PONG_FEATURES), n_steps=16, batch_size=16, policy_kwargs=kwargs
    )
    env = distractor_pong()
    layer = "features_extractor.blocks.1.attention"
    fig = feature_attention_figure(model, env, layer=layer, head=1, path=tmp_path / "awrl.png")
    assert_png(tmp_path / "awrl.png")
    obs, _ = env.reset(seed=0)
    names = list(env.feature_names)
    assert len(fig.axes) == 4 + 1
    assert tick_texts(fig.axes[0].get_xticklabels()) == names
    w = attention_maps(model, obs)[layer][0, 1]
    np.testing.assert_allclose(fig.axes[0].images[0].get_array(), w.numpy(), rtol=1e-6)
    env.close()
