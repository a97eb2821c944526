"""Generate the shipped CarRacing background images procedurally.

The article behind E6 swapped CarRacing's grass for four pictures (a KOF fighting-game arena,
Mt. Fuji, an ukiyo-e wave, a Nintendo DS screen). Those pictures are not ours to ship, so this
script draws stand-ins with the same character from deterministic numpy/cv2 code: no files are
read, no randomness except fixed-seed generators. Running it rewrites the PNGs next to it::

    python -m attn_envs.assets.backgrounds.make_backgrounds

and the result is bit-identical to the shipped files (``tests/test_background.py`` checks it).
The images are released under the project's MIT licence (see ``LICENSE.md``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np

SIZE = 384
"""Side length in pixels of every generated (square, RGB) background."""

HERE = Path(__file__).resolve().parent
AA = cv2.LINE_AA
# Fixed PNG settings so re-encoding the same pixels gives the same bytes.
PNG_PARAMS = [cv2.IMWRITE_PNG_COMPRESSION, 9, cv2.IMWRITE_PNG_STRATEGY, 0]


def _to_u8(x: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)


def _vgradient(h: int, w: int, top: tuple[int, ...], bottom: tuple[int, ...]) -> np.ndarray:
    """(h, w, 3) float image fading linearly from ``top`` to ``bottom``."""
    t = np.linspace(0.0, 1.0, h)[:, None, None]
    col = (1.0 - t) * np.asarray(top, float) + t * np.asarray(bottom, float)
    return np.broadcast_to(col, (h, w, 3)).copy()


def _hsv_colours(rng: np.random.Generator, n: int, s: int = 220, v: int = 255) -> np.ndarray:
    """``n`` saturated colours with random hues, as an (n, 3) uint8 RGB array."""
    hsv = np.stack([rng.integers(0, 180, n), np.full(n, s), np.full(n, v)], axis=1).astype(np.uint8)
    return cv2.cvtColor(hsv[None], cv2.COLOR_HSV2RGB)[0]


def _rgb(c: np.ndarray | tuple[int, ...]) -> tuple[int, int, int]:
    return (int(c[0]), int(c[1]), int(c[2]))


def _pt(p: np.ndarray) -> tuple[int, int]:
    """Round a float (x, y) to cv2's integer point."""
    return (int(np.rint(p[0])), int(np.rint(p[1])))


def make_kof(size: int = SIZE) -> np.ndarray:
    """A fighting-game arena at sunset: skyline, crowd, checkered stage, two fighters, HUD."""
    rng = np.random.default_rng(1994)
    s = size / 384.0
    horizon = int(200 * s)
    img = _vgradient(size, size, (48, 8, 96), (255, 110, 40))

    # Retro striped sun sinking behind the stage.
    yy, xx = np.mgrid[0:size, 0:size]
    sun = (xx - size / 2) ** 2 + (yy - 175 * s) ** 2 < (80 * s) ** 2
    stripes = ((yy // max(1, int(6 * s))) % 2 == 0) | (yy < 150 * s)
    sun_col = _vgradient(size, size, (255, 240, 90), (255, 60, 120))
    img = np.where((sun & stripes)[..., None], sun_col, img)
    img = _to_u8(img)

    # City skyline with lit windows.
    x = 0
    while x < size:
        w = int(rng.integers(18, 46) * s)
        top = horizon - int(rng.integers(25, 110) * s)
        cv2.rectangle(img, (x, top), (x + w - 2, horizon), (40, 12, 60), -1)
        for wy in range(top + 5, horizon - 6, int(9 * s)):
            for wx in range(x + 4, x + w - 6, int(8 * s)):
                if rng.random() < 0.45:
                    col = (255, 230, 120) if rng.random() < 0.7 else (90, 240, 255)
                    cv2.rectangle(img, (wx, wy), (wx + 2, wy + 3), col, -1)
        x += w

    # Crowd: rows of colourful heads with shoulders, back rows first.
    for row in range(4):
        cy = horizon + int((8 + row * 12) * s)
        cols = _hsv_colours(rng, 60, s=200, v=255 - 25 * (3 - row))
        for i, cx in enumerate(np.arange(-6, size + 12, 9 * s)):
            cxi = int(cx + rng.integers(-3, 4))
            cv2.ellipse(
                img,
                (cxi, cy + int(10 * s)),
                (int(7 * s), int(6 * s)),
                0,
                180,
                360,
                _rgb(cols[i % 60]),
                -1,
                AA,
            )
            cv2.circle(img, (cxi, cy), int(4 * s), (240, 190, 150), -1, AA)
            if rng.random() < 0.25:  # raised arms
                cv2.line(img, (cxi - 4, cy + 4), (cxi - 7, cy - 9), (240, 190, 150), 2, AA)
    floor_top = horizon + int(55 * s)
    cv2.rectangle(img, (0, floor_top - int(6 * s)), (size, floor_top), (20, 10, 30), -1)

    # Checkered stage floor in perspective.
    fy, fx = np.mgrid[floor_top:size, 0:size].astype(float)
    depth = 60.0 * s / (fy - floor_top + 12.0 * s)
    u = (fx - size / 2) * depth / (8.0 * s)
    v = depth * 12.0
    check = ((np.floor(u) + np.floor(v)) % 2 == 0)[..., None]
    shade = np.clip(1.15 - depth * 0.5, 0.55, 1.0)[..., None]
    floor = np.where(check, (210, 30, 45), (250, 200, 40)) * shade
    img[floor_top:] = _to_u8(floor)

    # Two fighters squaring off.
    def fighter(cx: int, facing: int, gi: tuple[int, int, int], belt: tuple[int, int, int]) -> None:
        foot = int(345 * s)
        hip = (cx, foot - int(55 * s))
        neck = (cx + facing * int(4 * s), foot - int(100 * s))
        skin = (235, 180, 140)
        cv2.ellipse(img, (cx, foot + 2), (int(30 * s), int(6 * s)), 0, 0, 360, (60, 20, 30), -1)
        cv2.line(img, hip, (cx - int(22 * s), foot), gi, int(11 * s), AA)
        cv2.line(img, hip, (cx + int(22 * s), foot), gi, int(11 * s), AA)
        cv2.line(img, hip, neck, gi, int(20 * s), AA)
        cv2.line(
            img, (hip[0] - int(9 * s), hip[1]), (hip[0] + int(9 * s), hip[1]), belt, int(6 * s), AA
        )
        fist = (neck[0] + facing * int(38 * s), neck[1] + int(8 * s))
        elbow = (neck[0] + facing * int(14 * s), neck[1] + int(26 * s))
        cv2.line(img, neck, elbow, skin, int(8 * s), AA)
        cv2.line(img, elbow, fist, skin, int(8 * s), AA)
        cv2.circle(img, fist, int(7 * s), (200, 30, 30), -1, AA)
        cv2.circle(img, (neck[0], neck[1] - int(14 * s)), int(12 * s), skin, -1, AA)
        cv2.line(
            img,
            (neck[0] - int(12 * s), neck[1] - int(22 * s)),
            (neck[0] + int(12 * s), neck[1] - int(22 * s)),
            belt,
            int(5 * s),
            AA,
        )

    fighter(int(120 * s), 1, (250, 250, 250), (200, 20, 30))
    fighter(int(264 * s), -1, (40, 70, 220), (250, 220, 40))

    # HUD: health bars, timer and a big KO.
    bar_y, bar_h = int(18 * s), int(16 * s)
    for x0, x1, filled in ((int(12 * s), int(168 * s), 0.8), (int(216 * s), int(372 * s), 0.45)):
        cv2.rectangle(img, (x0 - 2, bar_y - 2), (x1 + 2, bar_y + bar_h + 2), (20, 20, 20), -1)
        cv2.rectangle(img, (x0, bar_y), (x1, bar_y + bar_h), (200, 20, 20), -1)
        fill = int((x1 - x0) * filled)
        fx0, fx1 = (x1 - fill, x1) if x0 < size / 2 else (x0, x0 + fill)
        cv2.rectangle(img, (fx0, bar_y), (fx1, bar_y + bar_h), (255, 220, 30), -1)
    font = cv2.FONT_HERSHEY_DUPLEX
    cv2.putText(img, "99", (int(175 * s), int(38 * s)), font, 0.9 * s, (20, 20, 20), 5, AA)
    cv2.putText(img, "99", (int(175 * s), int(38 * s)), font, 0.9 * s, (255, 255, 255), 2, AA)
    cv2.putText(img, "KO", (int(150 * s), int(110 * s)), font, 2.6 * s, (90, 0, 0), 12, AA)
    cv2.putText(img, "KO", (int(150 * s), int(110 * s)), font, 2.6 * s, (255, 230, 40), 5, AA)
    return img


def make_mt_fuji(size: int = SIZE) -> np.ndarray:
    """A snow-capped volcano under a blue sky with clouds, mirrored in a lake."""
    rng = np.random.default_rng(3776)
    s = size / 384.0
    water = int(290 * s)
    sky = _vgradient(size, size, (30, 80, 175), (185, 215, 240))

    # Soft clouds: blurred white ellipses blended over the sky.
    clouds: np.ndarray = np.zeros((size, size), np.float32)
    for _ in range(14):
        c = (int(rng.integers(0, size)), int(rng.integers(15, 150) * s))
        axes = (int(rng.integers(25, 70) * s), int(rng.integers(6, 16) * s))
        cv2.ellipse(clouds, c, axes, 0, 0, 360, 1.0, -1, AA)
    clouds = cv2.GaussianBlur(clouds, (0, 0), 6 * s)[..., None]
    img = sky * (1 - 0.85 * clouds) + 250 * 0.85 * clouds

    # Concave volcano profile: steep near the summit, flattening towards the plains.
    x = np.arange(size, dtype=float)
    cx, summit, base_half = size * 0.5, 95 * s, 230 * s
    plateau = 16 * s
    t = np.clip((np.abs(x - cx) - plateau) / (base_half - plateau), 0.0, 1.0)
    ridge = summit + (water - summit) * (1.0 - (1.0 - t) ** 1.8)
    yy, xx = np.mgrid[0:size, 0:size].astype(float)
    mountain = (yy >= ridge[None, :]) & (yy < water)
    # Lit left flank, shadowed right flank, darker towards the foot.
    side = np.clip(0.5 + (cx - xx) / (2 * base_half), 0.0, 1.0)
    height = np.clip((yy - summit) / (water - summit), 0.0, 1.0)
    rock = np.array([95, 110, 160]) * (0.75 + 0.35 * side[..., None]) - 35 * height[..., None]

    # Snow cap with ragged tongues running down the gullies.
    tongues = 22 * s * np.abs(np.sin(x * 0.11 / s + 0.7)) + 12 * s * np.abs(np.sin(x * 0.29 / s))
    snowline = summit + 62 * s + tongues * (1 - t) + 40 * s * (1 - t) ** 6
    snow = mountain & (yy < snowline[None, :])
    snow_col = np.array([248, 250, 255]) * (0.82 + 0.18 * side[..., None])
    img = np.where(mountain[..., None], rock, img)
    img = np.where(snow[..., None], snow_col, img)

    # Dark foothills and a tree line along the shore.
    hills = water - (18 * s + 10 * s * np.sin(x * 0.035 / s) + 6 * s * np.sin(x * 0.13 / s + 2))
    img = np.where(((yy >= hills[None, :]) & (yy < water))[..., None], (30, 55, 70), img)
    for tx in range(0, size, max(1, int(7 * s))):
        h = int((10 + rng.integers(0, 12)) * s)
        pts = np.array([[tx - 5 * s, water], [tx + 5 * s, water], [tx, water - h]], np.int32)
        cv2.fillPoly(img, [pts], (18, 40, 45), AA)

    # Lake: rippled, darkened reflection of everything above the shore.
    rows = np.arange(water, size)
    src = np.clip(2 * water - rows - 1, 0, size - 1)
    shift = np.rint(3 * s * np.sin(rows * 0.9)).astype(int)
    cols = np.clip(np.arange(size)[None, :] + shift[:, None], 0, size - 1)
    refl = img[src[:, None], cols]
    fade = np.linspace(0.75, 0.45, size - water)[:, None, None]
    img[water:] = refl * fade + np.array([20, 50, 90]) * (1 - fade)
    ripples = np.arange(water, size) % max(2, int(5 * s)) == 0
    img[water:][ripples] = img[water:][ripples] * 0.8 + 255 * 0.2
    return _to_u8(img)


def make_ukiyoe(size: int = SIZE) -> np.ndarray:
    """A great curling wave in Prussian blue over scale-patterned sea, on paper."""
    rng = np.random.default_rng(1831)
    s = size / 384.0
    paper = np.array([236, 222, 188], float)
    img = _vgradient(size, size, (214, 196, 170), tuple(paper))
    # Grey-pink cloud bands typical of the prints.
    for cy, cxs in ((60, (40, 260)), (95, (150, 330))):
        for cxx in cxs:
            cv2.ellipse(
                img,
                (int(cxx * s), int(cy * s)),
                (int(70 * s), int(9 * s)),
                0,
                0,
                360,
                (196, 170, 160),
                -1,
                AA,
            )
    img = _to_u8(img)

    # Distant snowy peak in the trough of the wave.
    cx, base = int(230 * s), int(255 * s)
    cv2.fillPoly(
        img,
        [np.array([[cx - 60 * s, base], [cx + 60 * s, base], [cx, base - 45 * s]], np.int32)],
        (40, 60, 110),
        AA,
    )
    cv2.fillPoly(
        img,
        [
            np.array(
                [[cx - 20 * s, base - 30 * s], [cx + 20 * s, base - 30 * s], [cx, base - 45 * s]],
                np.int32,
            )
        ],
        (250, 250, 245),
        AA,
    )

    # Seigaiha (overlapping concentric scales) sea, drawn back to front.
    r = int(24 * s)
    rings = [(20, 40, 100), (250, 248, 240), (60, 100, 160), (250, 248, 240), (120, 160, 200)]
    for j, cy in enumerate(range(int(250 * s), size + r, r // 2)):
        off = r if j % 2 else 0
        for cxx in range(-r + off, size + 2 * r, 2 * r):
            for k, col in enumerate(rings):
                cv2.circle(img, (cxx, cy), r - k * r // len(rings), col, -1, AA)

    # The big wave: a band between two log spirals that rises from the lower left, crests
    # near the top and curls over to the right, tapering to a lip.
    c = np.array([215.0, 175.0]) * s
    th0, th1 = 0.75 * np.pi, 2.05 * np.pi
    th = np.linspace(th0, th1, 200)
    r_out = 230 * s * np.exp(-0.196 * (th - th0))
    r_in = r_out * (0.78 - 0.28 * (1 - (th - th0) / (th1 - th0)) ** 0.6)
    unit = np.stack([np.cos(th), np.sin(th)], axis=1)
    outer, inner = c + r_out[:, None] * unit, c + r_in[:, None] * unit
    poly = np.concatenate(
        [[[-10 * s, size + 10 * s]], outer, inner[::-1], [[inner[0, 0] + 30 * s, size + 10 * s]]]
    )
    wave = np.zeros((size, size), np.uint8)
    cv2.fillPoly(wave, [np.rint(poly).astype(np.int32)], 1)
    # Contour-following bands from the distance to the edge: white foam at the rim, then
    # alternating blues, deep Prussian blue inside.
    dist = cv2.distanceTransform(wave, cv2.DIST_L2, 5)
    band = np.floor(dist / (7 * s)).astype(int)
    blues = np.array(
        [[250, 250, 245], [110, 160, 205], [35, 65, 130], [80, 125, 185], [35, 65, 130]], float
    )
    body = np.where(
        (band < len(blues))[..., None], blues[np.minimum(band, len(blues) - 1)], (20, 38, 90)
    )
    img = _to_u8(np.where(wave[..., None] > 0, body, img))

    # Foam claws along the crest and the lip, fingers pointing into the curl.
    for t in np.linspace(1.35 * np.pi, th1, 46):
        rr = 230 * s * np.exp(-0.196 * (t - th0))
        d = np.array([np.cos(t), np.sin(t)])
        p = c + (rr + rng.uniform(0, 5) * s) * d
        cv2.circle(img, _pt(p), int(rng.integers(3, 7) * s), (252, 252, 248), -1, AA)
        for dt in (-0.06, 0.0, 0.06):
            q = c + (rr - 16 * s) * np.array([np.cos(t + 0.15 + dt), np.sin(t + 0.15 + dt)])
            cv2.line(img, _pt(p), _pt(q), (252, 252, 248), max(1, int(2 * s)), AA)
    # Spray flung off the crest.
    for _ in range(70):
        t = rng.uniform(1.5 * np.pi, th1)
        rr = 230 * s * np.exp(-0.196 * (t - th0)) + rng.uniform(6, 30) * s
        p = c + rr * np.array([np.cos(t), np.sin(t)])
        cv2.circle(img, _pt(p), max(1, int(rng.integers(1, 4) * s)), (250, 250, 245), -1, AA)
    return img


def _pixel_scene(rng: np.random.Generator) -> np.ndarray:
    """A 48x36 platformer screen: sky, clouds, sun, bricks, ?-blocks, coins and a hero."""
    h, w = 36, 48
    px = np.zeros((h, w, 3), np.uint8)
    px[:] = (92, 148, 252)
    px[:8] = (60, 110, 250)
    px[8:14] = (78, 130, 252)
    for cx, cy in ((6, 5), (22, 3), (36, 7)):
        px[cy : cy + 2, cx : cx + 6] = 255
        px[cy - 1, cx + 1 : cx + 4] = 255
    px[2:7, 41:46] = (255, 220, 40)
    px[3:6, 40] = px[3:6, 46] = (255, 220, 40)
    # Ground: orange-brown bricks with mortar lines.
    px[29:] = (200, 76, 12)
    px[29] = (252, 160, 68)
    px[31::3] = (120, 40, 0)
    px[30::2, ::4] = (120, 40, 0)
    px[31::2, 2::4] = (120, 40, 0)
    # Floating bricks and ?-blocks.
    px[18:21, 12:24] = (200, 76, 12)
    px[18:21, 12:24:3] = (120, 40, 0)
    for bx in (15, 30, 33):
        px[18:21, bx : bx + 3] = (252, 188, 60)
        px[19, bx + 1] = (120, 40, 0)
    # Coins.
    for cx in range(27, 40, 3):
        if rng.random() < 0.8:
            px[13:15, cx] = (255, 230, 0)
    # Hero: red cap, skin face, blue overalls.
    hx, hy = 8, 22
    px[hy, hx : hx + 4] = (228, 0, 88)
    px[hy + 1 : hy + 3, hx : hx + 4] = (252, 188, 148)
    px[hy + 3 : hy + 5, hx : hx + 4] = (0, 88, 248)
    px[hy + 5 : hy + 7, hx : hx + 4] = (228, 0, 88)
    px[hy + 5 : hy + 7, hx + 1 : hx + 3] = (0, 88, 248)
    # A pink enemy and a purple pipe.
    px[26:29, 20:23] = (248, 120, 200)
    px[26, 21] = (0, 0, 0)
    px[22:29, 40:45] = (150, 60, 220)
    px[21:23, 39:46] = (190, 110, 250)
    return px


def _pixel_menu(rng: np.random.Generator) -> np.ndarray:
    """A 48x36 touch-screen menu: stripes, bright tiles and a pixel 'PLAY' button."""
    h, w = 36, 48
    px = np.zeros((h, w, 3), np.uint8)
    px[:] = (255, 244, 200)
    px[::4] = (255, 226, 150)
    cols = _hsv_colours(rng, 8, s=200, v=250)
    for i in range(8):
        x0, y0 = 3 + (i % 4) * 11, 3 + (i // 4) * 11
        px[y0 : y0 + 9, x0 : x0 + 9] = cols[i]
        px[y0 + 3 : y0 + 6, x0 + 3 : x0 + 6] = 255
    px[26:33, 8:40] = (250, 80, 60)
    px[27:32, 9:39] = (255, 120, 90)
    glyphs = [
        "111 1    1  1 1",
        "1 1 1   1 1 1 1",
        "111 1   111  1 ",
        "1   1   1 1  1 ",
        "1   111 1 1  1 ",
    ]
    for gy, row in enumerate(glyphs):
        for gx, ch in enumerate(row):
            if ch == "1":
                px[27 + gy, 16 + gx] = 255
    return px


def make_ds(size: int = SIZE) -> np.ndarray:
    """A bright two-screen handheld console showing pixel-art screens."""
    rng = np.random.default_rng(2004)
    s = size / 384.0
    img = _to_u8(_vgradient(size, size, (120, 220, 255), (255, 140, 210)))
    # Polka-dot backdrop.
    for y in range(0, size, int(32 * s)):
        for x in range((y // int(32 * s)) % 2 * int(16 * s), size, int(32 * s)):
            cv2.circle(img, (x, y), int(5 * s), (255, 255, 255), -1, AA)

    def rounded(x0: int, y0: int, x1: int, y1: int, r: int, col: tuple[int, int, int]) -> None:
        cv2.rectangle(img, (x0 + r, y0), (x1 - r, y1), col, -1)
        cv2.rectangle(img, (x0, y0 + r), (x1, y1 - r), col, -1)
        for cx, cy in ((x0 + r, y0 + r), (x1 - r, y0 + r), (x0 + r, y1 - r), (x1 - r, y1 - r)):
            cv2.circle(img, (cx, cy), r, col, -1, AA)

    left, right = int(52 * s), int(332 * s)
    for y0, y1 in ((int(14 * s), int(186 * s)), (int(198 * s), int(370 * s))):
        rounded(left - 3, y0 - 3, right + 3, y1 + 3, int(22 * s), (70, 70, 90))
        rounded(left, y0, right, y1, int(20 * s), (236, 236, 244))
    cv2.rectangle(
        img,
        (left + int(30 * s), int(186 * s)),
        (right - int(30 * s), int(198 * s)),
        (160, 160, 175),
        -1,
    )

    scr_w, scr_h = int(192 * s), int(144 * s)
    sx = (size - scr_w) // 2
    for y0, px in ((int(28 * s), _pixel_scene(rng)), (int(212 * s), _pixel_menu(rng))):
        cv2.rectangle(img, (sx - 6, y0 - 6), (sx + scr_w + 5, y0 + scr_h + 5), (30, 30, 40), -1)
        img[y0 : y0 + scr_h, sx : sx + scr_w] = cv2.resize(
            px, (scr_w, scr_h), interpolation=cv2.INTER_NEAREST
        )

    # D-pad, face buttons and speaker dots.
    dc = (int(76 * s), int(250 * s))
    arm = int(14 * s)
    cv2.rectangle(img, (dc[0] - arm, dc[1] - 5), (dc[0] + arm, dc[1] + 5), (50, 50, 60), -1)
    cv2.rectangle(img, (dc[0] - 5, dc[1] - arm), (dc[0] + 5, dc[1] + arm), (50, 50, 60), -1)
    bc, d = (int(308 * s), int(250 * s)), int(12 * s)
    for (dx, dy), col in zip(
        ((0, -1), (1, 0), (0, 1), (-1, 0)),
        ((40, 120, 250), (240, 40, 60), (250, 200, 20), (150, 60, 220)),
        strict=True,
    ):
        cv2.circle(img, (bc[0] + dx * d, bc[1] + dy * d), int(6 * s), col, -1, AA)
    for i in range(3):
        for j in range(3):
            cv2.circle(
                img, (int((68 + 8 * i) * s), int((90 + 8 * j) * s)), 2, (120, 120, 140), -1, AA
            )
            cv2.circle(
                img, (int((300 + 8 * i) * s), int((90 + 8 * j) * s)), 2, (120, 120, 140), -1, AA
            )
    return img


BACKGROUNDS: dict[str, Callable[[], np.ndarray]] = {
    "kof": make_kof,
    "mt_fuji": make_mt_fuji,
    "ukiyoe": make_ukiyoe,
    "ds": make_ds,
}
"""Shipped background name -> generator of its (SIZE, SIZE, 3) uint8 RGB image."""


def generate(name: str) -> np.ndarray:
    """Draw the background ``name`` as an (SIZE, SIZE, 3) uint8 RGB array."""
    if name not in BACKGROUNDS:
        raise ValueError(f"unknown background {name!r}; generated ones are {sorted(BACKGROUNDS)}")
    img = BACKGROUNDS[name]()
    assert img.shape == (SIZE, SIZE, 3) and img.dtype == np.uint8, (name, img.shape, img.dtype)
    return img


def write_png(img: np.ndarray, path: Path) -> None:
    """Write an RGB uint8 image as PNG with fixed encoder settings."""
    ok, buf = cv2.imencode(".png", np.ascontiguousarray(img[..., ::-1]), PNG_PARAMS)
    if not ok:
        raise OSError(f"could not encode {path}")
    path.write_bytes(buf.tobytes())


def main(out_dir: Path | str = HERE, names: list[str] | None = None) -> list[Path]:
    """(Re)write ``<name>.png`` for each background into ``out_dir``; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in names or list(BACKGROUNDS):
        path = out / f"{name}.png"
        write_png(generate(name), path)
        paths.append(path)
    return paths


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out-dir", default=str(HERE), help="where to write the PNGs")
    args = parser.parse_args()
    for p in main(args.out_dir):
        print(f"wrote {p} ({p.stat().st_size // 1024} KiB)")
