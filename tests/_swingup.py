"""The start-state checks both CartPoleSwingUp tests share (single env and vector env)."""

from __future__ import annotations

import math

import numpy as np

REST = np.array([0.0, 0.0, math.pi, 0.0])
HARDER_SPAN = np.array([2.4, 10.0, math.pi / 2, 10.0])


def assert_fills_the_harder_box(starts: np.ndarray) -> None:
    """The Harder reset: uniform over the whole box around the hanging rest state."""
    offsets = (starts - REST) / HARDER_SPAN
    assert np.all(offsets >= -1.0) and np.all(offsets < 1.0)
    np.testing.assert_array_less(offsets.min(axis=0), -0.98)
    np.testing.assert_array_less(0.98, offsets.max(axis=0))
    np.testing.assert_allclose(offsets.mean(axis=0), 0.0, atol=0.05)  # uniform, not clustered


def assert_gaussian_around_hanging(starts: np.ndarray) -> None:
    """The easy reset: N(rest, 0.2) per coordinate."""
    np.testing.assert_allclose(starts.mean(axis=0), REST, atol=0.02)
    np.testing.assert_allclose(starts.std(axis=0), 0.2, atol=0.01)
