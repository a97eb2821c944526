"""Tests for zoo.trainers.classifier_trainer (``algo: classifier``, the E1 MNIST runs)."""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from _metrics import metrics_match_own_table

import zoo
from attn_policies.relational import CNNMNIST, RelationalMNIST
from zoo.config import ConfigError

# The mnist config's smoke settings, in a file of our own for the error cases.
SMALL: dict[str, Any] = {
    "algo": "classifier",
    "model": "cnn_mnist",
    "dataset": {"name": "synthetic", "n_train": 64, "n_test": 40},
    "transform": {"max_shift": 2},
    "iterations": 4,
    "batch_size": 8,
    "eval_every": 2,
    "test_size": 20,
}


def write_config(tmp_path: Path, body: dict[str, Any]) -> Path:
    path = tmp_path / "clf.yml"
    path.write_text(yaml.safe_dump({"clf": body}, sort_keys=False))
    return path


def read_history(run_dir: Path) -> list[dict[str, float]]:
    with (run_dir / "history.csv").open() as fh:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(fh)]


def test_mnist_smoke_cnn_run(tmp_path: Path) -> None:
    run = zoo.train("mnist", budget="smoke", overrides={"model": "cnn"}, root=tmp_path)
    config = run.config
    assert (config.tag, config.body["model"]) == ("cnn", "cnn_mnist")
    assert run.path.parent == tmp_path / "mnist" / "cnn"
    assert run.status["state"] == "finished"
    assert run.status["num_timesteps"] == config.body["iterations"]

    history = read_history(run.path)
    iterations = config.body["iterations"]
    every = config.body["eval_every"]
    expected = sorted({*range(every, iterations + 1, every), iterations})
    assert [int(r["iteration"]) for r in history] == expected
    assert list(history[0]) == ["iteration", "loss", "train_accuracy", "test_accuracy"]
    metrics_match_own_table(run.path, ("classifier/loss", "classifier/test_accuracy"))

    state = torch.load(run.path / "model.pt", map_location="cpu", weights_only=True)
    model = CNNMNIST()
    model.load_state_dict(state)
    loaded = run.model()
    assert isinstance(loaded, CNNMNIST) and not loaded.training
    for name, value in loaded.state_dict().items():
        torch.testing.assert_close(value, state[name])

    result = run.eval
    assert result["n_test"] == config.body["test_size"]
    assert (result["experiment"], result["tag"], result["budget"]) == ("mnist", "cnn", "smoke")
    # The fixed test set: eval.json, a later evaluation and the last history row agree.
    assert zoo.evaluate(run)["test_accuracy"] == result["test_accuracy"]
    assert zoo.evaluate(str(run.path))["test_accuracy"] == result["test_accuracy"]
    assert history[-1]["test_accuracy"] == pytest.approx(result["test_accuracy"])
    assert zoo.evaluate(run, n_episodes=10)["n_test"] == 10

    with pytest.raises(ConfigError, match="finished"):
        zoo.resume(run.path)
    run.write_status(state="interrupted")
    with pytest.raises(ConfigError, match="cannot be resumed"):
        zoo.resume(run.path)


def test_relational_cell_builds_the_relational_model(tmp_path: Path) -> None:
    (run,) = zoo.load_runs("mnist", budget="smoke", overrides={"model": "relational"})
    assert run.body["model"] == "relational_mnist"
    path = write_config(tmp_path, {**SMALL, "model": "relational_mnist", "iterations": 1})
    trained = zoo.train(path, root=tmp_path / "runs")
    assert isinstance(trained.model(), RelationalMNIST)


def test_full_budget_without_data_fails_before_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no data/mnist here
    assert not Path("data/mnist").exists()
    with pytest.raises(FileNotFoundError):
        zoo.train("mnist", overrides={"model": "cnn"}, root="runs")
    with pytest.raises(FileNotFoundError):
        zoo.train_all("mnist", root="runs")
    assert list(tmp_path.iterdir()) == []


def test_callbacks_see_every_evaluation_and_can_stop(tmp_path: Path) -> None:
    seen: list[int] = []

    def hook(iteration: int, record: dict[str, float]) -> bool:
        seen.append(iteration)
        assert set(record) == {"iteration", "loss", "train_accuracy", "test_accuracy"}
        return iteration < 2  # stop after the first evaluation

    path = write_config(tmp_path, {**SMALL, "iterations": 6})
    run = zoo.train(path, root=tmp_path / "runs", callbacks=[hook])
    assert seen == [2]
    assert run.status["num_timesteps"] == 2
    assert [int(r["iteration"]) for r in read_history(run.path)] == [2]


def test_same_seed_same_run(tmp_path: Path) -> None:
    path = write_config(tmp_path, SMALL)
    a, b = (zoo.train(path, root=tmp_path / name, seed=3) for name in ("a", "b"))
    assert read_history(a.path) == read_history(b.path)
    c = zoo.train(path, root=tmp_path / "c", seed=4)
    assert read_history(c.path) != read_history(a.path)


@pytest.mark.parametrize(
    ("changes", "must_contain"),
    [
        ({"model": "cnn_mnst"}, ["'cnn_mnst'", "Did you mean 'cnn_mnist'"]),
        ({"model": None}, ["'model'"]),
        ({"model_kwargs": {"n_class": 3}}, ["'n_class'", "Did you mean 'n_classes'"]),
        ({"dataset": {"name": "synthetic", "n_trian": 5}}, ["'dataset.n_trian'", "'n_train'"]),
        ({"dataset": {"name": "cifar"}}, ["dataset.name"]),
        ({"transform": {"max_shfit": 2}}, ["'transform.max_shfit'", "Did you mean 'max_shift'"]),
        ({"iterations": 0}, ["iterations"]),
        ({"iterations": "many"}, ["'iterations'"]),
        ({"learning_rate": "fast"}, ["'learning_rate'"]),
        ({"batch_sise": 8}, ["'batch_sise'", "Did you mean 'batch_size'"]),
        ({"policy": "MlpPolicy"}, ["'policy'"]),
    ],
    ids=[
        "model",
        "no-model",
        "model-kwarg",
        "dataset-key",
        "dataset-name",
        "transform-key",
        "iterations-zero",
        "iterations-type",
        "lr-type",
        "unknown-key",
        "rl-key",
    ],
)
def test_validation_errors(
    tmp_path: Path, changes: dict[str, Any], must_contain: list[str]
) -> None:
    body = {k: v for k, v in {**SMALL, **changes}.items() if v is not None}
    with pytest.raises(ConfigError) as err:
        zoo.load_runs(write_config(tmp_path, body))
    for text in must_contain:
        assert text in str(err.value)


# --- the UCI handwritten digits (dataset: digits) ----------------------------------------------

DIGITS = {**SMALL, "dataset": {"name": "digits", "n_train": 64, "n_test": 40}}


def test_digits_run_trains_on_the_uci_split(tmp_path: Path) -> None:
    from zoo.trainers.classifier_trainer import load_data

    run = zoo.train(write_config(tmp_path, DIGITS), root=tmp_path / "runs")
    assert run.status["state"] == "finished" and run.eval["n_test"] == SMALL["test_size"]
    train_images, train_labels, test_images, test_labels = load_data(run.config)
    assert (len(train_images), len(train_labels)) == (64, 64)
    assert (len(test_images), len(test_labels)) == (40, 40)
    assert train_images.shape[1:] == (28, 28)
    (cell,) = zoo.load_runs("mnist_digits", budget="smoke", overrides={"model": "cnn"})
    assert cell.body["dataset"] == {"name": "digits", "n_test": 500}


@pytest.mark.parametrize(
    "dataset",
    [
        {"name": "digits", "n_test": 1797},
        {"name": "digits", "n_test": 0},
        {"name": "digits", "n_test": 500, "n_train": 1298},
        {"name": "digits", "n_test": "500"},
    ],
)
def test_digits_sizes_are_checked(tmp_path: Path, dataset: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="n_test"):
        zoo.load_runs(write_config(tmp_path, {**SMALL, "dataset": dataset}))


def test_digits_without_sklearn_fail_before_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(ConfigError, match=r"needs scikit-learn: pip install 'attn-zoo\[digits\]'"):
        zoo.train(write_config(tmp_path, DIGITS), root=tmp_path / "runs")
    assert not (tmp_path / "runs").exists()
