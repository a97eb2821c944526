"""Tests for attn_policies.algorithms.supervised (the E1 classifier training loop)."""

from __future__ import annotations

import ast
import copy
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import attn_policies.algorithms.supervised as supervised
from attn_envs.mnist import MNISTTransform
from attn_envs.mnist_data import synthetic_digits
from attn_policies.algorithms.supervised import (
    ClassifierConfig,
    evaluate_classifier,
    scale_images,
    train_classifier,
)
from attn_policies.relational import CNNMNIST


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    train_x, train_y = synthetic_digits(1200, seed=0)
    test_x, test_y = synthetic_digits(300, seed=1)
    return train_x, train_y, test_x, test_y


def tiny_model(seed: int = 0, n_classes: int = 10) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, n_classes), nn.LogSoftmax(dim=1))


def tiny_data(n: int = 40, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8, generator=g)
    return images, torch.randint(0, 10, (n,), generator=g)


# --- config -----------------------------------------------------------------------------------


def test_config_defaults_are_the_books() -> None:
    config = ClassifierConfig()
    assert (config.iterations, config.batch_size, config.learning_rate) == (1000, 300, 1e-3)
    assert (config.eval_every, config.test_size, config.seed) == (100, 500, 0)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("iterations", 0),
        ("iterations", 2.5),
        ("batch_size", -1),
        ("batch_size", True),
        ("eval_every", 0),
        ("test_size", 0),
        ("test_size", "500"),
        ("seed", -1),
        ("iterations", True),
        ("batch_size", 2.5),
        ("learning_rate", 0.0),
        ("learning_rate", -1e-3),
        ("learning_rate", math.nan),
        ("learning_rate", math.inf),
        ("learning_rate", "1e-3"),
    ],
)
def test_config_rejects_bad_values(field, value) -> None:
    with pytest.raises(ValueError, match=field):
        ClassifierConfig(**{field: value})


def test_config_normalises_numpy_numbers() -> None:
    config = ClassifierConfig(iterations=np.int64(5), learning_rate=np.float32(0.5))
    assert type(config.iterations) is int and type(config.learning_rate) is float


# --- the module's boundaries ------------------------------------------------------------------


def test_module_imports_neither_yaml_nor_zoo_nor_attn_envs() -> None:
    tree = ast.parse(Path(supervised.__file__).read_text())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            roots.add(node.module.split(".")[0])
    assert roots, "no imports parsed"
    assert not roots & {"yaml", "zoo", "attn_envs"}


# --- evaluate_classifier ----------------------------------------------------------------------


def test_evaluate_classifier_matches_a_direct_count() -> None:
    model = tiny_model()
    images, labels = tiny_data(53)
    x = scale_images(images)
    expected = (model(x).argmax(dim=1) == labels).float().mean().item()
    for batch_size in (7, 53, 500):
        assert evaluate_classifier(model, x, labels, batch_size=batch_size) == pytest.approx(
            expected
        )
    assert evaluate_classifier(model, x, model(x).argmax(dim=1)) == 1.0


def test_evaluate_classifier_uses_eval_mode_and_restores_it() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Dropout(0.9), nn.Linear(28 * 28, 10))
    images, _ = tiny_data(50)
    x = scale_images(images)
    model.eval()
    labels = model(x).argmax(dim=1)
    model.train()
    assert evaluate_classifier(model, x, labels) == 1.0  # dropout off while evaluating
    assert model.training
    model.eval()
    evaluate_classifier(model, x, labels)
    assert not model.training


def test_evaluate_classifier_rejects_mismatched_inputs() -> None:
    images, labels = tiny_data(10)
    with pytest.raises(ValueError, match="labels"):
        evaluate_classifier(tiny_model(), scale_images(images), labels[:5])


# --- train_classifier -------------------------------------------------------------------------


def test_history_has_a_record_per_evaluation_and_after_the_last_step() -> None:
    images, labels = tiny_data()
    config = ClassifierConfig(iterations=7, batch_size=4, eval_every=3, test_size=10)
    history = train_classifier(tiny_model(), images, labels, images, labels, config)
    assert [r["iteration"] for r in history] == [3, 6, 7]
    for record in history:
        assert set(record) == {"iteration", "loss", "train_accuracy", "test_accuracy"}
        assert record["loss"] > 0 and 0 <= record["train_accuracy"] <= 1
        assert record["test_accuracy"] * 10 == pytest.approx(round(record["test_accuracy"] * 10))


def test_loss_is_the_nll_of_the_models_log_probabilities() -> None:
    model = tiny_model()
    nn.init.zeros_(model[1].weight)
    nn.init.zeros_(model[1].bias)  # uniform log-probabilities before the first step
    images, labels = tiny_data()
    config = ClassifierConfig(iterations=1, batch_size=8, eval_every=1, test_size=10)
    (record,) = train_classifier(model, images, labels, images, labels, config)
    assert record["loss"] == pytest.approx(math.log(10), rel=1e-6)


def test_training_changes_the_weights_and_is_seeded() -> None:
    images, labels = tiny_data()
    config = ClassifierConfig(iterations=5, batch_size=8, eval_every=5, test_size=20, seed=3)
    a, b, c = tiny_model(), tiny_model(), tiny_model()
    start = copy.deepcopy(a.state_dict())
    history_a = train_classifier(a, images, labels, images, labels, config)
    history_b = train_classifier(b, images, labels, images, labels, config)
    assert history_a == history_b
    for key, value in a.state_dict().items():
        torch.testing.assert_close(value, b.state_dict()[key], rtol=0, atol=0)
    assert not torch.equal(a[1].weight, start["1.weight"])
    other = ClassifierConfig(iterations=5, batch_size=8, eval_every=5, test_size=20, seed=4)
    train_classifier(c, images, labels, images, labels, other)
    assert not torch.equal(a[1].weight, c[1].weight)


def test_transform_gets_raw_batches_and_the_test_set_is_transformed_once() -> None:
    images, labels = tiny_data(60)
    calls: list[tuple[int, torch.dtype]] = []

    def transform(batch: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        assert isinstance(generator, torch.Generator)
        calls.append((len(batch), batch.dtype))
        return scale_images(batch)

    config = ClassifierConfig(iterations=6, batch_size=5, eval_every=2, test_size=25)
    train_classifier(tiny_model(), images, labels, images, labels, config, transform=transform)
    assert calls == [(25, torch.uint8)] + [(5, torch.uint8)] * 6


def test_test_set_is_fixed_distinct_images() -> None:
    """With a perfect model, test accuracy is exact: every test image is one of the originals."""
    images, labels = tiny_data(30)
    seen: list[torch.Tensor] = []

    def transform(batch, generator):
        seen.append(batch.clone())
        return scale_images(batch)

    config = ClassifierConfig(iterations=1, batch_size=2, eval_every=1, test_size=30)
    train_classifier(tiny_model(), images, labels, images, labels, config, transform=transform)
    test_batch = seen[0]
    match = (test_batch[:, None] == images[None]).flatten(2).all(dim=2)
    assert match.sum(dim=1).eq(1).all() and match.sum(dim=0).eq(1).all()  # a permutation


def test_callback_returning_false_stops_training() -> None:
    images, labels = tiny_data()
    config = ClassifierConfig(iterations=50, batch_size=4, eval_every=5, test_size=10)
    seen = []

    def stop_at_15(iteration, record):
        seen.append((iteration, dict(record)))
        return False if iteration == 15 else None

    steps = []

    def counting(batch, generator):
        steps.append(len(batch))
        return scale_images(batch)

    history = train_classifier(
        tiny_model(), images, labels, images, labels, config, counting, stop_at_15
    )
    assert [r["iteration"] for r in history] == [5, 10, 15]
    assert [it for it, _ in seen] == [5, 10, 15]
    assert seen[-1][1] == history[-1]
    assert len(steps) == 1 + 15  # the test set, then exactly 15 training batches


def test_callback_returning_none_or_zero_does_not_stop() -> None:
    images, labels = tiny_data()
    config = ClassifierConfig(iterations=6, batch_size=4, eval_every=2, test_size=10)
    for result in (None, 0, True):
        history = train_classifier(
            tiny_model(),
            images,
            labels,
            images,
            labels,
            config,
            callback=lambda i, r, result=result: result,
        )
        assert [r["iteration"] for r in history] == [2, 4, 6]


def test_train_classifier_validates_data() -> None:
    images, labels = tiny_data(20)
    config = ClassifierConfig(iterations=1, batch_size=4, test_size=21)
    with pytest.raises(ValueError, match="test_size"):
        train_classifier(tiny_model(), images, labels, images, labels, config)
    config = ClassifierConfig(iterations=1, batch_size=4, test_size=5)
    with pytest.raises(ValueError, match="train"):
        train_classifier(tiny_model(), images, labels[:10], images, labels, config)


def test_cnn_learns_synthetic_digits(digits) -> None:
    """CNNMNIST on untransformed synthetic digits: far above chance (10%) in 150 small steps.

    Measured: 0.94-0.96 test accuracy at 150 steps of 32 images (seeds 0-2), ~2 s on 1 thread.
    """
    train_x, train_y, test_x, test_y = digits
    torch.manual_seed(0)
    model = CNNMNIST()
    config = ClassifierConfig(iterations=150, batch_size=32, eval_every=50, test_size=300)
    history = train_classifier(model, train_x, train_y, test_x, test_y, config)
    assert history[0]["test_accuracy"] < history[-1]["test_accuracy"]
    assert history[-1]["loss"] < 0.5 * history[0]["loss"]
    assert history[-1]["test_accuracy"] >= 0.8
    assert history[-1]["train_accuracy"] >= 0.8


def test_cnn_gets_above_chance_on_transformed_digits(digits) -> None:
    """With the full E1 transform the task is much harder; a short run still beats chance."""
    train_x, train_y, test_x, test_y = digits
    torch.manual_seed(0)
    model = CNNMNIST()
    config = ClassifierConfig(iterations=300, batch_size=32, eval_every=300, test_size=300)
    (record,) = train_classifier(
        model, train_x, train_y, test_x, test_y, config, transform=MNISTTransform()
    )
    # Measured: 0.43 and 0.46 (seeds 0, 1; loss 2.30 -> 1.4), ~5 s on 1 thread.
    assert record["test_accuracy"] >= 0.3
