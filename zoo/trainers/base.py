"""What the torch-trained runs (CMA-ES, DAgger, BC, classifier) share: JSON and state-dict
files, per-trainer progress tables, TensorBoard and progress bars.

Example:
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> table = ProgressTable(folder / "progress.csv", ["round", "loss"], key="round")
    >>> for row in ({"round": 1, "loss": 0.5}, {"round": 2, "loss": 0.25}):
    ...     table.write(row)
    >>> table = ProgressTable(folder / "progress.csv", ["round", "loss"], "round", done=1)
    >>> (folder / "progress.csv").read_text().split()
    ['round,loss', '1,0.5']
"""

from __future__ import annotations

import csv
import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import torch
from torch import nn

import zoo
from attn_policies.atomic import atomic_path, atomic_write, open_append
from zoo.config_checks import ConfigError, RunConfig
from zoo.config_checks import read_json as read_json  # the one reader, for the trainers

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

    from attn_policies.algorithms.es_eval import Evaluator

ModuleT = TypeVar("ModuleT", bound=nn.Module)


def load_state_dict(module: nn.Module, file: Path, what: str) -> nn.Module:
    """``module`` with the tensors of ``file`` (read as tensors only); tensors that do not
    fit it are one :class:`ConfigError` naming ``what`` the module is."""
    from zoo.trainers.sb3_state import tensors_of

    try:
        module.load_state_dict(tensors_of(file, module))  # sizes checked first
    except RuntimeError as err:
        raise ConfigError(f"{file}: does not fit the run's {what} ({err})") from None
    return module


def load_init(module: ModuleT, source: str | Path, run_name: str, what: str) -> ModuleT:
    """``module`` with the weights of a config's ``init``: a run folder (its best model) or a
    state dict file, read as tensors only. Any problem is one :class:`ConfigError` naming
    ``init`` (a missing source or model, or tensors that do not fit the run's ``what``)."""
    from zoo.trainers import state_dict_file
    from zoo.trainers.sb3_state import tensors_of

    source = Path(source)
    if not source.exists():
        raise ConfigError(f"{run_name}: 'init': {source} does not exist")
    try:
        file = state_dict_file(source, "best") if source.is_dir() else source
    except FileNotFoundError as err:
        raise ConfigError(f"{run_name}: 'init': {err}") from None
    try:
        module.load_state_dict(tensors_of(file, module))  # sizes checked first
    except RuntimeError as err:
        raise ConfigError(
            f"{run_name}: 'init': {file} does not fit the run's {what} ({err})"
        ) from None
    return module


TEACHER_KEYS = ("experiment", "budget", "overrides")


def check_teacher_experiment(run: RunConfig, spec: dict[str, Any]) -> None:
    """A ``teacher: {experiment, budget, overrides}`` mapping (a zoo experiment trained into
    the run folder first): its keys, and the teacher's config validated as ``train`` would."""
    if "experiment" not in spec:
        raise ConfigError(f"{run.name}: teacher: a mapping needs 'experiment'")
    unknown = sorted(set(spec) - set(TEACHER_KEYS))
    if unknown:
        raise ConfigError(f"{run.name}: teacher takes {list(TEACHER_KEYS)}, got {unknown}")
    if not isinstance(spec.get("overrides") or {}, dict):
        raise ConfigError(f"{run.name}: teacher.overrides must be a mapping of key -> value")
    budget = spec.get("budget", run.budget)
    zoo.load_runs(spec["experiment"], budget=budget, overrides=spec.get("overrides"))


def train_teacher_experiment(run: RunConfig, spec: dict[str, Any], folder: Path) -> Path:
    """Train the teacher experiment ``spec`` into ``folder`` (with the run's seed and, unless
    it says otherwise, its budget) and return it: a finished teacher there is reused, one cut
    short by a kill continues from its checkpoint."""
    if (folder / "status.json").exists() and not (folder / "eval.json").exists():
        zoo.resume(folder)
    elif not (folder / "eval.json").exists():
        shutil.rmtree(folder, ignore_errors=True)  # killed before its status was written
        zoo.train(spec["experiment"], budget=spec.get("budget", run.budget),
                  overrides=dict(spec.get("overrides") or {}), seed=run.seed,
                  run_dir=folder, command=f"teacher of {run.name}")  # fmt: skip
    return folder


def save_state_dict(module: nn.Module, file: Path) -> None:
    """``module``'s state dict, written atomically (a kill leaves the old file)."""
    with atomic_path(file) as tmp:
        torch.save(module.state_dict(), tmp)


class ProgressTable:
    """A trainer's own wide CSV (``progress.csv``), one row per generation/round/epoch.

    Args:
        file: the CSV file.
        fields: its columns (other keys of a written row are ignored).
        key: the column counting rows (``generation``, ``round``, ...).
        done: a resumed run's checkpoint count: rows past it are dropped; None starts the
            file afresh.
    """

    def __init__(
        self, file: Path, fields: Sequence[str], key: str, done: int | None = None
    ) -> None:
        self.file, self.fields = Path(file), list(fields)
        rows = []
        if done is not None and self.file.exists():
            with self.file.open() as fh:
                rows = [r for r in csv.DictReader(fh) if int(float(r[key])) <= done]
        with atomic_path(self.file) as tmp, tmp.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=self.fields)
            writer.writeheader()
            writer.writerows(rows)

    def write(self, record: dict[str, Any]) -> None:
        with open_append(self.file) as fh:
            csv.DictWriter(fh, fieldnames=self.fields, extrasaction="ignore").writerow(record)


def periodic_test(
    tester: Evaluator,
    policy: nn.Module,
    seeds: Sequence[int],
    record: dict[str, Any],
    evaluations: list[dict[str, Any]],
    count: tuple[str, int],
    env_steps: int,
    path: Path,
) -> None:
    """A periodic test of a flat-parameter policy: its mean and std go into ``record``, an
    entry ``{count name: count, env_steps, test_mean, test_std}`` into ``evaluations`` (and
    ``evaluations.json``), and the policy into ``best_model.pt`` when no earlier test beat it
    (ties go to the later, more trained model)."""
    flat = nn.utils.parameters_to_vector(policy.parameters()).detach()
    returns = tester.evaluate(flat[None].numpy(), seeds)[0]
    record["test_mean"], record["test_std"] = returns.mean(), returns.std()
    best = max((e["test_mean"] for e in evaluations), default=-np.inf)
    evaluations.append(
        {
            count[0]: count[1],
            "env_steps": env_steps,
            "test_mean": float(record["test_mean"]),
            "test_std": float(record["test_std"]),
        }
    )
    if record["test_mean"] >= best:
        save_state_dict(policy, path / "best_model.pt")
    atomic_write(path / "evaluations.json", json.dumps(evaluations, indent=1))


def tensorboard(directory: Path) -> SummaryWriter | None:
    """A TensorBoard ``SummaryWriter`` into ``directory`` (None without tensorboard)."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # pragma: no cover - tensorboard is a dependency
        return None
    return SummaryWriter(str(directory))


def progress_bar(enabled: bool, total: int, done: int, unit: str) -> Any:
    """A tqdm bar from ``done`` to ``total`` (None when not ``enabled``)."""
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=done, unit=unit)
