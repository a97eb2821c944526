"""Behaviour cloning (seed 001, E4 Ant and E5 Puzzle Pong): a student imitates a teacher.

The training loop. :func:`~attn_policies.algorithms.bc_collect.collect_rollouts` plays a
teacher in a vector env and records what the student will see with the teacher's targets
(a :class:`~attn_policies.algorithms.bc_data.BCDataset`); :func:`train_bc` fits the student
with Adam, gradient clipping and, per batch, the two augmentations of seed 001:

- Gaussian noise on the previous action the student is fed (``prev_action_noise``; the Ant
  student used sigma 0.03), so it does not learn to copy ``a_{t-1}``;
- patch occlusion (``occlusion``): every sample of a batch keeps the same number of randomly
  chosen patch tokens, the rest are dropped (the AttentionNeuron takes any number of tokens),
  which is how the Puzzle Pong agent learnt to play with part of the screen.

The loss is the MSE between the student's outputs and the teacher's logits (Discrete) or
action means (Box), the cross-entropy of the student's logits against the teacher's
actions, or (Discrete) the KL divergence from the teacher's softmax at a temperature to the
student's (policy distillation, Rusu et al. 2016; Hinton et al. 2015), which keeps the
teacher's near-ties instead of asking the student to copy an arbitrary argmax.
:class:`BatchSampler` draws the batches: one ``index_select`` per entry from tensor views of
the dataset, the occluded tokens straight from it (``uint8`` screens stay ``uint8`` until the
student converts them); ``benchmarks/bc.py`` times it against the student's step.

Long runs resume: :class:`~attn_policies.algorithms.bc_collect.RolloutCollector` records the
teacher a chunk at a time (each chunk a
:meth:`~attn_policies.algorithms.bc_data.BCDataset.save` file), and
``train_bc(..., checkpoint=FILE)`` saves the student, the optimizer and the sampling streams
after every epoch and continues from them.

Example:
    >>> import torch
    >>> from torch import nn
    >>> rng = np.random.default_rng(0)
    >>> obs = rng.normal(size=(256, 4)).astype(np.float32)
    >>> data = BCDataset(obs, obs @ np.ones((4, 2), np.float32), np.zeros(256, np.int64))
    >>> _ = torch.manual_seed(0)
    >>> history = train_bc(nn.Linear(4, 2), data, BCConfig(epochs=20, learning_rate=0.05))
    >>> history[0]["loss"] > 10 * history[-1]["loss"]
    True
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attn_policies.algorithms.bc_data import BCDataset
from attn_policies.algorithms.frame_store import StackedFrames
from attn_policies.atomic import atomic_path
from attn_policies.checks import require_sizes
from attn_policies.safe_reads import load_tensors, parse_json

__all__ = [
    "BCConfig",
    "BatchSampler",
    "lr_factor",
    "occlude_tokens",
    "train_bc",
]


@dataclass
class BCConfig:
    """Behaviour-cloning settings (E4: batch 64, Adam 1e-3, grad clip 0.5, sigma 0.03).

    Args:
        batch_size: samples per gradient step.
        learning_rate: Adam step size.
        grad_clip: max global gradient norm (``0`` turns clipping off).
        epochs: passes over the dataset.
        loss: ``"mse"`` against teacher outputs, ``"cross_entropy"`` against its actions,
            ``"kl"``: ``KL(softmax(teacher logits / temperature) || softmax(student logits))``.
        temperature: the teacher's softmax temperature of ``"kl"`` (below 1 sharpens it).
        prev_action_noise: std of the Gaussian noise added to ``obs[prev_action_key]``.
        prev_action_key: the Dict entry holding ``a_{t-1}``.
        occlusion: fraction of patch tokens dropped in every batch, or ``(low, high)`` to draw
            it per batch.
        tokens_key: the Dict entry holding the tokens (``None``: the observation itself).
        epoch_samples: samples per epoch, a fresh random subset of the data each epoch
            (``0``: all of it), so that an epoch costs the same however large the data grows.
        lr_schedule: ``"constant"``, or ``"linear"`` / ``"cosine"`` decay of the step size
            from ``learning_rate`` to 0 over ``lr_epochs`` epochs (then 0), per batch. The step
            size is a function of the epoch and batch alone, so a resumed run keeps it.
        lr_epochs: the decay's length in epochs (``0``: ``epochs``).
        seed: seeds shuffling, noise and occlusion.
    """

    batch_size: int = 64
    learning_rate: float = 1e-3
    grad_clip: float = 0.5
    epochs: int = 10
    loss: Literal["mse", "cross_entropy", "kl"] = "mse"
    temperature: float = 1.0
    prev_action_noise: float = 0.0
    prev_action_key: str = "prev_action"
    occlusion: float | tuple[float, float] = 0.0
    tokens_key: str | None = None
    epoch_samples: int = 0
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    lr_epochs: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.loss not in ("mse", "cross_entropy", "kl"):
            raise ValueError(f"loss must be 'mse', 'cross_entropy' or 'kl', got {self.loss!r}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature!r}")
        require_sizes(batch_size=self.batch_size, epochs=self.epochs)
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate!r}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(
                f"lr_schedule must be one of {list(LR_SCHEDULES)}, got {self.lr_schedule!r}"
            )
        for name in ("grad_clip", "prev_action_noise", "epoch_samples", "lr_epochs"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        low, high = _ratio_range(self.occlusion)
        if not 0 <= low <= high < 1:
            raise ValueError(f"occlusion must lie in [0, 1), got {self.occlusion!r}")


LR_SCHEDULES = ("constant", "linear", "cosine")


def lr_factor(config: BCConfig, progress: float) -> float:
    """The step size's share of ``learning_rate`` after ``progress`` epochs (fractional).

    Example:
        >>> config = BCConfig(epochs=4, lr_schedule="cosine")
        >>> [round(lr_factor(config, e), 3) for e in (0, 2, 4, 5)]
        [1.0, 0.5, 0.0, 0.0]
    """
    if config.lr_schedule == "constant":
        return 1.0
    done = min(progress / (config.lr_epochs or config.epochs), 1.0)
    if config.lr_schedule == "linear":
        return 1.0 - done
    return 0.5 * (1.0 + math.cos(math.pi * done))


def _ratio_range(occlusion: float | tuple[float, float]) -> tuple[float, float]:
    if isinstance(occlusion, tuple | list):
        return float(occlusion[0]), float(occlusion[1])
    return float(occlusion), float(occlusion)


def occlude_tokens(tokens: Tensor, ratio: float, generator: torch.Generator) -> Tensor:
    """Keep ``round((1 - ratio) * N)`` (at least 1) random tokens of every sample, in order.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> occlude_tokens(torch.arange(20.0).view(2, 10, 1), 0.7, g).shape
        torch.Size([2, 3, 1])
    """
    b, n = tokens.shape[:2]
    kept = _kept_tokens(b, n, ratio, generator)
    if kept is None:
        return tokens
    return _take_tokens(tokens, torch.arange(b), kept)


def _kept_tokens(b: int, n: int, ratio: float, generator: torch.Generator) -> Tensor | None:
    """The token indices :func:`occlude_tokens` keeps, ``(b, keep)`` ascending per row, or
    ``None`` (and no draw) when ``ratio`` keeps them all."""
    keep = max(1, round((1.0 - ratio) * n))
    if keep == n:
        return None
    scores = torch.rand(b, n, generator=generator)
    return scores.argsort(dim=1)[:, :keep].sort(dim=1).values


def _take_tokens(source: Tensor, rows: Tensor, kept: Tensor) -> Tensor:
    """``source[rows[i], kept[i]]`` for every ``i``: ``(len(rows), keep, ...)``, one row copy
    per kept token (``index_select`` on the ``(S * N, ...)`` view of ``source``), any dtype."""
    if not source.is_contiguous():
        source, rows = source.index_select(0, rows), torch.arange(len(rows))
    n, rest = source.shape[1], source.shape[2:]
    flat = (rows.unsqueeze(1) * n + kept).view(-1)
    return source.reshape(-1, *rest).index_select(0, flat).view(*kept.shape, *rest)


def _tensor(tensor: Tensor) -> Tensor:
    """Float tensors become float32 (MuJoCo observations are float64); others keep their type."""
    return tensor.float() if tensor.is_floating_point() else tensor


def _draw_ratio(config: BCConfig, generator: torch.Generator) -> float:
    low, high = _ratio_range(config.occlusion)
    return low + (high - low) * float(torch.rand((), generator=generator))


def _noisy(prev: Tensor, config: BCConfig, generator: torch.Generator) -> Tensor:
    prev = prev.float()
    return prev + torch.randn(prev.shape, generator=generator) * config.prev_action_noise


# dtypes that torch.from_numpy views and index_select takes
_VIEWABLE = frozenset(map(np.dtype, ["?", "u1", "i1", "i2", "i4", "i8", "f2", "f4", "f8"]))


def _view(values: np.ndarray | StackedFrames | Tensor) -> Tensor | None:
    """``values`` as a tensor sharing its memory, or ``None`` (then numpy indexes it)."""
    if isinstance(values, Tensor):
        return values
    if not isinstance(values, np.ndarray) or values.dtype not in _VIEWABLE:
        return None
    if any(s < 0 for s in values.strides):
        return None
    with warnings.catch_warnings():  # a read-only array: it is only ever read here
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(values)


class _Column:
    """One array of the dataset, indexed batch by batch (first axis: the sample) through a
    tensor view of it, or numpy's indexing for a dtype torch cannot view; float arrays come
    out float32 (``_tensor``) unless ``keep_dtype``."""

    def __init__(self, values: np.ndarray | StackedFrames, keep_dtype: bool = False) -> None:
        self.values, self.view, self.keep_dtype = values, _view(values), keep_dtype
        self.frames = values if isinstance(values, StackedFrames) else None
        # a StackedFrames answers .shape itself (np.shape would materialise it)
        self.shape = tuple(values.shape) if hasattr(values, "shape") else np.shape(values)

    def _out(self, tensor: Tensor) -> Tensor:
        return tensor if self.keep_dtype else _tensor(tensor)

    def take(self, index: Tensor) -> Tensor:
        if self.frames is not None:
            return self._out(self.frames.take(index))
        if self.view is None:
            return self._out(torch.as_tensor(self.values[index.numpy()]))
        return self._out(self.view.index_select(0, index))

    def take_tokens(self, index: Tensor, kept: Tensor) -> Tensor:
        """Only the tokens ``kept`` ``(batch, keep)`` of the samples ``index``."""
        if self.frames is not None:
            return self._out(self.frames.take_tokens(index, kept))
        if self.view is None:
            tokens = torch.as_tensor(self.values[index.numpy()])
            return self._out(_take_tokens(tokens, torch.arange(len(index)), kept))
        return self._out(_take_tokens(self.view, index, kept))


class BatchSampler:
    """The batches :func:`train_bc` fits, augmented as :class:`BCConfig` asks.

    Every batch draws from ``generator`` in a fixed order: the occlusion ratio (one uniform
    draw, even when ``occlusion`` is ``0``), then the previous-action noise (Dict
    observations with ``prev_action_noise``), then the kept tokens (as
    :func:`occlude_tokens` draws them, when the ratio drops any), so a seed fixes the batches.
    The dataset is viewed as tensors once (no copy), a batch is one ``index_select`` per
    entry, and occluded tokens are taken straight from the dataset: only the kept ones are
    copied, in their own dtype (``uint8`` screens stay ``uint8``; the student converts them).
    Float entries and targets come out float32; the actions keep their dtype.

    Example:
        >>> obs = np.arange(4 * 6 * 2, dtype=np.uint8).reshape(4, 6, 2)
        >>> data = BCDataset(obs, np.zeros((4, 1)), np.zeros(4))
        >>> sampler = BatchSampler(data, BCConfig(batch_size=2, occlusion=0.5))
        >>> g = torch.Generator().manual_seed(0)
        >>> [(o.shape, o.dtype) for o, _, _ in sampler.epoch(np.random.default_rng(0), g)]
        [(torch.Size([2, 3, 2]), torch.uint8), (torch.Size([2, 3, 2]), torch.uint8)]
    """

    def __init__(self, data: BCDataset, config: BCConfig) -> None:
        self.data, self.config = data, config
        self.is_dict = isinstance(data.obs, dict)
        entries = data.obs if isinstance(data.obs, dict) else {"": data.obs}
        self.obs = {k: _Column(v) for k, v in entries.items()}
        self.targets = _Column(data.targets)
        self.actions = _Column(data.actions, keep_dtype=True)

    def _tokens(self, key: str, index: Tensor, ratio: float, generator: torch.Generator) -> Tensor:
        column = self.obs[key]
        kept = _kept_tokens(len(index), column.shape[1], ratio, generator)
        return column.take(index) if kept is None else column.take_tokens(index, kept)

    def batch(self, index: Tensor, generator: torch.Generator) -> tuple[Any, Tensor, Tensor]:
        """The augmented batch of the samples ``index`` (int64): ``(obs, targets, actions)``."""
        config = self.config
        ratio = _draw_ratio(config, generator)
        if not self.is_dict:
            obs: Any = (
                self._tokens("", index, ratio, generator) if ratio else self.obs[""].take(index)
            )
        else:
            occluded = config.tokens_key if ratio and config.tokens_key else None
            obs = {k: None if k == occluded else c.take(index) for k, c in self.obs.items()}
            if config.prev_action_noise and config.prev_action_key in obs:
                key = config.prev_action_key
                obs[key] = _noisy(obs[key], config, generator)
            if occluded is not None:
                obs[occluded] = self._tokens(occluded, index, ratio, generator)
        return obs, self.targets.take(index), self.actions.take(index)

    def __len__(self) -> int:
        """Batches in one :meth:`epoch`."""
        samples = min(len(self.data), self.config.epoch_samples or len(self.data))
        return -(-samples // self.config.batch_size)

    def epoch(
        self, rng: np.random.Generator, generator: torch.Generator
    ) -> Iterator[tuple[Any, Tensor, Tensor]]:
        """One pass over the data in a fresh shuffled order (``rng.permutation``), or over its
        first ``epoch_samples`` samples when that is set and smaller than the data."""
        order = torch.from_numpy(rng.permutation(len(self.data)))
        if self.config.epoch_samples:
            order = order[: self.config.epoch_samples]
        for start in range(0, len(order), self.config.batch_size):
            yield self.batch(order[start : start + self.config.batch_size], generator)


def _check_keys(data: BCDataset, config: BCConfig) -> None:
    """Fail loudly instead of silently skipping an augmentation the config asks for."""
    entries = list(data.obs) if isinstance(data.obs, dict) else None
    if config.prev_action_noise and (entries is None or config.prev_action_key not in entries):
        raise ValueError(
            f"prev_action_noise needs a Dict observation with {config.prev_action_key!r}, "
            f"got entries {entries}"
        )
    occludes = _ratio_range(config.occlusion)[1] > 0
    if occludes and entries is not None and config.tokens_key not in entries:
        raise ValueError(
            f"occlusion of a Dict observation needs tokens_key among {entries}, got "
            f"{config.tokens_key!r}"
        )


def train_bc(
    student: nn.Module,
    data: BCDataset,
    config: BCConfig,
    callback: Callable[[dict[str, float]], bool | None] | None = None,
    checkpoint: str | Path | None = None,
) -> list[dict[str, float]]:
    """Fit ``student`` (``obs -> outputs``) to the teacher with Adam; one history row per epoch.

    Every batch is augmented first (previous-action noise, token occlusion; see
    :class:`BCConfig`). Shuffling, noise and occlusion draw from generators seeded with
    ``config.seed``; the student's initial weights are the caller's business.

    Args:
        student: maps a batch of observations (tensor or Dict of tensors) to outputs of the
            targets' shape (``"mse"``) or to logits (``"cross_entropy"``, ``"kl"``).
        data: from :func:`~attn_policies.algorithms.bc_collect.collect_rollouts` or any
            :class:`~attn_policies.algorithms.bc_data.BCDataset`.
        config: the settings.
        callback: ``callback(row)`` after every epoch (``row = {"epoch", "loss"}``, the mean
            batch loss); returning ``False`` stops training. The student is in train mode.
        checkpoint: a file saved after every epoch (once its callback has returned): the
            student, Adam's state, the shuffling/noise/occlusion streams and the history. If it
            exists at the start, training continues from it, and the remaining epochs match an
            uninterrupted run's bit for bit (read with ``torch.load(weights_only=True)``).

    Returns:
        The history rows (a resumed run's include the earlier epochs). The student is left in
        eval mode.

    Raises:
        ValueError: an empty dataset, or an augmentation whose Dict entry is missing.
    """
    if len(data) == 0:
        raise ValueError("the dataset is empty")
    _check_keys(data, config)
    generator = torch.Generator().manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    optimizer = torch.optim.Adam(student.parameters(), lr=config.learning_rate)
    history: list[dict[str, float]] = []
    if checkpoint is not None and Path(checkpoint).exists():
        state = load_tensors(checkpoint)  # zip sizes checked first
        student.load_state_dict(state["student"])
        optimizer.load_state_dict(state["optimizer"])
        generator.set_state(state["generator"])
        rng.bit_generator.state = parse_json(state["rng"], f"{checkpoint}: rng")
        history = parse_json(state["history"], f"{checkpoint}: history")
    student.train()
    sampler = BatchSampler(data, config)
    for epoch in range(len(history) + 1, config.epochs + 1):
        losses = []
        for batch, (obs, targets, actions) in enumerate(sampler.epoch(rng, generator)):
            lr = config.learning_rate * lr_factor(config, epoch - 1 + batch / len(sampler))
            for group in optimizer.param_groups:
                group["lr"] = lr
            out = student(obs)
            if config.loss == "mse":
                loss = F.mse_loss(out, targets.reshape(out.shape))
            elif config.loss == "kl":
                teacher = F.log_softmax(targets.reshape(out.shape) / config.temperature, dim=-1)
                loss = F.kl_div(
                    F.log_softmax(out, dim=-1), teacher, log_target=True, reduction="batchmean"
                )
            else:
                loss = F.cross_entropy(out, actions.long().reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            if config.grad_clip:
                nn.utils.clip_grad_norm_(student.parameters(), config.grad_clip)
            optimizer.step()
            losses.append(loss.item())
        row = {"epoch": float(epoch), "loss": float(np.mean(losses))}
        history.append(row)
        stop = callback is not None and callback(row) is False
        if checkpoint is not None:
            state = {
                "student": student.state_dict(),
                "optimizer": optimizer.state_dict(),
                "generator": generator.get_state(),
                "rng": json.dumps(rng.bit_generator.state),
                "history": json.dumps(history),
            }
            with atomic_path(checkpoint) as tmp:
                torch.save(state, tmp)
        if stop:
            break
    student.eval()
    return history
