"""Train, resume, load and evaluate runs; each run lives in its own folder.

``runs/<experiment>[/<matrix cell>]/<seed>-<timestamp>/`` holds:

- ``config.yml``: the resolved config (budget, overrides and matrix cell applied), loadable
  again with ``attn-zoo train runs/.../config.yml``; ``command.txt``: how it was started;
- ``status.json``: ``running`` / ``interrupted`` / ``failed`` (with the ``reason``) /
  ``finished``, steps done, wall time (rewritten every minute while training, so a run
  killed outright keeps the time it ran), ``parts``: 1, plus one per resume;
- ``run.lock``: locked by the process training the run (:mod:`zoo.run_lock`; a second
  ``resume`` is refused); a start cut before the run could train (a full disk, Ctrl-C)
  removes what it wrote, and a folder holding only an unheld ``run.lock`` (a start killed
  outright) is taken over by ``--run-dir``;
- ``checkpoints/``: the last checkpoint (model, replay buffer, normalisation statistics),
  written atomically;
- ``metrics.csv``: every metric the trainer logs, one long table (:mod:`zoo.metrics`);
- ``monitor/``: Monitor CSVs; ``logs/part<k>/``: SB3 ``progress.csv`` and TensorBoard events
  (one part per start or resume);
- ``evaluations.json`` and ``best_model.zip``: periodic evaluations and the best model;
- ``model.zip``: the final model; ``eval.json``: the final test episodes.

"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import logging
import os
import shlex
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from attn_policies.atomic import atomic_write
from zoo.config import ConfigError, RunConfig, check_folder_name, load_runs, require_int
from zoo.config_checks import read_json as read_json  # the one reader of run JSON
from zoo.run_lock import RunLock, RunLockedError
from zoo.trainers import get_episode_trainer, get_trainer

if TYPE_CHECKING:
    from torch import nn

    from attn_policies.agents import Agent

logger = logging.getLogger(__name__)

DEFAULT_TORCH_THREADS = 1  # a run's torch threads when its config sets no torch_threads


@dataclass
class Run:
    """A run folder and its resolved config; ``trusted``: the pickled files the caller named
    (``trust_teacher``, the CLI's ``--trust-teacher``), never read from the folder."""

    path: Path
    config: RunConfig
    trusted: tuple[Path, ...] = ()

    @property
    def status(self) -> dict[str, Any]:
        path = self.path / "status.json"
        status = read_json(path) if path.exists() else {}
        if not isinstance(status, dict):
            raise ConfigError(f"{path}: expected a JSON mapping")
        return status

    @property
    def eval(self) -> dict[str, Any]:
        """The final evaluation (``eval.json``)."""
        return read_json(self.path / "eval.json")

    def model(self, which: str = "best") -> nn.Module | Agent:
        """The trained model: ``"best"`` (kept by evaluation, else the final one) or ``"last"``."""
        return get_trainer(self.config.algo).load(self.path, self.config, which)

    def agent(self, which: str = "best") -> Agent:
        """The trained agent, ready to act (:class:`~attn_policies.agents.Agent`: SB3's
        ``predict``): an SB3 model, a BC student, an ES policy (CMA-ES, APG, DAgger,
        imported checkpoints) in a :class:`~attn_policies.agents.PolicyAgent`; a recipe's is
        its final stage's (:meth:`acting`). ``which``: ``"best"`` or ``"last"``.

        Raises:
            ConfigError: for a run whose model does not act in an env (``classifier``).
            FileNotFoundError: if the folder holds no trained model.
        """
        handle = self.acting()
        return get_episode_trainer(handle.config.algo).agent(handle.path, handle.config, which)

    def acting(self) -> Run:
        """The run whose model acts: a recipe's final stage (``algo: recipe``), else itself.
        Recording and attention maps build the agent's env from this run's config."""
        final = getattr(get_trainer(self.config.algo), "final_stage", None)
        return self if final is None else final(self.path, self.config)

    def write_status(self, **fields: Any) -> None:
        with _STATUS_LOCK:  # the wall clock's thread writes too
            now = datetime.now().isoformat(timespec="seconds")
            status = {**self.status, **fields, "updated": now}
            atomic_write(self.path / "status.json", json.dumps(status, indent=1))


_STATUS_LOCK = threading.Lock()
WALL_CLOCK_SECONDS = 60.0


@contextmanager
def _wall_clock(handle: Run, elapsed: Callable[[], float]) -> Iterator[None]:
    """Write ``wall_seconds`` to the status every :data:`WALL_CLOCK_SECONDS` while training,
    so that a process killed outright (SIGKILL, a machine taken away) leaves its time on
    disk and a resumed run's total counts it (up to the last write)."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(WALL_CLOCK_SECONDS):
            handle.write_status(wall_seconds=elapsed())

    thread = threading.Thread(target=beat, name="wall-clock", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def new_run_dir(run: RunConfig, root: str | Path = "runs") -> Path:
    """Create and return a fresh run folder; ``mkdir`` decides, so two processes started
    in the same second never share one. The experiment name and matrix cell are one folder
    each (:func:`zoo.config.check_folder_name`), also for a :class:`RunConfig` built in Python,
    so the folder is always inside ``root``."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path(root) / check_folder_name(run.experiment, "the experiment name")
    if run.tag:
        base = base / check_folder_name(run.tag, f"{run.experiment}: the matrix cell")
    base.mkdir(parents=True, exist_ok=True)
    for k in itertools.count(1):
        path = base / (f"{run.seed}-{stamp}" if k == 1 else f"{run.seed}-{stamp}-{k}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise AssertionError("unreachable")


def check_trusted(run: RunConfig, trusted: Sequence[str | Path]) -> tuple[Path, ...]:
    """``trusted`` as paths, after the trainer's check that every pickled file the run would
    load is among them (BC teachers), before anything is loaded or written. Each must name
    an existing file: ``--trust-teacher /``, ``''`` (this folder) or a missing file is a
    :class:`ConfigError` (a trust that names no file is a slip, never a wildcard)."""
    for name in trusted:
        if not Path(name).is_file():
            raise ConfigError(
                f"--trust-teacher {str(name)!r}: not a file (it names the one pickled teacher "
                "file, an SB3 .zip or a statistics .pkl, that the run may unpickle)"
            )
    check = getattr(get_trainer(run.algo), "check_trusted", None)
    if check is not None:
        check(run, trusted)
    return tuple(Path(t) for t in trusted)


def _resolve_runs(
    experiment: str | Path | RunConfig,
    budget: str,
    overrides: Mapping[str, Any] | None,
    seed: int | None,
) -> list[RunConfig]:
    if isinstance(experiment, RunConfig):
        return [experiment]
    return load_runs(experiment, budget=budget, overrides=overrides, seed=seed)


def train_all(
    experiment: str | Path | RunConfig,
    budget: str = "full",
    overrides: Mapping[str, Any] | None = None,
    seed: int | None = None,
    root: str | Path = "runs",
    callbacks: Sequence[Any] = (),
    progress_bar: bool = False,
    command: str | None = None,
    trust_teacher: Sequence[str | Path] = (),
) -> list[Run]:
    """Train every matrix cell of an experiment, one after the other.

    All cells are validated (including a dry build of env and model) before the first run
    folder is created. Arguments as for :func:`train`.
    """
    runs = _resolve_runs(experiment, budget, overrides, seed)
    trusted = [check_trusted(run, trust_teacher) for run in runs]
    for run in runs:
        get_trainer(run.algo).probe(run)
    return [
        _train_one(run, root, callbacks, progress_bar, command, trusted=files)
        for run, files in zip(runs, trusted, strict=True)
    ]


def train(
    experiment: str | Path | RunConfig,
    budget: str = "full",
    overrides: Mapping[str, Any] | None = None,
    seed: int | None = None,
    root: str | Path = "runs",
    callbacks: Sequence[Any] = (),
    progress_bar: bool = False,
    command: str | None = None,
    run_dir: str | Path | None = None,
    trust_teacher: Sequence[str | Path] = (),
) -> Run:
    """Train one run and return it (its folder, config, models and ``eval.json``).

    Args:
        experiment: a name from ``attn-zoo list``, a YAML path, or a :class:`RunConfig`.
        budget: ``"smoke"``, ``"cpu"`` or ``"full"``.
        overrides: ``{dotted key: value}`` (``--set``); a matrix axis name picks a cell.
        seed: the run's seed (overrides ``seed``).
        root: where run folders go.
        callbacks: extra SB3 callbacks (or classifier hooks).
        progress_bar: show a progress bar.
        command: recorded in ``command.txt`` (default: this process's command line).
        run_dir: the run folder itself instead of ``root/<experiment>/<seed>-<time>``; it
            must not exist or be empty.
        trust_teacher: pickled files a BC run may load (its SB3 ``.zip`` teacher, a
            ``VecNormalize`` pickle): unpickling runs their code, so only the caller names
            them, never a config (``attn-zoo train --trust-teacher FILE``).

    Raises:
        ConfigError: invalid config, or a matrix with several cells (use :func:`train_all`).
        KeyboardInterrupt: after saving a checkpoint; continue with :func:`resume`.
    """
    runs = _resolve_runs(experiment, budget, overrides, seed)
    if len(runs) != 1:
        cells = ", ".join(r.tag for r in runs[:6]) + (", ..." if len(runs) > 6 else "")
        raise ConfigError(
            f"{runs[0].experiment} expands into {len(runs)} runs ({cells}); pick one by "
            "setting its matrix axes (e.g. overrides={'game': 'Pong'}) or use train_all"
        )
    if (
        run_dir is not None
        and Path(run_dir).exists()
        and any(Path(run_dir).iterdir())
        and not RunLock.abandoned(run_dir)  # a start cut before its first file: taken over
    ):
        raise ConfigError(f"run folder {run_dir} exists and is not empty")
    trusted = check_trusted(runs[0], trust_teacher)
    get_trainer(runs[0].algo).probe(runs[0])
    return _train_one(runs[0], root, callbacks, progress_bar, command, run_dir, trusted)


def _train_one(
    run: RunConfig,
    root: str | Path,
    callbacks: Sequence[Any],
    progress_bar: bool,
    command: str | None,
    run_dir: str | Path | None = None,
    trusted: tuple[Path, ...] = (),
) -> Run:
    if run_dir is not None:
        path = Path(run_dir)
        created = not path.exists()
        path.mkdir(parents=True, exist_ok=True)
    else:
        path, created = new_run_dir(run, root), True
    lock = RunLock(path)
    handle = Run(path, run, trusted)
    try:
        lock.acquire()
        atomic_write(path / "config.yml", run.to_yaml())
        atomic_write(path / "command.txt", (command or shlex.join(sys.argv)) + "\n")
        handle.write_status(
            experiment=run.experiment, tag=run.tag, budget=run.budget, seed=run.seed
        )
    except RunLockedError:
        raise  # another process is starting a run in this --run-dir: its files stay
    except BaseException:
        # Cut before it could train (a full disk, Ctrl-C): no half run folder stays, which
        # neither --run-dir (not empty) nor --resume (no config) could take.
        _remove_start(path, created, lock)
        raise
    with lock:
        return _execute(handle, callbacks, progress_bar, resume=False, lock=lock)


def _remove_start(path: Path, created: bool, lock: RunLock) -> None:
    """Remove the files a run's start writes (and its folder, when the start made it)."""
    for name in ("config.yml", "command.txt", "status.json", "run.lock"):
        (path / name).unlink(missing_ok=True)
    lock.release()
    if created:
        with contextlib.suppress(OSError):  # not empty: something else is in it, keep it
            path.rmdir()


def _execute(
    handle: Run,
    callbacks: Sequence[Any],
    progress_bar: bool,
    resume: bool,
    lock: RunLock | None = None,
) -> Run:
    trainer = get_trainer(handle.config.algo)
    # Every trainer honours the key the same way. Unset, a run takes one thread: beside one
    # busy process torch's default (a thread per core) fell to 0.3x its alone speed on 2
    # cores, one thread kept a core to itself (benchmarks/load.py). Parallel work comes from
    # processes (SubprocVecEnv, evaluator workers), each with its own thread.
    torch.set_num_threads(int(handle.config.get("torch_threads") or DEFAULT_TORCH_THREADS))
    wall = float(handle.status.get("wall_seconds", 0.0))
    start = time.perf_counter()

    def elapsed() -> float:  # this part's seconds added to the parts before it
        return round(wall + time.perf_counter() - start, 1)

    # a resumed run is not its command run uninterrupted to the last bit (its envs restart
    # their episodes), so the folder counts its parts; folders from before the count had one
    before = handle.status.get("parts")
    parts = (before if isinstance(before, int) and before > 0 else 1) + 1 if resume else 1
    handle.write_status(state="running", reason=None, pid=os.getpid(), parts=parts)
    try:
        with _wall_clock(handle, elapsed):
            steps = trainer.train(
                handle, callbacks=callbacks, progress_bar=progress_bar, resume=resume
            )
        handle.write_status(
            state="trained",
            num_timesteps=steps,
            wall_seconds=elapsed(),
        )
        result = trainer.evaluate(handle.path, handle.config)
    except KeyboardInterrupt:
        handle.write_status(state="interrupted", wall_seconds=elapsed())
        raise
    except BaseException as err:  # any failure: the folder says so, with the reason
        handle.write_status(
            state="failed",
            reason=f"{type(err).__name__}: {err}".splitlines()[0][:500],
            wall_seconds=elapsed(),
        )
        raise
    result["wall_seconds"] = handle.status["wall_seconds"]
    atomic_write(handle.path / "eval.json", json.dumps(result, indent=1))
    handle.write_status(state="finished")
    return handle


def load(path: str | Path) -> Run:
    """The run in a folder (a run folder, or any folder holding its ``config.yml``)."""
    path = Path(path)
    if not (path / "config.yml").is_file():
        hint = ""
        if path.is_dir() and RunLock.abandoned(path):
            hint = " (a start cut before its first file; `train NAME --run-dir` takes it over)"
        raise FileNotFoundError(f"{path} is not a run folder: it has no config.yml{hint}")
    handle = Run(path, load_runs(path / "config.yml")[0])
    from_status(handle.status, handle.config)
    return handle


def from_status(status: Mapping[str, Any], run: RunConfig) -> None:
    """Give ``run``, resolved from a run folder's ``config.yml``, the budget and cell it was
    resolved from: the resolved file keeps neither, the folder's ``status.json`` says them
    (checked: a cell is a folder name, a budget a word)."""
    budget, tag = status.get("budget", run.budget), status.get("tag", run.tag)
    if not isinstance(budget, str) or not budget.isidentifier():
        raise ConfigError(f"status.json: 'budget' must be a budget name, got {budget!r:.60}")
    run.budget = budget
    run.tag = check_folder_name(tag, "status.json: the matrix cell 'tag'") if tag else ""


SOURCE_KEYS = ("init", "teacher")
"""The keys naming what a run read once when it trained: its warm start and its teacher."""


def absent_sources(run: RunConfig) -> dict[str, str]:
    """The ``init`` and ``teacher`` paths of ``run`` that are not here (a run folder from
    another machine, or one whose warm start lived in a git-ignored ``runs/``): training read
    them; showing, loading and evaluating the trained folder do not. Experiments trained with
    the run (``{experiment: NAME}``) and import paths (``package.module:function``) are
    not paths, so never absent."""
    absent = {}
    for key in SOURCE_KEYS:
        value = run.body.get(key)
        if not isinstance(value, str):
            continue
        looks_like_path = "/" in value or os.sep in value or Path(value).suffix in (".zip", ".pt")
        if looks_like_path and not Path(value).exists():
            absent[key] = value
    return absent


def _policy_mode(mode: str | float) -> str | float:
    """``"deterministic"``, ``"stochastic"``, or an ε given as a number or its text."""
    if isinstance(mode, str) and mode not in ("deterministic", "stochastic"):
        try:
            return float(mode)
        except ValueError:
            raise ConfigError(
                f"policy mode must be 'deterministic', 'stochastic' or an epsilon in [0, 1], "
                f"got {mode!r}"
            ) from None
    return mode


def resume(
    path: str | Path,
    callbacks: Sequence[Any] = (),
    progress_bar: bool = False,
    trust_teacher: Sequence[str | Path] = (),
) -> Run:
    """Continue an interrupted run from its last checkpoint up to its ``n_timesteps``.

    The resumed run ends at the same step count an uninterrupted one would.
    ``trust_teacher`` as for :func:`train`.
    """
    handle = load(path)
    handle.trusted = check_trusted(handle.config, trust_teacher)
    with RunLock(handle.path) as lock:  # refused while another process trains it
        if handle.status.get("state") == "finished":
            raise ConfigError(f"{path} has already finished; nothing to resume")
        # The checkpoint is read before anything is written: a refused one (pickled,
        # tampered, another model's) leaves the folder as it was, status.json included.
        check = getattr(get_trainer(handle.config.algo), "check_resume", None)
        if check is not None:
            check(handle.path, handle.config)
        if lock.stale is not None:
            logger.warning(
                "%s: taking over the stale lock of process %s, which ended without releasing it",
                handle.path,
                lock.stale.get("pid"),
            )
        return _execute(handle, callbacks, progress_bar, resume=True, lock=lock)


def evaluate(
    run: Run | str | Path,
    n_episodes: int | None = None,
    which: str = "best",
    seed: int | None = None,
    write: bool = False,
    policies: Sequence[str | float] | None = None,
) -> dict[str, Any]:
    """Evaluate a trained run on its test episodes (by default those behind ``eval.json``).

    Args:
        run: a :class:`Run` or a run folder.
        n_episodes: test episodes per policy mode (default ``eval.final_episodes``).
        which: ``"best"`` or ``"last"`` model.
        seed: test seed (default ``eval.test_seed``, which reproduces ``eval.json``).
        write: also write the result to ``eval.json``.
        policies: test these policy modes (``"deterministic"``, ``"stochastic"``, an ε)
            instead of the run's ``eval.policies`` and ``final_policies``; e.g. the greedy
            score of a run trained and tested stochastic (E5's teacher acts greedily).

    Raises:
        ConfigError: a policy mode that is none of those, or ``policies`` with ``write``.
    """
    if n_episodes is not None:
        n_episodes = require_int(n_episodes, "the number of test episodes", minimum=1)
    handle = run if isinstance(run, Run) else load(run)
    config = handle.config
    if policies:
        if write:
            raise ConfigError("--policy results are not written: eval.json holds eval.policies")
        modes = {str(m): _policy_mode(m) for m in policies}
        tested = dataclasses.replace(config.eval, policies=modes, final_policies={}, select=None)
        config = dataclasses.replace(config, eval=tested)
    result = get_trainer(config.algo).evaluate(
        handle.path, config, n_episodes=n_episodes, which=which, seed=seed
    )
    if write:
        atomic_write(handle.path / "eval.json", json.dumps(result, indent=1))
    return result
