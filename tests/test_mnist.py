"""Tests for attn_envs.mnist: IDX files, download, synthetic digits and the E1 transform."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attn_envs.mnist import MNISTTransform, transform_mnist, transformed_test_set
from attn_envs.mnist_data import synthetic_digits

NO_AUGMENT = {"max_shift": 0, "max_rotation": 0.0, "n_spots": None}


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    return synthetic_digits(64, seed=0)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --- the E1 transform -------------------------------------------------------------------------


def test_transform_shape_range_and_max(digits) -> None:
    images, _ = digits
    x = transform_mnist(images, gen(0))
    assert x.shape == (64, 1, 28, 28) and x.dtype == torch.float32
    assert x.min() >= 0 and x.max() <= 1
    torch.testing.assert_close(x.amax(dim=(1, 2, 3)), torch.ones(64), rtol=0, atol=0)


def test_each_image_is_renormalised_by_its_max(digits) -> None:
    images, _ = digits
    dim = images // np.arange(2, 66, dtype=np.uint8)[:, None, None]  # maxima 127 down to 3
    x = transform_mnist(dim, gen(0), max_shift=6, max_rotation=30.0, n_spots=None)
    torch.testing.assert_close(x.amax(dim=(1, 2, 3)), torch.ones(64), rtol=0, atol=0)
    # Relative brightness within an image is kept: the same digit at half intensity.
    half = transform_mnist(images // 2, gen(0), **NO_AUGMENT)
    full = transform_mnist(images, gen(0), **NO_AUGMENT)
    torch.testing.assert_close(half, full, atol=2 / 127, rtol=0)


def test_transform_accepts_tensors_channels_and_floats(digits) -> None:
    images, _ = digits
    a = transform_mnist(images, gen(1))
    b = transform_mnist(torch.from_numpy(images).unsqueeze(1), gen(1))
    c = transform_mnist(torch.from_numpy(images).float() / 255, gen(1))
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(a, c)
    with pytest.raises(ValueError, match="shape"):
        transform_mnist(np.zeros((2, 3, 28, 28), np.uint8), 0)


def test_transform_is_seeded(digits) -> None:
    images, _ = digits
    a = transform_mnist(images, gen(5))
    torch.testing.assert_close(a, transform_mnist(images, gen(5)), rtol=0, atol=0)
    torch.testing.assert_close(a, transform_mnist(images, 5), rtol=0, atol=0)
    assert not torch.equal(a, transform_mnist(images, gen(6)))
    g = gen(5)  # a generator advances: two calls give two different batches
    assert not torch.equal(transform_mnist(images, g), transform_mnist(images, g))


def test_transform_leaves_global_rng_alone(digits) -> None:
    images, _ = digits
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    transform_mnist(images, gen(0))
    torch.testing.assert_close(torch.rand(3), expected, rtol=0, atol=0)
    torch.manual_seed(1)
    a = transform_mnist(images, 7)
    torch.manual_seed(2)
    torch.testing.assert_close(transform_mnist(images, 7), a, rtol=0, atol=0)


def test_no_augmentation_is_the_normalised_image(digits) -> None:
    images, _ = digits
    x = transform_mnist(images, gen(0), **NO_AUGMENT)
    ref = torch.from_numpy(images).float().unsqueeze(1) / 255
    torch.testing.assert_close(x, ref / ref.amax(dim=(1, 2, 3), keepdim=True))


def test_zero_rotation_is_the_identity(digits) -> None:
    """A (numerically) zero angle goes through the affine grid and changes nothing."""
    images, _ = digits
    x = transform_mnist(images, gen(0), max_shift=0, max_rotation=1e-6, n_spots=None)
    torch.testing.assert_close(x, transform_mnist(images, gen(0), **NO_AUGMENT), atol=1e-4, rtol=0)


def test_rotation_happens(digits) -> None:
    images, _ = digits
    plain = transform_mnist(images, gen(0), **NO_AUGMENT)
    rotated = transform_mnist(images, gen(0), max_shift=0, max_rotation=30.0, n_spots=None)
    change = (rotated - plain).abs().amax(dim=(1, 2, 3))
    assert (change > 0.1).float().mean() > 0.85  # all but the smallest angles show
    # Rotation keeps the digit's mass at the centre (no shift) ...
    mass = rotated.sum(dim=(1, 2, 3))
    rows = (rotated.sum(dim=(1, 3)) * torch.arange(28)).sum(1) / mass
    cols = (rotated.sum(dim=(1, 2)) * torch.arange(28)).sum(1) / mass
    base_mass = plain.sum(dim=(1, 2, 3))
    base_rows = (plain.sum(dim=(1, 3)) * torch.arange(28)).sum(1) / base_mass
    base_cols = (plain.sum(dim=(1, 2)) * torch.arange(28)).sum(1) / base_mass
    assert (rows - base_rows).abs().max() < 1.5 and (cols - base_cols).abs().max() < 1.5


def polar_angle(x: torch.Tensor) -> torch.Tensor:
    """Screen angle (degrees, counter-clockwise from +x) of each image's brightest pixel."""
    flat = x.flatten(1).argmax(dim=1)
    row, col = flat // 28, flat % 28
    return torch.rad2deg(torch.atan2(-(row - 13.5), col - 13.5))


def test_rotation_angles_span_the_range() -> None:
    dot = np.zeros((400, 28, 28), np.uint8)
    dot[:, 13:15, 22:24] = 255  # a blob 9 px right of the centre, polar angle ~0
    x = transform_mnist(dot, gen(0), max_shift=0, max_rotation=30.0, n_spots=None)
    angles = polar_angle(x)
    assert angles.abs().max() <= 30 + 5  # never more than the limit (+ pixel rounding)
    assert angles.max() > 20 and angles.min() < -20  # both directions, near the limit
    assert (angles.abs() > 10).float().mean() > 0.5  # uniform in [-30, 30]: ~2/3 beyond 10


def test_affine_grid_turns_counter_clockwise_and_shifts_right_down() -> None:
    """Torchvision's convention: +90 degrees takes a pixel right of the centre to the top."""
    from attn_envs.mnist import _affine_grid

    image = torch.zeros(1, 1, 28, 28)
    image[0, 0, 14, 22] = 1.0  # right of the centre (13.5, 13.5)
    grid = _affine_grid(torch.tensor([90.0]), torch.zeros(1, 2), 28, 28)
    out = torch.nn.functional.grid_sample(image, grid, align_corners=False)
    assert (out[0, 0] > 0.5).nonzero().tolist() == [[5, 14]]
    grid = _affine_grid(torch.tensor([0.0]), torch.tensor([[3.0, -2.0]]), 28, 28)
    out = torch.nn.functional.grid_sample(image, grid, align_corners=False)
    assert (out[0, 0] > 0.5).nonzero().tolist() == [[12, 25]]
    # Non-square images: a quarter turn maps a 10x30 image's long axis onto its short one.
    wide = torch.zeros(1, 1, 10, 30)
    wide[0, 0, 5, 18] = 1.0  # 3.5 px right of the centre (4.5, 14.5)
    grid = _affine_grid(torch.tensor([90.0]), torch.zeros(1, 2), 10, 30)
    out = torch.nn.functional.grid_sample(wide, grid, align_corners=False)
    assert (out[0, 0] > 0.5).nonzero().tolist() == [[1, 15]]


def test_shifts_are_integers_within_range() -> None:
    dot = np.zeros((300, 28, 28), np.uint8)
    dot[:, 14, 14] = 255
    x = transform_mnist(dot, gen(0), max_shift=6, max_rotation=0.0, n_spots=None)
    # Integer shifts keep a single pixel a single pixel of value 1 (up to float round-off).
    assert ((x > 1e-4).flatten(1).sum(dim=1) == 1).all()
    flat = x.flatten(1).argmax(dim=1)
    dy, dx = flat // 28 - 14, flat % 28 - 14
    assert dy.abs().max() == 6 and dx.abs().max() == 6
    assert len(set(dx.tolist())) == 13 and len(set(dy.tolist())) == 13


def test_number_of_spots_is_within_the_stated_range() -> None:
    blank = np.zeros((2000, 28, 28), np.uint8)
    x = transform_mnist(blank, gen(0), max_shift=0, max_rotation=0.0, n_spots=(20, 5.0))
    counts = (x == 1).flatten(1).sum(dim=1).float()
    assert ((x == 0) | (x == 1)).all()  # spots are pure white on black
    assert counts.min() >= 20
    # 20 + |5 N(0,1)| has mean 20 + 5 sqrt(2/pi) ~ 23.99 (floored: ~23.5) and is < 20 + 5*5.
    assert counts.max() < 45
    assert abs(counts.mean().item() - (20 + 5 * math.sqrt(2 / math.pi) - 0.5)) < 0.3
    assert (counts > 25).any()
    none = transform_mnist(blank[:5], gen(0), max_shift=0, max_rotation=0.0, n_spots=None)
    assert (none == 0).all()  # a blank image with no spots stays blank (no division by 0)
    fixed = transform_mnist(blank[:50], gen(0), max_shift=0, max_rotation=0.0, n_spots=(7, 0))
    assert ((fixed == 1).flatten(1).sum(dim=1) == 7).all()


def test_default_spots_follow_the_books_listing() -> None:
    # prepare_images(..., noise=10) calls add_spots(img, m=noise): 10 + |5 N(0,1)| spots
    blank = np.zeros((1000, 28, 28), np.uint8)
    for transform in (
        lambda x: transform_mnist(x, gen(0), max_shift=0, max_rotation=0.0),
        lambda x: MNISTTransform(max_shift=0, max_rotation=0.0)(x, gen(0)),
    ):
        counts = (transform(blank) == 1).flatten(1).sum(dim=1).float()
        assert counts.min() >= 10 and counts.max() < 35
        assert abs(counts.mean().item() - (10 + 5 * math.sqrt(2 / math.pi) - 0.5)) < 0.3
    from zoo.config import load_runs

    for run in load_runs("mnist", budget="full"):
        assert run.body["transform"]["n_spots"] == [10, 5.0]


def test_spots_are_placed_independently_per_image() -> None:
    blank = np.zeros((200, 28, 28), np.uint8)
    x = transform_mnist(blank, gen(1), max_shift=0, max_rotation=0.0)
    frequency = (x == 1).float().mean(dim=0)
    assert (frequency > 0).float().mean() > 0.95  # spots land all over the image
    assert not torch.equal(x[0], x[1])


def test_transform_validates_arguments(digits) -> None:
    images, _ = digits
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="max_shift must be a non-negative integer"):
            transform_mnist(images, 0, max_shift=bad)
    with pytest.raises(ValueError, match="max_rotation"):
        transform_mnist(images, 0, max_rotation=math.nan)
    with pytest.raises(ValueError, match="n_spots"):
        transform_mnist(images, 0, n_spots=(20,))
    with pytest.raises(TypeError, match="generator"):
        transform_mnist(images, None)


def test_mnist_transform_callable_matches_function(digits) -> None:
    images, _ = digits
    transform = MNISTTransform(max_shift=3, max_rotation=10.0, n_spots=(5, 1.0))
    expected = transform_mnist(images, gen(2), max_shift=3, max_rotation=10.0, n_spots=(5, 1.0))
    torch.testing.assert_close(transform(images, gen(2)), expected, rtol=0, atol=0)


def test_transformed_test_set_is_fixed_and_distinct(digits) -> None:
    images, labels = digits
    x, y = transformed_test_set(images, labels, n=40, seed=0)
    x2, y2 = transformed_test_set(images, labels, n=40, seed=0)
    assert x.shape == (40, 1, 28, 28) and y.shape == (40,)
    torch.testing.assert_close(x, x2, rtol=0, atol=0)
    torch.testing.assert_close(y, y2, rtol=0, atol=0)
    x3, _ = transformed_test_set(images, labels, n=40, seed=1)
    assert not torch.equal(x, x3)
    # Without augmentation the images are distinct originals with their own labels.
    plain, y_plain = transformed_test_set(
        images, labels, n=64, seed=0, transform=MNISTTransform(**NO_AUGMENT)
    )
    originals = torch.from_numpy(images).float() / 255
    originals = originals / originals.amax(dim=(1, 2), keepdim=True)
    match = (plain[:, 0, None] - originals[None]).abs().amax(dim=(2, 3)) < 1e-6
    index = match.float().argmax(dim=1)
    assert match.any(dim=1).all() and len(set(index.tolist())) == 64
    torch.testing.assert_close(y_plain, torch.from_numpy(labels)[index])
    with pytest.raises(ValueError, match="n must"):
        transformed_test_set(images, labels, n=65)
