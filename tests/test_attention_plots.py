"""Tests for attn_policies.attention_plots (figures from arrays, DoorKey views)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from _attention import (
    Screen,
    assert_png,
    doorkey_view_with_key_and_door,
    tick_texts,
)
from minigrid.core.constants import OBJECT_TO_IDX

import attn_envs  # noqa: F401  (registers attn_envs/...)
from attn_envs.patches import PatchObservation
from attn_policies.attention_plots import (
    RAW_GRID_KEY,
    doorkey_frame,
    doorkey_grid,
    doorkey_nodes,
    plot_feature_attention,
    plot_grid_attention,
    plot_saliency,
    plot_top_patches,
)
from attn_policies.saliency import patch_grid_origins


def test_doorkey_nodes_on_a_real_observation() -> None:
    env, obs, info = doorkey_view_with_key_and_door()
    base = env.unwrapped
    raw = base.gen_obs()["image"]  # (x, y, 3) MiniGrid cells
    nodes = doorkey_nodes(info)
    assert set(nodes) == {"agent", "key", "door"}
    cell = {name: divmod(i, 7) for name, i in nodes.items()}
    assert raw[cell["key"]][0] == OBJECT_TO_IDX["key"]
    assert raw[cell["door"]][0] == OBJECT_TO_IDX["door"]
    assert nodes["agent"] == 3 * 7 + 6
    # the cell in front of the agent in the world is the view cell right above the agent
    front = base.grid.get(*base.front_pos)
    front_type = OBJECT_TO_IDX["empty"] if front is None else OBJECT_TO_IDX[front.type]
    assert raw[3, 5, 0] == front_type
    # the raw grid itself, as integers or as the floats of EgocentricGridObservation(scale=None)
    image = raw.transpose(2, 0, 1)
    np.testing.assert_array_equal(doorkey_grid(info), image)
    assert doorkey_nodes(image) == doorkey_nodes(image.astype(np.float32)) == nodes
    # a scaled observation is refused, not decoded by guessing its divisor
    with pytest.raises(ValueError, match="raw"):
        doorkey_nodes(obs)
    env.close()


def test_raw_grid_key_is_the_envs() -> None:
    from attn_envs.grid import RAW_GRID_KEY as ENV_KEY

    assert RAW_GRID_KEY == ENV_KEY
    with pytest.raises(ValueError, match="EgocentricGridObservation"):
        doorkey_grid({"image": np.zeros((7, 7, 3))})


def test_doorkey_nodes_with_the_key_carried() -> None:
    raw = np.zeros((3, 7, 7), np.float32)
    raw[:, 2, :] = np.array([2, 5, 0])[:, None]  # a wall column
    raw[:, 3, 6] = (5, 4, 0)  # the agent's cell shows the carried yellow key
    raw[:, 3, 5] = (4, 4, 2)  # a locked yellow door in front
    assert doorkey_nodes(raw) == {"agent": 27, "door": 26}
    assert doorkey_nodes({RAW_GRID_KEY: torch.as_tensor(raw).to(torch.uint8)}) == doorkey_nodes(raw)
    with pytest.raises(ValueError, match="shape"):
        doorkey_nodes(np.zeros((7, 7, 3)))
    with pytest.raises(ValueError, match="raw"):
        doorkey_nodes(np.full((3, 7, 7), 0.3))
    with pytest.raises(ValueError, match="raw"):
        doorkey_nodes(raw / raw.max())
    with pytest.raises(ValueError, match="raw"):  # object index 11 does not exist
        doorkey_nodes(np.full((3, 7, 7), 11))


def test_doorkey_frame_is_the_upright_view() -> None:
    _, _, info = doorkey_view_with_key_and_door()
    frame = doorkey_frame(info, tile_size=8)
    assert frame.shape == (56, 56, 3) and frame.dtype == np.uint8
    # the agent's tile (bottom centre) is drawn red-ish; unseen tiles are black
    agent = frame[48:56, 24:32].reshape(-1, 3).astype(int)
    assert (agent[:, 0] > agent[:, 1] + 100).any()


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
