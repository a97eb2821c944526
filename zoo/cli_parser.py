"""The ``attn-zoo`` argument parser: its subcommands, their options and help texts."""

from __future__ import annotations

import argparse

from zoo import __version__, cli_commands, progress
from zoo.cli_commands import DEFAULT_BUDGET

BUDGET_HELP = (
    f"smoke (seconds), cpu (hours on a laptop) or full (the papers' runs); default "
    f"{DEFAULT_BUDGET}, or full for a config that has no {DEFAULT_BUDGET} budget"
)


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
    p.set_defaults(func=cli_commands.cmd_list)

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
    p.set_defaults(func=cli_commands.cmd_show)

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
    p.set_defaults(func=cli_commands.cmd_train)

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
    p.set_defaults(func=cli_commands.cmd_evaluate)

    p = sub.add_parser("record", help="record a video, with attention where the model has one")
    p.add_argument("run", help=RUN_HELP)
    p.add_argument("--out", help=f"video file (default video.mp4 in {OUT_NOTE})")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--which", default="best", choices=["best", "last"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-attention", action="store_true")
    p.set_defaults(func=cli_commands.cmd_record)

    p = sub.add_parser("plot", help="learning curves of runs (mean and spread over seeds)")
    p.add_argument("runs", nargs="+", help="run folders or experiment folders under runs/")
    p.add_argument("--out", help="PNG path (default: curves.png in the first run folder)")
    p.add_argument("--x", default="steps", choices=["steps", "time"])
    p.set_defaults(func=cli_commands.cmd_plot)

    p = sub.add_parser("report", help="summary table and curves of an experiment E1-E8")
    p.add_argument("experiment", help="E1 ... E8 or its name (mnist, doorkey, ...)")
    p.add_argument("folders", nargs="*", help="run folders, one row each (default: results/)")
    p.add_argument("--out", help="output folder (default results/<experiment>/report)")
    p.add_argument("--no-plot", action="store_true", help="the table only, no curves")
    p.add_argument(
        "--windows",
        type=float,
        metavar="STEPS",
        help="also windows.md/.csv: each cell's training return per window of STEPS steps",
    )
    p.set_defaults(func=cli_commands.cmd_report)

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
    p.set_defaults(func=cli_commands.cmd_robustness)

    p = sub.add_parser("maps", help="attention figures of a trained run")
    p.add_argument("run", help=RUN_HELP)
    p.add_argument("--out", help=f"folder for the PNGs (default {OUT_NOTE})")
    p.add_argument("--which", default="best", choices=["best", "last"])
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cli_commands.cmd_maps)

    p = sub.add_parser(
        "import", help="import a published seed 001 agent (config.gin + model.npz) as a run"
    )
    p.add_argument("path", help="the authors' folder, e.g. AttentionNeuron/pretrained/cartpole_pi")
    p.add_argument("--out", help="run folder to write (default runs/<experiment>/imported-<time>)")
    p.add_argument("--root", default="runs", help="where the default run folder goes")
    p.add_argument(
        "--restore",
        metavar="FOLDER",
        help="write model.pt back into FOLDER, an import committed without the authors' weights",
    )
    p.set_defaults(func=cli_commands.cmd_import)
    for p in sub.choices.values():
        p.add_argument(
            "--allow-import",
            action="append",
            default=[],
            metavar="PKG",
            help="let configs import this package too (its code runs; repeatable)",
        )
        p.add_argument(
            "--allow-writer",
            action="append",
            default=[],
            metavar="CLASS",
            help="let configs name this class that writes files where its arguments say, "
            "e.g. RecordVideo (repeatable)",
        )
    return parser
