"""Tests for attn_envs.mnist_data (IDX files, download, synthetic and UCI digits)."""

from __future__ import annotations

import gzip
import hashlib

import numpy as np
import pytest

from attn_envs.mnist_data import (
    MNIST_FILES,
    MNIST_MD5,
    UCI_DIGITS,
    download_mnist,
    load_mnist,
    read_idx,
    synthetic_digits,
    uci_digits,
    write_idx,
)


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    return synthetic_digits(64, seed=0)


def write_split(root, split: str, images, labels, gz: bool) -> None:
    image_name, label_name = MNIST_FILES[split]
    suffix = ".gz" if gz else ""
    write_idx(root / (image_name + suffix), images)
    write_idx(root / (label_name + suffix), labels.astype(np.uint8))


# --- IDX files --------------------------------------------------------------------------------


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("split", ["train", "test"])
def test_idx_round_trip(tmp_path, digits, split, gz) -> None:
    images, labels = digits
    write_split(tmp_path, split, images, labels, gz)
    name = MNIST_FILES[split][0] + (".gz" if gz else "")
    with open(tmp_path / name, "rb") as f:
        assert f.read(2) == (b"\x1f\x8b" if gz else b"\x00\x00")  # really gzipped or not
    x, y = load_mnist(tmp_path, split)
    assert x.dtype == np.uint8 and x.shape == (64, 28, 28)
    assert y.dtype == np.int64 and y.shape == (64,)
    np.testing.assert_array_equal(x, images)
    np.testing.assert_array_equal(y, labels)


def test_idx_header_is_the_mnist_one(tmp_path, digits) -> None:
    images, labels = digits
    raw = write_idx(tmp_path / "img", images).read_bytes()
    assert int.from_bytes(raw[:4], "big") == 2051
    assert [int.from_bytes(raw[4 * i : 4 * i + 4], "big") for i in (1, 2, 3)] == [64, 28, 28]
    assert len(raw) == 16 + 64 * 28 * 28
    raw = write_idx(tmp_path / "lab", labels.astype(np.uint8)).read_bytes()
    assert int.from_bytes(raw[:4], "big") == 2049 and len(raw) == 8 + 64


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
def test_idx_other_dtypes_round_trip(tmp_path, dtype) -> None:
    array = (np.arange(24).reshape(2, 3, 4) - 5).astype(dtype)
    out = read_idx(write_idx(tmp_path / "a.idx.gz", array))
    assert out.dtype == np.dtype(dtype) and out.dtype.isnative
    np.testing.assert_array_equal(out, array)


def test_write_idx_refuses_other_dtypes(tmp_path) -> None:
    with pytest.raises(TypeError, match="IDX stores"):
        write_idx(tmp_path / "a", np.zeros(3, np.int64))


def test_bad_magic_number_raises(tmp_path, digits) -> None:
    images, labels = digits
    write_split(tmp_path, "test", images, labels, gz=False)
    path = tmp_path / MNIST_FILES["test"][0]
    raw = bytearray(path.read_bytes())
    raw[:4] = b"\x12\x34\x56\x78"
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="bad magic number"):
        load_mnist(tmp_path, "test")


def test_swapped_files_are_refused(tmp_path, digits) -> None:
    _, labels = digits
    image_name, label_name = MNIST_FILES["train"]
    write_idx(tmp_path / image_name, labels.astype(np.uint8))  # labels where images belong
    write_idx(tmp_path / label_name, labels.astype(np.uint8))
    with pytest.raises(ValueError, match="expected 2051"):
        load_mnist(tmp_path, "train")


def test_truncated_file_raises(tmp_path, digits) -> None:
    images, labels = digits
    write_split(tmp_path, "train", images, labels, gz=True)
    path = tmp_path / (MNIST_FILES["train"][0] + ".gz")
    raw = gzip.decompress(path.read_bytes())
    path.write_bytes(gzip.compress(raw[:-10]))
    with pytest.raises(ValueError, match="holds"):
        load_mnist(tmp_path, "train")


def test_mismatched_counts_and_bad_labels_raise(tmp_path, digits) -> None:
    images, labels = digits
    write_split(tmp_path, "test", images, labels[:10], gz=False)
    with pytest.raises(ValueError, match=r"64 images but .* 10 labels"):
        load_mnist(tmp_path, "test")
    write_split(tmp_path, "test", images, np.full(64, 12), gz=False)
    with pytest.raises(ValueError, match=r"0\.\.9"):
        load_mnist(tmp_path, "test")


def test_missing_files_raise_file_not_found(tmp_path, digits) -> None:
    with pytest.raises(FileNotFoundError) as info:
        load_mnist(tmp_path, "train")
    message = str(info.value)
    assert str(tmp_path / "train-images-idx3-ubyte.gz") in message
    assert "download_mnist" in message
    # Only the labels missing: the error names the labels file.
    images, _ = digits
    write_idx(tmp_path / MNIST_FILES["train"][0], images)
    with pytest.raises(FileNotFoundError, match="train-labels-idx1-ubyte"):
        load_mnist(tmp_path, "train")


def test_torchvision_layout_is_found(tmp_path, digits) -> None:
    images, labels = digits
    write_split(tmp_path / "MNIST" / "raw", "test", images, labels, gz=True)
    x, _ = load_mnist(tmp_path, "test")
    np.testing.assert_array_equal(x, images)


def test_bad_split_raises(tmp_path) -> None:
    with pytest.raises(ValueError, match="split"):
        load_mnist(tmp_path, "validation")


# --- download ---------------------------------------------------------------------------------


def make_mirror(folder, digits) -> dict[str, str]:
    """Write the four .gz files into ``folder``; return their md5 sums."""
    images, labels = digits
    for split in MNIST_FILES:
        write_split(folder, split, images, labels, gz=True)
    return {name: hashlib.md5((folder / name).read_bytes()).hexdigest() for name in MNIST_MD5}


def test_download_from_file_url(tmp_path, digits) -> None:
    mirror, root = tmp_path / "mirror", tmp_path / "data"
    md5 = make_mirror(mirror, digits)
    paths = download_mnist(root, base_url=mirror.as_uri() + "/", md5=md5)
    assert sorted(p.name for p in paths) == sorted(MNIST_MD5)
    assert not list(root.glob("*.part"))
    for split in ("train", "test"):
        x, y = load_mnist(root, split)
        np.testing.assert_array_equal(x, digits[0])
        np.testing.assert_array_equal(y, digits[1])


def test_download_tries_the_next_mirror_and_skips_present_files(tmp_path, digits) -> None:
    mirror, root = tmp_path / "mirror", tmp_path / "data"
    md5 = make_mirror(mirror, digits)
    dead = (tmp_path / "nowhere").as_uri()
    download_mnist(root, base_url=[dead, mirror.as_uri()], md5=md5)
    stamps = {p.name: p.stat().st_mtime_ns for p in root.iterdir()}
    for p in mirror.iterdir():
        p.unlink()  # a second call must not need the mirror at all
    download_mnist(root, base_url=mirror.as_uri(), md5=md5)
    assert {p.name: p.stat().st_mtime_ns for p in root.iterdir()} == stamps


def test_download_checksum_mismatch_raises(tmp_path, digits) -> None:
    mirror, root = tmp_path / "mirror", tmp_path / "data"
    md5 = make_mirror(mirror, digits)
    md5["t10k-images-idx3-ubyte.gz"] = "0" * 32
    with pytest.raises(ValueError, match="checksum mismatch"):
        download_mnist(root, base_url=mirror.as_uri(), md5=md5)
    assert not (root / "t10k-images-idx3-ubyte.gz").exists()
    assert not list(root.glob("*.part"))


def test_download_with_the_official_checksums_rejects_other_files(tmp_path, digits) -> None:
    mirror = tmp_path / "mirror"
    make_mirror(mirror, digits)
    with pytest.raises(ValueError, match="checksum mismatch"):
        download_mnist(tmp_path / "data", base_url=mirror.as_uri())


def test_download_unreachable_raises_os_error(tmp_path) -> None:
    with pytest.raises(OSError, match="could not download"):
        download_mnist(tmp_path / "data", base_url=(tmp_path / "nowhere").as_uri())


# --- synthetic digits -------------------------------------------------------------------------


def test_synthetic_digits_shape_and_determinism() -> None:
    images, labels = synthetic_digits(200, seed=3)
    assert images.shape == (200, 28, 28) and images.dtype == np.uint8
    assert labels.shape == (200,) and labels.dtype == np.int64
    assert set(labels.tolist()) == set(range(10))
    assert (images.reshape(200, -1).max(axis=1) == 255).all()
    # Black border like MNIST: the digit sits inside, centred.
    assert images[:, 0, :].max() < 64 and images[:, :, 0].max() < 64
    again, labels_again = synthetic_digits(200, seed=3)
    np.testing.assert_array_equal(again, images)
    np.testing.assert_array_equal(labels_again, labels)
    other, _ = synthetic_digits(200, seed=4)
    assert not np.array_equal(other, images)


def test_synthetic_digits_differ_by_class() -> None:
    images, labels = synthetic_digits(500, seed=0)
    means = np.stack([images[labels == d].mean(axis=0) for d in range(10)])
    distances = np.linalg.norm(means[:, None] - means[None], axis=(2, 3))
    assert distances[~np.eye(10, dtype=bool)].min() > 100  # class means are far apart


@pytest.mark.parametrize("n", [-1, True, 2.5, "3"])
def test_synthetic_digits_needs_a_count(n) -> None:
    with pytest.raises(ValueError, match="n must be a non-negative integer"):
        synthetic_digits(n)
    assert len(synthetic_digits(0)[0]) == 0 and len(synthetic_digits(2.0)[0]) == 2


# --- UCI handwritten digits (scikit-learn) ----------------------------------------------------


def test_uci_digits_are_the_upscaled_sklearn_digits_split_once() -> None:
    import torch
    import torch.nn.functional as F
    from sklearn.datasets import load_digits

    train, train_labels = uci_digits("train")
    test, test_labels = uci_digits("test")
    assert (len(train), len(test)) == (UCI_DIGITS - 500, 500)
    assert train.dtype == test.dtype == np.uint8 and train.shape[1:] == (28, 28)
    everything = np.concatenate([train, test])
    assert everything[:, :4].max() == everything[:, 24:].max() == 0  # MNIST's 4 px margins
    assert everything[:, :, :4].max() == everything[:, :, 24:].max() == 0
    source = load_digits()
    # each image is nearest to a distinct original (bilinearly upscaled) with its label
    ours = torch.as_tensor(everything[:, 4:24, 4:24] / 255.0).reshape(UCI_DIGITS, -1)
    original = torch.as_tensor(source.images[:, None] / 16.0)
    original = F.interpolate(original, size=(20, 20), mode="bilinear").reshape(UCI_DIGITS, -1)
    index = torch.cdist(ours, original).argmin(dim=1)
    assert len(set(index.tolist())) == UCI_DIGITS
    labels = np.concatenate([train_labels, test_labels])
    np.testing.assert_array_equal(source.target[index.numpy()], labels)
    # the split is fixed: the same for every call, and n_test decides its size
    np.testing.assert_array_equal(uci_digits("test")[0], test)
    assert len(uci_digits("test", n_test=100)[0]) == 100
    assert set(test_labels.tolist()) == set(range(10))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"split": "val"}, "split must be 'train' or 'test'"),
        ({"n_test": 0}, "n_test must be a positive integer"),
        ({"n_test": True}, "n_test must be a positive integer"),
        ({"n_test": UCI_DIGITS}, "n_test must be below 1797"),
    ],
)
def test_uci_digits_bad_arguments(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        uci_digits(**kwargs)


def test_uci_digits_without_sklearn_says_how_to_install(monkeypatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "sklearn.datasets", None)
    with pytest.raises(ImportError, match=r"pip install 'attn-zoo\[digits\]'"):
        uci_digits("test")
