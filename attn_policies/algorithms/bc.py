"""Behaviour cloning (seed 001, E4 Ant and E5 Puzzle Pong): a student imitates a teacher.

Read top to bottom: :func:`collect_rollouts` plays a teacher in a vector env and records what
the student will see with the teacher's targets; :func:`train_bc` fits the student with Adam,
gradient clipping and, per batch, the two augmentations of seed 001:

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

Long runs resume: :class:`RolloutCollector` records the teacher a chunk at a time (each chunk
a :meth:`BCDataset.save` file), and ``train_bc(..., checkpoint=FILE)`` saves the student, the
optimizer and the sampling streams after every epoch and continues from them.

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
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attn_policies.algorithms.frame_store import FrameStore, StackedFrames
from attn_policies.atomic import atomic_path
from attn_policies.checks import require_int, require_sizes

__all__ = [
    "BCConfig",
    "BCDataset",
    "BatchSampler",
    "DatasetBuffer",
    "RolloutCollector",
    "as_teacher",
    "collect_rollouts",
    "lr_factor",
    "occlude_tokens",
    "sample_logits",
    "sb3_teacher",
    "train_bc",
]

Obs = np.ndarray | dict[str, np.ndarray]


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
        arrays = {"targets": self.targets, "actions": self.actions}
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
        self._obs: Obs | None = None
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
        if isinstance(self._obs, dict):
            stores = {k: v for k, v in self._obs.items() if isinstance(v, FrameStore)}
            for key, value in part.obs.items():  # arrays first: a store cannot take back rows
                if key not in stores:
                    self._obs[key][self.size : end] = value
            for key, store in stores.items():
                store.append(part.obs[key])
        else:
            self._obs[self.size : end] = part.obs
        self._targets[self.size : end] = part.targets
        self._actions[self.size : end] = part.actions
        self.size = end

    @property
    def data(self) -> BCDataset:
        """The samples appended so far, as views of the buffer."""
        if self._obs is None:
            raise ValueError("the buffer is empty")
        n = self.size
        obs: Obs = (
            {k: v.data() if isinstance(v, FrameStore) else v[:n] for k, v in self._obs.items()}
            if isinstance(self._obs, dict)
            else self._obs[:n]
        )
        return BCDataset(obs, self._targets[:n], self._actions[:n])


Teacher = Callable[[Obs], tuple[np.ndarray, np.ndarray]]


def sb3_teacher(model: Any) -> Teacher:
    """An SB3 model as a teacher: its deterministic actions and its logits or action means.

    The targets come from ``model.policy.get_distribution``: ``logits`` for a categorical
    distribution (Discrete), ``mean`` for a Gaussian (Box). The actions are what
    ``model.predict(obs, deterministic=True)`` returns (clipped to the bounds for Box).

    Args:
        model: a trained ``stable_baselines3`` ``BaseAlgorithm`` (PPO, A2C, ...).
    """

    def act(obs: Obs) -> tuple[np.ndarray, np.ndarray]:
        with torch.no_grad():
            tensor, _ = model.policy.obs_to_tensor(obs)
            dist = model.policy.get_distribution(tensor).distribution
            target = dist.logits if hasattr(dist, "logits") else dist.mean
        actions, _ = model.predict(obs, deterministic=True)
        return actions, target.cpu().numpy()

    return act


def as_teacher(teacher: Teacher | Any) -> Teacher:
    """``teacher`` as a callable ``obs -> (actions, targets)`` (SB3 models are wrapped)."""
    if hasattr(teacher, "policy") and hasattr(teacher, "predict"):
        return sb3_teacher(teacher)
    if not callable(teacher):
        raise TypeError(
            f"teacher must be an SB3 model or a callable obs -> (actions, targets), got "
            f"{type(teacher).__name__}"
        )
    return teacher


class RolloutCollector:
    """Plays a teacher in an SB3 ``VecEnv``, a chunk of steps at a time.

    The first :meth:`collect` resets the env; later ones continue its episodes, so chunks of
    ``n`` and ``m`` steps hold the same samples as one call of ``n + m``. Episodes restart as
    the ``VecEnv`` resets them. The env's observation is what the student will see (e.g. with
    the ``"prev_action"`` entry of ``attn_envs.PreviousActionObservation``, which then holds
    the teacher's ``a_{t-1}``); ``teacher_obs`` maps it to what the teacher was trained on.

    Args:
        teacher: an SB3 model or a callable ``obs -> (actions, targets)`` on a batch.
        env: the ``VecEnv`` (seed it before for reproducible data).
        student_obs: maps the env's observation to the student's (default: the same).
        teacher_obs: maps the env's observation to the teacher's (default: the same).
        actor: ``student_obs -> actions`` of the policy that steps the env instead of the
            teacher, which still labels every step (DAgger's relabelled states: the samples
            then cover the states the student itself reaches).
        sample_teacher: a generator: the env is stepped with actions drawn from the softmax
            of the teacher's targets (its logits; Discrete actions) instead of its
            deterministic actions, which stay the labels. A deterministic teacher in a
            deterministic game replays the same states (E5's RAM teacher: 100k steps, 3.6k
            distinct screens); a sampling one visits the states of a stochastic expert.

    Example:
        >>> from stable_baselines3.common.env_util import make_vec_env
        >>> env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
        >>> push_right = lambda obs: (np.ones(len(obs), np.int64), np.ones((len(obs), 2)))
        >>> collector = RolloutCollector(push_right, env)
        >>> [len(collector.collect(n)) for n in (3, 5)]  # samples: steps x envs
        [6, 10]
    """

    def __init__(
        self,
        teacher: Teacher | Any,
        env: Any,
        student_obs: Callable[[Obs], Obs] | None = None,
        teacher_obs: Callable[[Obs], Obs] | None = None,
        actor: Callable[[Obs], np.ndarray] | None = None,
        sample_teacher: np.random.Generator | None = None,
    ) -> None:
        if actor is not None and sample_teacher is not None:
            raise ValueError("give an actor or sample_teacher, not both")
        self.act, self.env = as_teacher(teacher), env
        self.student_obs, self.teacher_obs, self.actor = student_obs, teacher_obs, actor
        self.sample_teacher = sample_teacher
        self._obs: Obs | None = None

    def collect(self, n_steps: int) -> BCDataset:
        """The next ``n_steps`` steps of every env: ``n_steps * num_envs`` samples.

        Raises:
            ValueError: ``n_steps < 1``.
        """
        require_int(n_steps, "n_steps")
        obs = self.env.reset() if self._obs is None else self._obs
        seen: list[Obs] = []
        targets: list[np.ndarray] = []
        actions: list[np.ndarray] = []
        for _ in range(n_steps):
            action, target = self.act(self.teacher_obs(obs) if self.teacher_obs else obs)
            student = self.student_obs(obs) if self.student_obs else obs
            seen.append(student)
            targets.append(np.asarray(target, dtype=np.float32))
            actions.append(np.asarray(action))
            if self.actor is not None:
                action = self.actor(student)
            elif self.sample_teacher is not None:
                action = sample_logits(targets[-1], self.sample_teacher)
            obs, _, _, _ = self.env.step(action)
        self._obs = obs
        if isinstance(seen[0], dict):
            stacked: Obs = {k: np.concatenate([o[k] for o in seen]) for k in seen[0]}
        else:
            stacked = np.concatenate(seen)
        return BCDataset(stacked, np.concatenate(targets), np.concatenate(actions))


def sample_logits(logits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One action per row drawn from ``softmax(logits)`` (Gumbel-max: one uniform per logit).

    Example:
        >>> logits = np.log(np.array([[0.9, 0.1, 0.0], [0.0, 0.0, 1.0]]) + 1e-12)
        >>> draws = sample_logits(np.repeat(logits, 1000, axis=0), np.random.default_rng(0))
        >>> np.bincount(draws[:1000], minlength=3).tolist()[2], set(draws[1000:].tolist())
        (0, {2})
    """
    gumbel = -np.log(-np.log(rng.random(logits.shape)))
    return np.argmax(logits + gumbel, axis=-1)


def collect_rollouts(
    teacher: Teacher | Any,
    env: Any,
    n_steps: int,
    student_obs: Callable[[Obs], Obs] | None = None,
    teacher_obs: Callable[[Obs], Obs] | None = None,
) -> BCDataset:
    """Play ``teacher`` in an SB3 ``VecEnv`` for ``n_steps`` steps of every env, from a reset:
    one :meth:`RolloutCollector.collect` (see there for the arguments).

    Raises:
        ValueError: ``n_steps < 1``.
    """
    return RolloutCollector(teacher, env, student_obs, teacher_obs).collect(n_steps)


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


def _view(values: Any) -> Tensor | None:
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

    def __init__(self, values: Any, keep_dtype: bool = False) -> None:
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
        data: from :func:`collect_rollouts` or any :class:`BCDataset`.
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
        state = torch.load(checkpoint, weights_only=True)
        student.load_state_dict(state["student"])
        optimizer.load_state_dict(state["optimizer"])
        generator.set_state(state["generator"])
        rng.bit_generator.state = json.loads(state["rng"])
        history = json.loads(state["history"])
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
