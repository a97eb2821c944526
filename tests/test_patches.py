from __future__ import annotations

from functools import partial

import ale_py
import gymnasium as gym
import numpy as np
import pytest
from _contract import UniformBoxEnv, assert_env_contract, rollout
from gymnasium import spaces
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_envs import OcclusionObservation, PatchObservation, patchify, unpatchify

gym.register_envs(ale_py)


def pong_stack() -> gym.Env:
    env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0)
    return FrameStackObservation(AtariPreprocessing(env, frame_skip=4, noop_max=0), 4)


def pong_patches(**kwargs) -> gym.Env:
    return PatchObservation(pong_stack(), **kwargs)


def car_racing_patches(**kwargs) -> gym.Env:
    return PatchObservation(gym.make("CarRacing-v3"), patch_size=6, **kwargs)


def occluded_pong(ratio: float = 0.5, mode: str = "episode", fill=None) -> gym.Env:
    return OcclusionObservation(pong_patches(), ratio=ratio, mode=mode, fill=fill)


def _image(shape: tuple[int, ...], dtype: type = np.uint8) -> UniformBoxEnv:
    high = 255 if dtype == np.uint8 else 1.0
    return UniformBoxEnv(spaces.Box(0, high, shape, dtype))


@pytest.mark.parametrize(
    "factory",
    [
        pong_patches,
        partial(pong_patches, blank_top=9, flatten=False),
        car_racing_patches,
        occluded_pong,
        partial(occluded_pong, 0.3, "step"),
        partial(occluded_pong, 0.3, "episode", 0),
    ],
    ids=["pong", "pong-blank-4d", "carracing", "occl-episode", "occl-step", "occl-fill"],
)
def test_contract(factory) -> None:
    assert_env_contract(factory, n_steps=15)


def test_pong_token_layout() -> None:
    env = pong_patches(patch_size=6)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (196, 144) and env.grid_shape == (14, 14)
    frames = pong_stack().reset(seed=0)[0]  # (4, 84, 84)
    # token for patch row 3, col 5 holds pixels [18:24, 30:36] of every frame, frame axis last
    expected = frames[:, 18:24, 30:36].transpose(1, 2, 0).ravel()
    np.testing.assert_array_equal(obs[3 * 14 + 5], expected)
    np.testing.assert_array_equal(env.patch_origins[3 * 14 + 5], [18, 30])


@pytest.mark.parametrize("shape", [(84, 84), (96, 96, 3), (4, 84, 84), (12, 18, 2)])
def test_reassembly_is_exact(shape: tuple[int, ...]) -> None:
    env = PatchObservation(_image(shape), patch_size=6)
    obs, _ = env.reset(seed=3)
    raw, _ = _image(shape).reset(seed=3)
    np.testing.assert_array_equal(env.unpatchify(obs), raw)


@settings(max_examples=40, deadline=None)
@given(
    p=st.integers(1, 5),
    nh=st.integers(1, 6),
    nw=st.integers(1, 6),
    c=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_patchify_roundtrip_property(p: int, nh: int, nw: int, c: int, seed: int) -> None:
    image = np.random.default_rng(seed).integers(0, 255, (nh * p, nw * p, c), dtype=np.uint8)
    patches = patchify(image, p)
    assert patches.shape == (nh * nw, p, p, c)
    np.testing.assert_array_equal(unpatchify(patches, (nh, nw)), image)
    # token k is the k-th patch in row-major order
    k = seed % (nh * nw)
    r, q = divmod(k, nw)
    np.testing.assert_array_equal(patches[k], image[r * p : (r + 1) * p, q * p : (q + 1) * p])


def test_overlapping_patches_attention_agent_grid() -> None:
    env = PatchObservation(_image((96, 96, 3)), patch_size=7, stride=4, crop=True, flatten=False)
    obs, _ = env.reset(seed=0)
    raw, _ = _image((96, 96, 3)).reset(seed=0)
    assert obs.shape == (529, 7, 7, 3) and env.grid_shape == (23, 23)
    np.testing.assert_array_equal(obs[24], raw[4:11, 4:11])  # row 1, col 1
    with pytest.raises(ValueError, match="cannot be reassembled"):
        env.unpatchify(obs)


def test_blanking_keeps_size_and_zeroes_rows() -> None:
    env = pong_patches(blank_top=9, blank_bottom=6)
    obs, _ = env.reset(seed=0)
    image = env.unpatchify(obs)
    raw = pong_stack().reset(seed=0)[0]
    assert image.shape == raw.shape
    assert (image[:, :9] == 0).all() and (image[:, -6:] == 0).all()
    np.testing.assert_array_equal(image[:, 9:-6], raw[:, 9:-6])
    assert raw[:, :9].any(), "the score rows of a raw Pong frame are not blank"


def test_space_contains_blanked_observations() -> None:
    env = PatchObservation(
        _image((12, 12), dtype=np.float32), patch_size=3, blank_top=3, blank_value=-1.0
    )
    assert env.observation_space.low.min() == -1.0
    for seed in range(3):
        assert env.observation_space.contains(env.reset(seed=seed)[0])


def test_patch_errors() -> None:
    with pytest.raises(ValueError, match=r"does not split into 5x5 patches.*crop=True"):
        PatchObservation(_image((84, 84)), patch_size=5)
    cropped = PatchObservation(_image((84, 84)), patch_size=5, crop=True)
    assert cropped.grid_shape == (16, 16)
    with pytest.raises(TypeError, match="PatchObservation needs a Box"):
        PatchObservation(gym.make("FrozenLake-v1"))
    with pytest.raises(ValueError, match="needs a 2-D or 3-D Box observation, got shape"):
        PatchObservation(gym.make("CartPole-v1"))
    with pytest.raises(ValueError, match="patch_size must be a positive integer"):
        PatchObservation(_image((84, 84)), patch_size=0)
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="stride must be a positive integer"):
            PatchObservation(_image((84, 84)), patch_size=6, stride=bad)
    assert PatchObservation(_image((84, 84)), patch_size=6.0).patch_size == 6
    with pytest.raises(ValueError, match="exceeds the image size"):
        PatchObservation(_image((4, 4)), patch_size=6)
    with pytest.raises(ValueError, match="blank_top"):
        PatchObservation(_image((84, 84)), blank_top=80, blank_bottom=10)
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="blank_bottom must be a non-negative integer"):
            PatchObservation(_image((84, 84)), blank_bottom=bad)


def test_occlusion_counts_and_order() -> None:
    for ratio, n_kept in [(0.0, 196), (0.5, 98), (0.7, 59), (0.9, 20)]:
        env = occluded_pong(ratio)
        obs, info = env.reset(seed=1)
        assert obs.shape == (n_kept, 144) == (len(info["kept"]), 144)
        assert (np.diff(info["kept"]) > 0).all()
        full = pong_patches().reset(seed=1)[0]
        np.testing.assert_array_equal(obs, full[info["kept"]])


def test_occlusion_identity_ratio_zero() -> None:
    a, b = rollout(pong_patches, 4, 10), rollout(partial(occluded_pong, 0.0), 4, 10)
    assert all(np.array_equal(x[0], y[0]) for x, y in zip(a, b, strict=True))


def test_occlusion_episode_mask_fixed_step_mask_redrawn() -> None:
    env = occluded_pong(0.5, "episode")
    _, info = env.reset(seed=2)
    first = info["kept"]
    for _ in range(5):
        np.testing.assert_array_equal(env.step(0)[4]["kept"], first)
    assert not np.array_equal(env.reset()[1]["kept"], first), "new mask at each reset"

    env = occluded_pong(0.5, "step")
    masks = [env.reset(seed=2)[1]["kept"]] + [env.step(0)[4]["kept"] for _ in range(5)]
    assert len({tuple(m) for m in masks}) == 6


def test_occlusion_fill_keeps_shape() -> None:
    env = occluded_pong(0.75, fill=0)
    obs, info = env.reset(seed=0)
    full = pong_patches().reset(seed=0)[0]
    assert obs.shape == full.shape
    dropped = np.setdiff1d(np.arange(196), info["kept"])
    assert (obs[dropped] == 0).all()
    np.testing.assert_array_equal(obs[info["kept"]], full[info["kept"]])


def test_occlusion_errors() -> None:
    with pytest.raises(ValueError, match=r"ratio must lie in \[0, 1\)"):
        occluded_pong(1.0)
    with pytest.raises(ValueError, match="mode must be"):
        occluded_pong(0.5, "frame")
    with pytest.raises(TypeError, match="OcclusionObservation needs a Box"):
        OcclusionObservation(gym.make("FrozenLake-v1"), 0.5)


@pytest.mark.parametrize("fill", [256, -1, 0.5, float("nan"), "0"])
def test_fill_values_the_observation_dtype_cannot_hold_are_refused(fill: object) -> None:
    env = UniformBoxEnv(spaces.Box(0, 255, (16, 12), np.uint8))
    with pytest.raises(ValueError, match="fill"):
        OcclusionObservation(env, ratio=0.5, fill=fill)
    assert OcclusionObservation(env, ratio=0.5, fill=255).observation_space.high.max() == 255
