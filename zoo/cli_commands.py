"""The ``attn-zoo`` commands, one function each (``cmd_<name>(args) -> exit status``), and
what they share: the budget and size of a run, the headline of a result, the run folder a
command argument names."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

# Only light modules here: torch, SB3 and gymnasium load inside the commands that use them,
# so `attn-zoo --help` answers at once.
from zoo import progress
from zoo.cli_streams import (
    OutputClosed,
    guarded_output,
    quiet_native_stderr,
    reader_gone,
    train_folder,
)
from zoo.config import ConfigError, RunConfig, list_experiments, load_runs, parse_overrides
from zoo.trainers.keys import values


def cmd_list(args: argparse.Namespace) -> int:
    """``attn-zoo list``: the experiments in ``zoo/configs``, one line each."""
    from zoo.config import read_family

    for name, path in sorted(list_experiments().items()):
        raw = read_family(path)[name]
        n_cells = len(load_runs(name, budget=_budget(name, args.budget))) if args.cells else None
        cells = f"  [{n_cells} runs]" if n_cells else ""
        print(f"{name:28s} {raw.get('algo', ''):12s} {raw.get('description', '')}{cells}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """``attn-zoo show``: an experiment's resolved runs as YAML, each checked as ``train``
    checks it; a run folder's config, the folder opened as ``evaluate`` opens it."""
    from zoo.trainers import get_trainer
    from zoo.trainers.keys import defaults_comment

    budget = _budget(args.name, args.budget)
    runs = load_runs(args.name, budget=budget, overrides=parse_overrides(args.set))
    folder = Path(args.name)
    notes: list[str] = []
    if folder.is_dir():
        notes = _open_run_folder(folder, runs)
    else:
        with quiet_native_stderr():  # an emulator's banner is no part of a config
            for run in runs[: args.limit]:
                get_trainer(run.algo).probe(run)  # as `train` checks it: env and model built
    for run in runs[: args.limit]:
        print(run.to_yaml())
        defaults = defaults_comment(get_trainer(run.algo).config_model, run)
        if defaults:
            print(defaults)
    if notes:
        print("\n".join(["# this folder:", *(f"#   {note}" for note in notes)]))
    if len(runs) > args.limit:
        print(f"# ... and {len(runs) - args.limit} more runs ({len(runs)} in all)")
    return 0


def _open_run_folder(folder: Path, runs: list[RunConfig]) -> list[str]:
    """Open a run folder as ``evaluate`` opens it, not as ``train`` would start it: the header
    names the budget and cell it ran (``status.json``) and its trained model is built from its
    weights (tensors only; weights that do not fit the config are an error). Returns notes: a
    warm start or teacher that is not here (training read it, showing does not) and missing
    weights (an imported agent is committed without the authors')."""
    from zoo.runs import Run, absent_sources, from_status

    handle = Run(folder, runs[0])
    status = handle.status
    for run in runs:
        from_status(status, run)
    notes = [
        f"{key}: {value} is not here (read when the run trained; not needed to show or evaluate it)"
        for key, value in absent_sources(handle.config).items()
    ]
    try:
        with quiet_native_stderr():
            handle.model()
    except FileNotFoundError as err:
        notes.append(str(err))
    return notes


def _run_size(run: RunConfig) -> tuple[int, str]:
    """``(env steps or 0 when unknown in advance, how the run's length is counted)``."""
    body = run.body
    if run.algo == "recipe":
        from zoo.trainers.recipe_trainer import plan, stage_config

        sizes = [(s.name, _run_size(stage_config(run, s, None))) for s in plan(run)]
        steps = sum(size[0] for _, size in sizes)
        return steps, f"{len(sizes)} stages ({'; '.join(f'{n}: {t}' for n, (_, t) in sizes)})"
    if run.algo == "cmaes":
        from zoo.trainers.cmaes_trainer import CMAESKeys

        cmaes = values(CMAESKeys, run)
        episodes = int(cmaes.population) * int(cmaes.repeats)
        return 0, f"{int(cmaes.n_generations):,} generations x {episodes:,} episodes"
    if run.algo == "classifier":
        from zoo.trainers.classifier_trainer import ClassifierKeys

        return 0, f"{int(values(ClassifierKeys, run).iterations):,} iterations"
    if run.algo == "apg":
        from zoo.trainers.apg_trainer import APGKeys

        apg = values(APGKeys, run)
        size = f"{int(apg.batch_size):,} x {int(apg.window):,} steps"
        return 0, f"{int(apg.n_updates):,} updates of {size}"
    if run.algo == "dagger":
        from zoo.trainers.dagger_trainer import DAggerKeys

        dagger = values(DAggerKeys, run)
        return 0, f"{int(dagger.n_rounds):,} rounds x {int(dagger.n_envs):,} episodes"
    steps = int(body.get("n_timesteps") or 0)
    return steps, f"{steps:,} steps"


DEFAULT_BUDGET = "cpu"
"""The budget when none is given: hours on a laptop's CPU, not the papers' days (``full``);
a config without a ``cpu`` budget runs as written (``full``)."""


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


def cmd_train(args: argparse.Namespace) -> int:
    """``attn-zoo train``: train an experiment (every cell) or resume a run; it stops as on
    Ctrl-C when stdout's reader leaves."""
    try:
        with guarded_output():
            return _train(args)
    except OutputClosed:
        return reader_gone(args)


def _train(args: argparse.Namespace) -> int:
    import zoo

    command = "attn-zoo " + shlex.join(args.argv)
    tty = sys.stdout.isatty()
    bar = not args.no_progress and tty
    # without a terminal: the run folder first, then a line every --progress-every seconds
    progress.configure(on=not args.no_progress and not tty, every=args.progress_every)
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
                kwargs.pop("progress_bar")
                every = None if args.no_progress else args.progress_every
                return _train_grid(
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
        folder = train_folder(args)
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
        print(f"{run.path}: {headline(run.eval)}")
        if args.report:
            _report(run.path)
    return 0


def _train_grid(name: str, command: str, **kwargs: Any) -> int:
    """``attn-zoo train NAME --ray``: the grid (:func:`zoo.ray_grid.run_grid`, ``kwargs`` as
    for it), a summary, and the exit code: 0, 1 if a cell failed, 130 after Ctrl-C."""
    from zoo.ray_grid import run_grid  # Ray is optional: only --ray needs it

    try:
        result = run_grid(name, command=command, **kwargs)
    except KeyboardInterrupt:
        print(
            f"\ninterrupted: the running cells saved a checkpoint; run `{command}` again "
            "to resume them (finished cells are skipped)",
            file=sys.stderr,
        )
        return 130
    print(result.summary())
    if not result.ok:
        print(f"rerun `{command}` to retry the failed cells", file=sys.stderr)
    return 0 if result.ok else 1


def _report(path: Path) -> None:
    """Learning curves and, where the model has attention, its figures, into the run folder."""
    from zoo.plots import plot_runs
    from zoo.run_maps import run_maps

    print(f"  curves: {plot_runs([path])}")
    try:
        for figure in run_maps(path):
            print(f"  attention: {figure}")
    except ConfigError as err:  # a model without attention has no maps
        print(f"  no attention figures: {err}")


def headline(result: dict) -> str:
    """A result (``eval.json``) in one line: the final training return, each policy's test
    return (and success rate), a classifier's test accuracy."""
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


def cmd_evaluate(args: argparse.Namespace) -> int:
    """``attn-zoo evaluate``: a trained run on its test episodes."""
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
    print(json.dumps(printable, indent=1) if args.json else f"{run}: {headline(result)}")
    return 0


def cmd_record(args: argparse.Namespace) -> int:
    """``attn-zoo record``: a video of a run, with its attention where the model has one."""
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


def cmd_plot(args: argparse.Namespace) -> int:
    """``attn-zoo plot``: learning curves of runs."""
    from zoo.plots import plot_runs

    out = plot_runs(args.runs, out=args.out, x=args.x)
    print(out)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """``attn-zoo report``: an experiment's summary table and curves."""
    from zoo.report import report

    result = report(
        args.experiment, args.folders, out=args.out, plot=not args.no_plot, windows=args.windows
    )
    print(result.table)
    for path in result.written:
        print(f"wrote {path}", file=sys.stderr)
    return 0


def cmd_robustness(args: argparse.Namespace) -> int:
    """``attn-zoo robustness``: runs under perturbations; 1 when a cell could not be played."""
    from zoo.outputs import make_output_folder
    from zoo.robustness import check_sweep, not_played, robustness_sweep
    from zoo.robustness_tables import markdown

    rescale = not args.no_rescale
    runs = [resolve_run(run) for run in args.runs]  # RUN/latest as evaluate takes it
    # every spec against every run's env before the first episode
    sweeps = [check_sweep(runs, spec, rescale) for spec in args.sweep]
    # the default folder as robustness_sweep makes it (a linked robustness/ is replaced)
    out = Path(args.out) if args.out else make_output_folder(runs[0], "robustness")
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


def cmd_maps(args: argparse.Namespace) -> int:
    """``attn-zoo maps``: a run's attention figures."""
    from zoo.run_maps import run_maps

    run = resolve_run(args.run)
    for path in run_maps(run, out_dir=args.out, which=args.which, seed=args.seed):
        print(path)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    """``attn-zoo import``: a published seed 001 agent as a run folder."""
    from zoo.pretrained import import_checkpoint, restore_weights

    if args.restore is not None:
        if args.out is not None:
            raise ConfigError("--restore writes into its FOLDER: --out does not apply")
        print(restore_weights(args.path, args.restore))
        return 0
    run = import_checkpoint(args.path, out=args.out, root=args.root)
    print(run.path)
    return 0
