"""Tests for attn_envs.atari_frames: seed 003's grey, 110x84 downsample, 84x84 crop."""

from __future__ import annotations

from functools import partial

import ale_py
import cv2
import gymnasium as gym
import numpy as np
import pytest
from _contract import assert_env_contract
from stable_baselines3.common import atari_wrappers as sb3

from attn_envs.atari_frames import (
    AtariCropWrapper,
    DownsampleCropObservation,
    FixedNoopReset,
    NoopFrameReset,
)
from attn_envs.atari_ram import make_distractor_env

gym.register_envs(ale_py)


def _pong(**kwargs: object) -> gym.Env:
    return gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0, **kwargs)


def test_frame_is_grey_then_110x84_then_the_playing_area() -> None:
    env = DownsampleCropObservation(_pong())
    obs, _ = env.reset(seed=0)
    rgb = env.unwrapped.ale.getScreenRGB()
    grey = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    small = cv2.resize(grey, (84, 110), interpolation=cv2.INTER_AREA)
    np.testing.assert_array_equal(obs[..., 0], small[18:102])
    assert obs.shape == (84, 84, 1) and env.observation_space.shape == (84, 84, 1)
    # Pong's score (top rows of the screen) is outside the crop: the crop does not change
    # when only the score rows of the frame change
    marked = rgb.copy()
    marked[:30] = 255
    again = env.observation(marked)
    np.testing.assert_array_equal(again, obs)
    # while the squashed 84x84 frame of SB3's WarpFrame keeps them
    warp = sb3.WarpFrame(_pong())
    assert not np.array_equal(warp.observation(marked), warp.observation(rgb))
    env.close()
    warp.close()


def test_grey_input_and_centred_crop() -> None:
    grey = gym.wrappers.GrayscaleObservation(_pong())
    env = DownsampleCropObservation(grey, height=100, width=90, crop_top=0, size=80)
    obs, _ = env.reset(seed=0)
    frame = grey.observation(env.unwrapped.ale.getScreenRGB())
    small = cv2.resize(frame, (90, 100), interpolation=cv2.INTER_AREA)
    np.testing.assert_array_equal(obs[..., 0], small[:80, 5:85])
    env.close()


def test_crop_wrapper_is_sb3_atari_wrapper_with_the_crop() -> None:
    def chain(env: gym.Env) -> list[type]:
        out = []
        while isinstance(env, gym.Wrapper):
            out.append(type(env))
            env = env.env
        return out

    crop = chain(AtariCropWrapper(_pong()).env)
    warp = chain(sb3.AtariWrapper(_pong()).env)
    assert crop == [DownsampleCropObservation if c is sb3.WarpFrame else c for c in warp]
    assert sb3.FireResetEnv in crop  # Pong has FIRE
    freeway = chain(AtariCropWrapper(gym.make("ALE/Freeway-v5", frameskip=1)).env)
    assert sb3.FireResetEnv not in freeway
    env = AtariCropWrapper(_pong(), clip_reward=False, terminal_on_life_loss=False, noop_max=0)
    assert chain(env.env)[0] is DownsampleCropObservation
    obs, _ = env.reset(seed=0)
    assert obs.shape == (84, 84, 1) and obs.dtype == np.uint8
    env.close()


def test_e8_config_uses_the_crop_and_builds_84x84x4() -> None:
    from zoo.config import load_runs
    from zoo.factory import make_vec_env

    run = load_runs("atari_nonlocal", budget="smoke", overrides={"variant": "cnn"})[0]
    assert run.body["env_wrapper"] == ["AtariCropWrapper"]
    venv = make_vec_env(run, n_envs=1)
    assert venv.observation_space.shape == (84, 84, 4)
    venv.close()


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match=r"needs a uint8 \(H, W, 3\) RGB or"):
        DownsampleCropObservation(gym.wrappers.DtypeObservation(_pong(), np.float32))
    with pytest.raises(ValueError, match="does not fit a 110x84 frame"):
        DownsampleCropObservation(_pong(), crop_top=30)
    with pytest.raises(TypeError, match="needs a Box observation space"):
        DownsampleCropObservation(gym.make("FrozenLake-v1"))
    with pytest.raises(TypeError, match="AtariCropWrapper needs an ALE env"):
        AtariCropWrapper(gym.make("CarRacing-v3"))


def _fixed_noop_pong(noops: int) -> gym.Env:
    return FixedNoopReset(_pong(), noops)


def test_fixed_noop_reset_contract() -> None:
    assert_env_contract(partial(_fixed_noop_pong, 5), n_steps=20)


@pytest.mark.parametrize("noops", [0, 1, 6, 29])
def test_fixed_noops_start_every_episode_after_that_many_frames(noops: int) -> None:
    env = _fixed_noop_pong(noops)
    for seed in (0, None):
        _, info = env.reset(seed=seed)
        assert info["episode_frame_number"] == noops == env.unwrapped.ale.getEpisodeFrameNumber()
    env.close()


def test_fixed_noop_reset_bad_inputs() -> None:
    with pytest.raises(ValueError, match="noops must be a non-negative integer, got -1"):
        FixedNoopReset(_pong(), -1)
    with pytest.raises(TypeError, match="FixedNoopReset needs an ALE env"):
        FixedNoopReset(gym.make("CartPole-v1"), 3)


def _phase_pong(noop_max: int = 3) -> gym.Env:
    # the ALE env skips 4 frames itself: NoopResetEnv's no-ops would keep the phase
    return NoopFrameReset(
        gym.make("ALE/Pong-v5", obs_type="ram", frameskip=4, repeat_action_probability=0.0),
        noop_max,
    )


def test_noop_frame_reset_contract() -> None:
    assert_env_contract(_phase_pong, n_steps=20)


def test_noop_frame_reset_draws_every_phase_and_replays_its_seed() -> None:
    """0..noop_max single frames after reset, so a frame-skip-4 env starts at every phase;
    the draw follows reset's seed, and the observation is the advanced emulator's."""
    env = _phase_pong(3)
    frames = []
    for seed in range(40):
        obs, info = env.reset(seed=seed)
        frames.append(info["episode_frame_number"])
        assert frames[-1] == env.unwrapped.ale.getEpisodeFrameNumber()
        np.testing.assert_array_equal(obs, env.unwrapped.ale.getRAM())
    assert set(frames) == {0, 1, 2, 3}
    again = [env.reset(seed=seed)[1]["episode_frame_number"] for seed in range(40)]
    assert again == frames
    info = env.step(0)[4]  # then whole 4-frame steps
    assert info["episode_frame_number"] == frames[-1] + 4
    assert _phase_pong(0).reset(seed=1)[1]["episode_frame_number"] == 0
    env.close()


def test_distractor_env_reads_its_features_after_the_phase_frames() -> None:
    """``make_distractor_env(noop_frames=k)``: the reset stack holds the advanced RAM."""
    env = make_distractor_env("Pong", n_distractors=0, stack=1, noop_frames=3, frameskip=4,
                              repeat_action_probability=0.0, order_seed=0)  # fmt: skip
    moved = 0
    for seed in range(12):
        obs, info = env.reset(seed=seed)
        expected = env.unwrapped.ale.getRAM()[env._indices][env.feature_permutation]
        np.testing.assert_array_equal(obs[0], expected.astype(np.float32))
        moved += info["episode_frame_number"] > 0
    assert moved > 0
    env.close()


def test_noop_frame_reset_bad_inputs() -> None:
    with pytest.raises(ValueError, match="noop_max must be a non-negative integer, got -1"):
        _phase_pong(-1)
    with pytest.raises(TypeError, match="NoopFrameReset needs an ALE env"):
        NoopFrameReset(gym.make("CartPole-v1"))
    with pytest.raises(ValueError, match="noop_frames must be a non-negative integer"):
        make_distractor_env("Pong", n_distractors=0, noop_frames=-2)
