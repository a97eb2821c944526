"""Tests for zoo.video (attention panels, captions, frame sizes and the MP4/GIF writer)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from zoo.video import (
    MIN_HEIGHT,
    TITLE_BAND,
    VideoWriter,
    as_rgb,
    caption,
    even_crop,
    fit_frame,
    render_panel,
)


def test_panel_grid_puts_the_largest_weight_brightest() -> None:
    saliency = np.zeros((7, 7))
    saliency[2, 5] = 1.0
    panel = render_panel(saliency, 70)
    body = panel[22:].astype(int).sum(axis=-1)  # below the label band, 10 px per cell
    assert np.unravel_index(body.argmax(), body.shape)[0] // 10 == 2
    assert np.unravel_index(body.argmax(), body.shape)[1] // 10 == 5


def test_panel_bars_grow_with_attention() -> None:
    panel = render_panel(np.array([0.1, 0.5, 0.2, 0.9]), 80)
    body = panel[22:]
    lit = (np.abs(body.astype(int) - 32).sum(axis=-1) > 0).sum(axis=0)  # bar height per column
    heights = lit.reshape(4, 20).max(axis=1)
    assert np.argsort(heights).tolist() == [0, 2, 1, 3]


def test_empty_panel_and_title_band() -> None:
    panel = render_panel(None, 50, title="attention")
    assert panel.shape == (50 + TITLE_BAND, 50, 3) and panel.dtype == np.uint8
    assert (panel[:TITLE_BAND] == 255).any()  # the title is written in white


def test_grid_panel_over_a_background_mixes_both() -> None:
    saliency = np.zeros((4, 4))
    plain = render_panel(saliency, 40)
    over = render_panel(saliency, 40, background=np.full((8, 8), 255, np.uint8))
    assert over[TITLE_BAND:].mean() > plain[TITLE_BAND:].mean()


def test_caption_writes_on_a_black_box() -> None:
    image = np.full((40, 200, 3), 128, np.uint8)
    caption(image, "episode 1", (6, 18))
    assert (image == 0).any() and (image == 255).any()


def test_fit_frame_scales_by_an_integer_factor_or_to_a_shape() -> None:
    frame = np.zeros((56, 40, 3), np.uint8)
    up = fit_frame(frame, None)
    factor = -(-MIN_HEIGHT // 56)
    assert up.shape == (56 * factor, 40 * factor, 3)
    assert fit_frame(frame, (100, 30)).shape == (100, 30, 3)
    assert even_crop(np.zeros((11, 7, 3))).shape == (10, 6, 3)


def test_as_rgb_of_grey_and_float_images() -> None:
    grey = as_rgb(np.arange(6.0).reshape(2, 3))
    assert grey.shape == (2, 3, 3) and grey.dtype == np.uint8
    assert grey[0, 0, 0] == 0 and grey[-1, -1, 0] == 255


@pytest.mark.parametrize("suffix", [".gif", ".mp4"])
def test_writer_writes_every_frame(tmp_path: Path, suffix: str) -> None:
    writer = VideoWriter(tmp_path / f"v{suffix}", fps=10, size=(32, 24))
    for k in range(5):
        writer.write(np.full((24, 32, 3), 40 * k, np.uint8))
    path = writer.close()
    if path.suffix == ".gif":
        assert Image.open(path).n_frames == 5
    else:
        capture = cv2.VideoCapture(str(path))
        assert capture.get(cv2.CAP_PROP_FRAME_COUNT) == 5
        capture.release()
