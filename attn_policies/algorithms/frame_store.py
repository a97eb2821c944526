"""Frame-stacked patch tokens held as their distinct frames, for behaviour-cloning data.

A Puzzle Pong sample is 196 tokens of 6x6 pixels x 4 stacked frames, ``(196, 144)`` uint8;
consecutive steps of one episode share 3 of their 4 frames, so a dataset of stacked tokens
holds each frame 4 times. :class:`FrameStore` keeps every distinct frame once (found by
content: a BLAKE2 digest, confirmed by comparing the bytes) and each sample as the indices of
its frames; :class:`StackedFrames` reads samples back, whole or only some of their tokens,
as :class:`~attn_policies.algorithms.bc.BatchSampler` asks. Nothing about the env is
assumed beyond the token layout: frames may come from any number of interleaved envs,
resets or reshuffles (a frame whose pixels moved is simply a new frame).

Token layout (that of ``attn_envs``' ``PatchObservation`` after a ``FrameStackObservation``):
the last axis is ``P`` pixels x ``K`` frames with the frame innermost, oldest first, so
frame ``k`` of a sample is ``tokens[..., k::K]``.

Example:
    >>> rng = np.random.default_rng(0)
    >>> frames = rng.integers(0, 256, (6, 10, 9), dtype=np.uint8)   # 6 screens, 10 tokens
    >>> window = np.stack([frames[t : t + 4] for t in range(3)])     # 3 steps, 4 frames each
    >>> tokens = window.transpose(0, 2, 3, 1).reshape(3, 10, 36)     # (steps, N, P * K)
    >>> store = FrameStore(capacity=3, stack=4)
    >>> store.append(tokens)
    >>> data = store.data()
    >>> data.shape, store.n_frames, np.array_equal(np.asarray(data), tokens)
    ((3, 10, 36), 6, True)
"""

from __future__ import annotations

import hashlib
import warnings
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor

__all__ = ["FrameStore", "StackedFrames"]

CHUNK = 4096  # samples regrouped frame-major at a time while appending (bounds the copy)


class StackedFrames:
    """Samples ``(S, N, P * K)`` read from distinct frames ``(F, N, P)`` and indices ``(S, K)``.

    Array-like enough for the BC data path: ``len``, ``shape``, ``dtype``, ``ndim``, numpy
    indexing of samples (``data[rows]``), ``np.asarray`` (materialises every sample), and the
    batch reads :meth:`take` and :meth:`take_tokens`, which copy only what they return.

    Args:
        frames: the distinct frames, ``(F, N, P)``.
        index: each sample's ``K`` frame rows, oldest first, ``(S, K)`` integers.
    """

    def __init__(self, frames: np.ndarray, index: np.ndarray) -> None:
        if frames.ndim != 3 or index.ndim != 2:
            raise ValueError(
                f"frames must be (F, N, P) and index (S, K), got {frames.shape} and {index.shape}"
            )
        if len(index) and (index.min() < 0 or index.max() >= len(frames)):
            raise ValueError(f"index must lie in [0, {len(frames)})")
        self.frames = np.ascontiguousarray(frames)
        self.index = np.ascontiguousarray(index, dtype=np.int64)
        with warnings.catch_warnings():  # read-only arrays: they are only ever read here
            warnings.simplefilter("ignore", UserWarning)
            self._frames, self._index = map(torch.from_numpy, (self.frames, self.index))
        _, n, p = frames.shape
        self.shape = (len(index), n, p * index.shape[1])
        self.dtype, self.ndim = frames.dtype, 3

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: Any) -> np.ndarray:
        """The samples ``rows`` (an integer, a slice, an integer array or a mask), materialised."""
        picked = np.arange(len(self))[rows]
        out = self.take(torch.from_numpy(np.atleast_1d(picked).astype(np.int64))).numpy()
        return out[0] if np.ndim(picked) == 0 else out

    def __array__(self, dtype: npt.DTypeLike | None = None, copy: bool | None = None) -> np.ndarray:
        out = self[:]
        return out if dtype is None else out.astype(dtype)

    def take(self, rows: Tensor) -> Tensor:
        """The samples ``rows`` (int64 tensor), ``(B, N, P * K)``."""
        frames, index = self._frames, self._index
        picked = frames.index_select(0, index.index_select(0, rows).view(-1))
        b, k = len(rows), index.shape[1]
        return picked.view(b, k, *frames.shape[1:]).permute(0, 2, 3, 1).reshape(b, *self.shape[1:])

    def take_tokens(self, rows: Tensor, kept: Tensor) -> Tensor:
        """Only the tokens ``kept`` ``(B, keep)`` of the samples ``rows``: ``(B, keep, P * K)``,
        one ``P``-pixel row copied per kept token and frame."""
        frames, index = self._frames, self._index
        n, p = frames.shape[1:]
        sample_frames = index.index_select(0, rows)  # (B, K)
        flat = (sample_frames.unsqueeze(1) * n + kept.unsqueeze(2)).view(-1)  # (B * keep * K)
        picked = frames.reshape(-1, p).index_select(0, flat)
        b, keep, k = len(rows), kept.shape[1], index.shape[1]
        return picked.view(b, keep, k, p).transpose(2, 3).reshape(b, keep, p * k)


class FrameStore:
    """Stacked-token samples appended as distinct frames plus per-sample frame indices.

    Room for ``capacity`` samples is reserved once (``capacity * stack`` frames at most, the
    case where no two frames are equal); as with ``np.empty``, memory is committed only as
    rows are written, so a store of 580k Puzzle Pong samples takes about 4 GB instead of the
    16 GB of the stacked array.

    Args:
        capacity: the most samples the store will hold.
        stack: frames per token, ``K`` (the env's ``frame_stack``).
    """

    def __init__(self, capacity: int, stack: int) -> None:
        if capacity < 1 or stack < 1:
            raise ValueError(f"capacity and stack must be >= 1, got {capacity} and {stack}")
        self.capacity, self.stack = capacity, stack
        self.size = self.n_frames = 0
        self._frames: np.ndarray | None = None
        self._index = np.empty((capacity, stack), np.int64)
        self._rows: dict[bytes, int] = {}  # frame digest -> its row

    def _row(self, frame: np.ndarray) -> int:
        """The row holding ``frame`` (C-contiguous ``(N, P)``), added if it is new."""
        assert self._frames is not None
        key = hashlib.blake2b(frame.data, digest_size=16).digest()
        row = self._rows.get(key)
        if row is not None and not np.array_equal(self._frames[row], frame):
            key += frame.tobytes()  # two frames, one digest: their bytes tell them apart
            row = self._rows.get(key)
        if row is None:
            row, self.n_frames = self.n_frames, self.n_frames + 1
            self._frames[row] = frame
            self._rows[key] = row
        return row

    def append(self, tokens: np.ndarray) -> None:
        """Add the samples ``tokens`` ``(S, N, P * K)`` after those held.

        Raises:
            ValueError: more samples than ``capacity``, or tokens whose shape or dtype differ
                from the first ones' or whose last axis is not a multiple of ``stack``.
        """
        tokens = np.asarray(tokens)
        k = self.stack
        if tokens.ndim != 3 or tokens.shape[2] % k:
            raise ValueError(
                f"tokens must be (S, N, P * {k}) with the frame innermost, got {tokens.shape}"
            )
        s, n, pk = tokens.shape
        if self._frames is None:
            self._frames = np.empty((self.capacity * k, n, pk // k), tokens.dtype)
        elif tokens.shape[1:] != self.shape[1:] or tokens.dtype != self._frames.dtype:
            raise ValueError(
                f"tokens {tokens.shape[1:]} {tokens.dtype} unlike the store's "
                f"{self.shape[1:]} {self._frames.dtype}"
            )
        if self.size + s > self.capacity:
            raise ValueError(f"{self.size + s} samples do not fit a store of {self.capacity}")
        for start in range(0, s, CHUNK):
            chunk = tokens[start : start + CHUNK]
            # (B, N, P, K) -> (B, K, N, P): each frame one contiguous block to digest
            frames = np.ascontiguousarray(chunk.reshape(len(chunk), n, -1, k).transpose(0, 3, 1, 2))
            rows = [self._row(frame) for sample in frames for frame in sample]
            end = self.size + len(chunk)
            self._index[self.size : end] = np.asarray(rows, np.int64).reshape(-1, k)
            self.size = end

    @property
    def shape(self) -> tuple[int, int, int]:
        if self._frames is None:
            return (0, 0, 0)
        _, n, p = self._frames.shape
        return (self.size, n, p * self.stack)

    def data(self) -> StackedFrames:
        """The samples appended so far, as views of the store (no copy)."""
        if self._frames is None:
            raise ValueError("the store is empty")
        return StackedFrames(self._frames[: self.n_frames], self._index[: self.size])
