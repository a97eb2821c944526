"""``attn-zoo``: a thin command line over :mod:`zoo` (``list``, ``show``, ``train``,
``evaluate``, ``record``, ``plot``, ``robustness``, ``maps``)."""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from zoo.config import ConfigError, list_experiments, load_runs, parse_overrides


def _cmd_list(args: argparse.Namespace) -> int:
    from zoo.config import read_family

    for name, path in sorted(list_experiments().items()):
        raw = read_family(path)[name]
        n_cells = len(load_runs(name, budget=args.budget)) if args.cells else None
        cells = f"  [{n_cells} runs]" if n_cells else ""
        print(f"{name:28s} {raw.get('algo', ''):12s} {raw.get('description', '')}{cells}")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    runs = load_runs(args.name, budget=args.budget, overrides=parse_overrides(args.set))
    for run in runs[: args.limit]:
        print(run.to_yaml())
    if len(runs) > args.limit:
        print(f"# ... and {len(runs) - args.limit} more runs ({len(runs)} in all)")
    return 0


def _interrupt_on_signals() -> None:
    """SIGTERM (a scheduler's stop) and SIGINT act as Ctrl-C: checkpoint, then exit 130.

    A job started in the background with ``&`` inherits an ignored SIGINT, so Python would
    not raise KeyboardInterrupt for ``kill -INT``; both handlers are set explicitly.
    """

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, interrupt)


def _cmd_train(args: argparse.Namespace) -> int:
    import zoo

    command = "attn-zoo " + shlex.join(args.argv)
    progress = not args.no_progress and sys.stdout.isatty()
    _interrupt_on_signals()
    try:
        if args.resume:
            runs = [zoo.resume(args.resume, progress_bar=progress)]
        else:
            if not args.name:
                raise ConfigError("train needs an experiment NAME or PATH (or --resume RUN)")
            kwargs = dict(
                budget=args.budget,
                overrides=parse_overrides(args.set),
                seed=args.seed,
                root=args.root,
                progress_bar=progress,
                command=command,
            )
            if args.run_dir:
                runs = [zoo.train(args.name, run_dir=args.run_dir, **kwargs)]
            else:
                runs = zoo.train_all(args.name, **kwargs)
    except KeyboardInterrupt:
        print(
            "\ninterrupted: a checkpoint was saved; continue with "
            "`attn-zoo train --resume RUN_FOLDER`",
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
    from zoo.maps import run_maps
    from zoo.plots import plot_runs

    print(f"  curves: {plot_runs([path])}")
    try:
        for figure in run_maps(path):
            print(f"  attention: {figure}")
    except ValueError as err:  # a model without attention has no maps
        print(f"  no attention figures: {err}")


def _headline(result: dict) -> str:
    parts = []
    for name, r in (result.get("policies") or {}).items():
        if r.get("success_rate") is not None:
            parts.append(f"{name} success {r['success_rate']:.0%}")
        parts.append(f"{name} return {r['mean_reward']:.2f}±{r['std_reward']:.2f}")
    if "test_accuracy" in result:
        parts.append(f"test accuracy {result['test_accuracy']:.1%}")
    return ", ".join(parts)


def _cmd_evaluate(args: argparse.Namespace) -> int:
    import zoo

    result = zoo.evaluate(
        args.run, n_episodes=args.episodes, which=args.which, seed=args.seed, write=args.write
    )
    printable = {k: v for k, v in result.items() if k != "episodes"}
    print(json.dumps(printable, indent=1) if args.json else f"{args.run}: {_headline(result)}")
    return 0


def _cmd_record(args: argparse.Namespace) -> int:
    from zoo.record import record

    out = record(
        args.run,
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


def _cmd_robustness(args: argparse.Namespace) -> int:
    from zoo.robustness import check_sweep, markdown, robustness_sweep

    rescale = not args.no_rescale
    # every spec against every run's env before the first episode
    sweeps = [check_sweep(args.runs, spec, rescale) for spec in args.sweep]
    out = Path(args.out) if args.out else Path(args.runs[0]) / "robustness"
    for sweep in sweeps:
        rows = robustness_sweep(
            args.runs,
            sweep,
            n_episodes=args.episodes,
            seed=args.seed,
            which=args.which,
            rescale=rescale,
            out=out,
        )
        print(markdown(rows))
        for suffix in ("csv", "md", "png"):
            print(out / f"{sweep.name}.{suffix}")
    return 0


def _cmd_maps(args: argparse.Namespace) -> int:
    from zoo.maps import run_maps

    for path in run_maps(args.run, out_dir=args.out, which=args.which, seed=args.seed):
        print(path)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attn-zoo", description="Train, evaluate, record and plot attention-RL experiments."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="list the experiments in zoo/configs")
    p.add_argument("--cells", action="store_true", help="count the runs each matrix expands to")
    p.add_argument("--budget", default="full")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("show", help="print the resolved config of an experiment")
    p.add_argument("name", help="experiment name, YAML path or run folder")
    p.add_argument("--budget", default="full", help="smoke, cpu or full")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    p.add_argument("--limit", type=int, default=3, help="runs to print for a matrix")
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser("train", help="train an experiment (every matrix cell) or resume a run")
    p.add_argument("name", nargs="?", help="experiment name, YAML path or run folder")
    p.add_argument("--budget", default="full", help="smoke, cpu or full (default full)")
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
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--report",
        action="store_true",
        help="also plot the curves and attention figures into each run folder",
    )
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("evaluate", help="evaluate a trained run on its test episodes")
    p.add_argument("run", help="run folder (or results/<experiment>)")
    p.add_argument("--episodes", type=int, help="episodes per policy (default eval.final_episodes)")
    p.add_argument("--which", default="best", choices=["best", "last"])
    p.add_argument("--seed", type=int, help="test seed (default: the one behind eval.json)")
    p.add_argument("--write", action="store_true", help="write the result to eval.json")
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.set_defaults(func=_cmd_evaluate)

    p = sub.add_parser("record", help="record a video, with attention where the model has one")
    p.add_argument("run")
    p.add_argument("--out", help="video file (default RUN/video.mp4)")
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

    p = sub.add_parser("robustness", help="test a trained run under perturbations (tables)")
    p.add_argument("runs", nargs="+", help="run folders (several: one row each)")
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
    p.add_argument("--out", help="folder for the tables (default RUN/robustness)")
    p.add_argument("--no-rescale", action="store_true", help="keep the output scale at 1")
    p.set_defaults(func=_cmd_robustness)

    p = sub.add_parser("maps", help="attention figures of a trained run")
    p.add_argument("run")
    p.add_argument("--out", help="folder for the PNGs (default: the run folder)")
    p.add_argument("--which", default="best", choices=["best", "last"])
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_cmd_maps)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    try:
        return int(args.func(args) or 0)
    except (ConfigError, FileNotFoundError, ValueError) as err:
        print(f"attn-zoo: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
