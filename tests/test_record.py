"""Tests of zoo.record: videos of trained runs with an attention side panel."""

from __future__ import annotations

from pathlib import Path

import ale_py
import cv2
import gymnasium as gym
import numpy as np
import pytest
import torch
from _zoo import TINY_DOORKEY, git_changes, tracked_copy, trained
from PIL import Image, ImageSequence
from torch import nn

import zoo
import zoo.record
import zoo.video
from attn_policies.agents import PolicyAgent
from attn_policies.nonlocal_cnn import NonLocalBlock
from zoo.record import current_info, key_saliency, record

# zoo.factory builds ALE ids without registering them (zoo.record does it for itself).
gym.register_envs(ale_py)


@pytest.fixture(scope="module")
def doorkey(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return trained(tmp_path_factory, "doorkey_tiny_s0", "doorkey", seed=0, **TINY_DOORKEY)


def video_frames(path: Path) -> list[np.ndarray]:
    """Every decoded frame (RGB) of an MP4 or GIF."""
    if path.suffix == ".gif":
        return [np.asarray(f.convert("RGB")) for f in ImageSequence.Iterator(Image.open(path))]
    capture = cv2.VideoCapture(str(path))
    frames = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        frames.append(frame[..., ::-1])
    capture.release()
    return frames


def test_doorkey_video_has_one_frame_per_step_and_an_attention_panel(
    doorkey: Path, tmp_path: Path
) -> None:
    out = record(doorkey, out=tmp_path / "v.mp4", n_steps=20)
    assert out == tmp_path / "v.mp4"
    capture = cv2.VideoCapture(str(out))
    assert capture.get(cv2.CAP_PROP_FRAME_COUNT) == 20
    capture.release()
    frames = video_frames(out)
    assert len(frames) == 20
    height, width, _ = frames[0].shape
    # MiniGrid's square frame, then a square heat map under a 22-pixel label band.
    assert height >= zoo.video.MIN_HEIGHT and width == height + height - 22
    panel = frames[0][30:, height + 10 :].astype(float)
    assert panel.std() > 10  # a heat map over the view, not an empty panel

    plain = record(doorkey, out=tmp_path / "plain.mp4", n_steps=20, overlay=False)
    plain_frames = video_frames(plain)
    assert len(plain_frames) == 20 and plain_frames[0].shape == (height, height, 3)


def test_same_seed_same_video_across_episode_resets(doorkey: Path, tmp_path: Path) -> None:
    # 40 steps cross the 30-step time limit: the video continues into episode 2.
    a = video_frames(record(doorkey, out=tmp_path / "a.gif", n_steps=40, seed=3, overlay=False))
    b = video_frames(record(doorkey, out=tmp_path / "b.gif", n_steps=40, seed=3, overlay=False))
    c = video_frames(record(doorkey, out=tmp_path / "c.gif", n_steps=40, seed=4, overlay=False))
    assert len(a) == len(b) == len(c) == 40
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_default_path_is_the_run_folder(doorkey: Path) -> None:
    out = record(doorkey, n_steps=3, which="last", overlay=False)
    assert out == doorkey / "video.mp4" and out.stat().st_size > 1000


def test_a_run_folder_under_version_control_is_left_as_it_is(
    doorkey: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `attn-zoo record results/doorkey`: the video goes to runs/<its path>, not into results/
    repo = tmp_path / "repo"
    run = tracked_copy(doorkey, repo)
    monkeypatch.chdir(repo)
    out = record(run, n_steps=3, which="last", overlay=False)
    assert out == Path("runs/results/doorkey/pi/video.mp4") and out.stat().st_size > 1000
    assert not (run / "video.mp4").exists() and git_changes(repo) == ""


def test_gif_fallback_when_opencv_cannot_write_mp4(
    doorkey: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class NoCodec:
        fourcc = staticmethod(zoo.video.cv2.VideoWriter.fourcc)

        def __init__(self, *args: object) -> None:
            pass

        def isOpened(self) -> bool:  # OpenCV's method name
            return False

        def release(self) -> None:
            pass

    monkeypatch.setattr(zoo.video.cv2, "VideoWriter", NoCodec)
    out = record(doorkey, out=tmp_path / "v.mp4", n_steps=7)
    assert out == tmp_path / "v.gif" and not (tmp_path / "v.mp4").exists()
    assert Image.open(out).n_frames == 7


def test_a2c_atari_with_non_local_attention(tmp_path_factory: pytest.TempPathFactory) -> None:
    run = trained(tmp_path_factory, "atari_fc", "atari_nonlocal", variant="fc")
    out = record(run, out=tmp_path_factory.mktemp("atari") / "v.mp4", n_steps=10)
    frames = video_frames(out)
    assert len(frames) == 10
    height, width, _ = frames[0].shape
    assert height == 420 and width == 320 + 420 - 22  # 210x160 ALE frame x2, plus the panel


def test_model_without_attention_records_without_panel(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    run = trained(tmp_path_factory, "atari_cnn", "atari_nonlocal", variant="cnn")
    out = record(run, out=tmp_path_factory.mktemp("cnn") / "v.mp4", n_steps=5)
    frames = video_frames(out)
    assert len(frames) == 5 and frames[0].shape == (420, 320, 3)


def test_ppo_feature_attention_gets_a_bar_strip(tmp_path_factory: pytest.TempPathFactory) -> None:
    run = trained(tmp_path_factory, "atariari_g", "atariari", model="g_awrl")
    out = record(run, out=tmp_path_factory.mktemp("ari") / "v.gif", n_steps=4)
    frames = video_frames(out)
    assert len(frames) == 4 and frames[0].shape[1] > frames[0].shape[0]


def test_errors(tmp_path_factory: pytest.TempPathFactory, doorkey: Path) -> None:
    mnist = trained(tmp_path_factory, "mnist_rel", "mnist", model="relational")
    with pytest.raises(ValueError, match="classifier run"):
        record(mnist)
    with pytest.raises(ValueError, match="n_steps"):
        record(doorkey, n_steps=0)
    with pytest.raises(ValueError, match="n_steps must be a positive integer"):
        record(doorkey, n_steps=2.5)  # not a TypeError from deep inside the rollout
    with pytest.raises(FileNotFoundError):
        record(tmp_path_factory.mktemp("not_a_run"))


def test_key_saliency_reads_non_local_rows_and_square_grids() -> None:
    block = NonLocalBlock(2, form="row")
    weights = torch.softmax(torch.randn(1, 2 * 3, 5, 5), dim=-1)  # 2 channels x 3 rows, W = 5
    model = nn.Sequential(block)
    grid = key_saliency(model, {"0": weights}, "0")
    assert grid.shape == (3, 5)
    expected = weights.reshape(1, 2, 3, 5, 5).mean(dim=(1, 3))[0]
    np.testing.assert_allclose(grid, expected.numpy(), rtol=1e-6)
    strip = key_saliency(model, {"x": torch.full((1, 2, 8, 8), 1 / 8)}, "x")
    assert strip.shape == (8,)


# --- every kind of run: CMA-ES policies (bare modules) and BC students ------------------------


@pytest.fixture(scope="module")
def cartpole_pi(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return trained(tmp_path_factory, "cartpole_pi", "cartpole_pi")


def test_cmaes_agent_plays_as_the_trainer_scores_it(cartpole_pi: Path) -> None:
    from zoo.trainers.cmaes_trainer import CMAESZooTrainer

    agent = zoo.load(cartpole_pi).agent("best")
    assert isinstance(agent, PolicyAgent)
    handle = zoo.load(cartpole_pi).acting()  # cartpole_pi is a recipe: its final CMA-ES stage
    cap = handle.config.body.get("max_episode_steps") or 10_000  # the env's own limit ends it
    expected = CMAESZooTrainer().episode_returns(
        handle.path, handle.config, n_episodes=1, seed=7, which="best"
    )["rewards"][0]
    venv = zoo.record.open_env(handle, render=False)
    venv.seed(7)
    obs, state, starts, total = venv.reset(), None, np.ones(1, dtype=bool), 0.0
    for _ in range(cap):  # the evaluator stops at max_episode_steps
        action, state = agent.predict(obs, state=state, episode_start=starts)
        obs, reward, starts, _ = venv.step(action)
        total += float(reward[0])
        if starts[0]:
            break
    venv.close()
    assert total == pytest.approx(expected, rel=1e-4, abs=1e-4)


def test_cmaes_panel_uses_the_state_the_agent_acts_from(cartpole_pi: Path) -> None:
    handle = zoo.load(cartpole_pi)
    agent = handle.agent("best")
    obs = np.random.default_rng(0).normal(size=(1, 5)).astype(np.float32)
    _, state = agent.predict(obs)
    fresh = zoo.record.model_attention(agent, obs)["policy.neuron"]
    carried = zoo.record.model_attention(agent, obs, state)["policy.neuron"]
    restarted = zoo.record.model_attention(agent, obs, state, np.ones(1, bool))["policy.neuron"]
    assert not torch.allclose(fresh, carried)  # the LSTM keys remember the last step
    torch.testing.assert_close(fresh, restarted)


def test_cmaes_run_records_with_a_bar_per_observation_entry(
    cartpole_pi: Path, tmp_path: Path
) -> None:
    frames = video_frames(record(cartpole_pi, out=tmp_path / "v.mp4", n_steps=5))
    assert len(frames) == 5
    height, width, _ = frames[0].shape
    assert width == 600 + height - 22  # the 600x400 CartPole frame, then the panel
    plain = video_frames(record(cartpole_pi, out=tmp_path / "p.mp4", n_steps=2, overlay=False))
    assert plain[0].shape == (400, 600, 3)


def test_bc_student_records_with_its_attention_panel(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    run = trained(tmp_path_factory, "puzzle_pong_bc", "puzzle_pong_bc")
    model = zoo.load(run).model("best")
    assert type(zoo.record.policy_module(model)).__name__ == "BCStudent"
    assert zoo.record.has_attention(model)
    frames = video_frames(record(run, out=tmp_path / "v.mp4", n_steps=3))
    height, width, _ = frames[0].shape
    assert len(frames) == 3 and width == 320 + height - 22  # 210x160 ALE frame x2 + panel


def test_policy_agent_hands_integer_screens_to_its_policy_as_integers() -> None:
    from gymnasium import spaces

    from attn_policies.attention import MultiHeadSelfAttention

    class Spy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = MultiHeadSelfAttention(1, n_heads=1, head_dim=2)
            self.seen: list[tuple[torch.dtype, float]] = []

        def forward(self, obs: torch.Tensor, state: None = None) -> tuple[torch.Tensor, None]:
            self.seen.append((obs.dtype, float(obs.max())))
            out = self.attention(obs.float()[..., None] / 255)
            return out.mean(dim=(1, 2))[:, None], None

    agent = PolicyAgent(Spy(), spaces.Box(-1, 1, (1,)))
    screen = np.full((1, 4), 200, np.uint8)
    maps = zoo.record.model_attention(agent, screen)  # before any predict: a first frame
    assert list(maps) == ["policy.attention"] and maps["policy.attention"].shape == (1, 1, 4, 4)
    action, _ = agent.predict(screen)
    assert agent.policy.seen == [(torch.uint8, 200.0)] * 2
    assert action.shape == (1, 1) and action.dtype == np.float32


def test_current_info_follows_resets_and_episode_ends() -> None:
    from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack

    from attn_envs.grid import make_egocentric_doorkey

    venv = VecFrameStack(DummyVecEnv([lambda: make_egocentric_doorkey(max_steps=3)]), 1, "first")
    venv.seed(0)
    obs = venv.reset()
    info = current_info(venv)  # through a VecEnvWrapper, from the base VecEnv's reset_infos
    np.testing.assert_allclose(obs[0], info["raw_grid"] / info["raw_grid"].max(), rtol=1e-6)
    for _ in range(3):  # the third step truncates: obs is the next episode's first view
        obs, _, dones, infos = venv.step(np.array([0]))
        info = current_info(venv, infos, dones)
        np.testing.assert_allclose(obs[0], info["raw_grid"] / info["raw_grid"].max(), rtol=1e-6)
    assert dones[0] and "terminal_observation" in infos[0] and "terminal_observation" not in info
    venv.close()
