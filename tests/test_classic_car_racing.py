"""Tests for attn_envs.classic_car_racing (gym <= 0.21's 96x96 CarRacing screen, headless)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

import attn_envs  # noqa: F401
from attn_envs.background import GRASS_COLORS_NOMINAL, make_car_racing_background
from attn_envs.classic_car_racing import (
    ClassicCarRacing,
    classic_camera,
    make_car_racing,
    rasterize,
)

ROAD = {(102, 102, 102), (105, 105, 105), (107, 107, 107)}
KERBS = {(255, 255, 255), (255, 0, 0)}
CAR = {(204, 0, 0), (0, 0, 0), (77, 77, 77)}


def centre_rule(polygon: np.ndarray, size: int) -> np.ndarray:
    """Plain per-pixel reference: is the pixel centre inside the convex polygon?"""
    ys, xs = np.mgrid[0:size, 0:size] + 0.5
    cy, cx = polygon.mean(0)[1], polygon.mean(0)[0]
    inside = np.ones((size, size), bool)
    for a, b in zip(polygon, np.roll(polygon, -1, axis=0), strict=True):

        def side(x, y, a=a, b=b):
            return (b[0] - a[0]) * (y - a[1]) - (b[1] - a[1]) * (x - a[0])

        inside &= side(xs, ys) * np.sign(side(cx, cy)) > 0
    return inside


def test_rasterize_matches_the_pixel_centre_rule_for_rotated_quads():
    rng = np.random.default_rng(0)
    for _ in range(30):
        centre, angle = rng.uniform(5, 27, 2), rng.uniform(0, math.pi)
        half = rng.uniform(1, 8, 2)
        corners = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]]) * half
        rot = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
        quad = corners @ rot.T + centre
        img = np.zeros((32, 32, 1), np.uint8)
        rasterize(quad[None], np.array([[1]], np.uint8), (32, 32), img)
        np.testing.assert_array_equal(img[..., 0] == 1, centre_rule(quad, 32))


def test_adjacent_polygons_neither_overlap_nor_leave_gaps():
    # two triangles sharing a diagonal tile a square exactly once each
    a = np.array([[[2.3, 2.7], [20.6, 2.7], [20.6, 19.2]]])
    b = np.array([[[2.3, 2.7], [20.6, 19.2], [2.3, 19.2]]])
    count = np.zeros((24, 24), int)
    for tri in (a, b):
        img = np.zeros((24, 24, 1), np.uint8)
        rasterize(tri, np.array([[1]], np.uint8), (24, 24), img)
        count += img[..., 0]
    square = np.zeros((24, 24, 1), np.uint8)
    rasterize(np.array([[[2.3, 2.7], [20.6, 2.7], [20.6, 19.2], [2.3, 19.2]]]),
              np.array([[1]], np.uint8), (24, 24), square)  # fmt: skip
    np.testing.assert_array_equal(count, square[..., 0])


def test_later_polygons_paint_over_earlier_ones():
    polys = np.array([[[0, 0], [8, 0], [8, 8], [0, 8]], [[2, 2], [6, 2], [6, 6], [2, 6]]], float)
    img = np.zeros((8, 8, 1), np.uint8)
    rasterize(polys, np.array([[1], [2]], np.uint8), (8, 8), img)
    assert (img[2:6, 2:6] == 2).all() and img[0, 0, 0] == 1 and (img == 1).sum() == 64 - 16


def test_camera_turns_along_velocity_only_above_half_a_unit():
    _, slow, _ = classic_camera((0.0, 0.0), body_angle=0.3, velocity=(0.3, 0.3), t=1.0)
    assert slow == pytest.approx(-0.3)  # speed 0.42: the body angle
    _, fast, _ = classic_camera((0.0, 0.0), body_angle=0.3, velocity=(1.0, 1.0), t=1.0)
    assert fast == pytest.approx(math.atan2(1.0, 1.0))
    zoom0, _, _ = classic_camera((0.0, 0.0), 0.0, (0.0, 0.0), t=0.0)
    zoom1, _, trans = classic_camera((10.0, 0.0), 0.0, (0.0, 0.0), t=1.0)
    assert (zoom0, zoom1) == pytest.approx((0.6, 16.2))
    assert trans.tolist() == pytest.approx([500 - 162.0, 200.0])  # the car at (500, 200)


def _drive(env: gym.Env, steps: int, seed: int = 3):
    obs, _ = env.reset(seed=seed)
    frames, rewards = [obs], []
    for i in range(steps):
        action = np.array([0.3 * math.sin(i / 9), 0.5, 0.0], np.float32)
        obs, reward, *_ = env.step(action)
        frames.append(obs)
        rewards.append(reward)
    return np.stack(frames), np.array(rewards)


def test_same_physics_and_rewards_as_gymnasium_only_the_screen_differs():
    classic, rewards = _drive(gym.make("attn_envs/ClassicCarRacing-v0"), 80)
    modern, modern_rewards = _drive(gym.make("CarRacing-v3"), 80)
    np.testing.assert_array_equal(rewards, modern_rewards)
    assert classic.shape == modern.shape == (81, 96, 96, 3)
    assert (classic != modern).any()


def test_screen_is_drawn_with_the_old_flat_colours():
    frames, _ = _drive(gym.make("attn_envs/ClassicCarRacing-v0"), 80)
    field = frames[60:, :84].reshape(-1, 3)  # zoomed in, above the indicator bar
    colours = {tuple(c) for c in np.unique(field, axis=0)}
    allowed = set(GRASS_COLORS_NOMINAL) | ROAD | KERBS | CAR
    assert colours <= allowed, colours - allowed
    assert set(GRASS_COLORS_NOMINAL) <= colours and colours & ROAD and colours & CAR
    bar = frames[-1, 84:]
    assert (bar[:, 30:] == 0).all(-1).mean() > 0.7  # a black bar with a few indicators
    assert ((bar == (255, 255, 255)).all(-1)).any()  # the speed bar after 80 steps of gas


def test_car_sits_at_the_old_camera_spot():
    frames, _ = _drive(gym.make("attn_envs/ClassicCarRacing-v0"), 60)
    red = np.argwhere((frames[-1] == (204, 0, 0)).all(-1))
    # window (500, 200) of 1000x800 -> column 48, row 96 - 24 = 72 (the hull spans it)
    assert abs(red[:, 1].mean() - 48) < 2 and abs(red[:, 0].mean() - 72) < 4


def test_background_replacement_works_on_the_classic_screen():
    env = make_car_racing_background("kof", screen="classic")
    obs, _ = env.reset(seed=3)
    for _ in range(60):
        obs, *_ = env.step(np.array([0.0, 0.5, 0.0], np.float32))
    grass = np.zeros((84, 96), bool)
    for colour in GRASS_COLORS_NOMINAL:
        grass |= (obs[:84] == colour).all(-1)
    assert not grass.any()
    assert (obs[:84] == (102, 102, 102)).all(-1).any()  # the road stays


def test_puzzle_car_racing_takes_the_screen():
    env = gym.make("attn_envs/PuzzleCarRacing-v0", screen="classic")
    obs, _ = env.reset(seed=0)
    assert obs.shape == (256, 144)
    assert isinstance(env.unwrapped, ClassicCarRacing)
    assert not isinstance(gym.make("attn_envs/PuzzleCarRacing-v0").unwrapped, ClassicCarRacing)


def test_unknown_screen_is_refused():
    with pytest.raises(ValueError, match="screen must be one of"):
        make_car_racing("crt")


def test_rgb_array_render_is_still_gymnasiums():
    env = ClassicCarRacing(render_mode="rgb_array")
    env.reset(seed=0)
    assert env.render().shape == (400, 600, 3)
    env.close()
