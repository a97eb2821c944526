"""Drawing and encoding the frames of a video: attention side panels, captions, MP4/GIF.

Pure numpy/OpenCV helpers of :func:`zoo.record.record`: :func:`render_panel` draws the
attention every key receives (a heat map when the keys form a grid, else a bar strip;
colours scaled per frame from the smallest to the largest weight), :func:`caption` writes
readable text on a frame, :func:`fit_frame` and :func:`even_crop` give every frame one size
an encoder takes, and :class:`VideoWriter` writes an MP4 (OpenCV's ``mp4v``) or an animated
GIF where that codec is missing.
"""

from __future__ import annotations

import math
from pathlib import Path

import cv2
import numpy as np

from attn_policies.atomic import atomic_path, commit, discard, temp_path

__all__ = [
    "MIN_HEIGHT",
    "TITLE_BAND",
    "VideoWriter",
    "as_rgb",
    "caption",
    "even_crop",
    "fit_frame",
    "render_panel",
]

MIN_HEIGHT = 256
"""Frames are scaled up by an integer factor to at least this many pixel rows."""
TITLE_BAND = 22
"""Pixel rows above the attention panel for its label."""


def _colour(values: np.ndarray) -> np.ndarray:
    """Values in [0, 1] -> viridis RGB uint8, same shape plus a channel axis."""
    grey = np.clip(np.rint(values * 255), 0, 255).astype(np.uint8)
    bgr = cv2.applyColorMap(grey.reshape(-1, 1), cv2.COLORMAP_VIRIDIS).reshape(*grey.shape, 3)
    return bgr[..., ::-1]


def _normalise(x: np.ndarray) -> np.ndarray:
    span = float(x.max() - x.min()) if x.size else 0.0
    return (x - x.min()) / span if span > 0 else np.zeros_like(x, dtype=np.float64)


def as_rgb(image: np.ndarray) -> np.ndarray:
    """An image as ``(H, W, 3)`` uint8: grey images repeated, floats min-max scaled."""
    image = np.asarray(image)
    if image.dtype != np.uint8:
        image = np.clip(_normalise(image.astype(np.float64)) * 255, 0, 255).astype(np.uint8)
    return np.repeat(image[..., None], 3, axis=-1) if image.ndim == 2 else image[..., :3]


def render_panel(
    saliency: np.ndarray | None,
    size: int,
    background: np.ndarray | None = None,
    title: str = "",
) -> np.ndarray:
    """A ``(size + TITLE_BAND, size, 3)`` uint8 attention panel (see the module docstring).

    ``saliency`` is ``(rows, cols)`` (a heat map, stretched over ``background`` if given)
    or ``(K,)`` (a bar per key); None draws an empty panel.

    Example:
        >>> render_panel(np.arange(49.0).reshape(7, 7), 70).shape
        (92, 70, 3)
    """
    panel = np.full((size + TITLE_BAND, size, 3), 32, np.uint8)
    body = panel[TITLE_BAND:]
    if saliency is None:
        caption(body, "no attention recorded", (6, size // 2))
    elif saliency.ndim == 2:
        heat = cv2.resize(
            _colour(_normalise(saliency)), (size, size), interpolation=cv2.INTER_NEAREST
        )
        if background is not None:
            under = cv2.resize(as_rgb(background), (size, size), interpolation=cv2.INTER_NEAREST)
            heat = cv2.addWeighted(heat, 0.55, under, 0.45, 0)
        body[:] = heat
    else:
        values = _normalise(saliency.astype(np.float64))
        height = size - 4
        tops = np.rint(values * (height - 1)).astype(int) + 1  # every key shows a sliver
        mask = np.arange(height)[::-1, None] < tops[None, :]  # (height, K)
        bars = np.where(mask[..., None], _colour(values)[None], np.uint8(32)).astype(np.uint8)
        body[4:] = cv2.resize(bars, (size, height), interpolation=cv2.INTER_NEAREST)
    caption(panel, title, (4, 15), scale=0.4)
    return panel


def caption(image: np.ndarray, text: str, org: tuple[int, int], scale: float = 0.45) -> None:
    """White text on a black box, readable on any frame."""
    font = cv2.FONT_HERSHEY_SIMPLEX
    (width, height), base = cv2.getTextSize(text, font, scale, 1)
    x, y = org
    cv2.rectangle(image, (x - 2, y - height - 3), (x + width + 2, y + base), (0, 0, 0), -1)
    cv2.putText(image, text, org, font, scale, (255, 255, 255), 1, cv2.LINE_AA)


class VideoWriter:
    """MP4 through OpenCV, or an animated GIF (PIL) when the path says so or mp4v is missing.

    The frames go to a temporary file beside ``path`` that replaces it on :meth:`close`
    (:mod:`attn_policies.atomic`): a symlinked ``video.mp4`` is replaced, never written
    through, and a failed recording leaves the previous video.
    """

    def __init__(self, path: Path, fps: int, size: tuple[int, int]) -> None:
        self.path, self.fps = path, fps
        self.frames: list[np.ndarray] = []
        self.video = None
        self.tmp: Path | None = None
        if path.suffix.lower() != ".gif":
            self.tmp = temp_path(path)  # keeps the suffix, which OpenCV reads the format from
            video = cv2.VideoWriter(str(self.tmp), cv2.VideoWriter.fourcc(*"mp4v"), fps, size)
            if video.isOpened():
                self.video = video
            else:
                video.release()
                discard(self.tmp)
                self.tmp = None
                self.path = path.with_suffix(".gif")

    def write(self, rgb: np.ndarray) -> None:
        if self.video is not None:
            self.video.write(np.ascontiguousarray(rgb[..., ::-1]))
        else:
            self.frames.append(rgb)

    def close(self) -> Path:
        if self.video is not None and self.tmp is not None:
            self.video.release()
            commit(self.tmp, self.path)
        elif self.frames:
            from PIL import Image

            images = [Image.fromarray(f) for f in self.frames]
            with atomic_path(self.path) as tmp:
                images[0].save(
                    tmp,
                    format="GIF",
                    save_all=True,
                    append_images=images[1:],
                    duration=round(1000 / self.fps),
                    loop=0,
                )
        return self.path


def fit_frame(frame: np.ndarray, shape: tuple[int, int] | None) -> np.ndarray:
    """``frame`` scaled up by an integer factor to ``MIN_HEIGHT`` rows, or to ``shape``."""
    if shape is None:
        factor = max(1, math.ceil(MIN_HEIGHT / frame.shape[0]))
        shape = (frame.shape[0] * factor, frame.shape[1] * factor)
    if frame.shape[:2] != shape:
        frame = cv2.resize(frame, (shape[1], shape[0]), interpolation=cv2.INTER_NEAREST)
    return frame


def even_crop(frame: np.ndarray) -> np.ndarray:
    """Crop to even width and height (what H.264-style encoders and players expect)."""
    return frame[: frame.shape[0] // 2 * 2, : frame.shape[1] // 2 * 2]
