"""MNIST data for experiment E1: IDX loading, a synthetic stand-in and the book's transform.

Seed 000, sec. 10.3 trains a relational module and a CNN on MNIST digits that are randomly
translated (up to ±6 px), rotated (up to ±30°) and sprinkled with ``10 + |5·N(0, 1)|``
white spots, then renormalised by their maximum. This module supplies the data side:

* the files (:mod:`attn_envs.mnist_data`): :func:`~attn_envs.mnist_data.load_mnist` reads the
  standard IDX files from a local folder, :func:`download_mnist` fetches and checks them,
  :func:`read_idx` / :func:`write_idx` handle the IDX format, and :func:`synthetic_digits`
  draws digit-like images with OpenCV's Hershey fonts, so tests and smoke runs never need a
  download.
* :func:`transform_mnist` is the E1 transform, batched in torch (``affine_grid`` /
  ``grid_sample``, no per-image Python loop); :class:`MNISTTransform` freezes its settings
  into a ``transform(images, generator)`` callable and :func:`transformed_test_set` draws
  the fixed, seeded test set of 500 transformed images.

The book's ``prepare_images`` rotates by an angle that its code never lets through (a sign
bug), so its digits are only shifted; here the rotation really happens. All randomness
comes from the ``torch.Generator`` (or seed) passed in, never from global state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from attn_envs._spaces import require_integral

__all__ = ["MNISTTransform", "transform_mnist", "transformed_test_set"]

# ---------------------------------------------------------------------------------------------
# The E1 transform
# ---------------------------------------------------------------------------------------------


def _as_generator(generator: torch.Generator | int) -> torch.Generator:
    if isinstance(generator, torch.Generator):
        return generator
    if isinstance(generator, bool) or not isinstance(generator, (int, np.integer)):
        raise TypeError(f"generator must be a torch.Generator or an int seed, got {generator!r}")
    return torch.Generator().manual_seed(int(generator))


def _as_images(images: np.ndarray | Tensor) -> Tensor:
    """``(B, [1,] H, W)`` uint8 in 0..255 or float in [0, 1] -> float ``(B, 1, H, W)``."""
    x = torch.as_tensor(images)
    if x.ndim == 3:
        x = x.unsqueeze(1)
    if x.ndim != 4 or x.shape[1] != 1:
        raise ValueError(f"images must have shape (B, H, W) or (B, 1, H, W), got {tuple(x.shape)}")
    if x.dtype == torch.uint8:
        return x.float() / 255.0
    if not x.is_floating_point():
        raise TypeError(f"images must be uint8 (0..255) or float (0..1), got {x.dtype}")
    return x.float()


def _affine_grid(angles_deg: Tensor, shifts: Tensor, height: int, width: int) -> Tensor:
    """Sampling grid that rotates by ``angles_deg`` (counter-clockwise) then shifts by ``shifts``.

    ``shifts`` are ``(dx, dy)`` pixels, positive right and down, as in
    ``torchvision.transforms.functional.affine``. ``affine_grid`` maps *output* pixels to the
    *input* points they sample, so ``theta`` is the inverse map, written in pixel units and
    converted to the normalised ``[-1, 1]`` coordinates (exact for non-square images too).
    """
    a = torch.deg2rad(angles_deg)
    c, s = torch.cos(a), torch.sin(a)
    # Forward map on screen coordinates (y down): p = M q + t, M = [[c, s], [-s, c]] turns
    # counter-clockwise. Inverse: q = M^T (p - t).
    inv = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)  # (B, 2, 2)
    scale = torch.tensor([2.0 / width, 2.0 / height])
    linear = scale[:, None] * inv / scale[None, :]  # S M^T S^-1
    offset = -(scale[:, None] * inv) @ shifts.unsqueeze(-1)  # -S M^T t
    theta = torch.cat([linear, offset], dim=-1)  # (B, 2, 3)
    return F.affine_grid(theta, [len(a), 1, height, width], align_corners=False)


def transform_mnist(
    images: np.ndarray | Tensor,
    generator: torch.Generator | int,
    max_shift: int = 6,
    max_rotation: float = 30.0,
    n_spots: tuple[float, float] | None = (10, 5.0),
    spot_value: float = 1.0,
) -> Tensor:
    """The E1 transform of seed 000 (``prepare_images``), batched and with working rotation.

    Per image: scale to ``[0, 1]``; rotate by ``U(-max_rotation, max_rotation)`` degrees about
    the centre and shift by integers ``dx, dy`` uniform in ``[-max_shift, max_shift]``
    (bilinear ``grid_sample``, zero fill); add ``spot_value`` at ``floor(m + std·|N(0, 1)|)``
    distinct random pixels (``n_spots = (m, std)``) and clip to ``[0, 1]``; divide by the
    image's maximum. Everything is drawn from ``generator`` in one batched call per
    quantity, so a seed fixes the whole batch.

    Args:
        images: ``(B, H, W)`` or ``(B, 1, H, W)`` array or tensor, ``uint8`` in 0..255 (as
            :func:`load_mnist` returns) or float already in ``[0, 1]``.
        generator: a CPU ``torch.Generator`` (advanced in place) or an int seed.
        max_shift: largest translation in pixels along each axis (0: none).
        max_rotation: largest rotation in degrees either way (0: none). Positive angles turn
            counter-clockwise, as in torchvision.
        n_spots: ``(m, std)`` of the spot count. The book's ``prepare_images`` calls
            ``add_spots(img, m=noise)`` with ``noise=10`` (listings 10.1 and 10.5), so
            ``(10, 5)``, not ``add_spots``'s own default ``m=20``; ``None`` adds no spots.
            The count is capped at ``H * W``.
        spot_value: value added at each spot before clipping (the book: 1, a white pixel).

    Returns:
        float32 ``(B, 1, H, W)`` in ``[0, 1]``, each non-blank image with maximum exactly 1.

    Example:
        >>> from attn_envs.mnist_data import synthetic_digits
        >>> images, _ = synthetic_digits(8, seed=0)
        >>> x = transform_mnist(images, torch.Generator().manual_seed(0))
        >>> x.shape, x.dtype, float(x.min()), x.amax(dim=(1, 2, 3)).tolist() == [1.0] * 8
        (torch.Size([8, 1, 28, 28]), torch.float32, 0.0, True)
        >>> bool((transform_mnist(images, 0) == transform_mnist(images, 0)).all())
        True
    """
    max_shift = require_integral(max_shift, "max_shift", minimum=0)
    if not (math.isfinite(max_rotation) and max_rotation >= 0):
        raise ValueError(f"max_rotation must be a finite angle >= 0 (degrees), got {max_rotation}")
    if n_spots is not None and (len(n_spots) != 2 or min(n_spots) < 0):
        raise ValueError(f"n_spots must be None or (mean, std) >= 0, got {n_spots!r}")
    g = _as_generator(generator)
    x = _as_images(images)
    batch, _, height, width = x.shape
    if batch == 0:
        return x

    if max_shift > 0 or max_rotation > 0:
        shifts = torch.randint(-int(max_shift), int(max_shift) + 1, (batch, 2), generator=g).float()
        angles = (torch.rand(batch, generator=g) * 2 - 1) * float(max_rotation)
        grid = _affine_grid(angles, shifts, height, width)
        x = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)

    if n_spots is not None:
        mean, std = (float(v) for v in n_spots)
        counts = (mean + std * torch.randn(batch, generator=g).abs()).floor().long()
        counts = counts.clamp(0, height * width)
        # Rank the pixels of each image at random; the `count` first ranks get a spot.
        order = torch.rand(batch, height * width, generator=g).argsort(dim=1)
        chosen = torch.arange(height * width).expand(batch, -1) < counts[:, None]
        spots = torch.zeros(batch, height * width).scatter_(1, order, chosen.float())
        x = (x + spot_value * spots.view_as(x)).clamp(0.0, 1.0)

    x = x.clamp(0.0, 1.0)
    peak = x.amax(dim=(1, 2, 3), keepdim=True)
    return x / peak.clamp_min(torch.finfo(x.dtype).tiny)


@dataclass(frozen=True)
class MNISTTransform:
    """:func:`transform_mnist` with fixed settings: a ``transform(images, generator)`` callable.

    This is the ``transform`` argument of
    :func:`attn_policies.algorithms.supervised.train_classifier`; the defaults are E1's.

    Example:
        >>> transform = MNISTTransform(max_rotation=0.0, n_spots=None)  # shifts only
        >>> from attn_envs.mnist_data import synthetic_digits
        >>> images, _ = synthetic_digits(2, seed=1)
        >>> transform(images, torch.Generator().manual_seed(0)).shape
        torch.Size([2, 1, 28, 28])
    """

    max_shift: int = 6
    max_rotation: float = 30.0
    n_spots: tuple[float, float] | None = (10, 5.0)
    spot_value: float = 1.0

    def __call__(self, images: np.ndarray | Tensor, generator: torch.Generator | int) -> Tensor:
        return transform_mnist(
            images,
            generator,
            max_shift=self.max_shift,
            max_rotation=self.max_rotation,
            n_spots=self.n_spots,
            spot_value=self.spot_value,
        )


def transformed_test_set(
    images: np.ndarray | Tensor,
    labels: np.ndarray | Tensor,
    n: int = 500,
    seed: int = 0,
    transform: MNISTTransform | None = None,
) -> tuple[Tensor, Tensor]:
    """A fixed, seeded test set: ``n`` distinct images, transformed once (book: 500).

    Args:
        images: ``uint8 (N, 28, 28)`` test images.
        labels: ``(N,)`` labels.
        n: how many images to draw (without replacement; at most ``N``).
        seed: fixes both the choice of images and their transformation.
        transform: the transform to apply (default: E1's :class:`MNISTTransform`).

    Returns:
        ``(x, y)``: float ``(n, 1, 28, 28)`` and int64 ``(n,)``.

    Example:
        >>> from attn_envs.mnist_data import synthetic_digits
        >>> images, labels = synthetic_digits(20, seed=0)
        >>> x, y = transformed_test_set(images, labels, n=10, seed=3)
        >>> x.shape, y.shape
        (torch.Size([10, 1, 28, 28]), torch.Size([10]))
    """
    images, labels = torch.as_tensor(images), torch.as_tensor(labels).long()
    if len(images) != len(labels):
        raise ValueError(f"{len(images)} images but {len(labels)} labels")
    if not 0 < n <= len(images):
        raise ValueError(f"n must lie in 1..{len(images)} (the number of images), got {n}")
    g = torch.Generator().manual_seed(int(seed))
    index = torch.randperm(len(images), generator=g)[:n]
    return (transform or MNISTTransform())(images[index], g), labels[index]
