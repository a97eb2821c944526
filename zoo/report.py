"""``attn-zoo report``: the summary table and curves of an experiment, from its run folders.

The experiments and their rows are data in :mod:`zoo.experiments`. :func:`report` reads an
experiment's run folders (each run's ``eval.json``, ``status.json`` and ``metrics.csv``),
writes ``summary.md`` (the table and one row per run), ``summary.csv`` (one row per run)
and ``curves.png`` / ``curves.csv`` (:func:`zoo.plots.plot_runs`), and puts the table
between the markers ``<!-- report: ... -->`` and ``<!-- /report -->`` of the experiment's
documentation page (:func:`zoo.results.replace_blocks`), so the numbers in the docs are
generated, never typed.

Example:
    >>> import tempfile
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
import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attn_policies.atomic import atomic_path, atomic_write
from zoo.config_checks import ConfigError
from zoo.dynamics import dynamics_table
from zoo.experiments import Cell, Experiment, find_experiment
from zoo.metrics import read_metrics, series
from zoo.results import eval_policy, final_return, replace_blocks

__all__ = [
    "CellResult",
    "Report",
    "RunScore",
    "chain_rows",
    "collect",
    "curves_match",
    "plot_chain",
    "probe_table",
    "read_score",
    "recipe_chains",
    "report",
    "runs_in",
    "summary_table",
    "window_returns",
    "window_table",
]

MARKER = "report"
"""Name of the page block the table goes into: ``<!-- report: ... -->`` ... ``<!-- /report -->``."""
PROBES_MARKER = "probes"
"""Name of the page block of an experiment's probe table (:attr:`Experiment.probes`)."""


@dataclass(frozen=True)
class RunScore:
    """What a table reads of one run folder (:func:`read_score`)."""

    path: Path
    seed: int | None
    score: float
    score_sd: float | None  # over the test episodes
    episodes: int | None
    final_return: float | None  # training episodes' return at the end, when logged
    num_timesteps: int | None
    wall_minutes: float | None


@dataclass(frozen=True)
class CellResult:
    cell: Cell
    runs: tuple[RunScore, ...]


@dataclass(frozen=True)
class Report:
    """What :func:`report` produced: the rows, the table, and the files it wrote."""

    experiment: Experiment
    cells: tuple[CellResult, ...]
    table: str
    written: tuple[Path, ...]


def runs_in(folder: Path) -> list[Path]:
    """``folder`` if it is a finished run folder (it has ``eval.json``), else the ones
    directly inside it, sorted."""
    if (folder / "eval.json").is_file():
        return [folder]
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if (p / "eval.json").is_file())


def read_score(
    run: str | Path,
    score: str,
    policy: str | None = None,
    final: float = 0.1,
    final_from_eval: bool = False,
) -> RunScore:
    """One run's score (see :class:`zoo.experiments.Experiment`), its spread over test
    episodes, and its training episodes' final return (:func:`zoo.results.final_return`)
    when it logged any.

    Raises:
        ConfigError: ``eval.json`` lacks the score or the policy.
    """
    run = Path(run)
    result = json.loads((run / "eval.json").read_text())
    status_file = run / "status.json"
    status: dict[str, Any] = json.loads(status_file.read_text()) if status_file.is_file() else {}
    sd: float | None = None
    episodes: int | None = None
    if score == "test accuracy":
        if "test_accuracy" not in result:
            raise ConfigError(f"{run}/eval.json has no test_accuracy")
        value = float(result["test_accuracy"])
        episodes = result.get("n_test")
    else:
        entry = eval_policy(result, policy)
        if entry is None:
            tested = sorted(result.get("policies") or {})
            raise ConfigError(f"{run}/eval.json has no policy {policy!r} (has {tested})")
        key = "success_rate" if "success" in score else "mean_reward"
        value = float(entry[key])
        sd = None if key == "success_rate" else float(entry["std_reward"])
        episodes = entry.get("n_episodes")
    return RunScore(
        path=run,
        seed=status.get("seed"),
        score=value,
        score_sd=sd,
        episodes=episodes,
        final_return=_from_eval(result) if final_from_eval else _final_return(run, final),
        num_timesteps=status.get("num_timesteps"),
        wall_minutes=status["wall_seconds"] / 60 if "wall_seconds" in status else None,
    )


def _from_eval(result: dict[str, Any]) -> float | None:
    training = result.get("training_return")
    return None if training is None else float(training["mean_reward"])


def _final_return(run: Path, final: float) -> float | None:
    if not (run / "metrics.csv").is_file():
        return None
    steps, returns = series(read_metrics(run), "episode_return")
    if len(steps) == 0:
        return None
    fraction = final if final < 1 else min(1.0, final / float(np.max(steps)))
    return final_return(steps, returns, fraction)


def collect(
    experiment: Experiment, results: str | Path = "results", folders: Sequence[str | Path] = ()
) -> tuple[CellResult, ...]:
    """The experiment's rows: its cells (:data:`zoo.experiments.EXPERIMENTS`) under
    ``results``, or one row per folder of ``folders`` (a run folder, or a folder of seed run
    folders).

    Raises:
        ConfigError: a cell or folder holds no finished run folder.
    """
    if folders:
        cells = [Cell(str(f), "", "", None) for f in folders]
        groups = [runs_in(Path(f)) for f in folders]
    else:
        cells = list(experiment.cells)
        root = Path(results)
        groups = [
            [run for match in sorted(root.glob(c.pattern)) for run in runs_in(match)] for c in cells
        ]
    rows = []
    for cell, runs in zip(cells, groups, strict=True):
        if not runs:
            where = cell.label if folders else f"{results}/{cell.pattern}"
            raise ConfigError(f"{where}: no finished run folder (a folder with eval.json)")
        scores = tuple(
            read_score(
                r, experiment.score, cell.policy, experiment.final, experiment.final_from_eval
            )
            for r in runs
        )
        rows.append(CellResult(cell, scores))
    return tuple(rows)


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
    lines = [_md_row([*titles, "published"]), "| --- | ---: |" + " --- |" * (len(titles) - 1)]
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
        lines.append(_md_row([*values, row.cell.published]))
    return "\n".join(lines)


def window_returns(run: str | Path, width: float) -> np.ndarray:
    """Mean return of the training episodes that ended in each window of ``width`` steps,
    ``(0, width]``, ``(width, 2 width]``, ...; NaN where none ended.

    Example:
        >>> import tempfile
        >>> run = Path(tempfile.mkdtemp())
        >>> rows = ["step,wall_time,metric,value"]
        >>> rows += [f"{s},0,episode_return,{v}" for s, v in [(40, -21), (100, -19), (250, -15)]]
        >>> _ = (run / "metrics.csv").write_text("\\n".join(rows) + "\\n")
        >>> window_returns(run, 100).tolist()  # an episode ending at step 100 is in (0, 100]
        [-20.0, nan, -15.0]
    """
    steps, returns = series(read_metrics(run), "episode_return")
    if len(steps) == 0:
        return np.zeros(0)
    index = np.maximum(np.ceil(steps / width).astype(int) - 1, 0)
    counts = np.bincount(index)
    sums = np.bincount(index, weights=returns)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _steps_text(steps: float) -> str:
    for size, suffix in ((1e6, "M"), (1e3, "k")):
        if steps >= size:
            return f"{steps / size:g}{suffix}"
    return f"{steps:g}"


def _window_grid(cell: CellResult, width: float) -> np.ndarray:
    """:func:`window_returns` of each run of ``cell``, ``(runs, windows)``, NaN-padded."""
    per_run = [window_returns(r.path, width) for r in cell.runs]
    grid = np.full((len(per_run), max((len(w) for w in per_run), default=0)), np.nan)
    for i, values in enumerate(per_run):
        grid[i, : len(values)] = values
    return grid


def window_table(cells: Sequence[CellResult], width: float) -> tuple[str, list[list[Any]]]:
    """Each cell's training return by window of ``width`` steps (:func:`window_returns`):
    the mean over its runs ± their sd, each run's figure after it; and the rows per run and
    window for a CSV (``cell, run, seed, window_start, window_end, mean_return``).

    A learning-curve A/B reads here whether one change moves the curve more than seeds do.
    """
    grids = [_window_grid(row, width) for row in cells]
    n = max((g.shape[1] for g in grids), default=0)
    heads = [f"{_steps_text(k * width)}-{_steps_text((k + 1) * width)}" for k in range(n)]
    lines = [_md_row(["cell", "runs", *heads]), "| --- | ---: |" + " ---: |" * n]
    rows: list[list[Any]] = []
    for row, grid in zip(cells, grids, strict=True):
        grid = np.pad(grid, ((0, 0), (0, n - grid.shape[1])), constant_values=np.nan)
        texts = []
        for k in range(n):
            column = grid[:, k][~np.isnan(grid[:, k])]
            if len(column) == 0:
                texts.append("")
            elif len(column) == 1:
                texts.append(f"{column[0]:.1f}")
            else:
                each = " / ".join(f"{v:.1f}" for v in column)
                texts.append(f"{column.mean():.1f} ± {column.std(ddof=1):.1f} ({each})")
        lines.append(_md_row([row.cell.label, len(row.runs), *texts]))
        for r, values in zip(row.runs, grid, strict=True):
            for k, value in enumerate(values):
                if not np.isnan(value):
                    seed = "" if r.seed is None else r.seed
                    start, end = int(k * width), int((k + 1) * width)
                    rows.append(
                        [row.cell.label, r.path.as_posix(), seed, start, end, f"{value:.6g}"]
                    )
    return "\n".join(lines), rows


def curves_match(
    base: CellResult,
    new: CellResult,
    width: float,
    window_tolerance: float = 1.0,
    test_sds: float = 2.0,
) -> dict[str, Any]:
    """A learning-curve A/B of two cells (same command, one change), by a rule fixed in
    advance: ``new`` matches ``base`` when, in every window of ``width`` steps, its mean
    training return over seeds (:func:`window_returns`) is within ``window_tolerance`` of
    ``base``'s, and its mean test score within ``base``'s mean ± ``test_sds`` sd over seeds.

    Returns the figures behind the verdict (JSON-ready) and ``"match"``; windows where
    either cell has no episode are left out of the rule, and the result says how many.

    Raises:
        ValueError: ``base`` has fewer than two runs (no sd over seeds to compare with).
    """
    if len(base.runs) < 2:
        raise ValueError(f"{base.cell.label}: an A/B needs at least two base seeds")

    def means(cell: CellResult) -> np.ndarray:  # NaN where no run has an episode
        grid = _window_grid(cell, width)
        counts = (~np.isnan(grid)).sum(axis=0)
        with np.errstate(invalid="ignore"):
            return np.nansum(grid, axis=0) / counts

    a, b = means(base), means(new)
    n = min(len(a), len(b))
    gaps = np.abs(b[:n] - a[:n])
    compared = ~np.isnan(gaps)
    base_tests = [r.score for r in base.runs]
    mean, sd = statistics.mean(base_tests), statistics.stdev(base_tests)
    new_test = statistics.mean(r.score for r in new.runs)
    windows_hold = bool(np.all(gaps[compared] <= window_tolerance))
    test_holds = abs(new_test - mean) <= test_sds * sd
    return {
        "base": base.cell.label,
        "new": new.cell.label,
        "seeds": [len(base.runs), len(new.runs)],
        "window_steps": width,
        "window_means": [[round(float(x), 3) for x in a[:n]], [round(float(x), 3) for x in b[:n]]],
        "windows_compared": int(compared.sum()),
        "largest_window_gap": round(float(gaps[compared].max()), 3) if compared.any() else None,
        "window_tolerance": window_tolerance,
        "test": {
            "base_mean": round(mean, 3),
            "base_sd": round(sd, 3),
            "new_mean": round(new_test, 3),
            "sds": test_sds,
        },
        "match": windows_hold and test_holds,
    }


WINDOW_COLUMNS = ("cell", "run", "seed", "window_start", "window_end", "mean_return")


def _md_row(values: Sequence[Any]) -> str:
    """A Markdown table row; an empty cell is ``| |``."""
    return "|" + "|".join(f" {v} " if str(v) else " " for v in values) + "|"


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


def chain_rows(stages: Sequence[str | Path]) -> list[tuple[str, str, float, float]]:
    """A curriculum's stages end to end: ``(stage, kind, minutes, mean return)`` rows.

    Each stage's periodic checks (``evaluations.json``: ``test_mean`` at an ``update`` or
    ``generation``) are placed at the wall time they were reached, assuming an even pace
    through the stage (``status.json``'s ``wall_seconds`` over its count), after the wall
    time of the stages before it (kind ``check``); its final test (``eval.json``'s first
    policy) at its end (kind ``final``).

    Example:
        >>> import tempfile
        >>> stage = Path(tempfile.mkdtemp()) / "1_hold"
        >>> stage.mkdir()
        >>> status = {"wall_seconds": 120.0, "update": 10}
        >>> _ = (stage / "status.json").write_text(json.dumps(status))
        >>> checks = [{"update": 5, "test_mean": 1.0}, {"update": 10, "test_mean": 3.0}]
        >>> _ = (stage / "evaluations.json").write_text(json.dumps(checks))
        >>> final = {"policies": {"deterministic": {"mean_reward": 2.5}}}
        >>> _ = (stage / "eval.json").write_text(json.dumps(final))
        >>> for row in chain_rows([stage, stage]):  # the same stage twice: 2 min each
        ...     print(row)
        ('1_hold', 'check', 1.0, 1.0)
        ('1_hold', 'check', 2.0, 3.0)
        ('1_hold', 'final', 2.0, 2.5)
        ('1_hold', 'check', 3.0, 1.0)
        ('1_hold', 'check', 4.0, 3.0)
        ('1_hold', 'final', 4.0, 2.5)
    """
    rows: list[tuple[str, str, float, float]] = []
    offset = 0.0
    for stage in map(Path, stages):
        status = json.loads((stage / "status.json").read_text())
        wall = float(status["wall_seconds"])
        count = "update" if "update" in status else "generation"
        total = max(float(status[count]), 1.0)
        for check in json.loads((stage / "evaluations.json").read_text()):
            minutes = (offset + wall * check[count] / total) / 60
            rows.append((stage.name, "check", round(minutes, 2), float(check["test_mean"])))
        offset += wall
        if (stage / "eval.json").is_file():
            policies = json.loads((stage / "eval.json").read_text())["policies"]
            score = float(next(iter(policies.values()))["mean_reward"])
            rows.append((stage.name, "final", round(offset / 60, 2), score))
    return rows


def plot_chain(
    chains: Mapping[str, Sequence[str | Path]],
    out: str | Path,
    goal: float | None = None,
    title: str = "",
) -> Path:
    """Draw each chain of :func:`chain_rows` (a recipe seed's stages, by label) as one line of
    its checks against wall time from scratch, its stages' final tests as dots of the same
    colour, to the PNG ``out``; the rows go to a CSV beside it (same stem, with a ``run``
    column); returns the PNG path."""
    from attn_policies.canvas import new_figure, save_figure

    out = Path(out)
    fig = new_figure(8.0, 4.5)
    ax = fig.subplots()
    table: list[tuple[str, str, str, float, float]] = []
    for label, stages in chains.items():
        rows = chain_rows(stages)
        table += [(label, *row) for row in rows]
        checks = [r for r in rows if r[1] == "check"]
        (line,) = ax.plot([r[2] for r in checks], [r[3] for r in checks], lw=1, label=label)
        finals = [r for r in rows if r[1] == "final"]
        ax.plot([r[2] for r in finals], [r[3] for r in finals], "o", ms=4, color=line.get_color())
    if goal is not None:
        ax.axhline(goal, color="r", lw=0.8, ls=":", label=f"goal {goal:g}")
    ax.set_xlabel("wall minutes from scratch (stages end to end; dots: each stage's test)")
    ax.set_ylabel("mean test return")
    ax.set_title(title or "recipe stages end to end")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    save_figure(fig, out, dpi=110)
    with atomic_path(out.with_suffix(".csv")) as tmp, tmp.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(("run", "stage", "kind", "minutes", "mean_return"))
        writer.writerows(table)
    return out


def recipe_chains(pattern: str, results: str | Path) -> dict[str, list[Path]]:
    """The stage folders (``stages/<k>_<name>``, in order) of each recipe run folder that
    ``pattern`` matches under ``results``, labelled ``seed S``."""
    chains: dict[str, list[Path]] = {}
    for run in sorted(Path(results).glob(pattern)):
        stages = sorted(
            (p for p in (run / "stages").glob("*_*") if p.is_dir()),
            key=lambda p: int(p.name.split("_", 1)[0]),
        )
        status = run / "status.json"
        seed = json.loads(status.read_text()).get("seed") if status.is_file() else None
        if stages:
            chains[run.name if seed is None else f"seed {seed}"] = stages
    return chains


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
    :func:`plot_chain`) into ``out``, and refresh the page's table.

    Args:
        name: the experiment (:func:`zoo.experiments.find_experiment`).
        folders: run folders (or folders of seed run folders), one row each; default: the
            experiment's cells under ``root/results``.
        root: the repository root (``results/`` and ``docs/`` are under it).
        out: the output folder; default ``root/results/<folder>/report`` for the default
            cells, else ``report`` inside the first folder given.
        plot: draw the curves (off for a quick table).
        windows: also write ``windows.md`` and ``windows.csv``: the training return by
            window of this many steps (:func:`window_table`).

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
    target.mkdir(parents=True, exist_ok=True)
    run_rows = _run_rows(cells)
    per_run = [
        "| cell | run | seed | score | ± over episodes | episodes | training return | steps "
        "| wall min |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *(_md_row(row) for row in run_rows),
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
