"""MNIST files for experiment E1: IDX reading and writing, local loading, checked download,
and a synthetic stand-in.

* :func:`load_mnist` reads the standard IDX files (``.gz`` or not) from a local folder;
  :func:`download_mnist` fetches and checks them where a network exists;
  :func:`read_idx` / :func:`write_idx` handle the IDX format itself.
* :func:`synthetic_digits` draws digit-like images with OpenCV's Hershey fonts, so tests and
  smoke runs never need a download.
* :func:`uci_digits`: real handwriting offline, the 1,797 UCI digits that ship with
  scikit-learn, upscaled to MNIST's 28x28 layout.

The E1 transform that consumes them is in :mod:`attn_envs.mnist` (which re-exports these).
"""

from __future__ import annotations

import gzip
import hashlib
import math
import os
import shutil
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import BinaryIO, Literal

import cv2
import numpy as np

from attn_envs._spaces import require_integral

__all__ = [
    "MNIST_FILES",
    "MNIST_MD5",
    "MNIST_MIRRORS",
    "download_mnist",
    "load_mnist",
    "read_idx",
    "synthetic_digits",
    "uci_digits",
    "write_idx",
]

Split = Literal["train", "test"]

#: ``split -> (image file, label file)``, names without the ``.gz`` suffix.
MNIST_FILES: dict[str, tuple[str, str]] = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}

#: MD5 of the official gzipped files (the checksums torchvision verifies).
MNIST_MD5: dict[str, str] = {
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}

#: Public mirrors of the original files, tried in order (yann.lecun.com often refuses bots).
MNIST_MIRRORS: tuple[str, ...] = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
)

_IMAGE_MAGIC, _LABEL_MAGIC = 2051, 2049  # 0x00000803: uint8, 3 dims; 0x00000801: uint8, 1 dim
_IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_IDX_CODES: dict[str, int] = {
    "u1": 0x08,
    "i1": 0x09,
    "i2": 0x0B,
    "i4": 0x0C,
    "f4": 0x0D,
    "f8": 0x0E,
}


# ---------------------------------------------------------------------------------------------
# IDX files
# ---------------------------------------------------------------------------------------------


def _open(path: Path, mode: Literal["rb", "wb"]) -> gzip.GzipFile | BinaryIO:
    return gzip.open(path, mode) if path.suffix == ".gz" else open(path, mode)


def write_idx(path: str | os.PathLike, array: np.ndarray) -> Path:
    """Write ``array`` as an IDX file (big-endian, gzipped when ``path`` ends in ``.gz``).

    Supported dtypes are the IDX ones: ``uint8``, ``int8``, ``int16``, ``int32``, ``float32``
    and ``float64``. A ``uint8`` array of 3 (1) dimensions gets MNIST's image (label) magic
    number 2051 (2049).

    Returns:
        The path written.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "labels-idx1-ubyte.gz"
        >>> _ = write_idx(path, np.array([3, 1, 4], np.uint8))
        >>> read_idx(path).tolist()
        [3, 1, 4]
    """
    path = Path(path)
    array = np.asarray(array)
    code = _IDX_CODES.get(array.dtype.str[1:])
    if code is None:
        raise TypeError(
            f"IDX stores uint8, int8, int16, int32, float32 or float64, got dtype {array.dtype}"
        )
    if not 1 <= array.ndim <= 255:
        raise ValueError(f"IDX needs an array of 1 to 255 dimensions, got shape {array.shape}")
    header = bytes([0, 0, code, array.ndim]) + b"".join(
        int(n).to_bytes(4, "big") for n in array.shape
    )
    data = np.ascontiguousarray(array, dtype=_IDX_DTYPES[code]).tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    with _open(path, "wb") as f:
        f.write(header + data)
    return path


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX file (gzipped when ``path`` ends in ``.gz``) into a native-endian array.

    Raises:
        ValueError: the file is not a well-formed IDX file (bad magic number, unknown data
            type, or a size that does not match its header).
    """
    path = Path(path)
    with _open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise ValueError(
            f"{path} is not an IDX file: bad magic number {raw[:4].hex() or '(empty file)'}"
            " (expected 0000 followed by a data type code and the number of dimensions)"
        )
    dtype, ndim = _IDX_DTYPES[raw[2]], raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    offset = 4 + 4 * ndim
    expected = offset + math.prod(shape) * dtype.itemsize
    if len(shape) != ndim or len(raw) != expected:
        raise ValueError(
            f"{path}: header says shape {shape} of {dtype} ({expected} bytes with header), "
            f"but the file holds {len(raw)} bytes"
        )
    array = np.frombuffer(raw, dtype=dtype, offset=offset).reshape(shape)
    return array.astype(dtype.newbyteorder("="), copy=True)


def _find(root: Path, name: str) -> Path:
    """Locate ``name`` or ``name.gz`` in ``root`` or torchvision's ``root/MNIST/raw``."""
    folders = [root, root / "MNIST" / "raw"]
    candidates = [folder / (name + suffix) for folder in folders for suffix in ("", ".gz")]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    tried = ", ".join(str(c) for c in candidates)
    raise FileNotFoundError(
        f"MNIST file {name!r} not found; looked for {tried}. Fetch the files with "
        f"attn_envs.mnist_data.download_mnist({str(root)!r}) where a network is available, or copy "
        f"the four IDX files ({', '.join(MNIST_MD5)}, gzipped or not) into {root}."
    )


def load_mnist(root: str | os.PathLike, split: Split = "train") -> tuple[np.ndarray, np.ndarray]:
    """Load an MNIST split from the standard IDX files in a local folder.

    Looks for ``train-images-idx3-ubyte`` / ``train-labels-idx1-ubyte`` (``split="train"``)
    or ``t10k-images-idx3-ubyte`` / ``t10k-labels-idx1-ubyte`` (``split="test"``), each plain
    or with ``.gz``, in ``root`` and in torchvision's layout ``root/MNIST/raw``.

    Args:
        root: folder holding the files (see :func:`download_mnist`).
        split: ``"train"`` (60,000 images) or ``"test"`` (10,000 images).

    Returns:
        ``(images, labels)``: ``uint8 (N, 28, 28)`` and ``int64 (N,)`` with labels in 0..9.

    Raises:
        FileNotFoundError: a file is missing (the message says where it looked).
        ValueError: a file is not MNIST-shaped (magic number, dimensions, counts, labels).

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> images, labels = synthetic_digits(5, seed=0)
        >>> _ = write_idx(root / "t10k-images-idx3-ubyte.gz", images)
        >>> _ = write_idx(root / "t10k-labels-idx1-ubyte", labels.astype(np.uint8))
        >>> x, y = load_mnist(root, "test")
        >>> x.shape, x.dtype, y.dtype, bool((y == labels).all())
        ((5, 28, 28), dtype('uint8'), dtype('int64'), True)
    """
    if split not in MNIST_FILES:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    root = Path(root)
    image_path, label_path = (_find(root, name) for name in MNIST_FILES[split])

    images, labels = read_idx(image_path), read_idx(label_path)
    for path, array, magic, ndim in (
        (image_path, images, _IMAGE_MAGIC, 3),
        (label_path, labels, _LABEL_MAGIC, 1),
    ):
        if array.dtype != np.uint8 or array.ndim != ndim:
            got = 0x0800 + array.ndim if array.dtype == np.uint8 else f"{array.dtype} data"
            raise ValueError(
                f"{path}: bad magic number, expected {magic} (uint8, {ndim} dimensions), got {got}"
            )
    if images.shape[1:] != (28, 28):
        raise ValueError(f"{image_path}: expected 28x28 images, got shape {images.shape}")
    if len(images) != len(labels):
        raise ValueError(
            f"{image_path} holds {len(images)} images but {label_path} {len(labels)} labels"
        )
    if labels.size and labels.max() > 9:
        raise ValueError(f"{label_path}: labels must lie in 0..9, found {int(labels.max())}")
    return images, labels.astype(np.int64)


def _md5(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_mnist(
    root: str | os.PathLike,
    base_url: str | Sequence[str] = MNIST_MIRRORS,
    md5: Mapping[str, str] | None = MNIST_MD5,
    timeout: float = 60.0,
) -> list[Path]:
    """Download the four gzipped MNIST IDX files into ``root`` and check their MD5 sums.

    Files already in ``root`` with the right checksum are kept. Each file is fetched with
    :mod:`urllib` (so ``file://`` URLs work too) into ``<name>.part``, checked, then renamed.

    Args:
        root: destination folder (created if needed); afterwards ``load_mnist(root)`` works.
        base_url: a mirror URL, or several tried in turn; the file name is appended.
        md5: expected MD5 hex digest per file name; ``None`` skips the check (not advised).
        timeout: seconds per connection attempt.

    Returns:
        Paths of the four ``.gz`` files.

    Raises:
        ValueError: a downloaded file has the wrong checksum (it is deleted).
        OSError: no mirror could deliver a file (the last network error is chained).
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    mirrors = [base_url] if isinstance(base_url, str) else list(base_url)
    if not mirrors:
        raise ValueError("base_url must name at least one mirror")
    names = [name + ".gz" for pair in MNIST_FILES.values() for name in pair]
    paths = []
    for name in names:
        path, expected = root / name, None if md5 is None else md5.get(name)
        if md5 is not None and expected is None:
            raise ValueError(f"md5 has no checksum for {name}")
        paths.append(path)
        if path.is_file() and (expected is None or _md5(path) == expected):
            continue
        part = path.with_name(name + ".part")
        error: Exception | None = None
        for mirror in mirrors:
            url = mirror.rstrip("/") + "/" + name
            try:
                with (
                    urllib.request.urlopen(url, timeout=timeout) as response,
                    open(part, "wb") as f,
                ):
                    shutil.copyfileobj(response, f)
            except OSError as err:  # URLError and socket timeouts are OSErrors
                part.unlink(missing_ok=True)
                error = err
                continue
            got = _md5(part)
            if expected is not None and got != expected:
                part.unlink()
                raise ValueError(f"checksum mismatch for {url}: md5 {got}, expected {expected}")
            part.replace(path)
            error = None
            break
        if error is not None:
            raise OSError(
                f"could not download {name} from any of {mirrors}; copy the MNIST files into "
                f"{root} by hand instead"
            ) from error
    return paths


# ---------------------------------------------------------------------------------------------
# Synthetic digits
# ---------------------------------------------------------------------------------------------

_FONTS = (
    cv2.FONT_HERSHEY_SIMPLEX,
    cv2.FONT_HERSHEY_DUPLEX,
    cv2.FONT_HERSHEY_COMPLEX,
    cv2.FONT_HERSHEY_TRIPLEX,
    cv2.FONT_HERSHEY_PLAIN,
    cv2.FONT_HERSHEY_SCRIPT_SIMPLEX,
    cv2.FONT_HERSHEY_SCRIPT_COMPLEX,
)


def _draw_digit(digit: int, rng: np.random.Generator) -> np.ndarray:
    """One MNIST-style 28x28 uint8 digit: glyph, slant, crop, fit in 20x20, centre of mass."""
    canvas: np.ndarray = np.zeros((64, 64), np.uint8)
    font = int(_FONTS[rng.integers(len(_FONTS))]) | (cv2.FONT_ITALIC if rng.random() < 0.3 else 0)
    scale = rng.uniform(1.3, 1.9) * (1.8 if font & 0xF == cv2.FONT_HERSHEY_PLAIN else 1.0)
    cv2.putText(
        canvas, str(digit), (14, 50), font, scale, 255, int(rng.integers(2, 6)), cv2.LINE_AA
    )
    # Slant (shear) and a small tilt about the canvas centre.
    shear, angle = rng.uniform(-0.35, 0.35), math.radians(rng.uniform(-12.0, 12.0))
    c, s = math.cos(angle), math.sin(angle)
    linear = np.array([[c, -s], [s, c]]) @ np.array([[1.0, shear], [0.0, 1.0]])
    offset = np.array([32.0, 32.0]) - linear @ np.array([32.0, 32.0])
    canvas = cv2.warpAffine(canvas, np.hstack([linear, offset[:, None]]), (64, 64))
    ys, xs = np.nonzero(canvas > 20)
    if len(ys) == 0:  # cannot happen with these fonts and scales; keep the blank canvas safe
        return np.zeros((28, 28), np.uint8)
    glyph: np.ndarray = canvas[ys.min() : ys.max() + 1, xs.min() : xs.max() + 1].astype(np.float32)
    # Fit the longer side to 16..20 px, like MNIST's 20x20 box (aspect ratio kept).
    h, w = glyph.shape
    box = rng.uniform(16.0, 20.0)
    factor = box / max(h, w)
    size = (max(1, round(w * factor)), max(1, round(h * factor)))
    glyph = cv2.resize(glyph, size, interpolation=cv2.INTER_AREA)
    # Place the centre of mass at the image centre (plus up to a pixel of jitter).
    h, w = glyph.shape
    total = glyph.sum()
    cy = (glyph.sum(axis=1) @ np.arange(h)) / total
    cx = (glyph.sum(axis=0) @ np.arange(w)) / total
    top = int(np.clip(round(13.5 - cy + rng.uniform(-1, 1)), 0, 28 - h))
    left = int(np.clip(round(13.5 - cx + rng.uniform(-1, 1)), 0, 28 - w))
    image: np.ndarray = np.zeros((28, 28), np.float32)
    image[top : top + h, left : left + w] = glyph
    image = cv2.GaussianBlur(image, (3, 3), rng.uniform(0.3, 0.8))
    return np.clip(np.rint(image * (255.0 / max(float(image.max()), 1.0))), 0, 255).astype(np.uint8)


def synthetic_digits(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Digit-like 28x28 images drawn with OpenCV's Hershey fonts, an offline MNIST stand-in.

    Each image is one digit 0-9 in a random Hershey font (sometimes italic) with random
    scale, stroke thickness, slant and small tilt, cropped, fitted into a 16-20 px box,
    centred by its centre of mass (as MNIST is) and slightly blurred. Labels are uniform.
    The data set is far more regular than handwriting but just as learnable by the E1
    models, and it is a deterministic function of ``(n, seed)``.

    Args:
        n: number of images.
        seed: seed of the generator (a ``numpy`` generator, independent of global state).

    Returns:
        ``(images, labels)``: ``uint8 (n, 28, 28)`` in 0..255 with a black background and
        ``int64 (n,)`` in 0..9.

    Example:
        >>> images, labels = synthetic_digits(4, seed=0)
        >>> images.shape, images.dtype, labels.dtype, int(images.max())
        ((4, 28, 28), dtype('uint8'), dtype('int64'), 255)
        >>> bool((synthetic_digits(4, seed=0)[0] == images).all())
        True
    """
    n = require_integral(n, "n", minimum=0)
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, size=int(n)).astype(np.int64)
    images = np.zeros((int(n), 28, 28), np.uint8)
    for i, digit in enumerate(labels):
        images[i] = _draw_digit(int(digit), rng)
    return images, labels


# ---------------------------------------------------------------------------------------------
# Handwritten UCI digits (scikit-learn)
# ---------------------------------------------------------------------------------------------

UCI_DIGITS = 1797
"""Images in scikit-learn's copy of the UCI digits (``sklearn.datasets.load_digits``)."""


def uci_digits(split: Split = "train", n_test: int = 500) -> tuple[np.ndarray, np.ndarray]:
    """Real handwriting offline: the 1,797 UCI digits that ship with scikit-learn, as MNIST.

    ``sklearn.datasets.load_digits`` is the test part of UCI's "Optical Recognition of
    Handwritten Digits" (43 writers): 8x8 images of 0..16, each pixel the count of ink in a
    4x4 block of a 32x32 bitmap. Each is upscaled to 20x20 (bicubic) and centred in a 28x28
    frame, MNIST's layout (a 20x20 box, 4 px margins), in 0..255. A fixed permutation (the
    same for every run seed) holds out ``n_test`` images as ``"test"``; ``"train"`` is the
    rest. Nothing is downloaded: the data are part of the scikit-learn package.

    Args:
        split: ``"train"`` or ``"test"``.
        n_test: images held out for ``"test"`` (1..1796).

    Returns:
        ``(images, labels)``: ``uint8 (n, 28, 28)`` with a black background and ``int64 (n,)``.

    Raises:
        ImportError: scikit-learn is not installed (``pip install 'attn-zoo[digits]'``).

    Example:
        >>> images, labels = uci_digits("test", n_test=500)
        >>> images.shape, images.dtype, labels.dtype, int(images.max())
        ((500, 28, 28), dtype('uint8'), dtype('int64'), 255)
        >>> len(uci_digits("train", n_test=500)[0]) + len(images)
        1797
        >>> int(images[:, :4].max()), int(images[:, 24:].max())  # the 4 px margins
        (0, 0)
    """
    import torch
    import torch.nn.functional as F

    if split not in MNIST_FILES:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    n_test = require_integral(n_test, "n_test")
    if n_test >= UCI_DIGITS:
        raise ValueError(f"n_test must be below {UCI_DIGITS} (the images there are), got {n_test}")
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ImportError(
            "the UCI digits need scikit-learn: pip install 'attn-zoo[digits]'"
        ) from None
    digits = load_digits()
    small = torch.as_tensor(digits.images, dtype=torch.float32)[:, None] / 16.0
    large = F.interpolate(small, size=(20, 20), mode="bicubic", align_corners=False)
    images = np.zeros((len(small), 28, 28), np.uint8)
    images[:, 4:24, 4:24] = np.rint(large[:, 0].clamp(0, 1).numpy() * 255).astype(np.uint8)
    labels = np.asarray(digits.target, np.int64)
    order = np.random.default_rng(0).permutation(len(images))
    keep = order[-n_test:] if split == "test" else order[:-n_test]
    return images[keep], labels[keep]
