"""Replace CarRacing's grass with a picture (E6, background-replacement robustness test).

CarRacing paints its field in two flat greens, so grass pixels can be found by exact colour and
swapped for the matching pixels of a fixed image resized to the frame; road, car, kerbs and the
indicator bar are untouched.

Gymnasium draws the field as RGB (102, 204, 102) and (102, 230, 102), the colours the article
names, but ``CarRacing-v3`` builds its 96x96 observation with ``pygame.transform.smoothscale``,
which shifts flat colours down by 2, so the observed grass is (100, 202, 100) and
(100, 228, 100). :data:`GRASS_COLORS` holds both pairs. The anti-aliased seams between the two
grass shades are replaced too (``seams=True``); blends of grass with the road stay. With
``domain_randomize=True`` the grass colours change per episode, so the wrapper would miss them.

Four procedurally generated backgrounds ship with the package (:func:`available_backgrounds`),
named after the article's table columns: ``kof``, ``mt_fuji``, ``ukiyoe`` and ``ds``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cv2
import gymnasium as gym
import numpy as np

from attn_envs._spaces import require_box

__all__ = [
    "GRASS_COLORS",
    "GRASS_COLORS_NOMINAL",
    "BackgroundObservation",
    "available_backgrounds",
    "load_background",
    "make_car_racing_background",
]

GRASS_COLORS_NOMINAL: tuple[tuple[int, int, int], ...] = ((102, 204, 102), (102, 230, 102))
"""The RGB grass colours CarRacing draws with (``bg_color`` and ``grass_color``)."""

GRASS_COLORS: tuple[tuple[int, int, int], ...] = (
    *GRASS_COLORS_NOMINAL,
    (100, 202, 100),
    (100, 228, 100),
)
"""RGB colours replaced by default: the drawn colours and their 96x96 ``smoothscale`` results."""

BACKGROUND_DIR = Path(__file__).resolve().parent / "assets" / "backgrounds"

ImageLike = np.ndarray | str | os.PathLike


def available_backgrounds() -> tuple[str, ...]:
    """Names of the backgrounds shipped with the package, sorted.

    Example:
        >>> available_backgrounds()
        ('ds', 'kof', 'mt_fuji', 'ukiyoe')
    """
    return tuple(sorted(p.stem for p in BACKGROUND_DIR.glob("*.png")))


def _read_image(path: Path) -> np.ndarray:
    bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if bgr is None:
        raise ValueError(f"could not read an image from {str(path)!r}")
    return np.ascontiguousarray(bgr[..., ::-1])


def load_background(name_or_path: str | os.PathLike) -> np.ndarray:
    """Load a shipped background by name, or any image file cv2 can read, as RGB uint8.

    Args:
        name_or_path: one of :func:`available_backgrounds` (these win over a same-named file)
            or a path to an image file.

    Returns:
        A fresh (H, W, 3) uint8 RGB array (shipped backgrounds are 384x384).

    Raises:
        FileNotFoundError: if it is neither a shipped name nor an existing file.
        ValueError: if the file is not a readable image.

    Example:
        >>> img = load_background("mt_fuji")
        >>> img.shape, img.dtype
        ((384, 384, 3), dtype('uint8'))
    """
    key = os.fspath(name_or_path)
    if key in available_backgrounds():
        path = BACKGROUND_DIR / f"{key}.png"
    else:
        path = Path(key)
        if not path.is_file():
            raise FileNotFoundError(
                f"{key!r} is neither a shipped background {available_backgrounds()} "
                "nor an existing image file"
            )
    return _read_image(path)


def _as_image(image: ImageLike) -> np.ndarray:
    """Validate an image argument (array, path or shipped name) and return it as an array."""
    if isinstance(image, str | os.PathLike):
        return load_background(image)
    if not isinstance(image, np.ndarray):
        raise TypeError(
            "BackgroundObservation needs image as an (H, W, 3) uint8 array, an image path or "
            f"a shipped background name {available_backgrounds()}, got {type(image).__name__}"
        )
    if image.ndim != 3 or image.shape[-1] != 3 or min(image.shape[:2]) < 1:
        raise ValueError(
            f"BackgroundObservation needs an (H, W, 3) RGB image, got shape {image.shape}"
        )
    if image.dtype != np.uint8:
        raise TypeError(f"BackgroundObservation needs a uint8 image, got dtype {image.dtype}")
    return image


def _packed(
    colours: Sequence[Sequence[int]] | np.ndarray, keep: tuple[int, ...] = (0, 1, 2)
) -> np.ndarray:
    """RGB triplets as the native uint32 read from their bytes, other channels zeroed.

    Building keys and masks from bytes, exactly as pixels are read, keeps the comparison
    independent of the machine's endianness.
    """
    rgba = np.zeros((len(colours), 4), np.uint8)
    rgba[:, list(keep)] = np.asarray(colours, np.uint8)[:, list(keep)]
    return np.frombuffer(rgba.tobytes(), np.uint32).copy()


class BackgroundObservation(
    gym.ObservationWrapper[np.ndarray, Any, np.ndarray], gym.utils.RecordConstructorArgs
):
    """Replace the pixels of given colours (CarRacing's grass) with a fixed background image.

    The image is resized once to the frame (``cv2.INTER_AREA``); each step only builds a mask
    of the matching pixels and selects between frame and background, so every other pixel is
    passed through unchanged and the observation space is that of the wrapped env.

    A pixel matches if its colour is one of ``colors`` or, with ``seams=True``, if it lies
    between two of ``colors`` that differ in a single channel: CarRacing's light grass patches
    are anti-aliased into the dark grass, leaving 1-px seams of in-between greens that would
    otherwise show as green outlines on the background (the article's direct 96x96 render had
    none). Blends of grass with road, kerb or car are never matched.

    Args:
        env: env with a uint8 RGB image observation, Box of shape (H, W, 3).
        image: the background: an (h, w, 3) uint8 RGB array, a path to an image file, or the
            name of a shipped background (see :func:`available_backgrounds`).
        colors: RGB colours to replace; defaults to :data:`GRASS_COLORS`.
        seams: also replace the in-between colours described above.

    Raises:
        TypeError: if the observation space is not a Box, not uint8, or ``image`` is not an
            array/path/name or not uint8.
        ValueError: if the observation or the image is not (H, W, 3), or ``colors`` is empty
            or holds values outside 0..255.

    Example:
        >>> import gymnasium as gym
        >>> env = BackgroundObservation(gym.make("CarRacing-v3"), "ukiyoe")
        >>> obs, _ = env.reset(seed=0)
        >>> obs.shape, obs.dtype, env.background.shape
        ((96, 96, 3), dtype('uint8'), (96, 96, 3))
        >>> frame = np.zeros((96, 96, 3), np.uint8)
        >>> frame[:40] = (100, 202, 100)  # grass on top, black below
        >>> frame[40] = (100, 215, 100)  # a seam between the two grass shades
        >>> out = env.observation(frame)
        >>> bool((out[:41] == env.background[:41]).all()), bool((out[41:] == 0).all())
        (True, True)
    """

    def __init__(
        self,
        env: gym.Env,
        image: ImageLike,
        colors: tuple[tuple[int, int, int], ...] | list[tuple[int, int, int]] = GRASS_COLORS,
        seams: bool = True,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, image=image, colors=colors, seams=seams)
        gym.ObservationWrapper.__init__(self, env)
        space = require_box(env.observation_space, "BackgroundObservation", ndim=(3,))
        if space.shape[-1] != 3:
            raise ValueError(
                "BackgroundObservation needs an RGB (H, W, 3) image observation, got shape "
                f"{space.shape}"
            )
        if space.dtype != np.uint8:
            raise TypeError(
                f"BackgroundObservation needs a uint8 image observation, got dtype {space.dtype}"
            )
        cols = np.asarray(colors)
        if cols.ndim != 2 or cols.shape[0] == 0 or cols.shape[1] != 3:
            raise ValueError(
                "BackgroundObservation needs colors as a non-empty list of RGB triplets, got "
                f"{colors!r}"
            )
        if not np.issubdtype(cols.dtype, np.integer) or np.any((cols < 0) | (cols > 255)):
            raise ValueError(
                f"BackgroundObservation colors must be integers 0..255, got {colors!r}"
            )

        h, w, _ = space.shape
        self.background: np.ndarray = cv2.resize(
            _as_image(image), (w, h), interpolation=cv2.INTER_AREA
        )
        self.background.flags.writeable = False
        self.colors: tuple[tuple[int, int, int], ...] = tuple(
            (int(r), int(g), int(b)) for r, g, b in cols
        )
        self.seams = bool(seams)
        self.observation_space = space

        self._rgb_mask = _packed([(255, 255, 255)])[0]
        self._keys = np.unique(_packed(cols))
        # Seam ranges as (lo, hi - lo, channel mask, other-channels mask, their key), all packed:
        # within one byte position the packed value grows with the channel, on any endianness.
        self._ranges: list[tuple[np.uint32, np.uint32, np.uint32, np.uint32, np.uint32]] = []
        if self.seams:
            for i, a in enumerate(self.colors):
                for b in self.colors[i + 1 :]:
                    diff = [k for k in range(3) if a[k] != b[k]]
                    if len(diff) != 1:
                        continue
                    k, rest = diff[0], tuple(j for j in range(3) if j != diff[0])
                    lo, hi = _packed([min(a, b), max(a, b)], (k,))
                    self._ranges.append(
                        (
                            lo,
                            hi - lo,
                            _packed([(255, 255, 255)], (k,))[0],
                            _packed([(255, 255, 255)], rest)[0],
                            _packed([a], rest)[0],
                        )
                    )
        self._flat_background = self.background.reshape(-1)

    def grass_mask(self, observation: np.ndarray) -> np.ndarray:
        """Boolean (H, W) mask of the pixels that get replaced."""
        obs = np.asarray(observation)
        n = obs.shape[0] * obs.shape[1]
        buf = np.empty(3 * n + 1, np.uint8)  # +1 byte so the last pixel's uint32 read fits
        buf[: 3 * n] = obs.reshape(-1)
        # Pixel i's R, G, B bytes read as one uint32 at byte offset 3 * i; the fourth byte (the
        # next pixel's R) is masked off.
        word = np.ndarray((n,), np.uint32, buf, 0, (3,))
        packed = word & self._rgb_mask
        mask = packed == self._keys[0]
        for key in self._keys[1:]:  # a handful of colours, not pixels
            mask |= packed == key
        for lo, width, chan_mask, rest_mask, rest_key in self._ranges:
            # lo <= channel <= hi as one unsigned compare: values below lo wrap round.
            in_range = ((packed & chan_mask) - lo) <= width
            mask |= ((packed & rest_mask) == rest_key) & in_range
        return mask.reshape(obs.shape[:2])

    def observation(self, observation: np.ndarray) -> np.ndarray:
        """Return a copy of ``observation`` with the matching pixels taken from the background."""
        # Byte-wise select via a 0/255 mask: cheaper than np.where on a repeated bool mask.
        mask = np.repeat(self.grass_mask(observation).reshape(-1).view(np.uint8), 3)
        mask *= 255
        flat = np.asarray(observation).reshape(-1)
        return (flat ^ ((flat ^ self._flat_background) & mask)).reshape(self.background.shape)


def make_car_racing_background(
    background: ImageLike = "kof", screen: str = "gymnasium", **car_racing_kwargs: Any
) -> gym.Env:
    """``CarRacing-v3`` with its grass replaced by ``background`` (E6 test environments).

    Args:
        background: shipped name, image path or (H, W, 3) uint8 array; see
            :class:`BackgroundObservation`.
        screen: ``"gymnasium"`` or ``"classic"`` (gym <= 0.21's direct 96x96 drawing, whose
            grass is exactly :data:`GRASS_COLORS_NOMINAL`; see
            :mod:`attn_envs.classic_car_racing`).
        **car_racing_kwargs: passed to ``gym.make("CarRacing-v3", ...)`` (e.g. ``continuous``,
            ``lap_complete_percent``, ``max_episode_steps``).

    Raises:
        ValueError: with ``domain_randomize=True``, whose random grass colours would not be
            replaced.

    Example:
        >>> env = make_car_racing_background("ds")
        >>> obs, _ = env.reset(seed=1)
        >>> obs.shape, env.action_space.shape
        ((96, 96, 3), (3,))
    """
    if car_racing_kwargs.get("domain_randomize"):
        raise ValueError(
            "make_car_racing_background: domain_randomize=True draws random grass colours, "
            "which the background replacement would not find; leave it False"
        )
    from attn_envs.classic_car_racing import make_car_racing

    return BackgroundObservation(make_car_racing(screen, **car_racing_kwargs), background)
