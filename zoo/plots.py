"""Learning curves of run folders: mean and min-max band over seeds, one PNG and its CSV.

:func:`plot_runs` reads what training leaves in each run folder (see :mod:`zoo.runs`):

- ``monitor/train_<i>.monitor.csv``: episode return and length against env steps (or wall
  time), smoothed with a rolling mean over :data:`SMOOTH_EPISODES` episodes;
- ``logs/part<k>/progress.csv``: SB3's ``train/loss`` (``train/value_loss`` for A2C, which
  logs no total loss) against ``time/total_timesteps``, parts concatenated in order (each
  resume starts a new part);
- ``evaluations.json``: the periodic evaluations' ``success_rate`` and ``mean_reward`` of
  every policy mode;
- ``history.csv`` of classifier runs: loss, test and train accuracy against iterations;
- ``progress.csv`` of CMA-ES runs: best, mean and worst fitness of each generation and the
  periodic test returns of the favourite solution.

Runs are grouped by experiment and matrix cell (``config.yml`` header), so the seeds of one
cell share a curve: their curves are interpolated onto a common grid over the steps all of
them reached and drawn as the mean with a min-max band; a group of one run is drawn as is.

Step of an episode end (an approximation): Monitor files record only each episode's length
and end time, so the episodes of all ``train_<i>`` files are merged in order of their end
time and the step of an episode end is the running sum of the lengths so far. With ``n``
parallel envs this misses the unfinished episodes of the other envs, so the axis runs behind
the true step count by less than ``n - 1`` episode lengths; it is exact for one env.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

SMOOTH_EPISODES = 20
"""Width of the rolling mean over episodes of the return and length curves."""
MAX_POINTS = 200
"""Grid points of a group's interpolated curve (fewer when its runs logged fewer)."""
CSV_COLUMNS = ("group", "x", "metric", "mean", "lo", "hi", "n")

Curve = tuple[np.ndarray, np.ndarray]

# panel key -> (title, y label, y scale); panels are drawn in this order when they have data.
PANELS: dict[str, tuple[str, str, str]] = {
    "return": ("episode return", f"return (rolling mean of {SMOOTH_EPISODES})", "linear"),
    "length": ("episode length", f"length (rolling mean of {SMOOTH_EPISODES})", "linear"),
    "loss": ("training loss", "loss", "log"),
    "success": ("evaluation success rate", "success rate", "linear"),
    "reward": ("evaluation mean return", "mean return", "linear"),
    "fitness": ("population fitness (mean return over repeats)", "fitness", "linear"),
    "classifier_loss": ("classifier loss", "NLL loss", "log"),
    "accuracy": ("classifier accuracy", "accuracy", "linear"),
}
_STYLES = ("-", "--", ":", "-.")


@dataclass
class RunData:
    """The curves of one run folder.

    Attributes:
        path: the run folder.
        name: ``experiment`` or ``experiment/tag``.
        budget: the budget it ran with.
        curves: metric -> ``(x, y)`` arrays, ``x`` increasing.
        xlabels: metric -> what ``x`` is (``"env steps"``, ``"wall time [s]"``, ``"iteration"``).
    """

    path: Path
    name: str
    budget: str
    curves: dict[str, Curve] = field(default_factory=dict)
    xlabels: dict[str, str] = field(default_factory=dict)


def find_run_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """Run folders among ``paths``: each is one (it has ``config.yml``) or is searched below.

    Raises:
        FileNotFoundError: for a path that does not exist or holds no run folder.
    """
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if (path / "config.yml").is_file():
            runs = [path]
        elif path.is_dir():
            runs = sorted(p.parent for p in path.rglob("config.yml"))
        else:
            raise FileNotFoundError(f"{path} does not exist")
        if not runs:
            raise FileNotFoundError(f"{path} holds no run folder (no config.yml below it)")
        found.extend(r for r in runs if r not in found)
    return found


def run_identity(path: Path) -> tuple[str, str, str]:
    """``(name, budget, algo)`` of a run folder, read from its ``config.yml``.

    The matrix cell is only in the header comment that :meth:`RunConfig.to_yaml` writes
    (``# atari_nonlocal/Pong-fc (budget cpu), ...``); without it the experiment name is used.
    """
    text = (path / "config.yml").read_text()
    data = yaml.safe_load(text) or {}
    experiment, body = next(iter(data.items())) if data else (path.name, {})
    match = re.match(r"#\s*(\S+)\s+\(budget\s+(\w+)\)", text)
    name, budget = (match.group(1), match.group(2)) if match else (str(experiment), "")
    algo = str(body.get("algo", "")) if isinstance(body, dict) else ""
    return name, budget, algo


def rolling_mean(y: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over the last ``window`` values (fewer at the start).

    Example:
        >>> rolling_mean(np.array([1.0, 3.0, 5.0, 7.0]), 2).tolist()
        [1.0, 2.0, 4.0, 6.0]
    """
    y = np.asarray(y, dtype=np.float64)
    if y.size == 0:
        return y
    c = np.concatenate([[0.0], np.cumsum(y)])
    i = np.arange(1, y.size + 1)
    lo = np.maximum(i - window, 0)
    return (c[i] - c[lo]) / (i - lo)


def _read_table(path: Path, skip: int = 0) -> dict[str, np.ndarray]:
    """A CSV file as float columns; empty cells (SB3 logs sparse rows) become NaN."""
    with path.open(newline="") as fh:
        for _ in range(skip):
            fh.readline()
        rows = list(csv.reader(fh))
    if not rows:
        return {}
    header, body = rows[0], [r for r in rows[1:] if r]

    def number(cell: str) -> float:
        try:
            return float(cell)
        except ValueError:
            return math.nan

    table = np.array([[number(c) for c in r] for r in body], dtype=np.float64)
    table = table.reshape(len(body), len(header))
    return {name: table[:, j] for j, name in enumerate(header)}


def read_monitor(run_dir: Path) -> dict[str, np.ndarray]:
    """Episodes of all ``monitor/train_*.monitor.csv`` files, merged by end time.

    Returns:
        ``r`` (return), ``l`` (length), ``step`` (running sum of ``l``: the approximate env
        step of the episode end, see the module docstring) and ``time`` (seconds since the
        earliest file's ``t_start``), in order of end time; empty arrays without episodes.
    """
    returns, lengths, ends, starts = [], [], [], []
    for file in sorted((run_dir / "monitor").glob("train_*.monitor.csv")):
        with file.open() as fh:
            first = fh.readline()
        t_start = float(json.loads(first.lstrip("#")).get("t_start", 0.0)) if first else 0.0
        table = _read_table(file, skip=1)
        starts.append(t_start)
        if table and len(table.get("r", ())):
            returns.append(table["r"])
            lengths.append(table["l"])
            ends.append(t_start + table["t"])
    if not returns:
        empty = np.zeros(0)
        return {"r": empty, "l": empty, "step": empty, "time": empty}
    end = np.concatenate(ends)
    order = np.argsort(end, kind="stable")
    length = np.concatenate(lengths)[order]
    return {
        "r": np.concatenate(returns)[order],
        "l": length,
        "step": np.cumsum(length),
        "time": end[order] - min(starts),
    }


def read_progress(run_dir: Path) -> dict[str, np.ndarray]:
    """``logs/part*/progress.csv`` concatenated in part order (a resume starts a new part).

    ``time/time_elapsed`` restarts with each part; it is offset by the previous parts' last
    value so it counts training time across the whole run.
    """
    parts = sorted(
        (run_dir / "logs").glob("part*/progress.csv"),
        key=lambda p: int(re.sub(r"\D", "", p.parent.name) or 0),
    )
    tables = [t for t in (_read_table(p) for p in parts) if t]
    if not tables:
        return {}
    names = list(dict.fromkeys(n for t in tables for n in t))
    out: dict[str, list[np.ndarray]] = {n: [] for n in names}
    offset = 0.0
    for t in tables:
        n_rows = len(next(iter(t.values())))
        for name in names:
            column = t.get(name, np.full(n_rows, np.nan))
            if name == "time/time_elapsed":
                column = column + offset
            out[name].append(column)
        elapsed = t.get("time/time_elapsed")
        if elapsed is not None and np.isfinite(elapsed).any():
            offset += float(np.nanmax(elapsed))
    return {n: np.concatenate(cols) for n, cols in out.items()}


def _valid(x: np.ndarray, y: np.ndarray) -> Curve:
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    order = np.argsort(x, kind="stable")
    return x[order], y[order]


def load_run(path: Path, x: str = "steps") -> RunData:
    """Every curve of one run folder (see the module docstring), ``x`` steps or time."""
    name, budget, algo = run_identity(path)
    data = RunData(path, name, budget)
    if algo == "classifier" or (path / "history.csv").is_file():
        table = _read_table(path / "history.csv") if (path / "history.csv").is_file() else {}
        it = table.get("iteration", np.zeros(0))
        for metric in ("loss", "test_accuracy", "train_accuracy"):
            if metric in table:
                data.curves[f"classifier/{metric}"] = _valid(it, table[metric])
                data.xlabels[f"classifier/{metric}"] = "iteration"
        return data
    xlabel = "env steps" if x == "steps" else "wall time [s]"
    if algo == "cmaes":
        return _load_cmaes_run(data, x, xlabel)
    if algo == "dagger":
        return _load_dagger_run(data, x, xlabel)
    episodes = read_monitor(path)
    if episodes["r"].size:
        ex = episodes["step"] if x == "steps" else episodes["time"]
        data.curves["episode_return"] = (ex, rolling_mean(episodes["r"], SMOOTH_EPISODES))
        data.curves["episode_length"] = (ex, rolling_mean(episodes["l"], SMOOTH_EPISODES))
    progress = read_progress(path)
    px = progress.get("time/total_timesteps" if x == "steps" else "time/time_elapsed")
    if px is not None:
        for column in ("train/loss", "train/value_loss"):
            if column in progress and np.isfinite(progress[column]).any():
                data.curves[column] = _valid(px, progress[column])
                break
    history_file = path / "evaluations.json"
    history = json.loads(history_file.read_text()) if history_file.is_file() else []
    steps = np.array([float(h["step"]) for h in history])
    if history and x == "time":
        # Evaluations record steps only: map them to time through the episodes' (step, time).
        if episodes["step"].size < 2:
            history = []
        else:
            steps = np.interp(steps, episodes["step"], episodes["time"])
    policies = [k for k, v in (history[0].items() if history else ()) if isinstance(v, dict)]
    for policy in policies:
        for metric in ("success_rate", "mean_reward"):
            values = np.array(
                [(h.get(policy) or {}).get(metric) for h in history], dtype=np.float64
            )
            if np.isfinite(values).any():
                data.curves[f"eval/{policy}/{metric}"] = _valid(steps, values)
    for metric in data.curves:
        data.xlabels.setdefault(metric, xlabel)
    return data


def _load_cmaes_run(data: RunData, x: str, xlabel: str) -> RunData:
    """CMA-ES runs: population fitness per generation and the periodic test returns."""
    table = (
        _read_table(data.path / "progress.csv") if (data.path / "progress.csv").is_file() else {}
    )
    if table.get("generation", np.zeros(0)).size:
        # Time axis: the generations' own ask/tell + evaluation seconds, summed.
        gx = (
            table["env_steps"]
            if x == "steps"
            else np.cumsum(table["time_ask_tell"] + table["time_evaluate"])
        )
        for stat in ("best", "mean", "worst"):
            data.curves[f"fitness/{stat}"] = _valid(gx, table[f"fitness_{stat}"])
        tested = np.isfinite(table["test_mean"])
        if tested.any():
            data.curves["eval/test/mean_reward"] = _valid(gx[tested], table["test_mean"][tested])
    for metric in data.curves:
        data.xlabels[metric] = xlabel
    return data


def _load_dagger_run(data: RunData, x: str, xlabel: str) -> RunData:
    """DAgger runs: imitation loss per round and the periodic test returns."""
    file = data.path / "progress.csv"
    table = _read_table(file) if file.is_file() else {}
    if table.get("round", np.zeros(0)).size:
        rx = table["env_steps"] if x == "steps" else np.cumsum(table["seconds"])
        data.curves["train/loss"] = _valid(rx, table["loss"])
        tested = np.isfinite(table["test_mean"])
        if tested.any():
            data.curves["eval/test/mean_reward"] = _valid(rx[tested], table["test_mean"][tested])
    for metric in data.curves:
        data.xlabels[metric] = xlabel
    return data


def aggregate_curves(
    curves: Sequence[Curve], max_points: int = MAX_POINTS
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mean, min and max of several runs' curves on a common grid.

    One curve is returned as it is. Several are linearly interpolated onto an even grid
    over the ``x`` range all of them cover (no extrapolation); if they do not overlap, over
    the union, each counting only inside its own range.

    Returns:
        ``(x, mean, lo, hi, n)``: ``n`` is the number of runs behind each point.

    Example:
        >>> a = (np.array([0.0, 4.0, 10.0]), np.array([0.0, 4.0, 10.0]))
        >>> b = (np.array([0.0, 20.0]), np.array([2.0, 2.0]))
        >>> x, mean, lo, hi, n = aggregate_curves([a, b])
        >>> x.tolist(), mean.tolist(), lo.tolist(), hi.tolist(), n.tolist()
        ([0.0, 5.0, 10.0], [1.0, 3.5, 6.0], [0.0, 2.0, 2.0], [2.0, 5.0, 10.0], [2, 2, 2])
    """
    curves = [(np.asarray(x, float), np.asarray(y, float)) for x, y in curves if len(x)]
    if not curves:
        empty = np.zeros(0)
        return empty, empty, empty, empty, np.zeros(0, int)
    if len(curves) == 1:
        x, y = curves[0]
        return x, y, y.copy(), y.copy(), np.ones(len(x), int)
    n_points = int(np.clip(max(len(x) for x, _ in curves), 2, max_points))
    start, end = max(x[0] for x, _ in curves), min(x[-1] for x, _ in curves)
    if end < start:
        start, end = min(x[0] for x, _ in curves), max(x[-1] for x, _ in curves)
    grid = np.linspace(start, end, n_points) if end > start else np.array([start])
    ys = np.stack(
        [
            np.where((grid >= x[0]) & (grid <= x[-1]), np.interp(grid, x, y), np.nan)
            for x, y in curves
        ]
    )
    n = np.isfinite(ys).sum(axis=0)
    keep = n > 0
    ys, grid, n = ys[:, keep], grid[keep], n[keep]
    return grid, np.nanmean(ys, axis=0), np.nanmin(ys, axis=0), np.nanmax(ys, axis=0), n


def panel_of(metric: str) -> str:
    """The panel key (:data:`PANELS`) a metric is drawn in."""
    if metric == "episode_return":
        return "return"
    if metric == "episode_length":
        return "length"
    if metric == "classifier/loss":
        return "classifier_loss"
    if metric.endswith("loss"):
        return "loss"
    if metric.endswith("success_rate"):
        return "success"
    if metric.endswith("mean_reward"):
        return "reward"
    if metric.startswith("fitness/"):
        return "fitness"
    return "accuracy"


def _group_labels(runs: Sequence[RunData]) -> list[str]:
    """Group label per run: the name, with the budget when one name ran with several."""
    budgets: dict[str, set[str]] = {}
    for r in runs:
        budgets.setdefault(r.name, set()).add(r.budget)
    return [f"{r.name} ({r.budget})" if len(budgets[r.name]) > 1 else r.name for r in runs]


def _metric_label(metric: str) -> str:
    return metric.removeprefix("classifier/").removeprefix("eval/")


def _draw_empty(fig: Figure, message: str) -> None:
    ax = fig.subplots()
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True)
    ax.set_axis_off()


def plot_runs(runs: Sequence[str | Path], out: str | Path | None = None, x: str = "steps") -> Path:
    """Learning curves of run folders, grouped by experiment and matrix cell, as a PNG.

    Each group (the seeds of one cell) is drawn as its mean with a min-max band, a single
    run as a line; panels: episode return and length (training episodes), training loss
    (log scale), evaluation success rate and mean return, and for classifier runs loss and
    accuracy against iterations. The plotted numbers go to a CSV next to the PNG (same
    stem; columns :data:`CSV_COLUMNS`; ``n`` is the runs behind a point).

    Args:
        runs: run folders, or folders searched recursively for run folders.
        out: the PNG path; default ``curves.png`` in the first folder given.
        x: ``"steps"`` (env steps) or ``"time"`` (wall-clock seconds since the run's start;
            the loss uses SB3's training time summed over resumed parts). Classifier runs
            always use iterations.

    Returns:
        The PNG path.

    Raises:
        ValueError: for an unknown ``x``.
        FileNotFoundError: for a path without run folders.
    """
    if x not in ("steps", "time"):
        raise ValueError(f"x must be 'steps' or 'time', got {x!r}")
    if isinstance(runs, (str, Path)):
        runs = [runs]
    if not runs:
        raise ValueError("plot_runs needs at least one run folder")
    folders = find_run_dirs(runs)
    data = [load_run(p, x) for p in folders]
    labels = _group_labels(data)
    groups: dict[str, list[RunData]] = {}
    for label, run in zip(labels, data, strict=True):
        groups.setdefault(label, []).append(run)

    rows: list[tuple[str, float, str, float, float, float, int]] = []
    # panel -> metric -> group -> aggregated arrays
    drawn: dict[str, dict[str, dict[str, tuple[np.ndarray, ...]]]] = {}
    xlabels: dict[str, str] = {}
    for label, members in groups.items():
        metrics = list(dict.fromkeys(m for r in members for m in r.curves))
        for metric in metrics:
            curves = [r.curves[metric] for r in members if metric in r.curves]
            agg = aggregate_curves(curves)
            if not len(agg[0]):
                continue
            panel = panel_of(metric)
            drawn.setdefault(panel, {}).setdefault(metric, {})[label] = agg
            xlabels.setdefault(
                panel, next(r.xlabels[metric] for r in members if metric in r.curves)
            )
            rows.extend(
                (label, float(a), metric, float(m), float(lo), float(hi), int(n))
                for a, m, lo, hi, n in zip(*agg, strict=True)
            )

    out_path = Path(out) if out is not None else Path(runs[0]) / "curves.png"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig = _figure(drawn, groups, xlabels)
    fig.savefig(out_path, dpi=120, format="png" if not out_path.suffix else None)
    with out_path.with_suffix(".csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(CSV_COLUMNS)
        writer.writerows(rows)
    return out_path


def _figure(
    drawn: dict[str, dict[str, dict[str, tuple[np.ndarray, ...]]]],
    groups: dict[str, list[RunData]],
    xlabels: dict[str, str],
) -> Figure:
    panels = [p for p in PANELS if p in drawn]
    n_cols = 1 if len(panels) <= 1 else (2 if len(panels) in (2, 4) else 3)
    n_rows = max(1, math.ceil(len(panels) / n_cols))
    fig = Figure(figsize=(4.6 * n_cols, 3.4 * n_rows + 0.9), layout="constrained")
    FigureCanvasAgg(fig)  # off-screen Agg canvas: no pyplot state, no display
    spread = "mean and min-max over seeds" if any(len(g) > 1 for g in groups.values()) else ""
    fig.suptitle("learning curves" + (f" ({spread})" if spread else ""))
    if not panels:
        _draw_empty(
            fig,
            "no episodes, losses or evaluations logged yet in:\n"
            + "\n".join(str(r.path) for g in groups.values() for r in g),
        )
        return fig
    colours = {label: f"C{i % 10}" for i, label in enumerate(groups)}
    axes = fig.subplots(n_rows, n_cols, squeeze=False).ravel()
    for ax, panel in zip(axes, panels, strict=False):
        _draw_panel(ax, panel, drawn[panel], colours, xlabels[panel])
    for ax in axes[len(panels) :]:
        ax.set_axis_off()
    plotted = {
        g for by_metric in drawn.values() for by_group in by_metric.values() for g in by_group
    }
    handles = [
        Line2D(
            [],
            [],
            color=colours[label],
            lw=2,
            label=f"{label} (n={len(members)} seed{'s' if len(members) > 1 else ''}"
            f"{'' if label in plotted else ', no data yet'})",
        )
        for label, members in groups.items()
    ]
    fig.legend(
        handles=handles, loc="outside lower center", ncols=min(3, len(handles)), frameon=False
    )
    return fig


def _draw_panel(
    ax: Axes,
    panel: str,
    metrics: dict[str, dict[str, tuple[np.ndarray, ...]]],
    colours: dict[str, str],
    xlabel: str,
) -> None:
    title, ylabel, scale = PANELS[panel]
    styles = {m: _STYLES[i % len(_STYLES)] for i, m in enumerate(metrics)}
    values = []
    for metric, by_group in metrics.items():
        for label, (gx, mean, lo, hi, n) in by_group.items():
            few = len(gx) <= 30  # sparse logs (evaluations, short runs): show the points
            ax.plot(
                gx,
                mean,
                color=colours[label],
                ls=styles[metric],
                lw=1.6,
                marker="o" if few else None,
                ms=3,
            )
            if (n > 1).any():
                ax.fill_between(gx, lo, hi, color=colours[label], alpha=0.2, lw=0)
            values.append(np.concatenate([lo, hi]))
    if scale == "log":
        v = np.concatenate(values)
        if (v > 0).all():
            ax.set_yscale("log")
        else:  # PPO's total loss can be negative: log-like beyond a linear band near 0
            finite = np.abs(v[v != 0])
            ax.set_yscale("symlog", linthresh=float(finite.min()) if finite.size else 1.0)
    if len(metrics) > 1:
        ax.legend(
            handles=[
                Line2D([], [], color="k", ls=styles[m], label=_metric_label(m)) for m in metrics
            ],
            fontsize=7,
            frameon=False,
        )
    if len(metrics) == 1 and panel in ("loss", "success", "reward"):
        title = f"{title} ({_metric_label(next(iter(metrics)))})"
    ax.set_title(title)
    if panel in ("success", "accuracy"):
        ax.set_ylim(-0.05, 1.05)  # rates: the whole [0, 1] range, so seeds compare at a glance
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
