"""Behaviour-cloning data: :class:`BCDataset` (student inputs, teacher targets and actions)
and :class:`DatasetBuffer`, which grows one round by round without copying what it holds.

A dataset saves to one ``.npz`` of plain arrays and loads with ``allow_pickle=False``, so a
recorded part of a long run (:class:`~attn_policies.algorithms.bc_collect.RolloutCollector`)
can be read back safely after a kill.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from attn_policies.algorithms.frame_store import FrameStore
from attn_policies.atomic import atomic_path
from attn_policies.checks import require_sizes

__all__ = ["BCDataset", "DatasetBuffer", "Obs"]

Obs = np.ndarray | dict[str, np.ndarray]


@dataclass(frozen=True)
class BCDataset:
    """Student inputs, teacher outputs and teacher actions; the first axis is the sample.

    Attributes:
        obs: an array, or a Dict of arrays (e.g. ``"observation"`` and ``"prev_action"``).
        targets: the teacher's logits (Discrete) or action means (Box), float32.
        actions: the actions the teacher took (the ``"cross_entropy"`` labels).
    """

    obs: Obs
    targets: np.ndarray
    actions: np.ndarray

    def __post_init__(self) -> None:
        sizes = (
            {len(v) for v in self.obs.values()} if isinstance(self.obs, dict) else {len(self.obs)}
        )
        sizes |= {len(self.targets), len(self.actions)}
        if len(sizes) != 1:
            raise ValueError(f"obs, targets and actions must have one length, got {sizes}")

    def __len__(self) -> int:
        return len(self.targets)

    def save(self, path: str | Path) -> Path:
        """Write the dataset to one uncompressed ``.npz`` (atomically: a kill leaves no file).

        Raises:
            ValueError: a Dict entry whose name is not a plain identifier.
        """
        arrays: dict[str, Any] = {"targets": self.targets, "actions": self.actions}
        if isinstance(self.obs, dict):
            for key, value in self.obs.items():
                if not re.fullmatch(r"\w+", key):
                    raise ValueError(f"observation entry {key!r} is not a plain identifier")
                arrays[f"obs.{key}"] = value
        else:
            arrays["obs"] = self.obs
        with atomic_path(path) as tmp, tmp.open("wb") as fh:
            np.savez(fh, **arrays)
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> BCDataset:
        """A dataset :meth:`save` wrote (arrays only: ``allow_pickle=False``)."""
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
        entries = {k[4:]: arrays.pop(k) for k in list(arrays) if k.startswith("obs.")}
        obs: Obs = arrays.pop("obs") if "obs" in arrays else entries
        return cls(obs, arrays["targets"], arrays["actions"])

    @classmethod
    def concatenate(cls, parts: Sequence[BCDataset]) -> BCDataset:
        """The samples of ``parts`` one after the other."""
        if not parts:
            raise ValueError("no datasets to concatenate")
        if isinstance(parts[0].obs, dict):
            keys = list(parts[0].obs)
            obs: Obs = {k: np.concatenate([p.obs[k] for p in parts]) for k in keys}
        else:
            obs = np.concatenate([p.obs for p in parts])
        return cls(
            obs,
            np.concatenate([p.targets for p in parts]),
            np.concatenate([p.actions for p in parts]),
        )


class DatasetBuffer:
    """Datasets appended into arrays allocated once, for data that grows round by round
    (DAgger): :meth:`append` copies only the new samples, where
    :meth:`BCDataset.concatenate` would copy everything so far, and :attr:`data` is a view
    of the samples held (no copy). Memory is committed as rows are written.

    ``stacked`` names Dict entries of frame-stacked patch tokens and their frames per token
    (``{"observation": 4}`` for Puzzle Pong): those are kept in a
    :class:`~attn_policies.algorithms.frame_store.FrameStore`, each distinct frame once, and
    read back as :class:`~attn_policies.algorithms.frame_store.StackedFrames` (about 4x less
    memory for 4 frames; the batches are the same).

    Example:
        >>> buffer = DatasetBuffer(capacity=5)
        >>> part = BCDataset(np.ones((2, 3), np.uint8), np.zeros((2, 1)), np.zeros(2))
        >>> buffer.append(part); buffer.append(part)
        >>> len(buffer.data), buffer.data.obs.shape
        (4, (4, 3))
    """

    def __init__(self, capacity: int, stacked: dict[str, int] | None = None) -> None:
        require_sizes(capacity=capacity)
        self.capacity, self.size = capacity, 0
        self.stacked = dict(stacked or {})
        self._obs: np.ndarray | dict[str, np.ndarray | FrameStore] | None = None
        self._targets = self._actions = np.empty(0)

    @staticmethod
    def _like(values: np.ndarray, capacity: int) -> np.ndarray:
        return np.empty((capacity, *values.shape[1:]), values.dtype)

    def append(self, part: BCDataset) -> None:
        """Copy ``part``'s samples after those held.

        Raises:
            ValueError: more samples than ``capacity``, or arrays unlike the first part's.
        """
        end = self.size + len(part)
        if end > self.capacity:
            raise ValueError(f"{end} samples do not fit a buffer of {self.capacity}")
        if self._obs is None:
            if self.stacked and not (
                isinstance(part.obs, dict) and set(self.stacked) <= set(part.obs)
            ):
                entries = list(part.obs) if isinstance(part.obs, dict) else None
                raise ValueError(f"stacked entries {list(self.stacked)} not among {entries}")
            self._obs = (
                {
                    k: FrameStore(self.capacity, self.stacked[k])
                    if k in self.stacked
                    else self._like(v, self.capacity)
                    for k, v in part.obs.items()
                }
                if isinstance(part.obs, dict)
                else self._like(part.obs, self.capacity)
            )
            self._targets = self._like(part.targets, self.capacity)
            self._actions = self._like(part.actions, self.capacity)
        if isinstance(self._obs, dict) != isinstance(part.obs, dict) or (
            isinstance(part.obs, dict) and set(part.obs) != set(self._obs)
        ):
            raise ValueError("every part must have the first part's observation entries")
        held = self._obs
        if isinstance(held, dict):
            new = cast("dict[str, np.ndarray]", part.obs)  # checked above: held's entries
            arrays = {k: v for k, v in held.items() if isinstance(v, np.ndarray)}
            stores = {k: v for k, v in held.items() if isinstance(v, FrameStore)}
            for key, values in arrays.items():  # arrays first: a store cannot take back rows
                values[self.size : end] = new[key]
            for key, store in stores.items():
                store.append(new[key])
        else:
            held[self.size : end] = part.obs
        self._targets[self.size : end] = part.targets
        self._actions[self.size : end] = part.actions
        self.size = end

    @property
    def data(self) -> BCDataset:
        """The samples appended so far, as views of the buffer."""
        if self._obs is None:
            raise ValueError("the buffer is empty")
        n = self.size
        obs: Obs
        if isinstance(self._obs, dict):
            # a frame store's entry is a StackedFrames, which BatchSampler takes like an array
            entries: dict[str, Any] = {
                k: v.data() if isinstance(v, FrameStore) else v[:n] for k, v in self._obs.items()
            }
            obs = entries
        else:
            obs = self._obs[:n]
        return BCDataset(obs, self._targets[:n], self._actions[:n])
