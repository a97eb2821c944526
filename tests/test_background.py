"""Tests for attn_envs.background (CarRacing grass -> picture, E6)."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import cv2
import gymnasium as gym
import numpy as np
import pytest
from _contract import assert_env_contract
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_envs.assets.backgrounds import make_backgrounds
from attn_envs.background import (
    BACKGROUND_DIR,
    GRASS_COLORS,
    GRASS_COLORS_NOMINAL,
    BackgroundObservation,
    available_backgrounds,
    load_background,
    make_car_racing_background,
)

ARTICLE_COLUMNS = ("kof", "mt_fuji", "ukiyoe", "ds")


class FrameEnv(gym.Env):
    """Replays a fixed list of frames, one per step; ends after the last one."""

    metadata = {"render_modes": []}

    def __init__(self, frames: np.ndarray | None = None, shape: tuple[int, ...] = (8, 8, 3)):
        self.frames = (
            np.zeros((2, *shape), np.uint8) if frames is None else np.asarray(frames, np.uint8)
        )
        self.observation_space = spaces.Box(0, 255, self.frames.shape[1:], np.uint8)
        self.action_space = spaces.Discrete(2)
        self._t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self.frames[0].copy(), {}

    def step(self, action):
        self._t += 1
        done = self._t >= len(self.frames) - 1
        return self.frames[min(self._t, len(self.frames) - 1)].copy(), 0.0, done, False, {}


def reference_mask(frame: np.ndarray, colors=GRASS_COLORS, seams: bool = True) -> np.ndarray:
    """Plain per-colour implementation of which pixels count as grass."""
    f = frame.astype(int)
    mask = np.zeros(frame.shape[:2], bool)
    for c in colors:
        mask |= np.all(f == c, axis=-1)
    if seams:
        for i, a in enumerate(colors):
            for b in colors[i + 1 :]:
                diff = [k for k in range(3) if a[k] != b[k]]
                if len(diff) == 1:
                    k = diff[0]
                    same = np.all(np.delete(f, k, axis=-1) == np.delete(a, k), axis=-1)
                    lo, hi = sorted((a[k], b[k]))
                    mask |= same & (f[..., k] >= lo) & (f[..., k] <= hi)
    return mask


def bare_wrapper(shape=(8, 8, 3), image="kof", **kw) -> BackgroundObservation:
    return BackgroundObservation(FrameEnv(shape=shape), image, **kw)


# --------------------------------------------------------------------------- contract


def test_contract_on_car_racing():
    assert_env_contract(functools.partial(make_car_racing_background, "kof"), n_steps=20)


def test_contract_wrapper_with_array_image():
    image = load_background("ukiyoe")[::2, ::3]  # non-square, non-contiguous array
    env_fn = functools.partial(_car_racing_with_image, image)
    assert_env_contract(env_fn, n_steps=10, subproc=False)


def _car_racing_with_image(image: np.ndarray) -> gym.Env:
    return BackgroundObservation(gym.make("CarRacing-v3"), image)


# --------------------------------------------------------------------------- behaviour


def _lockstep_frames(background: str, n_steps: int = 40, seed: int = 5):
    """Raw and wrapped CarRacing frames under the same seed and actions."""
    raw = gym.make("CarRacing-v3")
    wrapped = make_car_racing_background(background)
    pairs = [(raw.reset(seed=seed)[0], wrapped.reset(seed=seed)[0])]
    rng = np.random.default_rng(0)
    for _ in range(n_steps):
        action = rng.uniform([-1, 0, 0], [1, 1, 0.2]).astype(np.float32)
        pairs.append((raw.step(action)[0], wrapped.step(action)[0]))
    return pairs, wrapped


@pytest.mark.parametrize("background", ["kof", "ds"])
def test_exactly_grass_pixels_change_on_real_frames(background):
    pairs, env = _lockstep_frames(background)
    bg = env.background
    changed_fracs = []
    for raw, out in pairs:
        mask = reference_mask(raw)
        np.testing.assert_array_equal(env.grass_mask(raw), mask)
        np.testing.assert_array_equal(out[~mask], raw[~mask])
        np.testing.assert_array_equal(out[mask], bg[mask])
        changed_fracs.append(np.any(out != raw, axis=-1).mean())
    # Real frames are mostly grass: guards against colours that never occur in observations
    # (e.g. only the nominal (102, 204, 102), which smoothscale turns into (100, 202, 100)).
    assert np.median(changed_fracs) > 0.3
    # Road, kerbs, car and the black indicator bar survive.
    last_raw, last_out = pairs[-1]
    assert np.array_equal(last_out[-12:], last_raw[-12:])
    assert np.any(np.all(last_out == (100, 100, 100), axis=-1) | np.all(last_out == 102, -1))


def test_observed_grass_colours_are_in_grass_colors():
    pairs, _ = _lockstep_frames("kof", n_steps=5)
    raw = pairs[-1][0].reshape(-1, 3).astype(int)
    greens = raw[raw[:, 1] > raw[:, 0] + 50]
    colours, counts = np.unique(greens, axis=0, return_counts=True)
    top_two = {tuple(int(v) for v in c) for c in colours[np.argsort(-counts)[:2]]}
    assert counts.max() > 500
    assert top_two <= set(GRASS_COLORS)
    assert not top_two & set(GRASS_COLORS_NOMINAL)  # documents the smoothscale shift


def test_synthetic_frame_exact_replacement():
    h, w = 6, 10
    frame = np.zeros((h, w, 3), np.uint8)
    frame[0, :] = (100, 202, 100)
    frame[1, :] = (100, 228, 100)
    frame[2, :] = (102, 204, 102)
    frame[3, :] = (102, 230, 102)
    frame[4, :] = (100, 215, 100)  # seam between the observed shades
    frame[5, :] = [(101, 202, 100), (100, 202, 101), (100, 201, 100), (100, 229, 100),
                   (99, 202, 100), (100, 100, 100), (102, 102, 102), (0, 0, 0),
                   (255, 255, 255), (102, 231, 102)]  # fmt: skip
    env = bare_wrapper(shape=(h, w, 3))
    out = env.observation(frame)
    np.testing.assert_array_equal(out[:5], env.background[:5])
    np.testing.assert_array_equal(out[5], frame[5])
    assert env.grass_mask(frame).sum() == 5 * w

    plain = bare_wrapper(shape=(h, w, 3), seams=False)
    out = plain.observation(frame)
    np.testing.assert_array_equal(out[:4], plain.background[:4])
    np.testing.assert_array_equal(out[4:], frame[4:])


PALETTE = [
    *GRASS_COLORS,
    (100, 203, 100),
    (100, 227, 100),
    (102, 217, 102),
    (100, 229, 100),
    (100, 201, 100),
    (101, 202, 100),
    (100, 202, 101),
    (102, 202, 100),
    (100, 100, 100),
    (0, 0, 0),
]


@settings(max_examples=60, deadline=None)
@given(
    h=st.integers(1, 9),
    w=st.integers(1, 9),
    data=st.data(),
    seams=st.booleans(),
)
def test_property_output_is_where_of_reference_mask(h, w, data, seams):
    idx = data.draw(st.lists(st.integers(0, len(PALETTE) + 2), min_size=h * w, max_size=h * w))
    rand = np.random.default_rng(h * 31 + w).integers(0, 256, (h * w, 3))
    pal = np.array(PALETTE)
    frame = np.array(
        [pal[i] if i < len(pal) else rand[j] for j, i in enumerate(idx)], np.uint8
    ).reshape(h, w, 3)
    env = bare_wrapper(shape=(h, w, 3), image="mt_fuji", seams=seams)
    before = frame.copy()
    out = env.observation(frame)
    expected = np.where(reference_mask(frame, seams=seams)[..., None], env.background, frame)
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(frame, before)  # input not modified
    assert out.dtype == np.uint8 and out.shape == frame.shape


def test_custom_colours():
    frame = np.zeros((4, 4, 3), np.uint8)
    frame[:2] = (10, 20, 30)
    frame[2:] = (100, 202, 100)
    env = bare_wrapper(shape=(4, 4, 3), colors=[(10, 20, 30)])
    out = env.observation(frame)
    np.testing.assert_array_equal(out[:2], env.background[:2])
    np.testing.assert_array_equal(out[2:], frame[2:])


def test_env_without_grass_is_unchanged():
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (6, 24, 32, 3), dtype=np.uint8)
    frames[..., 0] = np.minimum(frames[..., 0], 99)  # no red channel of 100/102: no grass
    env = BackgroundObservation(FrameEnv(frames), "kof")
    obs, _ = env.reset(seed=0)
    seen = [obs]
    for _ in range(4):
        seen.append(env.step(0)[0])
    np.testing.assert_array_equal(np.stack(seen), frames[:5])


def test_resize_once_and_image_forms_agree():
    arr = load_background("kof")
    expected = cv2.resize(arr, (96, 96), interpolation=cv2.INTER_AREA)
    base = gym.make("CarRacing-v3")
    for image in (arr, "kof", BACKGROUND_DIR / "kof.png", str(BACKGROUND_DIR / "kof.png")):
        env = BackgroundObservation(base, image)
        np.testing.assert_array_equal(env.background, expected)
        assert not env.background.flags.writeable
    # Non-square images are stretched to the frame.
    env = bare_wrapper(shape=(5, 12, 3), image=np.zeros((30, 7, 3), np.uint8))
    assert env.background.shape == (5, 12, 3)


def test_same_seed_same_frames_and_stateless_observation():
    a, _ = _lockstep_frames("mt_fuji", n_steps=8, seed=11)
    b, env = _lockstep_frames("mt_fuji", n_steps=8, seed=11)
    for (_, x), (_, y) in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    raw = a[-1][0]
    np.testing.assert_array_equal(env.observation(raw), env.observation(raw))


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("space", "error", "match"),
    [
        (spaces.Discrete(3), TypeError, "needs a Box observation space, got Discrete"),
        (spaces.Box(0, 255, (96, 96), np.uint8), ValueError, r"3-D Box.*\(96, 96\)"),
        (spaces.Box(0, 255, (96, 96, 4), np.uint8), ValueError, r"RGB.*\(96, 96, 4\)"),
        (spaces.Box(0, 1, (96, 96, 3), np.float32), TypeError, "uint8.*float32"),
    ],
)
def test_bad_observation_space(space, error, match):
    env = FrameEnv()
    env.observation_space = space
    with pytest.raises(error, match=match):
        BackgroundObservation(env, "kof")


@pytest.mark.parametrize(
    ("image", "error", "match"),
    [
        (np.zeros((10, 10), np.uint8), ValueError, r"\(H, W, 3\).*\(10, 10\)"),
        (np.zeros((10, 10, 4), np.uint8), ValueError, r"\(10, 10, 4\)"),
        (np.zeros((0, 10, 3), np.uint8), ValueError, r"\(0, 10, 3\)"),
        (np.zeros((10, 10, 3), np.float32), TypeError, "uint8 image, got dtype float32"),
        ([[[0, 0, 0]]], TypeError, "got list"),
        ("no_such_background", FileNotFoundError, "neither a shipped background"),
    ],
)
def test_bad_image(image, error, match):
    with pytest.raises(error, match=match):
        bare_wrapper(image=image)


def test_unreadable_image_file(tmp_path):
    bad = tmp_path / "not_an_image.png"
    bad.write_text("hello")
    with pytest.raises(ValueError, match="could not read an image"):
        load_background(bad)


@pytest.mark.parametrize(
    ("colors", "match"),
    [
        ([], "non-empty list of RGB"),
        ([(1, 2)], "non-empty list of RGB"),
        ([(1, 2, 256)], "integers 0..255"),
        ([(1.5, 2, 3)], "integers 0..255"),
    ],
)
def test_bad_colours(colors, match):
    with pytest.raises(ValueError, match=match):
        bare_wrapper(colors=colors)


def test_factory_rejects_domain_randomize():
    with pytest.raises(ValueError, match="domain_randomize"):
        make_car_racing_background("kof", domain_randomize=True)


def test_factory_passes_kwargs():
    env = make_car_racing_background("ds", continuous=False)
    assert env.action_space == spaces.Discrete(5)
    assert isinstance(env, BackgroundObservation)


# --------------------------------------------------------------------------- shipped images


def test_shipped_names_mirror_the_article_table():
    assert set(ARTICLE_COLUMNS) <= set(available_backgrounds())
    assert set(available_backgrounds()) == set(make_backgrounds.BACKGROUNDS)
    assert (BACKGROUND_DIR / "LICENSE.md").is_file()


@pytest.mark.parametrize("name", ARTICLE_COLUMNS)
def test_shipped_background_is_far_from_grass(name):
    img = load_background(name)
    assert img.shape == (make_backgrounds.SIZE, make_backgrounds.SIZE, 3) == (384, 384, 3)
    assert img.dtype == np.uint8
    assert (BACKGROUND_DIR / f"{name}.png").stat().st_size < 300_000
    dist = np.min([np.abs(img.astype(int) - c).max(axis=-1) for c in GRASS_COLORS_NOMINAL], axis=0)
    assert np.mean(dist < 40) < 0.05, "too much grass-like green"
    assert dist.mean() > 80
    assert img.reshape(-1, 3).std(axis=0).mean() > 30  # textured, not a flat colour
    assert len(np.unique(img.reshape(-1, 3), axis=0)) > 50


def test_shipped_backgrounds_differ_from_each_other():
    imgs = [load_background(n).astype(int) for n in ARTICLE_COLUMNS]
    for i in range(len(imgs)):
        for j in range(i + 1, len(imgs)):
            assert np.abs(imgs[i] - imgs[j]).mean() > 40


def test_load_background_returns_a_private_copy():
    a = load_background("kof")
    a[:] = 0
    assert load_background("kof").any()


@pytest.mark.parametrize("name", ARTICLE_COLUMNS)
def test_generator_matches_shipped_pixels(name):
    np.testing.assert_array_equal(make_backgrounds.generate(name), load_background(name))


def test_generator_script_reproduces_shipped_images(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "attn_envs.assets.backgrounds.make_backgrounds",
         "--out-dir", str(tmp_path)],
        check=True, capture_output=True, cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    for name in ARTICLE_COLUMNS:
        # pixels, not file bytes: PNG encoders may differ between library versions
        written = load_background(str(tmp_path / f"{name}.png"))
        np.testing.assert_array_equal(written, load_background(name), err_msg=name)


def test_generate_rejects_unknown_name():
    with pytest.raises(ValueError, match="unknown background 'nope'"):
        make_backgrounds.generate("nope")
