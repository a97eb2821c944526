"""CarRacing with the 96x96 screen drawn as gym <= 0.21 drew it (seed 001's agents saw this).

Gymnasium's ``CarRacing-v3`` keeps the old physics but draws its state differently: a
1000x800 anti-aliased surface, camera fixed to the car body, shrunk to 96x96 with
``smoothscale``. gym <= 0.21 (``CarRacing-v0``, what the seed 001 authors trained and tested
on) rendered the 1000x800 window straight into a 96x96 OpenGL viewport: hard polygon edges,
colours exactly as given (grass (102, 204, 102) / (102, 230, 102)), and a camera that turns
along the car's *velocity* once its speed exceeds 0.5 (``angle = atan2(vel_x, vel_y)``),
else along the body (``-hull.angle``). Agents trained on that screen lose about 120 points
on Gymnasium's.

:class:`ClassicCarRacing` is ``CarRacing-v3`` (same physics, rewards, track, seeding) whose
``state_pixels`` are drawn that way, without OpenGL or a display: every polygon of the old
render (field, grass squares, road tiles and kerbs, car hull and wheels, the indicator bar)
is rasterised with OpenGL's pixel-centre rule by :func:`rasterize`, vectorised with numpy.
The zoom animation of the first second, the colours (OpenGL's rounding of the old float
colours: road 102 / 105 / 107) and the indicator bar follow gym 0.21's ``car_racing.py``.
The score digits, which pyglet drew as a text label, are approximated with pygame's default
font sampled at the pixel centres (the authors' font is unknown); E6's shuffled agent blanks
the bar anyway. ``render_mode="rgb_array"`` / ``"human"`` still use Gymnasium's renderer.

Example:
    >>> env = ClassicCarRacing()
    >>> obs, _ = env.reset(seed=0)
    >>> obs.shape, obs.dtype
    ((96, 96, 3), dtype('uint8'))
    >>> bool((obs[:84] == (102, 204, 102)).all(-1).any())  # exact grass colour, no blending
    True
    >>> env.close()
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.box2d import car_racing as _cr
from gymnasium.envs.box2d.car_dynamics import SIZE, WHEEL_R, WHEEL_W

__all__ = ["SCREENS", "ClassicCarRacing", "classic_camera", "make_car_racing", "rasterize"]

SCREENS = ("gymnasium", "classic")
"""``screen`` values: Gymnasium's anti-aliased render or gym <= 0.21's direct 96x96 drawing."""

_WHEEL_WHITE = (77, 77, 77)  # 0.3 * 255 as OpenGL rounds it
_BAR_BLACK = (0, 0, 0)


def rasterize(
    polygons: np.ndarray, colors: np.ndarray, size: tuple[int, int], out: np.ndarray
) -> np.ndarray:
    """Paint convex polygons in order with OpenGL's pixel-centre rule (no anti-aliasing).

    A pixel ``(row, col)`` takes the colour of the last polygon that contains its centre
    ``(col + 0.5, row + 0.5)``; spans are half-open (left edge in, right edge out), as in
    OpenGL, so adjacent polygons neither overlap nor leave gaps.

    Args:
        polygons: ``(P, V, 2)`` vertices ``(x, y)`` in pixel units, y pointing down; each
            polygon convex, in either winding.
        colors: ``(P, C)`` uint8 colours.
        size: ``(height, width)``.
        out: ``(height, width, C)`` uint8 image painted in place (pixels no polygon covers
            keep their value).

    Returns:
        ``out``.

    Example:
        >>> img = np.zeros((4, 4, 1), np.uint8)
        >>> square = np.array([[[0.6, 0.4], [2.6, 0.4], [2.6, 2.4], [0.6, 2.4]]])  # (x, y)
        >>> rasterize(square, np.array([[9]], np.uint8), (4, 4), img)[..., 0]
        array([[0, 9, 9, 0],
               [0, 9, 9, 0],
               [0, 0, 0, 0],
               [0, 0, 0, 0]], dtype=uint8)
    """
    height, width = size
    if len(polygons) == 0:
        return out
    ys = np.arange(height) + 0.5  # row centres
    a, b = polygons, np.roll(polygons, -1, axis=1)  # edges a -> b, (P, V, 2)
    ya, yb = a[..., 1][:, None, :], b[..., 1][:, None, :]  # (P, 1, V)
    xa, xb = a[..., 0][:, None, :], b[..., 0][:, None, :]
    y = ys[None, :, None]  # (1, H, 1)
    lo, hi = np.minimum(ya, yb), np.maximum(ya, yb)
    crosses = (y >= lo) & (y < hi)  # half-open in y: a shared vertex counts once
    with np.errstate(divide="ignore", invalid="ignore"):
        x = xa + (y - ya) * (xb - xa) / (yb - ya)
    left = np.where(crosses, x, np.inf).min(-1)  # (P, H)
    right = np.where(crosses, x, -np.inf).max(-1)
    # columns whose centre c + 0.5 lies in [left, right)
    first = np.clip(np.ceil(left - 0.5), 0, width).astype(np.int64)
    stop = np.clip(np.ceil(right - 0.5), 0, width).astype(np.int64)
    # every covered pixel as (flat index, polygon), then the highest polygon index wins
    lengths = np.maximum(stop - first, 0).ravel()  # (P * H,)
    total = int(lengths.sum())
    if total == 0:
        return out
    starts = (first + np.arange(height)[None, :] * width).ravel()
    owner = np.repeat(np.arange(len(polygons) * height) // height, lengths)
    offsets = np.cumsum(lengths) - lengths
    pixel = np.repeat(starts - offsets, lengths) + np.arange(total)
    top = np.full(height * width, -1, np.int64)
    np.maximum.at(top, pixel, owner)
    hit = top >= 0
    out.reshape(height * width, -1)[hit] = colors[top[hit]]
    return out


def _pad(polygon: np.ndarray, n_vertices: int) -> np.ndarray:
    """``(..., V, 2)`` -> ``(P, n_vertices, 2)`` by repeating the last vertex (an empty edge)."""
    polygon = np.asarray(polygon, np.float64)
    polygon = polygon.reshape(-1, *polygon.shape[-2:])
    extra = n_vertices - polygon.shape[1]
    if extra:
        polygon = np.concatenate([polygon, np.repeat(polygon[:, -1:], extra, axis=1)], axis=1)
    return polygon


def classic_camera(
    position: tuple[float, float], body_angle: float, velocity: tuple[float, float], t: float
) -> tuple[float, float, np.ndarray]:
    """gym 0.21's camera: ``(zoom, angle, translation)`` mapping world to window coordinates.

    ``window = translation + R(angle) @ (zoom * world)``, y up, window 1000x800. The camera
    turns along the velocity once the speed exceeds 0.5, else along the body.

    Example:
        >>> zoom, angle, trans = classic_camera((0.0, 0.0), 0.0, (0.0, 1.0), t=2.0)
        >>> round(zoom, 1), round(angle, 3), trans.tolist()
        (16.2, 0.0, [500.0, 200.0])
    """
    zoom = 0.1 * _cr.SCALE * max(1 - t, 0) + _cr.ZOOM * _cr.SCALE * min(t, 1)
    angle = -body_angle
    if math.hypot(velocity[0], velocity[1]) > 0.5:
        angle = math.atan2(velocity[0], velocity[1])
    c, s = math.cos(angle), math.sin(angle)
    x, y = position
    translation = np.array(
        [
            _cr.WINDOW_W / 2 - (x * zoom * c - y * zoom * s),
            _cr.WINDOW_H / 4 - (x * zoom * s + y * zoom * c),
        ]
    )
    return zoom, angle, translation


class ClassicCarRacing(_cr.CarRacing):
    """``CarRacing-v3`` whose 96x96 observation is drawn as gym <= 0.21 drew it.

    Same constructor arguments, physics, rewards and seeding as Gymnasium's ``CarRacing``;
    only the ``state_pixels`` (the observation) differ: see the module docstring. The
    observation space is the same ``Box(0, 255, (96, 96, 3), uint8)``.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._static: tuple[np.ndarray, np.ndarray] | None = None
        self._digits: dict[str, np.ndarray] = {}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._static = None  # a new track (and colours) each episode
        return super().reset(seed=seed, options=options)

    def _render(self, mode: str):
        if mode != "state_pixels":
            return super()._render(mode)
        if "t" not in self.__dict__ or self.car is None:
            return None  # reset() not called yet
        return self.classic_state()

    # -- drawing ---------------------------------------------------------------------------

    def _static_polygons(self) -> tuple[np.ndarray, np.ndarray]:
        """World polygons and colours drawn under the car: field, grass squares, road."""
        if self._static is None:
            bound, k = _cr.PLAYFIELD, _cr.GRASS_DIM
            polys = [[(bound, bound), (bound, -bound), (-bound, -bound), (-bound, bound)]]
            colors = [self.bg_color]
            for x in range(-20, 20, 2):
                for y in range(-20, 20, 2):
                    polys.append(
                        [
                            (k * x + k, k * y + 0),
                            (k * x + 0, k * y + 0),
                            (k * x + 0, k * y + k),
                            (k * x + k, k * y + k),
                        ]
                    )
                    colors.append(self.grass_color)
            for poly, color in self.road_poly:
                polys.append([tuple(p) for p in poly])
                colors.append(color)
            self._static = (
                np.asarray(polys, np.float64),
                np.clip(np.round(np.asarray(colors, np.float64)), 0, 255).astype(np.uint8),
            )
        return self._static

    def _car_polygons(self) -> tuple[list[np.ndarray], list[tuple[int, int, int]]]:
        assert self.car is not None
        polys: list[np.ndarray] = []
        colors: list[tuple[int, int, int]] = []
        for obj in self.car.drawlist:
            color = tuple(round(c * 255) for c in obj.color)
            for fixture in obj.fixtures:
                trans = fixture.body.transform
                polys.append(np.array([tuple(trans * v) for v in fixture.shape.vertices]))
                colors.append(color)
                if "phase" not in obj.__dict__:
                    continue
                a1, a2 = obj.phase, obj.phase + 1.2
                s1, s2, c1, c2 = math.sin(a1), math.sin(a2), math.cos(a1), math.cos(a2)
                if s1 > 0 and s2 > 0:
                    continue
                if s1 > 0:
                    c1 = np.sign(c1)
                if s2 > 0:
                    c2 = np.sign(c2)
                white = [
                    (-WHEEL_W * SIZE, +WHEEL_R * c1 * SIZE),
                    (+WHEEL_W * SIZE, +WHEEL_R * c1 * SIZE),
                    (+WHEEL_W * SIZE, +WHEEL_R * c2 * SIZE),
                    (-WHEEL_W * SIZE, +WHEEL_R * c2 * SIZE),
                ]
                polys.append(np.array([tuple(trans * v) for v in white]))
                colors.append(_WHEEL_WHITE)
        return polys, colors

    def _indicator_polygons(self) -> tuple[list[np.ndarray], list[tuple[int, int, int]]]:
        """gym 0.21's ``render_indicators`` in window coordinates (y up)."""
        assert self.car is not None
        w, h = _cr.WINDOW_W, _cr.WINDOW_H
        s, hh = w / 40.0, h / 40.0
        polys = [np.array([(w, 0), (w, 5 * hh), (0, 5 * hh), (0, 0)], np.float64)]
        colors = [_BAR_BLACK]

        def vertical(place: float, val: float, color: tuple[int, int, int]) -> None:
            top = hh + hh * val
            polys.append(
                np.array([(place * s, top), ((place + 1) * s, top), ((place + 1) * s, hh),
                          (place * s, hh)])
            )  # fmt: skip
            colors.append(color)

        def horizontal(place: float, val: float, color: tuple[int, int, int]) -> None:
            polys.append(
                np.array([(place * s, 4 * hh), ((place + val) * s, 4 * hh),
                          ((place + val) * s, 2 * hh), (place * s, 2 * hh)])
            )  # fmt: skip
            colors.append(color)

        car = self.car
        speed = float(np.hypot(*car.hull.linearVelocity))
        vertical(5, 0.02 * speed, (255, 255, 255))
        vertical(7, 0.01 * car.wheels[0].omega, (0, 0, 255))  # ABS sensors
        vertical(8, 0.01 * car.wheels[1].omega, (0, 0, 255))
        vertical(9, 0.01 * car.wheels[2].omega, (51, 0, 255))
        vertical(10, 0.01 * car.wheels[3].omega, (51, 0, 255))
        horizontal(20, -10.0 * car.wheels[0].joint.angle, (0, 255, 0))
        horizontal(30, -0.8 * car.hull.angularVelocity, (255, 0, 0))
        return polys, colors

    def classic_state(self) -> np.ndarray:
        """The current 96x96 RGB state as gym <= 0.21's ``render("state_pixels")`` drew it."""
        assert self.car is not None
        hull = self.car.hull
        zoom, angle, trans = classic_camera(
            tuple(hull.position), hull.angle, tuple(hull.linearVelocity), self.t
        )
        c, s = math.cos(angle), math.sin(angle)
        rot = zoom * np.array([[c, -s], [s, c]])
        static, static_colors = self._static_polygons()
        car_polys, car_colors = self._car_polygons()
        bar, bar_colors = self._indicator_polygons()
        n_vertices = max(len(p) for p in (*car_polys, static[0]))
        world = np.concatenate(
            [_pad(static, n_vertices), *(_pad(p, n_vertices) for p in car_polys)]
        )
        window = np.concatenate([world @ rot.T + trans, *(_pad(p, n_vertices) for p in bar)])
        colors = np.concatenate(
            [static_colors, np.asarray(car_colors + bar_colors, np.uint8).reshape(-1, 3)]
        )
        # window (1000x800, y up) squeezed into the 96x96 viewport, rows counted from the top
        pixels = np.empty_like(window)
        pixels[..., 0] = window[..., 0] * (_cr.STATE_W / _cr.WINDOW_W)
        pixels[..., 1] = _cr.STATE_H - window[..., 1] * (_cr.STATE_H / _cr.WINDOW_H)
        lo, hi = pixels.min(axis=1), pixels.max(axis=1)
        visible = (hi[:, 0] > 0) & (lo[:, 0] < _cr.STATE_W) & (hi[:, 1] > 0)
        visible &= lo[:, 1] < _cr.STATE_H
        image = np.zeros((_cr.STATE_H, _cr.STATE_W, 3), np.uint8)
        rasterize(pixels[visible], colors[visible], (_cr.STATE_H, _cr.STATE_W), image)
        self._draw_score(image)
        return image

    def _draw_score(self, image: np.ndarray) -> None:
        """The ``%04i`` score label (pyglet, 36 pt, white) sampled at the pixel centres."""
        text = f"{int(self.reward):04d}"  # pyglet label "%04i"
        alpha = self._digits.get(text)
        if alpha is None:
            alpha = self._score_alpha(text)
            if len(self._digits) > 4096:
                self._digits.clear()
            self._digits[text] = alpha
        rows = slice(_cr.STATE_H - alpha.shape[0], _cr.STATE_H)
        cols = slice(0, alpha.shape[1])
        region = image[rows, cols].astype(np.float32)
        image[rows, cols] = np.round(region * (1 - alpha) + 255 * alpha).astype(np.uint8)

    @staticmethod
    def _score_alpha(text: str) -> np.ndarray:
        import pygame

        pygame.font.init()
        font = pygame.font.Font(None, 48)  # 36 pt at 96 dpi
        glyphs = pygame.surfarray.array_alpha(font.render(text, True, (255, 255, 255)))
        glyphs = glyphs.T.astype(np.float32) / 255.0  # (h, w), y down
        gh, gw = glyphs.shape
        # label at x = 20, vertically centred on y = 2.5 / 40 * 800 (window, y up)
        x0, y_centre = 20.0, _cr.WINDOW_H * 2.5 / 40.0
        top = y_centre + gh / 2  # window y of the glyphs' top row
        n_rows, n_cols = 12, 24  # the bar's left part, where the label sits
        r = np.arange(n_rows)[:, None]
        col = np.arange(n_cols)[None, :]
        wx = (col + 0.5) * _cr.WINDOW_W / _cr.STATE_W - x0
        wy = top - (n_rows - r - 0.5) * _cr.WINDOW_H / _cr.STATE_H
        # bilinear sample (GL_LINEAR) of the glyph texture at each pixel centre
        u, v = wx - 0.5, wy - 0.5
        u0, v0 = np.floor(u).astype(int), np.floor(v).astype(int)
        fu, fv = u - u0, v - v0

        def texel(i: np.ndarray, j: np.ndarray) -> np.ndarray:
            ok = (i >= 0) & (i < gh) & (j >= 0) & (j < gw)
            return np.where(ok, glyphs[np.clip(i, 0, gh - 1), np.clip(j, 0, gw - 1)], 0.0)

        alpha = (
            texel(v0, u0) * (1 - fu) * (1 - fv)
            + texel(v0, u0 + 1) * fu * (1 - fv)
            + texel(v0 + 1, u0) * (1 - fu) * fv
            + texel(v0 + 1, u0 + 1) * fu * fv
        )
        return alpha[..., None].astype(np.float32)


def make_car_racing(screen: str = "gymnasium", **car_racing_kwargs: Any) -> gym.Env:
    """``CarRacing-v3`` with Gymnasium's screen or gym <= 0.21's (``screen="classic"``).

    Both have the same physics, 1000-step limit and seeding; ``max_episode_steps`` and the
    other ``gym.make`` arguments pass through.

    Example:
        >>> env = make_car_racing("classic")
        >>> type(env.unwrapped).__name__, env.spec.max_episode_steps
        ('ClassicCarRacing', 1000)
        >>> env.close()
    """
    if screen not in SCREENS:
        raise ValueError(f"screen must be one of {SCREENS}, got {screen!r}")
    if screen == "gymnasium":
        return gym.make("CarRacing-v3", **car_racing_kwargs)
    car_racing_kwargs.setdefault("max_episode_steps", 1000)
    return gym.make("attn_envs/ClassicCarRacing-v0", **car_racing_kwargs)
