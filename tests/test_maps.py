"""Tests for attn_policies.maps (attention capture API and the seeds' attention figures)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from einops import rearrange
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from minigrid.core.constants import OBJECT_TO_IDX
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import Tensor, nn

import attn_envs  # noqa: F401  (registers attn_envs/...)
from attn_envs.atari_ram import DistractorFeatureObservation
from attn_envs.patches import PatchObservation
from attn_policies.attention import MultiHeadSelfAttention, capture_attention
from attn_policies.maps import (
    attention_maps,
    attention_saliency,
    doorkey_attention_figure,
    doorkey_frame,
    doorkey_nodes,
    feature_attention_figure,
    patch_grid_origins,
    patch_scores,
    plot_feature_attention,
    plot_grid_attention,
    plot_saliency,
    plot_top_patches,
    saliency_figure,
    split_time_blocks,
    top_patches_figure,
    upsample_saliency,
)

DOORKEY = "attn_envs/EgocentricDoorKey-5x5-v0"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 1000, (path, len(data))


def tick_texts(labels: list[Any]) -> list[str]:
    return [t.get_text() for t in labels]


# --- models used by the tests --------------------------------------------------------------


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


class DictNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention = MultiHeadSelfAttention(3, n_heads=1, head_dim=4)

    def forward(self, obs: dict[str, Tensor], scale: float = 1.0) -> Tensor:
        return self.attention(obs["tokens"] * scale + obs["bias"][:, None, :])


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


def manual_weights(attn: MultiHeadSelfAttention, x: Tensor) -> Tensor:
    """softmax(Q K^T / sqrt(d)) from the layer's own projections."""
    q, k, _ = attn.project(x)
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(attn.head_dim), dim=-1)


# --- attention_maps ------------------------------------------------------------------------


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


# --- DoorKey -------------------------------------------------------------------------------


def doorkey_view_with_key_and_door() -> tuple[gym.Env, np.ndarray]:
    """A seeded DoorKey env stepped (seeded random actions) until key and door are in view."""
    env = gym.make(DOORKEY)
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        for _ in range(30):
            objects = env.unwrapped.gen_obs()["image"][..., 0]
            if (objects == OBJECT_TO_IDX["key"]).any() and (objects == OBJECT_TO_IDX["door"]).any():
                return env, obs
            obs, *_ = env.step(int(rng.integers(3)))  # left, right, forward
    raise AssertionError("no DoorKey view with both key and door")


def test_doorkey_nodes_on_a_real_observation() -> None:
    env, obs = doorkey_view_with_key_and_door()
    base = env.unwrapped
    raw = base.gen_obs()["image"]  # (x, y, 3) MiniGrid cells
    nodes = doorkey_nodes(obs)
    assert set(nodes) == {"agent", "key", "door"}
    cell = {name: divmod(i, 7) for name, i in nodes.items()}
    assert raw[cell["key"]][0] == OBJECT_TO_IDX["key"]
    assert raw[cell["door"]][0] == OBJECT_TO_IDX["door"]
    assert nodes["agent"] == 3 * 7 + 6
    # the cell in front of the agent in the world is the view cell right above the agent
    front = base.grid.get(*base.front_pos)
    front_type = OBJECT_TO_IDX["empty"] if front is None else OBJECT_TO_IDX[front.type]
    assert raw[3, 5, 0] == front_type
    # the other scalings of EgocentricGridObservation decode to the same nodes
    image = raw.transpose(2, 0, 1).astype(np.float32)
    assert doorkey_nodes(image, scale=None) == nodes
    assert doorkey_nodes(image / np.array([10, 5, 3], np.float32)[:, None, None], "fixed") == nodes
    env.close()


def test_doorkey_nodes_with_the_key_carried() -> None:
    raw = np.zeros((3, 7, 7), np.float32)
    raw[:, 2, :] = np.array([2, 5, 0])[:, None]  # a wall column
    raw[:, 3, 6] = (5, 4, 0)  # the agent's cell shows the carried yellow key
    raw[:, 3, 5] = (4, 4, 2)  # a locked yellow door in front
    assert doorkey_nodes(raw / raw.max()) == {"agent": 27, "door": 26}
    with pytest.raises(ValueError, match="shape"):
        doorkey_nodes(np.zeros((7, 7, 3)))
    with pytest.raises(ValueError, match="max-scaled"):
        doorkey_nodes(np.full((3, 7, 7), 0.3))


def test_doorkey_frame_is_the_upright_view() -> None:
    _, obs = doorkey_view_with_key_and_door()
    frame = doorkey_frame(obs, tile_size=8)
    assert frame.shape == (56, 56, 3) and frame.dtype == np.uint8
    # the agent's tile (bottom centre) is drawn red-ish; unseen tiles are black
    agent = frame[48:56, 24:32].reshape(-1, 3).astype(int)
    assert (agent[:, 0] > agent[:, 1] + 100).any()


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
    obs, _ = env.reset(seed=2)
    maps = attention_maps(model, obs)
    assert list(maps) == ["q_net.features_extractor.attention"]  # q_net_target is not run
    path = tmp_path / "doorkey.png"
    fig = doorkey_attention_figure(model, obs, path=path)
    assert_png(path)
    assert isinstance(fig, Figure) and len(fig.axes) == 3 * 3 + 1
    assert [ax.get_ylabel() for ax in fig.axes[:9:3]] == ["agent", "key", "door"]
    assert [ax.get_title() for ax in fig.axes[:3]] == ["head 1", "head 2", "head 3"]
    # panels are upright: agent's row, head 2 is the transposed 7x7 map of the agent node
    w = maps["q_net.features_extractor.attention"][0, 1, doorkey_nodes(obs)["agent"]]
    np.testing.assert_allclose(fig.axes[1].images[-1].get_array(), w.reshape(7, 7).T.numpy())
    env.close()


# --- plot_grid_attention -------------------------------------------------------------------


def test_plot_grid_attention(tmp_path: Path) -> None:
    torch.manual_seed(0)
    w = torch.softmax(torch.randn(2, 3, 12, 12), dim=-1)
    path = tmp_path / "sub" / "grid.png"
    fig = plot_grid_attention(w, {"a": 5, "b": (2, 1)}, grid_shape=(3, 4), batch_index=1, path=path)
    assert_png(path)
    assert len(fig.axes) == 2 * 3 + 1
    panels = fig.axes[:6]
    assert [ax.get_title() for ax in panels[:3]] == ["head 1", "head 2", "head 3"]
    assert [ax.get_ylabel() for ax in panels[::3]] == ["a", "b"]
    for r, node in enumerate((5, 9)):
        for h in range(3):
            ax = panels[3 * r + h]
            np.testing.assert_allclose(ax.images[-1].get_array(), w[1, h, node].reshape(3, 4))
            assert ax.patches[0].get_xy() == (node % 4 - 0.5, node // 4 - 0.5)  # own cell
    # transposed display, frame underneath
    fig = plot_grid_attention(
        w[0], {"a": 5}, grid_shape=(3, 4), frame=np.zeros((40, 30, 3), np.uint8), transpose=True
    )
    ax = fig.axes[0]
    assert len(ax.images) == 2
    np.testing.assert_allclose(ax.images[-1].get_array(), w[0, 0, 5].reshape(3, 4).T)
    assert ax.patches[0].get_xy() == (1 - 0.5, 1 - 0.5)  # node 5 = (row 1, col 1)


def test_colour_scale_covers_negative_weights() -> None:
    w = torch.linspace(-0.5, 1.0, 16).reshape(1, 4, 4)  # e.g. tanh or unnormalised scores
    im = plot_grid_attention(w, {"a": 0}, grid_shape=(2, 2)).axes[0].images[-1]
    assert im.get_clim() == (-0.5, 0.0)  # row 0 is all negative: the scale still shows 0
    im = plot_feature_attention(w, list("abcd")).axes[0].images[0]
    assert im.get_clim() == (-0.5, 1.0)


def test_plot_grid_attention_rejects_bad_input() -> None:
    w = torch.rand(3, 49, 49)
    with pytest.raises(ValueError, match="grid_shape"):
        plot_grid_attention(w, {"a": 0}, grid_shape=(6, 6))
    with pytest.raises(ValueError, match="outside"):
        plot_grid_attention(w, {"a": 49})
    with pytest.raises(ValueError, match="outside grid_shape"):
        plot_grid_attention(w, {"a": (7, 0)})
    with pytest.raises(ValueError, match="empty"):
        plot_grid_attention(w, {})


# --- feature maps --------------------------------------------------------------------------


def test_plot_feature_attention_labels_and_data(tmp_path: Path) -> None:
    torch.manual_seed(0)
    names = ["player_y", "player_x", "ball_x", "ball_y", "enemy_y"]
    w = torch.softmax(torch.randn(4, 3, 5, 5), dim=-1)
    path = tmp_path / "features.png"
    fig = plot_feature_attention([m for m in w], names, head=1, path=path)
    assert_png(path)
    assert len(fig.axes) == 4 + 1
    panels = fig.axes[:4]
    assert [ax.get_title() for ax in panels] == ["t-3", "t-2", "t-1", "t"]
    for t, ax in enumerate(panels):
        assert tick_texts(ax.get_xticklabels()) == names
        np.testing.assert_allclose(ax.images[0].get_array(), w[t, 1])
    assert tick_texts(panels[0].get_yticklabels()) == names
    mean = plot_feature_attention(w, names)  # head="mean"
    np.testing.assert_allclose(mean.axes[2].images[0].get_array(), w[2].mean(0), rtol=1e-6)
    single = plot_feature_attention(w[0, 0, :2], names, query_names=names[:2], time_labels=["x"])
    assert len(single.axes) == 2 and single.axes[0].get_title() == "x"
    assert tick_texts(single.axes[0].get_yticklabels()) == names[:2]
    with pytest.raises(ValueError, match="feature_names"):
        plot_feature_attention(w, names[:4])
    with pytest.raises(ValueError, match="head"):
        plot_feature_attention(w, names, head=3)


def test_split_time_blocks_picks_query_and_key_blocks() -> None:
    n_feat, n_steps = 3, 4
    w = torch.arange(144.0).reshape(12, 12)  # w[q, k] = 12 q + k
    blocks = split_time_blocks(w[None], n_steps)
    assert blocks.shape == (4, 1, 3, 3)
    for t in range(n_steps):
        newest = w[(n_steps - 1) * n_feat :, t * n_feat : (t + 1) * n_feat]
        torch.testing.assert_close(blocks[t, 0], newest)
    torch.testing.assert_close(split_time_blocks(w, n_steps, query_step=0)[2], w[:3, 6:9])
    with pytest.raises(ValueError, match="time blocks"):
        split_time_blocks(w, 5)


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
    per_feature, env = ppo(TokenEnv(PONG_FEATURES), "features"), distractor_pong()
    with pytest.raises(ValueError, match="blocks"):  # L tokens cannot be split by step
        feature_attention_figure(per_feature, env, 1, layout="blocks")
    env.close()


# --- patches -------------------------------------------------------------------------------


class Screen(gym.Env):
    observation_space = spaces.Box(0, 255, (96, 96, 3), np.uint8)
    action_space = spaces.Discrete(2)


def test_plot_top_patches_boxes_the_best_patches(tmp_path: Path) -> None:
    origins = PatchObservation(Screen(), patch_size=7, stride=4, crop=True).patch_origins
    np.testing.assert_array_equal(patch_grid_origins((96, 96), 7, 4), origins)
    scores = np.random.default_rng(0).random(len(origins))
    frame = np.random.default_rng(1).integers(0, 255, (96, 96, 3), dtype=np.uint8)
    path = tmp_path / "patches.png"
    fig = plot_top_patches(frame, scores, patch_size=7, origins=origins, k=10, path=path)
    assert_png(path)
    assert len(fig.axes) == 1
    best = np.argsort(-scores)[:10]
    rects = fig.axes[0].patches
    assert [r.get_xy() for r in rects] == [(c - 0.5, r - 0.5) for r, c in origins[best]]
    assert all(r.get_width() == 7 and r.get_height() == 7 for r in rects)
    # derived geometry, explicit indices and a grey channels-first frame
    grey = np.zeros((1, 96, 96), np.uint8)
    fig = plot_top_patches(grey, indices=[0, 528], patch_size=7, stride=4)
    assert [r.get_xy() for r in fig.axes[0].patches] == [(-0.5, -0.5), (87.5, 87.5)]
    with pytest.raises(ValueError, match="exactly one"):
        plot_top_patches(frame, patch_size=7, stride=4)
    with pytest.raises(ValueError, match="scores"):
        plot_top_patches(frame, scores[:10], patch_size=7, stride=4)


def test_patch_scores() -> None:
    w = torch.tensor([[0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [0.1, 0.1, 0.8]])
    heads = torch.stack([w, w.flip(-1)])[None]  # (1, 2, 3, 3)
    torch.testing.assert_close(patch_scores(heads), ((w.sum(0) + w.flip(-1).sum(0)) / 2)[None])
    torch.testing.assert_close(patch_scores(heads, "argmax"), torch.tensor([[3.0, 0.0, 3.0]]))
    with pytest.raises(ValueError, match="method"):
        patch_scores(heads, "max")  # type: ignore[arg-type]


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


# --- saliency ------------------------------------------------------------------------------


def test_attention_saliency_is_mean_attention_received() -> None:
    w = torch.rand(2, 3, 4, 5)
    torch.testing.assert_close(attention_saliency(w), w.mean(dim=(1, 2)))
    torch.testing.assert_close(attention_saliency(w[0]), w[0].mean(dim=(0, 1)))
    torch.testing.assert_close(attention_saliency(w[0, 0]), w[0, 0].mean(dim=0))


def test_attention_saliency_of_row_attention() -> None:
    channels, rows, width = 3, 4, 5
    w = torch.rand(2, channels * rows, width, width)
    sal = attention_saliency(w, rows=rows)
    assert sal.shape == (2, rows, width)
    per_row = w.view(2, channels, rows, width, width)  # head c * rows + h
    torch.testing.assert_close(sal[1, 2], per_row[1, :, 2].mean(dim=(0, 1)))
    with pytest.raises(ValueError, match="rows"):
        attention_saliency(w, rows=5)


def test_upsample_saliency() -> None:
    s = torch.tensor([[0.0, 1.0], [2.0, 3.0]])
    up = upsample_saliency(s, (4, 6))
    assert up.shape == (4, 6)
    expected = F.interpolate(s[None, None], size=(4, 6), mode="bilinear", align_corners=False)
    np.testing.assert_allclose(up, expected[0, 0].numpy())
    assert up[0, 0] == 0.0 and up[-1, -1] == 3.0
    flat = upsample_saliency(np.arange(12.0), (30, 40), grid_shape=(3, 4))
    assert flat.shape == (30, 40)
    np.testing.assert_allclose(upsample_saliency(np.ones(9), (7, 5)), np.ones((7, 5)), rtol=1e-6)
    with pytest.raises(ValueError, match="square"):
        upsample_saliency(np.ones(12), (30, 40))


def test_plot_saliency(tmp_path: Path) -> None:
    frame = np.random.default_rng(0).integers(0, 255, (210, 160, 3), dtype=np.uint8)
    sal = torch.zeros(7, 7)
    sal[1, 5] = 1.0
    path = tmp_path / "saliency.png"
    fig = plot_saliency(frame, sal, alpha=0.4, path=path)
    assert_png(path)
    assert len(fig.axes) == 2
    assert [ax.get_title() for ax in fig.axes] == ["frame", "attention"]
    heat = fig.axes[1].images[1]
    assert heat.get_array().shape == frame.shape[:2] and heat.get_alpha() == 0.4
    row, col = np.unravel_index(np.argmax(heat.get_array()), frame.shape[:2])
    assert row // 30 == 1 and col * 7 // 160 == 5  # the peak lands on cell (1, 5)
    only = plot_saliency(frame[..., 0], sal.ravel(), grid_shape=(7, 7), show_frame=False)
    assert len(only.axes) == 1


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


def test_figures_use_no_pyplot_state() -> None:
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    fig = plot_saliency(np.zeros((8, 8)), np.ones(4))
    assert plt.get_fignums() == before  # not registered with pyplot: nothing leaks or shows
    assert isinstance(fig.canvas, FigureCanvasAgg)


# --- integration with the attention modules of attn_policies --------------------------------


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
    _, obs = doorkey_view_with_key_and_door()
    maps = attention_maps(model, obs)
    name = "q_net.features_extractor.trunk.relational.attention"
    assert list(maps) == [name] and maps[name].shape == (1, 3, 49, 49)
    fig = doorkey_attention_figure(model, obs, path=tmp_path / "relational.png")
    assert_png(tmp_path / "relational.png")
    assert len(fig.axes) == 3 * 3 + 1
    key = doorkey_nodes(obs)["key"]
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
    from attn_policies.patch_voting import AttentionAgent

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
    from attn_policies.neuron import AttentionNeuron, AttentionNeuronExtractor

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
