"""Every matrix cell of an experiment as a Ray task (``attn-zoo train NAME --ray [ADDRESS]``).

Each cell trains in an ordinary run folder at the path the local runner uses
(``<root>/<experiment>[/<cell>]/<seed>-<time>/``), so ``resume``, ``evaluate``, ``plot`` and
the rest work on it unchanged. The driver plans the grid from the folders already there:

- a folder of the same cell (same resolved ``config.yml``, budget and cell) that has
  ``finished`` is skipped;
- an unfinished one (interrupted, failed, killed) is resumed from its last checkpoint
  (``classifier`` and ``bc`` runs cannot resume: they train afresh in a new folder);
- otherwise the driver creates a new folder and a task trains into it.

So re-running the same command after a crash or Ctrl-C finishes the grid. A failed task
(an exception, a dead worker or node) is resubmitted up to ``max_retries`` times, resuming
its folder; cells that still fail are listed at the end (exit code 1 from the CLI), never
dropped. Ray is an optional dependency (``pip install 'attn-zoo[ray]'``).

Each cell's ``resources`` and the cluster (``--ray ADDRESS``, else ``RAY_ADDRESS``, else a
local instance; never a config's choice) are :mod:`zoo.ray_cluster`'s. The driver, and with
it the run folders, must see the same filesystem as every worker (one machine, or
``--root`` on a shared mount such as NFS): a task that cannot see its folder fails with a
message saying so.
"""

from __future__ import annotations

import logging
import shlex
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zoo.config import ConfigError, RunConfig, load_runs, safe_yaml
from zoo.config_checks import read_json
from zoo.ray_cluster import cell_resources, cluster_address, connect, import_ray

logger = logging.getLogger(__name__)

DEFAULT_MAX_RETRIES = 2
"""Resubmissions of a failed cell before it is reported as failed."""

NOT_RESUMABLE = frozenset({"classifier"})
"""``algo`` values whose trainers refuse ``resume`` (minutes to train): a retry starts afresh."""


@dataclass
class Cell:
    """One matrix cell of a grid and what became of it.

    Attributes:
        run: the resolved cell.
        path: its run folder (``None`` until one is chosen).
        state: ``"new"``, ``"resume"`` or ``"skipped"`` (finished before) when planned;
            ``"finished"`` or ``"failed"`` after :func:`run_grid`.
        attempts: tasks submitted for it.
        error: the last failure, one line.
        result: its ``eval.json`` once finished.
    """

    run: RunConfig
    path: Path | None = None
    state: str = "new"
    attempts: int = 0
    error: str | None = None
    result: dict[str, Any] | None = None


def _yaml_body(text: str, where: str) -> Any:
    try:
        return safe_yaml(text, where)
    except ConfigError:
        return None


def _status(folder: Path) -> dict[str, Any]:
    try:
        status = safe_yaml((folder / "status.json").read_text(), str(folder))  # JSON is YAML
    except (OSError, ConfigError):
        return {}
    return status if isinstance(status, dict) else {}


def same_cell(folder: Path, run: RunConfig) -> bool:
    """Whether ``folder`` is a run of ``run``: the same resolved config, budget and cell."""
    try:
        text = (folder / "config.yml").read_text()
    except OSError:
        return False
    if _yaml_body(text, str(folder)) != _yaml_body(run.to_yaml(), run.name):
        return False
    status = _status(folder)
    return status.get("budget") == run.budget and status.get("tag", "") == run.tag


def cell_folders(run: RunConfig, root: str | Path = "runs") -> list[Path]:
    """Existing run folders of this cell under ``root``, oldest first."""
    base = Path(root) / run.experiment
    if run.tag:
        base = base / run.tag
    if not base.is_dir():
        return []
    found = [p for p in base.glob(f"{run.seed}-*") if p.is_dir() and same_cell(p, run)]
    return sorted(found, key=lambda p: p.name)


def resumable(run: RunConfig) -> bool:
    return run.algo not in NOT_RESUMABLE


def _finished(folder: Path | None) -> bool:
    if folder is None:
        return False
    return _status(folder).get("state") == "finished" and (folder / "eval.json").is_file()


def plan_cell(run: RunConfig, root: str | Path = "runs") -> Cell:
    """What to do with one cell: skip a finished folder, resume the latest unfinished one
    (when the trainer can), or start a new one (``path`` ``None``: made at submission)."""
    folders = cell_folders(run, root)
    for folder in folders:
        if _finished(folder):
            return Cell(run, folder, "skipped")
    if folders and resumable(run):
        return Cell(run, folders[-1], "resume")
    return Cell(run, None, "new")


def plan_grid(
    experiment: str | Path | RunConfig,
    budget: str = "full",
    overrides: Mapping[str, Any] | None = None,
    seed: int | None = None,
    root: str | Path = "runs",
) -> list[Cell]:
    """Every cell of the experiment with the folder it will use (see :func:`plan_cell`)."""
    if isinstance(experiment, RunConfig):
        runs = [experiment]
    else:
        runs = load_runs(experiment, budget=budget, overrides=overrides, seed=seed)
    return [plan_cell(run, root) for run in runs]


def _train_cell(
    run: RunConfig,
    path: str,
    resume: bool,
    command: str,
    progress_every: float | None,
    trust_teacher: Sequence[str] = (),
    allow_import: Sequence[str] = (),
    allow_writer: Sequence[str] = (),
) -> dict[str, Any]:
    """The task body: train (or resume) one cell in its folder; its ``eval.json``.
    ``allow_import``, ``allow_writer``: the driver's ``--allow-import`` packages and
    ``--allow-writer`` classes (a remote node lacks its environment)."""
    import zoo
    from zoo import progress
    from zoo.console import log_to_console
    from zoo.registry import allow_imports, allow_writers

    allow_imports(allow_import)
    allow_writers(allow_writer)
    folder = Path(path)
    host = socket.gethostname()
    if not folder.is_dir():
        raise ConfigError(
            f"run folder {folder} does not exist on {host}: the run root must be on a "
            "filesystem every Ray node shares (e.g. NFS), or run on one machine"
        )
    progress.configure(on=progress_every is not None, every=progress_every or 30.0)
    with log_to_console():  # the task's progress lines and warnings, as a command shows them
        handle = (
            zoo.resume(folder, trust_teacher=trust_teacher)
            if resume
            else zoo.train(run, run_dir=folder, command=command, trust_teacher=trust_teacher)
        )
    return handle.eval


@dataclass
class GridResult:
    """The cells of a grid after :func:`run_grid`."""

    cells: list[Cell]

    def with_state(self, state: str) -> list[Cell]:
        return [cell for cell in self.cells if cell.state == state]

    @property
    def failed(self) -> list[Cell]:
        return self.with_state("failed")

    @property
    def ok(self) -> bool:
        return not self.failed

    def summary(self) -> str:
        """One line of counts, then one line per failed cell."""
        counts = {s: len(self.with_state(s)) for s in ("finished", "skipped", "failed")}
        lines = [
            f"{len(self.cells)} cells: {counts['finished']} trained, "
            f"{counts['skipped']} already finished (skipped), {counts['failed']} failed"
        ]
        for cell in self.failed:
            lines.append(
                f"  FAILED {cell.run.name} seed {cell.run.seed} after {cell.attempts} "
                f"attempt(s): {cell.path}: {cell.error}"
            )
        return "\n".join(lines)


def _check_feasible(
    ray: Any, cells: list[Cell], options: dict[int, dict[str, Any]], strict: bool
) -> None:
    """Cells asking for more than the whole cluster has would wait forever: an error on a
    local instance this call started (``strict``), a warning on a cluster, whose autoscaler
    may add nodes."""
    total = ray.cluster_resources()
    for cell in cells:
        opts = options[id(cell)]
        asks = {"CPU": opts.get("num_cpus", 0), "GPU": opts.get("num_gpus", 0)}
        asks.update(opts.get("resources", {}))
        if "memory" in opts:
            asks["memory"] = opts["memory"]
        for name, amount in asks.items():
            if amount and amount > total.get(name, 0):
                message = (
                    f"{cell.run.name} asks for {name}={amount} but the Ray cluster has "
                    f"{total.get(name, 0)}; lower its 'resources' or add nodes"
                )
                if strict:
                    raise ConfigError(message)
                logger.warning("warning: %s (it waits for such a node)", message)


def run_grid(
    experiment: str | Path | RunConfig,
    budget: str = "full",
    overrides: Mapping[str, Any] | None = None,
    seed: int | None = None,
    root: str | Path = "runs",
    ray_address: str | None = None,
    max_retries: int = DEFAULT_MAX_RETRIES,
    command: str | None = None,
    progress_every: float | None = None,
    init_kwargs: Mapping[str, Any] | None = None,
    trust_teacher: Sequence[str | Path] = (),
) -> GridResult:
    """Train every matrix cell of an experiment as a Ray task; finished cells are skipped.

    Every cell to run is validated (a dry build of env and model) before the first folder
    is created. Arguments as for :func:`zoo.train_all`, and:

    Args:
        ray_address: ``"auto"``, ``"ray://host:10001"`` or ``"host:6379"`` joins a cluster;
            ``None`` uses ``RAY_ADDRESS``, else starts a local Ray instance (a config never
            chooses: :func:`cluster_address`). An already connected Ray (``ray.init`` by
            the caller) is used.
        max_retries: resubmissions of a failed cell (>= 0).
        progress_every: seconds between the workers' progress lines (``None``: none).
        init_kwargs: more ``ray.init`` arguments.
        trust_teacher: as for :func:`zoo.train` (checked here, before any folder is made).

    Returns:
        A :class:`GridResult`; check ``.ok`` (failed cells are listed, not raised).

    Raises:
        ConfigError: an invalid config or resources, Ray not installed, or ``max_retries``
            negative.
        KeyboardInterrupt: after cancelling the tasks, which save a checkpoint; run the
            same call again to resume.
    """
    from zoo.registry import ALLOWED_IMPORTS, allowed_imports, allowed_writers
    from zoo.runs import check_trusted, new_run_dir
    from zoo.trainers import get_trainer

    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise ConfigError(f"max_retries must be an integer >= 0, got {max_retries!r}")
    ray = import_ray()
    cells = plan_grid(experiment, budget, overrides, seed, root)
    todo = [cell for cell in cells if cell.state != "skipped"]
    options = {id(cell): cell_resources(cell.run) for cell in todo}
    address = cluster_address(ray_address)
    trusted = [str(Path(f).resolve()) for f in trust_teacher]  # the same files on every node
    extra_imports = [p for p in allowed_imports() if p not in ALLOWED_IMPORTS]
    for cell in todo:
        check_trusted(cell.run, trusted)
        get_trainer(cell.run.algo).probe(cell.run)
    command = command or shlex.join(sys.argv)
    say = logger.info  # a line per cell event (the command line prints them on stdout)

    for cell in cells:
        if cell.state == "skipped":
            say(f"{cell.path}: finished before, skipped")
    if not todo:
        return GridResult(cells)
    started = connect(ray, address, init_kwargs)
    pending: dict[Any, Cell] = {}
    try:
        local = started and address is None
        _check_feasible(ray, todo, options, strict=local)
        task = ray.remote(_train_cell)

        def submit(cell: Cell) -> None:
            resume = cell.path is not None and (cell.path / "config.yml").is_file()
            if resume and not resumable(cell.run):
                resume = False
            if not resume:  # a fresh folder, also for a retry that never wrote its config
                cell.path = new_run_dir(cell.run, root)
            cell.attempts += 1
            # retries are the driver's (it may pick a new folder), none inside Ray
            opts = {**options[id(cell)], "max_retries": 0, "retry_exceptions": False}
            ref = task.options(**opts).remote(
                cell.run,
                str(cell.path),
                resume,
                command,
                progress_every,
                trusted,
                extra_imports,
                allowed_writers(),
            )
            pending[ref] = cell
            say(
                f"{cell.path}: {'resuming' if resume else 'training'} {cell.run.name} "
                f"seed {cell.run.seed} (attempt {cell.attempts})"
            )

        for cell in todo:
            submit(cell)
        while pending:
            [ref], _ = ray.wait(list(pending), num_returns=1)
            cell = pending.pop(ref)
            try:
                cell.result = ray.get(ref)
            except ray.exceptions.RayError as err:
                cell.error = _error_line(err)
                if cell.path is not None and _finished(cell.path):  # only its reply was lost
                    cell.result = read_json(cell.path / "eval.json")
                elif cell.attempts <= max_retries:
                    say(f"{cell.path}: attempt {cell.attempts} failed ({cell.error}); retrying")
                    submit(cell)
                else:
                    cell.state = "failed"
                    say(f"{cell.path}: FAILED after {cell.attempts} attempt(s): {cell.error}")
                if cell.result is None:
                    continue
            cell.state, cell.error = "finished", None
            say(f"{cell.path}: finished")
    except KeyboardInterrupt:
        for ref in pending:
            ray.cancel(ref)  # a KeyboardInterrupt in the task: it checkpoints and stops
        ray.wait(list(pending), num_returns=len(pending), timeout=60)
        raise
    finally:
        if started:
            ray.shutdown()
    return GridResult(cells)


def _error_line(err: BaseException) -> str:
    """The task's own exception in one line (Ray wraps it with a traceback)."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, BaseException):
        err = cause
    text = " ".join(str(err).split()) or type(err).__name__
    return f"{type(err).__name__}: {text}"[:500]
