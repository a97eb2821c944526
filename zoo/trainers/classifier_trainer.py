"""Supervised runs (``algo: classifier``): E1, the relational module vs a CNN on transformed MNIST.

Keys besides the common ones: :class:`ClassifierKeys` (their table: ``docs/trainer_keys.md``).

``dataset.name: mnist`` reads the IDX files from ``root`` (``download: true`` fetches them
where a network exists); ``synthetic`` draws ``n_train``/``n_test`` digit-like images the
project generates, so tests and smoke runs never download anything; ``digits`` is real
handwriting offline, the 1,797 UCI digits that ship with scikit-learn upscaled to 28x28
(:func:`attn_envs.mnist_data.uci_digits`: ``n_test`` held out, the rest, or its first
``n_train``, to train). The run folder holds
``model.pt`` (a state dict, loaded with ``weights_only=True``), ``metrics.csv``
(:mod:`zoo.metrics`), ``history.csv`` and
``eval.json`` (test accuracy on the fixed transformed test set).
"""

from __future__ import annotations

import csv
import dataclasses
import inspect
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from attn_policies.algorithms.supervised import (
    ClassifierConfig,
    evaluate_classifier,
    fixed_test_set,
    train_classifier,
)
from attn_policies.atomic import open_append
from attn_policies.catalog import import_object
from zoo import progress
from zoo.config_checks import ConfigError, RunConfig, nearest
from zoo.metrics import CLASSIFIER_METRICS, MetricsLogger, renamed
from zoo.registry import resolve_module_builder
from zoo.trainers import keys
from zoo.trainers.base import load_state_dict, save_state_dict
from zoo.trainers.contract import KeyTypes, RunHandle, register
from zoo.trainers.keys import key

if TYPE_CHECKING:
    from attn_envs.mnist import MNISTTransform

MODELS: dict[str, str] = {
    "relational_mnist": "attn_policies.relational:RelationalMNIST",
    "cnn_mnist": "attn_policies.relational:CNNMNIST",
}


@dataclass(frozen=True)
class ClassifierKeys:
    """The keys of ``algo: classifier`` runs (defaults of the training loop's from
    :class:`~attn_policies.algorithms.supervised.ClassifierConfig`)."""

    model: str = key(
        doc="`relational_mnist`, `cnn_mnist` or an import path to a torch module class",
        required=True,
    )
    model_kwargs: dict[str, Any] = key({}, "the model's kwargs")
    dataset: dict[str, Any] = key(
        {"name": "mnist"},
        "`{name: mnist, root: data/mnist, download: false}`, `{name: synthetic, n_train, "
        "n_test}` (generated: never downloads) or `{name: digits, n_test: 500}` (UCI digits)",
    )
    transform: dict[str, Any] = key(
        {}, "MNISTTransform fields, e.g. `{max_shift: 6, max_rotation: 30.0, n_spots: [10, 5.0]}`"
    )
    iterations: int = key(ClassifierConfig.iterations, "Adam steps")
    batch_size: int = key(ClassifierConfig.batch_size, "images per step")
    learning_rate: float = key(ClassifierConfig.learning_rate, "Adam's step size")
    eval_every: int = key(ClassifierConfig.eval_every, "steps between test accuracies")
    test_size: int = key(ClassifierConfig.test_size, "images of the periodic tests")
    torch_threads: int | None = key(None, "torch threads (null: one)")


logger = logging.getLogger(__name__)

DATASET_KEYS = {"name", "root", "download", "n_train", "n_test"}


def _model_class(run: RunConfig) -> type[nn.Module]:
    name = str(run.body.get("model") or "")
    if name in MODELS:
        return import_object(MODELS[name])
    if "." in name or ":" in name:
        try:  # a torch module class of an allowed package (zoo.registry), nothing else
            return resolve_module_builder(name, "model")
        except ValueError as err:
            raise ConfigError(f"{run.name}: 'model': {err}") from None
    raise ConfigError(
        f"{run.name}: unknown model {name!r}.{nearest(name, MODELS)} Known: "
        f"{', '.join(MODELS)}, or an import path"
    )


def classifier_config(run: RunConfig) -> ClassifierConfig:
    fields = {f.name for f in dataclasses.fields(ClassifierConfig)} - {"seed"}
    kwargs = {k: run.body[k] for k in fields if k in run.body}
    try:
        return ClassifierConfig(seed=run.seed, **kwargs)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{run.name}: {err}") from None


def make_transform(run: RunConfig) -> MNISTTransform:
    from attn_envs.mnist import MNISTTransform

    raw = dict(run.body.get("transform") or {})
    if "n_spots" in raw and isinstance(raw["n_spots"], list):
        raw["n_spots"] = tuple(raw["n_spots"])
    names = [f.name for f in dataclasses.fields(MNISTTransform)]
    for entry in raw:
        if entry not in names:
            raise ConfigError(
                f"{run.name}: unknown key 'transform.{entry}'.{nearest(entry, names)}"
            )
    return MNISTTransform(**raw)


def load_data(run: RunConfig) -> tuple[Any, Any, Any, Any]:
    from attn_envs import mnist_data as mnist

    spec = dict(keys.value(ClassifierKeys, run, "dataset"))
    if spec.get("name") == "synthetic":
        train = mnist.synthetic_digits(int(spec.get("n_train", 10_000)), seed=run.seed)
        test = mnist.synthetic_digits(int(spec.get("n_test", 2_000)), seed=run.seed + 1)
        return (*train, *test)
    if spec.get("name") == "digits":
        n_test = int(spec.get("n_test", 500))
        images, labels = mnist.uci_digits("train", n_test)
        n_train = int(spec.get("n_train", len(images)))
        return images[:n_train], labels[:n_train], *mnist.uci_digits("test", n_test)
    root = Path(spec.get("root", "data/mnist"))
    if spec.get("download"):
        mnist.download_mnist(root)
    return (*mnist.load_mnist(root, "train"), *mnist.load_mnist(root, "test"))


@register("classifier")
class ClassifierTrainer:
    """Trains a classifier with :func:`~attn_policies.algorithms.supervised.train_classifier`."""

    config_model: type = ClassifierKeys

    def config_keys(self, body: dict[str, Any]) -> KeyTypes:
        return keys.key_types(ClassifierKeys)

    def validate(self, run: RunConfig) -> None:
        keys.check(ClassifierKeys, run)
        cls = _model_class(run)
        kwargs = run.body.get("model_kwargs") or {}
        names = list(inspect.signature(cls.__init__).parameters)[1:]
        for entry in kwargs:
            if entry not in names:
                raise ConfigError(
                    f"{run.name}: model_kwargs: {cls.__name__} has no argument {entry!r}."
                    f"{nearest(entry, names)}"
                )
        spec = keys.value(ClassifierKeys, run, "dataset")
        for entry in spec:
            if entry not in DATASET_KEYS:
                raise ConfigError(
                    f"{run.name}: unknown key 'dataset.{entry}'.{nearest(entry, DATASET_KEYS)}"
                )
        if spec.get("name", "mnist") not in ("mnist", "synthetic", "digits"):
            raise ConfigError(f"{run.name}: dataset.name must be 'mnist', 'synthetic' or 'digits'")
        if spec.get("name") == "digits":
            from attn_envs.mnist_data import UCI_DIGITS

            n_test, n_train = spec.get("n_test", 500), spec.get("n_train", 1)
            if not all(isinstance(n, int) and not isinstance(n, bool) for n in (n_test, n_train)):
                raise ConfigError(f"{run.name}: dataset.n_test and n_train must be integers")
            if not (1 <= n_test < UCI_DIGITS and 1 <= n_train <= UCI_DIGITS - n_test):
                raise ConfigError(
                    f"{run.name}: the {UCI_DIGITS} UCI digits need 1 <= dataset.n_test < "
                    f"{UCI_DIGITS} and 1 <= n_train <= {UCI_DIGITS} - n_test"
                )
        classifier_config(run)
        make_transform(run)

    def probe(self, run: RunConfig) -> None:
        spec = dict(keys.value(ClassifierKeys, run, "dataset"))
        if spec.get("name", "mnist") == "mnist" and not spec.get("download"):
            from attn_envs.mnist_data import load_mnist

            load_mnist(Path(spec.get("root", "data/mnist")), "test")  # FileNotFoundError, early
        if spec.get("name") == "digits":
            try:
                import sklearn.datasets  # noqa: F401
            except ImportError:
                raise ConfigError(
                    f"{run.name}: dataset 'digits' needs scikit-learn: "
                    "pip install 'attn-zoo[digits]'"
                ) from None

    def _model(self, run: RunConfig) -> nn.Module:
        return _model_class(run)(**(run.body.get("model_kwargs") or {}))

    def train(
        self,
        handle: RunHandle,
        callbacks: Sequence[Any] = (),
        progress_bar: bool = False,
        resume: bool = False,
    ) -> int:
        run: RunConfig = handle.config
        if resume:
            raise ConfigError("classifier runs cannot be resumed; train again (minutes on CPU)")
        torch.manual_seed(run.seed)
        model = self._model(run)
        config = classifier_config(run)
        path = Path(handle.path)
        log = path / "history.csv"
        progress.announce(path)
        lines = progress.lines(run.experiment, config.iterations, "iterations")

        metrics = MetricsLogger(path)

        def on_eval(iteration: int, record: dict[str, float]) -> bool:
            new = not log.exists()
            with open_append(log) as fh:
                writer = csv.DictWriter(fh, fieldnames=list(record))
                if new:
                    writer.writeheader()
                writer.writerow(record)
            metrics.log(iteration, renamed(record, CLASSIFIER_METRICS))
            save_state_dict(model, path / "model.pt")
            handle.write_status(num_timesteps=iteration)
            if progress_bar:
                logger.info(
                    "iteration %d: loss %.3f, test accuracy %.3f",
                    iteration,
                    record["loss"],
                    record["test_accuracy"],
                )
            if lines is not None:
                latest = f"test accuracy {record['test_accuracy']:.3f}"
                lines.update(iteration, latest)
            return all(cb(iteration, record) is not False for cb in callbacks)

        try:
            history = train_classifier(
                model, *load_data(run), config=config, transform=make_transform(run),
                callback=on_eval,
            )  # fmt: skip
        finally:
            metrics.close()
        if lines is not None:
            lines.close()
        save_state_dict(model, path / "model.pt")
        return int(history[-1]["iteration"]) if history else 0

    def load(self, path: Path, run: RunConfig, which: str = "best") -> nn.Module:
        model = self._model(run)
        # tensors only, their declared sizes checked against the model first
        return load_state_dict(model, Path(path) / "model.pt", "model").eval()

    def evaluate(
        self,
        path: Path,
        run: RunConfig,
        n_episodes: int | None = None,
        which: str = "best",
        seed: int | None = None,
    ) -> dict[str, Any]:
        """Test accuracy on the run's fixed transformed test set (``test_size`` images)."""
        model = self.load(path, run, which)
        _, _, test_images, test_labels = load_data(run)
        config = classifier_config(run)
        if n_episodes:
            config = dataclasses.replace(config, test_size=int(n_episodes))
        if seed is not None:
            config = dataclasses.replace(config, seed=int(seed))
        x, y = fixed_test_set(test_images, test_labels, config, make_transform(run))
        return {
            "experiment": run.experiment,
            "tag": run.tag,
            "budget": run.budget,
            "model": "model.pt",
            "n_test": len(y),
            "test_accuracy": evaluate_classifier(model, x, y),
        }
