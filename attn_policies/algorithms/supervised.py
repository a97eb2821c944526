"""Supervised training of an image classifier on freshly transformed batches (experiment E1).

Seed 000, sec. 10.3 trains the relational module and a CNN baseline on MNIST digits that are
randomly shifted, rotated and sprinkled with noise anew at every iteration (listing 10.4),
then measures accuracy on 500 transformed test images (listing 10.5). This is that loop,
written top to bottom in the CleanRL spirit:

* every iteration draws ``batch_size`` random training images (with replacement, as the
  book does), transforms them with a fresh draw, and takes one Adam step on the NLL loss of
  the model's log-probabilities;
* every ``eval_every`` iterations (and after the last) it measures accuracy on a *fixed*
  test set: ``test_size`` distinct test images transformed once at the start (the book draws
  a new random test batch at each call, which makes its figure noisier).

The data transform is passed in (``transform(images, generator) -> float (B, 1, H, W)``),
e.g. :class:`attn_envs.mnist.MNISTTransform`, so this module knows nothing of the data side.
All randomness comes from generators seeded by ``config.seed``; the model's initial weights
are the caller's business (seed torch before building it).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from attn_policies.checks import require_int

__all__ = ["ClassifierConfig", "evaluate_classifier", "scale_images", "train_classifier"]

Transform = Callable[[Tensor, torch.Generator], Tensor]
Callback = Callable[[int, dict[str, float]], bool | None]


@dataclass
class ClassifierConfig:
    """Settings of :func:`train_classifier`; the defaults are the book's E1 run.

    Attributes:
        iterations: optimiser steps (the book's "epochs"; one batch each).
        batch_size: training images per step.
        learning_rate: Adam step size.
        eval_every: evaluate on the test set every this many steps (and after the last).
        test_size: distinct test images in the fixed, transformed test set.
        seed: seeds the batch sampling, the training transforms and the test set.

    Example:
        >>> ClassifierConfig(iterations=10).batch_size
        300
        >>> ClassifierConfig(batch_size=0)
        Traceback (most recent call last):
        ...
        ValueError: batch_size must be a positive integer, got 0
    """

    iterations: int = 1000
    batch_size: int = 300
    learning_rate: float = 1e-3
    eval_every: int = 100
    test_size: int = 500
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("iterations", "batch_size", "eval_every", "test_size", "seed"):
            value = getattr(self, name)
            value = int(value) if isinstance(value, np.integer) else value
            setattr(self, name, require_int(value, name, minimum=0 if name == "seed" else 1))
        lr = self.learning_rate
        if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not 0 < lr < math.inf:
            raise ValueError(f"learning_rate must be a finite number > 0, got {lr!r}")
        self.learning_rate = float(lr)


def scale_images(images: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """The identity transform: ``uint8 (B, H, W)`` -> float ``(B, 1, H, W)`` in ``[0, 1]``.

    Example:
        >>> scale_images(torch.full((2, 28, 28), 255, dtype=torch.uint8)).shape
        torch.Size([2, 1, 28, 28])
    """
    x = torch.as_tensor(images)
    x = x.float() / 255.0 if x.dtype == torch.uint8 else x.float()
    return x.unsqueeze(1) if x.ndim == 3 else x


def _stream(seed: int, stream: int) -> torch.Generator:
    """An independent CPU generator per ``(seed, stream)`` (no overlap between seeds)."""
    state = np.random.SeedSequence([seed, stream]).generate_state(2, np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def evaluate_classifier(
    model: nn.Module, images: Tensor, labels: Tensor, batch_size: int = 500
) -> float:
    """Fraction of ``images`` whose arg-max class is ``labels`` (evaluation mode, no grad).

    Args:
        model: maps float ``(B, ...)`` to per-class scores ``(B, n_classes)``.
        images: model-ready float inputs (already transformed).
        labels: ``(N,)`` integer classes.
        batch_size: images per forward pass.

    Returns:
        Accuracy in ``[0, 1]``. The model's train/eval mode is restored afterwards.

    Example:
        >>> model = nn.Linear(4, 2)  # always predicts class 0
        >>> _ = nn.init.zeros_(model.weight), nn.init.constant_(model.bias, 0.0)
        >>> model.bias.data[0] = 1.0
        >>> evaluate_classifier(model, torch.rand(4, 4), torch.tensor([0, 0, 1, 0]))
        0.75
    """
    labels = torch.as_tensor(labels)
    if len(images) != len(labels) or len(images) == 0:
        raise ValueError(f"need as many labels as images (> 0), got {len(images)}, {len(labels)}")
    was_training, device = model.training, _device(model)
    model.eval()
    correct = 0
    for start in range(0, len(images), batch_size):
        x = images[start : start + batch_size].to(device)
        y = labels[start : start + batch_size].to(device)
        correct += int((model(x).argmax(dim=1) == y).sum())
    model.train(was_training)
    return correct / len(images)


def fixed_test_set(
    test_images: np.ndarray | Tensor,
    test_labels: np.ndarray | Tensor,
    config: ClassifierConfig,
    transform: Transform = scale_images,
) -> tuple[Tensor, Tensor]:
    """The fixed test set of a run: ``test_size`` distinct images, transformed once.

    Seeded by ``config.seed`` on a stream of its own, so evaluating a saved model later
    scores it on exactly the images :func:`train_classifier` reported.
    """
    test_images = torch.as_tensor(test_images)
    test_labels = torch.as_tensor(test_labels).long()
    test_rng = _stream(config.seed, 0)
    index = torch.randperm(len(test_images), generator=test_rng)[: config.test_size]
    return transform(test_images[index], test_rng), test_labels[index]


def train_classifier(
    model: nn.Module,
    train_images: np.ndarray | Tensor,
    train_labels: np.ndarray | Tensor,
    test_images: np.ndarray | Tensor,
    test_labels: np.ndarray | Tensor,
    config: ClassifierConfig | None = None,
    transform: Transform = scale_images,
    callback: Callback | None = None,
) -> list[dict[str, float]]:
    """Train ``model`` with Adam on NLL loss, one freshly transformed random batch per step.

    Args:
        model: maps float ``(B, 1, H, W)`` to log-probabilities ``(B, n_classes)``, e.g.
            :class:`attn_policies.relational.RelationalMNIST` or ``CNNMNIST``.
        train_images: raw training images, e.g. ``uint8 (N, 28, 28)`` (array or tensor).
        train_labels: ``(N,)`` integer classes.
        test_images: raw test images (``test_size`` of them are drawn without replacement).
        test_labels: their classes.
        config: :class:`ClassifierConfig` (default: the book's 1000 x 300, lr 1e-3).
        transform: ``transform(images, generator) -> float (B, 1, H, W)``, applied to the raw
            images of every batch (with the training generator) and once to the test set
            (with its own generator); e.g. ``attn_envs.mnist.MNISTTransform()``. The default
            :func:`scale_images` only scales ``uint8`` to ``[0, 1]``.
        callback: ``callback(iteration, record)`` after every evaluation, with the record
            just appended to the history; returning ``False`` (not merely falsy) stops
            training there, e.g. to honour Ctrl-C or a time budget. Checkpoint from it.

    Returns:
        History, one record per evaluation: ``iteration``, ``loss`` and ``train_accuracy``
        (means over the steps since the previous record) and ``test_accuracy``.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> model = nn.Sequential(nn.Flatten(), nn.Linear(16, 3), nn.LogSoftmax(dim=1))
        >>> images = torch.randint(0, 256, (30, 4, 4), dtype=torch.uint8)
        >>> labels = torch.randint(0, 3, (30,))
        >>> config = ClassifierConfig(iterations=4, batch_size=8, eval_every=2, test_size=10)
        >>> history = train_classifier(model, images, labels, images, labels, config)
        >>> [record["iteration"] for record in history], sorted(history[0])
        ([2, 4], ['iteration', 'loss', 'test_accuracy', 'train_accuracy'])
    """
    config = ClassifierConfig() if config is None else config
    device = _device(model)
    train_images, train_labels = torch.as_tensor(train_images), torch.as_tensor(train_labels).long()
    test_images, test_labels = torch.as_tensor(test_images), torch.as_tensor(test_labels).long()
    for name, images, labels in (
        ("train", train_images, train_labels),
        ("test", test_images, test_labels),
    ):
        if len(images) != len(labels) or len(images) == 0:
            raise ValueError(
                f"{name}: need as many labels as images (> 0), got {len(images)}, {len(labels)}"
            )
    if config.test_size > len(test_images):
        raise ValueError(f"test_size {config.test_size} exceeds the {len(test_images)} test images")

    test_x, test_y = fixed_test_set(test_images, test_labels, config, transform)
    train_rng = _stream(config.seed, 1)

    optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate)
    loss_fn = nn.NLLLoss()
    history: list[dict[str, float]] = []
    losses: list[float] = []
    hits = seen = 0

    model.train()
    for iteration in range(1, config.iterations + 1):
        # A fresh random batch, freshly transformed.
        batch = torch.randint(0, len(train_images), (config.batch_size,), generator=train_rng)
        x = transform(train_images[batch], train_rng).to(device)
        y = train_labels[batch].to(device)

        log_probs = model(x)
        loss = loss_fn(log_probs, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        losses.append(loss.item())
        hits += int((log_probs.detach().argmax(dim=1) == y).sum())
        seen += len(y)

        if iteration % config.eval_every == 0 or iteration == config.iterations:
            record = {
                "iteration": iteration,
                "loss": float(np.mean(losses)),
                "train_accuracy": hits / seen,
                "test_accuracy": evaluate_classifier(model, test_x, test_y),
            }
            history.append(record)
            losses, hits, seen = [], 0, 0
            if callback is not None and callback(iteration, record) is False:
                break
    return history
