"""``attn-zoo report``: the summary table and curves of an experiment, from its run folders.

The experiments and their rows are data in :mod:`zoo.experiments`. :func:`report` reads an
experiment's run folders (each run's ``eval.json``, ``status.json`` and ``metrics.csv``),
writes ``summary.md`` (the table and one row per run), ``summary.csv`` (one row per run)
and ``curves.png`` / ``curves.csv`` (:func:`zoo.plots.plot_runs`), and puts the table
between the markers ``<!-- report: ... -->`` and ``<!-- /report -->`` of the experiment's
documentation page (:func:`zoo.results.replace_blocks`), so the numbers in the docs are
generated, never typed.

Example:
    >>> import json, tempfile
    >>> from zoo.experiments import Cell
    >>> root = Path(tempfile.mkdtemp())
    >>> for seed, acc in enumerate([0.9, 0.8]):
    ...     run = root / "cnn" / f"{seed}-20260101-000000"
    ...     run.mkdir(parents=True)
    ...     _ = (run / "eval.json").write_text(json.dumps({"test_accuracy": acc}))
    ...     _ = (run / "status.json").write_text(json.dumps({"seed": seed}))
    >>> exp = Experiment("E0", "demo", "demo", "test accuracy", (Cell("CNN", "cnn/*", "85%"),))
    >>> print(summary_table(collect(exp, root), exp))
    | cell | runs | test accuracy | per run | published |
    | --- | ---: | --- | --- | --- |
    | CNN | 2 | 85.0% ± 7.1% (2 seeds) | 90.0% / 80.0% | 85% |
"""

from __future__ import annotations

import csv
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attn_policies.atomic import atomic_path, atomic_write, make_folder
from zoo.config_checks import ConfigError
from zoo.curve_windows import WINDOW_COLUMNS, window_table
from zoo.dynamics import dynamics_table
from zoo.experiments import Experiment, find_experiment
from zoo.report_chains import plot_chain, recipe_chains
from zoo.results import replace_blocks
from zoo.run_scores import CellResult, RunScore, collect, md_row

__all__ = ["Report", "probe_table", "report", "summary_table"]

MARKER = "report"
"""Name of the page block the table goes into: ``<!-- report: ... -->`` ... ``<!-- /report -->``."""
PROBES_MARKER = "probes"
"""Name of the page block of an experiment's probe table (:attr:`Experiment.probes`)."""


@dataclass(frozen=True)
class Report:
    """What :func:`report` produced: the rows, the table, and the files it wrote."""

    experiment: Experiment
    cells: tuple[CellResult, ...]
    table: str
    written: tuple[Path, ...]


def _fmt(value: float, percent: bool) -> str:
    return f"{value:.1%}" if percent else f"{value:.1f}"


def _score_text(runs: Sequence[RunScore], percent: bool, unit: str) -> str:
    values = [r.score for r in runs]
    if len(values) > 1:
        mean, sd = statistics.mean(values), statistics.stdev(values)
        return f"{_fmt(mean, percent)} ± {_fmt(sd, percent)} ({len(values)} seeds)"
    run = runs[0]
    text = _fmt(run.score, percent)
    if run.score_sd is not None:
        text += f" ± {_fmt(run.score_sd, percent)}"
    if run.episodes:
        text += f" ({run.episodes} {unit})"
    return text


def _final_text(runs: Sequence[RunScore]) -> str:
    finals = [r.final_return for r in runs if r.final_return is not None]
    if not finals:
        return ""
    if len(finals) == 1:
        return f"{finals[0]:.1f}"
    return f"{statistics.mean(finals):.1f} ± {statistics.stdev(finals):.1f}"


def _final_title(exp: Experiment) -> str:
    if exp.final_from_eval:
        return f"last {exp.final:,.0f} frames (eval.json)"
    return f"last {exp.final:.0%} of steps" if exp.final < 1 else f"last {exp.final:,.0f} steps"


def summary_table(cells: Sequence[CellResult], experiment: Experiment) -> str:
    """The Markdown table of :func:`collect`'s rows: score (mean ± sd over seeds, or over
    test episodes for a single run), each run's score where a cell has several, the training
    return at the end where the runs logged it, and the published figure."""
    exp = experiment
    many = any(len(row.runs) > 1 for row in cells)
    finals = [_final_text(row.runs) for row in cells]
    titles = ["cell", "runs", exp.score]
    titles += ["per run"] if many else []
    titles += [f"training return, {_final_title(exp)}"] if any(finals) else []
    lines = [md_row([*titles, "published"]), "| --- | ---: |" + " --- |" * (len(titles) - 1)]
    for row, final in zip(cells, finals, strict=True):
        unit = "test images" if exp.score == "test accuracy" else "episodes"
        values: list[Any] = [
            row.cell.label,
            len(row.runs),
            _score_text(row.runs, exp.percent, unit),
        ]
        if many:
            several = len(row.runs) > 1
            values.append(
                " / ".join(_fmt(r.score, exp.percent) for r in row.runs) if several else ""
            )
        if any(finals):
            values.append(final)
        lines.append(md_row([*values, row.cell.published]))
    return "\n".join(lines)


def _run_rows(cells: Sequence[CellResult]) -> list[list[Any]]:
    rows = []
    for row in cells:
        for r in row.runs:
            rows.append(
                [
                    row.cell.label,
                    r.path.as_posix(),
                    "" if r.seed is None else r.seed,
                    f"{r.score:.6g}",
                    "" if r.score_sd is None else f"{r.score_sd:.6g}",
                    "" if r.episodes is None else r.episodes,
                    "" if r.final_return is None else f"{r.final_return:.6g}",
                    "" if r.num_timesteps is None else r.num_timesteps,
                    "" if r.wall_minutes is None else f"{r.wall_minutes:.1f}",
                ]
            )
    return rows


CSV_COLUMNS = (
    "cell",
    "run",
    "seed",
    "score",
    "score_sd_episodes",
    "episodes",
    "final_return",
    "num_timesteps",
    "wall_minutes",
)


def probe_table(experiment: Experiment, results: str | Path = "results") -> str:
    """The experiment's probes (:attr:`~zoo.experiments.Experiment.probes`) as
    :func:`zoo.dynamics.dynamics_table` renders them, each labelled with its folder's name."""
    runs = {f"{label} (`{Path(p).name}`)": Path(results) / p for label, p in experiment.probes}
    return dynamics_table(runs)


def report(
    name: str,
    folders: Sequence[str | Path] = (),
    *,
    root: str | Path = ".",
    out: str | Path | None = None,
    plot: bool = True,
    windows: float | None = None,
) -> Report:
    """Summarise an experiment's runs: write ``summary.md``, ``summary.csv`` and the curves
    (``curves.png`` and ``curves.csv``; for recipes also ``chain.png`` and ``chain.csv``,
    :func:`zoo.report_chains.plot_chain`) into ``out``, and refresh the page's table.

    Args:
        name: the experiment (:func:`zoo.experiments.find_experiment`).
        folders: run folders (or folders of seed run folders), one row each; default: the
            experiment's cells under ``root/results``.
        root: the repository root (``results/`` and ``docs/`` are under it).
        out: the output folder; default ``root/results/<folder>/report`` for the default
            cells, else ``report`` inside the first folder given.
        plot: draw the curves (off for a quick table).
        windows: also write ``windows.md`` and ``windows.csv``: the training return by
            window of this many steps (:func:`zoo.curve_windows.window_table`).

    An experiment with :attr:`~zoo.experiments.Experiment.probes` also gets ``probes.md``
    and the page's probe block (:func:`zoo.dynamics.dynamics_table`).

    Only the default cells refresh the documentation page (when ``root`` has it; first, so
    a page without its markers stops the report before it writes anything): a table of
    other runs is not the page's evidence.

    Raises:
        ConfigError: unknown experiment, or a cell without finished runs. Nothing is
            written then.
    """
    from zoo.plots import find_run_dirs, plot_runs

    exp = find_experiment(name)
    if windows is not None and not windows > 0:
        raise ConfigError(f"--windows must be a positive number of steps, got {windows:g}")
    root = Path(root)
    cells = collect(exp, root / "results", folders)
    table = summary_table(cells, exp)
    target = (
        Path(out)
        if out is not None
        else (Path(folders[0]) / "report" if folders else root / "results" / exp.folder / "report")
    )
    runs = list(dict.fromkeys(r.path for row in cells for r in row.runs))
    if plot:
        find_run_dirs(runs)  # a run without config.yml fails here, before anything is written
    page = root / exp.page
    # a missing or foreign probe fails here, before anything is written
    probes = probe_table(exp, root / "results") if exp.probes and not folders else ""
    refreshed = False
    if not folders and exp.page and page.is_file():
        blocks = {MARKER: table, PROBES_MARKER: probes} if probes else {MARKER: table}
        refreshed = replace_blocks(page, blocks)  # every marker pair checked before a write
    if out is not None:  # the user's own path
        target.mkdir(parents=True, exist_ok=True)
    else:  # a linked report/ (or results/<folder>/) is replaced, never written through
        make_folder(target, inside=Path(folders[0]) if folders else root)
    run_rows = _run_rows(cells)
    per_run = [
        "| cell | run | seed | score | ± over episodes | episodes | training return | steps "
        "| wall min |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *(md_row(row) for row in run_rows),
    ]
    text = f"# {exp.key} ({exp.name})\n\n{table}\n\n" + "\n".join(per_run) + "\n"
    written = [target / "summary.md", target / "summary.csv"]
    atomic_write(written[0], text)  # a symlink there is replaced, never written through
    with atomic_path(written[1]) as tmp, tmp.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(CSV_COLUMNS)
        writer.writerows(run_rows)
    if plot:
        plotted = [r.path for row in cells if row.cell.plot or folders for r in row.runs]
        curves = target / "curves.png"
        # folders given are cells the config may not tell apart (an A/B of one command):
        # the figure groups them as the table does
        labels = {r.path: row.cell.label for row in cells for r in row.runs} if folders else None
        written.append(plot_runs(list(dict.fromkeys(plotted)), out=curves, x=exp.x, labels=labels))
        chains = recipe_chains(exp.chain, root / "results") if exp.chain and not folders else {}
        if chains:
            title = f"{exp.key}: each recipe seed's stages end to end"
            written.append(plot_chain(chains, target / "chain.png", exp.goal, title))
    if windows:
        by_window, window_rows = window_table(cells, windows)
        written.append(target / "windows.md")  # the table alone: a page can include it
        atomic_write(written[-1], f"{by_window}\n")
        written.append(target / "windows.csv")
        with atomic_path(written[-1]) as tmp, tmp.open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(WINDOW_COLUMNS)
            writer.writerows(window_rows)
    if probes:
        written.append(target / "probes.md")
        atomic_write(written[-1], f"# {exp.key} probes: early policy steps\n\n{probes}\n")
    if refreshed:
        written.append(page)
    return Report(exp, cells, table, tuple(written))
