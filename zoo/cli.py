"""``attn-zoo``: a thin command line over :mod:`zoo` (``list``, ``show``, ``train``,
``evaluate``, ``record``, ``plot``, ``robustness``, ``maps``)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import shlex
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

# Only light modules here: torch, SB3 and gymnasium load inside the commands that use them,
# so `attn-zoo --help` answers at once.
from attn_policies.atomic import atomic_write
from zoo import __version__, progress
from zoo.config import ConfigError, RunConfig, list_experiments, load_runs, parse_overrides


def _cmd_list(args: argparse.Namespace) -> int:
    from zoo.config import read_family

    for name, path in sorted(list_experiments().items()):
        raw = read_family(path)[name]
        n_cells = len(load_runs(name, budget=_budget(name, args.budget))) if args.cells else None
        cells = f"  [{n_cells} runs]" if n_cells else ""
        print(f"{name:28s} {raw.get('algo', ''):12s} {raw.get('description', '')}{cells}")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from zoo.trainers import get_trainer

    budget = _budget(args.name, args.budget)
    runs = load_runs(args.name, budget=budget, overrides=parse_overrides(args.set))
    with _quiet_native_stderr():  # an emulator's banner is no part of a config
        for run in runs[: args.limit]:
            get_trainer(run.algo).probe(run)  # as `train` checks it: env and model built once
    for run in runs[: args.limit]:
        print(run.to_yaml())
    if len(runs) > args.limit:
        print(f"# ... and {len(runs) - args.limit} more runs ({len(runs)} in all)")
    return 0


@contextlib.contextmanager
def _quiet_native_stderr() -> Iterator[None]:
    """Drop what native code writes to file descriptor 2 (ALE's banner) in this block;
    Python's own errors still reach the user through the exception."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _interrupt_on_signals() -> None:
    """SIGTERM (a scheduler's stop) and SIGINT act as Ctrl-C: checkpoint, then exit 130.

    A job started in the background with ``&`` inherits an ignored SIGINT, so Python would
    not raise KeyboardInterrupt for ``kill -INT``; both handlers are set explicitly.
    """

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, interrupt)


def _run_size(run: RunConfig) -> tuple[int, str]:
    """``(env steps or 0 when unknown in advance, how the run's length is counted)``."""
    body = run.body
    if run.algo == "cmaes":
        episodes = int(body.get("population", 256)) * int(body.get("repeats", 16))
        return 0, f"{int(body.get('n_generations', 0)):,} generations x {episodes:,} episodes"
    if run.algo == "classifier":
        return 0, f"{int(body.get('iterations', 0)):,} iterations"
    if run.algo == "apg":
        size = f"{int(body.get('batch_size', 128)):,} x {int(body.get('window', 100)):,} steps"
        return 0, f"{int(body.get('n_updates', 0)):,} updates of {size}"
    if run.algo == "dagger":
        episodes = int(body.get("n_envs", 64))
        return 0, f"{int(body.get('n_rounds', 0)):,} rounds x {episodes:,} episodes"
    steps = int(body.get("n_timesteps") or 0)
    return steps, f"{steps:,} steps"


DEFAULT_BUDGET = "cpu"
"""The budget when none is given: hours on a laptop's CPU, not the papers' days (``full``);
a config without a ``cpu`` budget runs as written (``full``)."""
BUDGET_HELP = (
    f"smoke (seconds), cpu (hours on a laptop) or full (the papers' runs); default "
    f"{DEFAULT_BUDGET}, or full for a config that has no {DEFAULT_BUDGET} budget"
)


def _budget(name: str | Path, given: str | None) -> str:
    """``given``, else :data:`DEFAULT_BUDGET` where the experiment defines it, else full."""
    if given is not None:
        return given
    from zoo.config import find_experiment

    raw = find_experiment(name)[1]
    budgets = raw.get("budgets") if isinstance(raw, dict) else None
    return DEFAULT_BUDGET if isinstance(budgets, dict) and DEFAULT_BUDGET in budgets else "full"


def _plan(name: str, runs: list[RunConfig], budget_given: bool, yes: bool) -> None:
    """Say how much work starts (the first line of every train command); a multi-run grid at
    the default budget needs consent."""
    steps = sum(_run_size(r)[0] for r in runs)
    lengths = sorted({_run_size(r)[1] for r in runs})
    each = lengths[0] if len(lengths) == 1 else f"{lengths[0]} to {lengths[-1]}"
    budget = runs[0].budget
    size = f"{len(runs)} run{'s' * (len(runs) > 1)} of {each}"
    total = f", {steps:,} env steps in all" if steps and len(runs) > 1 else ""
    if len(runs) > 1 and not budget_given and not yes:
        raise ConfigError(
            f"{name} at budget {budget} is {size}{total}; start them with --budget {budget} "
            "(or --yes), use --budget smoke, or pick one cell with --set AXIS=VALUE"
        )
    default = "" if budget_given else " (the default; --budget smoke, cpu or full)"
    print(f"{name}: budget {budget}{default}, {size}{total}", flush=True)


class OutputClosed(KeyboardInterrupt):
    """The reader of stdout or stderr left during ``train`` (``attn-zoo train ... | head``).

    Raised in place of the write's ``BrokenPipeError`` so the run stops as on Ctrl-C: the
    trainer saves its checkpoint and ``status.json`` says ``interrupted``, not ``failed``.
    """


class _Guarded:
    """A text stream whose writes raise :class:`OutputClosed` when its reader has left."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError as err:
            raise OutputClosed from err

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError as err:
            raise OutputClosed from err

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def _guarded_output() -> Iterator[None]:
    """sys.stdout and sys.stderr as :class:`_Guarded` streams, for the length of a command."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Guarded(sys.stdout), _Guarded(sys.stderr)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def _cmd_train(args: argparse.Namespace) -> int:
    try:
        with _guarded_output():
            return _train(args)
    except OutputClosed:
        return _reader_gone(args)


def _train(args: argparse.Namespace) -> int:
    import zoo

    command = "attn-zoo " + shlex.join(args.argv)
    tty = sys.stdout.isatty()
    bar = not args.no_progress and tty
    # without a terminal: the run folder first, then a line every --progress-every seconds
    progress.configure(on=not args.no_progress and not tty, every=args.progress_every)
    _interrupt_on_signals()
    try:
        if args.resume:
            if args.ray is not None:
                raise ConfigError("--ray resumes a grid by running its train command again")
            _resolve_existing(Path(args.resume))
            handle = zoo.load(args.resume)
            _plan(f"resuming {handle.path}", [handle.config], True, True)
            runs = [zoo.resume(args.resume, progress_bar=bar, trust_teacher=args.trust_teacher)]
        else:
            if not args.name:
                raise ConfigError("train needs an experiment NAME or PATH (or --resume RUN)")
            overrides = parse_overrides(args.set)
            budget = _budget(args.name, args.budget)
            cells = load_runs(args.name, budget=budget, overrides=overrides, seed=args.seed)
            _plan(str(args.name), cells, args.budget is not None, args.yes)
            kwargs = dict(
                budget=budget,
                overrides=overrides,
                seed=args.seed,
                root=args.root,
                progress_bar=bar,
                command=command,
                trust_teacher=args.trust_teacher,
            )
            if args.ray is not None:  # every cell a Ray task (zoo.ray_grid)
                if args.run_dir:
                    raise ConfigError("--ray runs the whole grid; it takes no --run-dir")
                from zoo.ray_grid import train_command

                kwargs.pop("progress_bar")
                every = None if args.no_progress else args.progress_every
                return train_command(
                    args.name, ray_address=args.ray or None, max_retries=args.max_retries,
                    progress_every=every, **kwargs,
                )  # fmt: skip
            if args.run_dir:
                runs = [zoo.train(args.name, run_dir=args.run_dir, **kwargs)]
            else:
                runs = zoo.train_all(args.name, **kwargs)
    except OutputClosed:
        raise
    except KeyboardInterrupt:
        folder = _train_folder(args)
        if folder is None or not (folder / "config.yml").is_file():  # stopped before a run began
            print("\ninterrupted before a run folder was made; nothing to resume", file=sys.stderr)
            return 130
        print(
            f"\ninterrupted: a checkpoint was saved; continue with "
            f"`attn-zoo train --resume {shlex.quote(str(folder))}`",
            file=sys.stderr,
        )
        return 130
    for run in runs:
        print(f"{run.path}: {_headline(run.eval)}")
        if args.report:
            _report(run.path)
    return 0


def _report(path: Path) -> None:
    """Learning curves and, where the model has attention, its figures, into the run folder."""
    from zoo.plots import plot_runs
    from zoo.run_maps import run_maps

    print(f"  curves: {plot_runs([path])}")
    try:
        for figure in run_maps(path):
            print(f"  attention: {figure}")
    except ValueError as err:  # a model without attention has no maps
        print(f"  no attention figures: {err}")


def _headline(result: dict) -> str:
    parts = []
    training = result.get("training_return")
    if training:  # seed 003's table 1 metric (eval.final_steps) leads
        mean = training["mean_reward"]
        figure = "no episode" if mean is None else f"{mean:.2f}±{training['std_reward']:.2f}"
        parts.append(
            f"final {training['final_steps']} steps return {figure} "
            f"({training['n_episodes']} training episodes)"
        )
    for name, r in (result.get("policies") or {}).items():
        if r.get("success_rate") is not None:
            parts.append(f"{name} success {r['success_rate']:.0%}")
        parts.append(f"{name} return {r['mean_reward']:.2f}±{r['std_reward']:.2f}")
    if "test_accuracy" in result:
        parts.append(f"test accuracy {result['test_accuracy']:.1%}")
    return ", ".join(parts)


def _resolve_existing(path: Path) -> None:
    if not path.exists():
        raise ConfigError(f"{path} does not exist")


MAX_RUN_DEPTH = 3
"""How deep below an experiment folder :func:`resolve_run` looks for run folders."""


def resolve_run(arg: str | Path) -> Path:
    """The run folder a command argument names.

    A run folder (it holds ``config.yml``) is itself; an experiment folder (run folders
    below it, e.g. ``runs/doorkey``) or ``FOLDER/latest`` names its latest run (by start
    time, said on stderr).

    Raises:
        ConfigError: the path does not exist, or holds no run folder.
    """
    path = Path(arg)
    latest = path.name == "latest" and not path.exists()
    if latest:
        path = path.parent
    _resolve_existing(path)
    if (path / "config.yml").is_file() and not latest:
        return path
    if not path.is_dir():
        raise ConfigError(f"{path} is not a run folder (a folder with config.yml)")
    # runs/<experiment>[/<cell>]/<run>: a bounded search, never a whole disk
    found = [
        p.parent
        for depth in range(1, MAX_RUN_DEPTH + 1)
        for p in path.glob("/".join(["*"] * depth + ["config.yml"]))
    ]
    if not found:
        raise ConfigError(
            f"{path} is not a run folder and holds none (no config.yml up to "
            f"{MAX_RUN_DEPTH} folders below it)"
        )
    # config.yml is written once, when a run starts
    run = max(found, key=lambda p: ((p / "config.yml").stat().st_mtime, str(p)))
    if run != path:
        others = f" (of {len(found)})" if len(found) > 1 else ""
        print(f"attn-zoo: using the latest run in {path}{others}: {run}", file=sys.stderr)
    return run


def _cmd_evaluate(args: argparse.Namespace) -> int:
    import zoo

    run = resolve_run(args.run)
    result = zoo.evaluate(
        run,
        n_episodes=args.episodes,
        which=args.which,
        seed=args.seed,
        write=args.write,
        policies=args.policy,
    )
    printable = {k: v for k, v in result.items() if k != "episodes"}
    print(json.dumps(printable, indent=1) if args.json else f"{run}: {_headline(result)}")
    return 0


def _cmd_record(args: argparse.Namespace) -> int:
    from zoo.record import record

    out = record(
        resolve_run(args.run),
        out=args.out,
        n_steps=args.steps,
        which=args.which,
        seed=args.seed,
        overlay=not args.no_attention,
    )
    print(out)
    return 0


def _cmd_plot(args: argparse.Namespace) -> int:
    from zoo.plots import plot_runs

    out = plot_runs(args.runs, out=args.out, x=args.x)
    print(out)
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from zoo.report import report

    result = report(args.experiment, args.folders, out=args.out, plot=not args.no_plot)
    print(result.table)
    for path in result.written:
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _cmd_robustness(args: argparse.Namespace) -> int:
    from zoo.outputs import output_folder
    from zoo.robustness import check_sweep, not_played, robustness_sweep
    from zoo.robustness_tables import markdown

    rescale = not args.no_rescale
    runs = [resolve_run(run) for run in args.runs]  # RUN/latest as evaluate takes it
    # every spec against every run's env before the first episode
    sweeps = [check_sweep(runs, spec, rescale) for spec in args.sweep]
    out = Path(args.out) if args.out else output_folder(runs[0]) / "robustness"
    failed: list[tuple[str, dict]] = []
    cells = 0
    for sweep in sweeps:
        rows = robustness_sweep(
            runs,
            sweep,
            n_episodes=args.episodes,
            seed=args.seed,
            which=args.which,
            rescale=rescale,
            out=out,
            fresh=args.fresh,
        )
        print(markdown(rows))
        for suffix in ("csv", "md", "png"):
            print(out / f"{sweep.name}.{suffix}")
        failed += [(sweep.name, row) for row in not_played(rows)]
        cells += len(rows)
    if failed:  # the tables say n/a; the exit status says it too
        first = "; ".join(f"{r['experiment']}, {r['condition']}: {r['note']}" for _, r in failed)
        print(
            f"attn-zoo: {len(failed)} of {cells} cells could not be played: {first}",
            file=sys.stderr,
        )
        return 1
    return 0


def _cmd_maps(args: argparse.Namespace) -> int:
    from zoo.run_maps import run_maps

    run = resolve_run(args.run)
    for path in run_maps(run, out_dir=args.out, which=args.which, seed=args.seed):
        print(path)
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    from zoo.pretrained import import_checkpoint

    run = import_checkpoint(args.path, out=args.out, root=args.root)
    print(run.path)
    return 0


RUN_HELP = "run folder, or an experiment folder / FOLDER/latest for its latest run"
OUT_NOTE = (
    "the run folder; for a run folder under version control (git tracks files in it, e.g. "
    "results/...) runs/<its path in the repository> under the current directory instead"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attn-zoo", description="Train, evaluate, record and plot attention-RL experiments."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="list the experiments in zoo/configs")
    p.add_argument("--cells", action="store_true", help="count the runs each matrix expands to")
    p.add_argument("--budget", help=BUDGET_HELP)
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("show", help="print the resolved config of an experiment")
    p.add_argument("name", help="experiment name, YAML path or run folder")
    p.add_argument("--budget", help=BUDGET_HELP)
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    p.add_argument(
        "--limit",
        type=int,
        default=3,
        help="runs to print for a matrix; each printed run is checked as `train` checks it",
    )
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser("train", help="train an experiment (every matrix cell) or resume a run")
    p.add_argument("name", nargs="?", help="experiment name, YAML path or run folder")
    p.add_argument(
        "--budget",
        help=f"{BUDGET_HELP}; a grid of several runs needs it said, or --yes. The first line "
        "printed says the budget and the size of what starts",
    )
    p.add_argument("--yes", action="store_true", help="start every cell of a full grid")
    p.add_argument("--seed", type=int)
    p.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="override config keys (dotted) or pick matrix cells (game=Pong)",
    )
    p.add_argument("--resume", metavar="RUN", help="continue an interrupted run folder")
    p.add_argument("--root", default="runs", help="where run folders go")
    p.add_argument("--run-dir", help="use this folder for the run (one matrix cell only)")
    p.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="run every cell as a Ray task: no ADDRESS uses RAY_ADDRESS or starts a local "
        "Ray; 'auto' joins the running cluster (see zoo.ray_grid)",
    )
    p.add_argument(
        "--max-retries", type=int, default=2, help="resubmissions of a failed cell (--ray)"
    )
    p.add_argument("--no-progress", action="store_true", help="no bar and no progress lines")
    p.add_argument(
        "--progress-every",
        type=float,
        default=progress.DEFAULT_EVERY,
        metavar="SECONDS",
        help="seconds between progress lines when stdout is not a terminal (default 30)",
    )
    p.add_argument(
        "--report",
        action="store_true",
        help="also plot the curves and attention figures into each run folder",
    )
    p.add_argument(
        "--trust-teacher",
        action="append",
        default=[],
        metavar="FILE",
        help="load this pickled BC teacher file (an SB3 .zip, a VecNormalize .pkl): "
        "unpickling runs its code, so only if you trust it (repeatable)",
    )
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("evaluate", help="evaluate a trained run on its test episodes")
    p.add_argument("run", help=RUN_HELP)
    p.add_argument("--episodes", type=int, help="episodes per policy (default eval.final_episodes)")
    p.add_argument("--which", default="best", choices=["best", "last"])
    p.add_argument("--seed", type=int, help="test seed (default: the one behind eval.json)")
    p.add_argument("--write", action="store_true", help="write the result to eval.json")
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.add_argument(
        "--policy",
        action="append",
        help="test this policy mode instead of the run's eval.policies: deterministic, "
        "stochastic or an epsilon (repeatable)",
    )
    p.set_defaults(func=_cmd_evaluate)

    p = sub.add_parser("record", help="record a video, with attention where the model has one")
    p.add_argument("run", help=RUN_HELP)
    p.add_argument("--out", help=f"video file (default video.mp4 in {OUT_NOTE})")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--which", default="best", choices=["best", "last"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-attention", action="store_true")
    p.set_defaults(func=_cmd_record)

    p = sub.add_parser("plot", help="learning curves of runs (mean and spread over seeds)")
    p.add_argument("runs", nargs="+", help="run folders or experiment folders under runs/")
    p.add_argument("--out", help="PNG path (default: curves.png in the first run folder)")
    p.add_argument("--x", default="steps", choices=["steps", "time"])
    p.set_defaults(func=_cmd_plot)

    p = sub.add_parser("report", help="summary table and curves of an experiment E1-E8")
    p.add_argument("experiment", help="E1 ... E8 or its name (mnist, doorkey, ...)")
    p.add_argument("folders", nargs="*", help="run folders, one row each (default: results/)")
    p.add_argument("--out", help="output folder (default results/<experiment>/report)")
    p.add_argument("--no-plot", action="store_true", help="the table only, no curves")
    p.set_defaults(func=_cmd_report)

    p = sub.add_parser(
        "robustness",
        help="test a trained run under perturbations (tables)",
        description="Test trained runs under perturbations: one table per --sweep. Exit "
        "status 1 when a cell could not be played (the agent cannot take the condition: "
        "n/a in the table, the reason in its notes and on stderr).",
    )
    p.add_argument("runs", nargs="+", help=f"{RUN_HELP} (several: one row each, named by folder)")
    p.add_argument(
        "--sweep",
        action="append",
        required=True,
        help="shuffle | reshuffle=T,.. | channels | occlusion=R,.. | background=NAME,.. | "
        "regression (repeatable)",
    )
    p.add_argument("--episodes", type=int, help="episodes per cell (default eval.final_episodes)")
    p.add_argument("--seed", type=int, help="test seed (default eval.test_seed)")
    p.add_argument("--which", default="best", choices=["best", "last"])
    p.add_argument(
        "--out", help=f"folder for the tables (default robustness/ in {OUT_NOTE}; first RUN)"
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="play every cell again, not reusing the finished cells kept in OUT/cells",
    )
    p.add_argument("--no-rescale", action="store_true", help="keep the output scale at 1")
    p.set_defaults(func=_cmd_robustness)

    p = sub.add_parser("maps", help="attention figures of a trained run")
    p.add_argument("run", help=RUN_HELP)
    p.add_argument("--out", help=f"folder for the PNGs (default {OUT_NOTE})")
    p.add_argument("--which", default="best", choices=["best", "last"])
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_cmd_maps)

    p = sub.add_parser(
        "import", help="import a published seed 001 agent (config.gin + model.npz) as a run"
    )
    p.add_argument("path", help="the authors' folder, e.g. AttentionNeuron/pretrained/cartpole_pi")
    p.add_argument("--out", help="run folder to write (default runs/<experiment>/imported-<time>)")
    p.add_argument("--root", default="runs", help="where the default run folder goes")
    p.set_defaults(func=_cmd_import)
    for p in sub.choices.values():
        p.add_argument(
            "--allow-import",
            action="append",
            default=[],
            metavar="PKG",
            help="let configs import this package too (its code runs; repeatable)",
        )
    return parser


USER_ERRORS = (ConfigError, FileNotFoundError, NotADirectoryError, PermissionError, ValueError)
"""What a user can fix (a config, a path, a value): one line, exit 2."""


def _train_folder(args: argparse.Namespace) -> Path | None:
    """The run folder a ``train`` command was writing: the one it started, or the resumed one."""
    return progress.current_run() or (Path(args.resume) if args.resume else None)


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def _internal_error(err: BaseException, args: argparse.Namespace) -> int:
    """Anything else is a bug: say so, where the run folder is, and where the traceback went."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    log = Path(tempfile.gettempdir()) / f"attn-zoo-error-{stamp}.log"
    try:
        text = f"attn-zoo {__version__}: {shlex.join(args.argv)}\n{traceback.format_exc()}"
        atomic_write(log, text)  # never through a link planted in the shared temp folder
    except OSError:
        log = None
    print(f"attn-zoo: internal error: {type(err).__name__}: {_one_line(err)}", file=sys.stderr)
    folder = _train_folder(args) if args.command == "train" else getattr(args, "run", None)
    if folder:
        print(f"  run folder: {folder} (status.json, logs/)", file=sys.stderr)
    if log is not None:
        print(f"  traceback: {log}", file=sys.stderr)
    else:
        traceback.print_exc()
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    program = argv is None  # the program itself, not a caller in Python
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    try:
        if args.allow_import:  # the person running says so; a config never can
            from zoo.registry import allow_imports

            allow_imports(args.allow_import)
        return int(args.func(args) or 0)
    except USER_ERRORS as err:
        print(f"attn-zoo: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nattn-zoo: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError as err:
        if not _stdout_reader_gone():  # another pipe broke (a worker's): a bug, not the reader
            return _internal_error(err, args)
        return _reader_gone(args)
    except Exception as err:
        return _internal_error(err, args)
    finally:
        if program:  # its exit status is decided
            _ignore_interrupts()


def _ignore_interrupts() -> None:
    """Ignore SIGINT and SIGTERM from now on: the interpreter's shutdown takes a while
    (torch's finalisers) and restores the default handlers, so a second Ctrl-C then would
    kill the process by the signal (exit -2) instead of the status the command returned
    (130 for the first one)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has left (poll reports an error on it)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(event & select.POLLERR for _, event in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll, or a stdout without a descriptor
        return False


def _reader_gone(args: argparse.Namespace) -> int:
    """stdout's reader left (``attn-zoo show ... | head``): stop quietly, as shell tools do.

    stdout is pointed at /dev/null first, or the interpreter's final flush raises again. A
    training run stopped this way says on stderr how to resume it.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    folder = _train_folder(args) if args.command == "train" else None
    if folder and _stopped(folder):
        resume = f"attn-zoo train --resume {shlex.quote(str(folder))}"
        try:
            print(f"attn-zoo: stdout closed; to resume: {resume}", file=sys.stderr, flush=True)
        except BrokenPipeError:  # `2>&1 | head`: stderr left too; status.json has the hint
            os.dup2(devnull, sys.stderr.fileno())
    return 128 + 13  # SIGPIPE's exit status


def _stopped(folder: Path) -> bool:
    """Whether the run in ``folder`` was interrupted (not finished); if so its
    ``status.json`` gets the resume command as ``reason``, for when no stderr shows it."""
    from zoo.runs import load

    try:
        handle = load(folder)
    except (OSError, ValueError):  # not a run folder (yet): nothing to resume
        return False
    if handle.status.get("state") != "interrupted":
        return False
    resume = f"attn-zoo train --resume {shlex.quote(str(folder))}"
    handle.write_status(reason=f"output closed; to resume: {resume}")
    return True


if __name__ == "__main__":
    sys.exit(main())
