"""Tests of zoo.run_maps: the attention figures of trained runs, chosen by env."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ale_py
import gymnasium as gym
import numpy as np
import pytest
import yaml
from _zoo import TINY_DOORKEY, git_changes, tracked_copy, trained
from PIL import Image

import zoo
import zoo.run_maps
from attn_policies.attention_plots import doorkey_nodes
from zoo.run_maps import run_maps

# zoo.factory builds ALE ids without registering them (zoo.record does it for itself).
gym.register_envs(ale_py)


def assert_png(path: Path, min_bytes: int = 15_000) -> tuple[int, int]:
    assert path.is_file() and path.stat().st_size > min_bytes
    with Image.open(path) as image:
        assert image.format == "PNG"
        return image.size


def spy(monkeypatch: pytest.MonkeyPatch, name: str) -> list[dict[str, Any]]:
    """Record the arguments zoo.run_maps passes to one of its figure functions."""
    calls: list[dict[str, Any]] = []
    real = getattr(zoo.run_maps, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls.append({"args": args, **kwargs})
        return real(*args, **kwargs)

    monkeypatch.setattr(zoo.run_maps, name, wrapper)
    return calls


def test_doorkey_figure_shows_agent_key_and_door(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = trained(tmp_path_factory, "doorkey_tiny_s0", "doorkey", seed=0, **TINY_DOORKEY)
    figures = spy(monkeypatch, "plot_grid_attention")
    frames = spy(monkeypatch, "doorkey_frame")
    inputs = spy(monkeypatch, "model_attention")
    paths = run_maps(run, out_dir=tmp_path)
    # the egocentric figure of every grid run, and the book's name for DoorKey's
    assert paths == [tmp_path / "attention_egocentric.png", tmp_path / "attention_doorkey.png"]
    width, height = assert_png(paths[0])
    assert width > 500 and height > 500  # 3 nodes x 3 heads
    grid = frames[0]["args"][0]
    assert set(figures[0]["args"][1]) == {"agent", "key", "door"}
    assert figures[0]["args"][1] == doorkey_nodes(grid) and figures[0]["transpose"]
    # the raw grid of the very observation drawn (the env scales its view by the max)
    obs = inputs[0]["args"][1][0]
    np.testing.assert_allclose(obs, grid / grid.max(), rtol=1e-6)
    # Default folder: the run's own; "last" loads the final model.
    assert run_maps(run, which="last")[1] == run / "attention_doorkey.png"


def test_a_run_folder_under_version_control_is_left_as_it_is(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = trained(tmp_path_factory, "doorkey_tiny_s0", "doorkey", seed=0, **TINY_DOORKEY)
    repo = tmp_path / "repo"
    tracked = tracked_copy(run, repo)
    monkeypatch.chdir(repo)
    paths = run_maps(tracked)
    assert [p.parent for p in paths] == [Path("runs/results/doorkey/pi")] * 2
    assert git_changes(repo) == "" and not list(tracked.glob("*.png"))


def test_every_egocentric_grid_run_gets_the_egocentric_figure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A relational PPO on MiniGrid-Empty-8x8 (no "DoorKey" in its id): the 7x7 attention over
    # the agent's own view, not stretched over the whole top-down render.
    body = {
        "algo": "ppo",
        "env": "MiniGrid-Empty-8x8-v0",
        "env_kwargs": {"max_steps": 30},
        "env_wrapper": ["EgocentricGridObservation"],
        "policy": "MlpPolicy",
        "policy_kwargs": {"features_extractor_class": "relational"},
        "n_timesteps": 64,
        "n_steps": 32,
        "batch_size": 32,
        "n_epochs": 1,
        "eval": {"final_episodes": 1},
    }
    config = tmp_path / "empty.yml"
    config.write_text(yaml.safe_dump({"empty": body}))
    run = zoo.train(config, root=tmp_path / "runs").path
    figures = spy(monkeypatch, "plot_grid_attention")
    saliency = spy(monkeypatch, "saliency_figure")
    assert run_maps(run, out_dir=tmp_path / "maps") == [tmp_path / "maps/attention_egocentric.png"]
    assert_png(tmp_path / "maps/attention_egocentric.png", min_bytes=5_000)
    assert not saliency
    (call,) = figures
    assert call["args"][0].shape == (3, 49, 49) and call["grid_shape"] == (7, 7)
    assert call["transpose"] and call["frame"].shape == (7 * 16, 7 * 16, 3)
    assert "agent" in call["args"][1]


def test_atari_non_local_saliency_per_layer(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = trained(tmp_path_factory, "atari_fc", "atari_nonlocal", variant="fc")
    calls = spy(monkeypatch, "saliency_figure")
    paths = run_maps(run, out_dir=tmp_path)
    assert paths == [tmp_path / "attention_features_extractor_cnn_attn_fc.png"]
    assert_png(paths[0])
    (call,) = calls
    assert call["rows"] == 7  # 32 channels x 7 rows of the 7x7 conv3 map
    assert call["args"][2].shape == (210, 160, 3)  # drawn over the rendered ALE frame


def test_ppo_distractor_features(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = trained(tmp_path_factory, "atariari_g", "atariari", model="g_awrl")
    calls = spy(monkeypatch, "feature_attention_figure")
    paths = run_maps(run, out_dir=tmp_path, seed=5)
    assert paths == [tmp_path / "attention_features.png"]
    assert_png(paths[0])
    assert calls[0]["seed"] == 5
    # The run normalises observations: the figure's env applies the saved statistics.
    env = calls[0]["args"][1]
    assert isinstance(env, gym.wrappers.TransformObservation)


def test_relational_mnist_digits(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = trained(tmp_path_factory, "mnist_rel", "mnist", model="relational")
    calls = spy(monkeypatch, "plot_grid_attention")
    paths = run_maps(run, out_dir=tmp_path)
    names = [p.name for p in paths]
    assert names == [
        "attention_mnist.png",
        "attention_mnist_digit0.png",
        "attention_mnist_digit1.png",
    ]
    for path in paths:
        assert_png(path, min_bytes=5_000)
    assert [c["batch_index"] for c in calls] == [0, 1]
    assert all(c["grid_shape"] == (16, 16) for c in calls)  # 28x28 -> four 4x4 convs -> 16x16
    weights = np.asarray(calls[0]["args"][0])
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, rtol=1e-5)  # softmax rows


def test_models_without_attention_raise(tmp_path_factory: pytest.TempPathFactory) -> None:
    cnn = trained(tmp_path_factory, "atari_cnn", "atari_nonlocal", variant="cnn")
    with pytest.raises(ValueError, match="no attention layer"):
        run_maps(cnn)
    mnist_cnn = trained(tmp_path_factory, "mnist_cnn", "mnist", model="cnn")
    with pytest.raises(ValueError, match=r"CNNMNIST.*no attention layer"):
        run_maps(mnist_cnn)
    with pytest.raises(FileNotFoundError):
        run_maps(tmp_path_factory.mktemp("not_a_run"))


def test_cmaes_attention_neuron_queries_by_observation_entry(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = trained(tmp_path_factory, "cartpole_pi", "cartpole_pi_x0")
    calls = spy(monkeypatch, "plot_feature_attention")
    out = tmp_path_factory.mktemp("pi_maps")
    (path,) = run_maps(run, out_dir=out)
    assert path == out / "attention_policy_neuron.png"
    assert_png(path)
    weights = calls[0]["args"][0]
    assert tuple(weights.shape) == (zoo.run_maps.FEATURE_STEPS, 1, 16, 5)  # steps, head, M, N
    assert calls[0]["args"][1] == [f"obs[{i}]" for i in range(5)]
    assert not np.allclose(weights[0], weights[-1])  # the rollout moves on


def test_cmaes_model_without_attention_names_its_policy(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    run = trained(tmp_path_factory, "cartpole_fnn", "cartpole_fnn")
    with pytest.raises(ValueError, match=r"FNNPolicy\) has no attention layer"):
        run_maps(run)


def test_bc_student_top_patches(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = trained(tmp_path_factory, "puzzle_pong_bc", "puzzle_pong_bc")
    calls = spy(monkeypatch, "top_patches_figure")
    (path,) = run_maps(run, out_dir=tmp_path_factory.mktemp("bc_maps"))
    assert path.name == "attention_extractor_neuron.png"
    assert_png(path, min_bytes=5_000)
    assert calls[0]["method"] == "argmax"  # an AttentionNeuron: the patches its queries pick
    assert type(calls[0]["args"][0]).__name__ == "BCStudent"
