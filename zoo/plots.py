"""Learning curves of run folders: mean and min-max band over seeds, one PNG and its CSV.

:func:`plot_runs` reads each run folder's metrics table (:func:`zoo.metrics.read_metrics`:
``metrics.csv``, or the files of a folder trained before it) and draws the metrics named in
:data:`PLOTTED`, each in its panel: training episodes' return and length (smoothed with a
rolling mean over :data:`SMOOTH_EPISODES` episodes), the training loss, periodic evaluations'
success rate and mean return, CMA-ES fitness, classifier loss and accuracy.

Runs are grouped by experiment and matrix cell (``config.yml`` header), so the seeds of one
cell share a curve: their curves are interpolated onto a common grid over the steps all of
them reached and drawn as the mean with a min-max band; a group of one run is drawn as is.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from attn_policies.atomic import atomic_path
from attn_policies.canvas import new_figure, save_figure
from zoo.config_checks import ConfigError, safe_yaml
from zoo.metrics import read_metrics, series

__all__ = ["find_run_dirs", "load_run", "plot_runs"]

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
# metric pattern -> (panel, x label of metrics whose step is not env steps: they are drawn
# against it on both axes); the first match wins, metrics matching none are not drawn.
PLOTTED: tuple[tuple[str, str, str | None], ...] = (
    ("episode_return", "return", None),
    ("episode_length", "length", None),
    ("classifier/loss", "classifier_loss", "iteration"),
    ("classifier/*accuracy", "accuracy", "iteration"),
    ("bc/loss", "loss", "epoch"),
    ("bc/test_mean_reward", "reward", "epoch"),
    ("train/loss", "loss", None),
    ("train/value_loss", "loss", None),
    ("eval/*/success_rate", "success", None),
    ("eval/*/mean_reward", "reward", None),
    ("fitness/*", "fitness", None),
)
SMOOTHED = ("episode_return", "episode_length")
"""Metrics drawn as a rolling mean over :data:`SMOOTH_EPISODES` values."""
STANDS_IN = {"train/value_loss": "train/loss"}
"""Metric -> the metric it is drawn for only when a run lacks it (A2C logs no total loss)."""
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
    data = safe_yaml(text, str(path / "config.yml")) or {}
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


def _valid(x: np.ndarray, y: np.ndarray) -> Curve:
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    order = np.argsort(x, kind="stable")
    return x[order], y[order]


def load_run(path: Path, x: str = "steps") -> RunData:
    """The drawn curves (:data:`PLOTTED`) of one run folder's :func:`read_metrics` table,
    against ``x``: ``"steps"`` or ``"time"`` (its wall time)."""
    name, budget, _ = run_identity(path)
    data = RunData(path, name, budget)
    table = read_metrics(path)
    present = set(table["metric"].tolist())
    for metric in dict.fromkeys(table["metric"].tolist()):
        rule = _rule(metric)
        if rule is None or STANDS_IN.get(metric) in present:
            continue
        fixed = rule[1]
        xs, ys = series(table, metric, "step" if fixed or x == "steps" else "wall_time")
        if metric in SMOOTHED:
            ys = rolling_mean(ys, SMOOTH_EPISODES)
        curve = _valid(xs, ys)
        if curve[0].size:
            data.curves[metric] = curve
            data.xlabels[metric] = fixed or ("env steps" if x == "steps" else "wall time [s]")
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


def _rule(metric: str) -> tuple[str, str | None] | None:
    return next(((p, fixed) for pat, p, fixed in PLOTTED if fnmatchcase(metric, pat)), None)


def panel_of(metric: str) -> str | None:
    """The panel key (:data:`PANELS`) a metric is drawn in, None for one not drawn.

    Example:
        >>> panel_of("eval/greedy/success_rate"), panel_of("time/fps")
        ('success', None)
    """
    rule = _rule(metric)
    return rule[0] if rule else None


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


def plot_runs(
    runs: Sequence[str | Path],
    out: str | Path | None = None,
    x: str = "steps",
    labels: Mapping[Path, str] | None = None,
) -> Path:
    """Learning curves of run folders, grouped by experiment and matrix cell, as a PNG.

    Each group (the seeds of one cell) is drawn as its mean with a min-max band, a single
    run as a line; panels as :data:`PLOTTED` assigns the metrics: episode return and length
    (training episodes), training loss (log scale), evaluation success rate and mean return,
    CMA-ES fitness, and for classifier runs loss and accuracy against iterations. The
    plotted numbers go to a CSV next to the PNG (same stem; columns :data:`CSV_COLUMNS`;
    ``n`` is the runs behind a point).

    Args:
        runs: run folders, or folders searched recursively for run folders.
        out: the PNG path; default ``curves.png`` in the first folder given.
        x: ``"steps"`` (the metrics' step: env steps) or ``"time"`` (their ``wall_time``:
            seconds since the run's start, summed over resumed parts). Metrics counted in
            iterations or epochs (classifier, BC) always use their step.
        labels: a group label per run folder, for groups the config cannot tell apart (the
            same cell in two folders, one with a change: an A/B); runs not in it get the
            default label (experiment and cell, with the budget where one cell ran with
            several).

    Returns:
        The PNG path.

    Raises:
        ConfigError: for an unknown ``x``, or no run folder.
        FileNotFoundError: for a path without run folders.
    """
    if x not in ("steps", "time"):
        raise ConfigError(f"x must be 'steps' or 'time', got {x!r}")
    if isinstance(runs, (str, Path)):
        runs = [runs]
    if not runs:
        raise ConfigError("plot_runs needs at least one run folder")
    folders = find_run_dirs(runs)
    data = [load_run(p, x) for p in folders]
    given = {Path(k): v for k, v in (labels or {}).items()}
    names = [
        given.get(r.path, default) for r, default in zip(data, _group_labels(data), strict=True)
    ]
    groups: dict[str, list[RunData]] = {}
    for label, run in zip(names, data, strict=True):
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
            assert panel is not None  # load_run keeps only metrics with a panel
            drawn.setdefault(panel, {}).setdefault(metric, {})[label] = agg
            xlabels.setdefault(
                panel, next(r.xlabels[metric] for r in members if metric in r.curves)
            )
            rows.extend(
                (label, float(a), metric, float(m), float(lo), float(hi), int(n))
                for a, m, lo, hi, n in zip(*agg, strict=True)
            )

    out_path = Path(out) if out is not None else Path(runs[0]) / "curves.png"
    fig = _figure(drawn, groups, xlabels)
    save_figure(fig, out_path, dpi=120)  # atomic: a symlinked curves.png is replaced
    with atomic_path(out_path.with_suffix(".csv")) as tmp, tmp.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(CSV_COLUMNS)
        writer.writerows(rows)
    return out_path


def group_colours(labels: Sequence[str]) -> dict[str, str]:
    """A colour per group: matplotlib's default cycle for up to ten groups, ``tab20`` for up
    to twenty (so no two groups of one figure share a colour), cycling beyond that.

    Example:
        >>> group_colours(["a", "b"])
        {'a': 'C0', 'b': 'C1'}
        >>> len(set(group_colours([str(i) for i in range(12)]).values()))
        12
    """
    palette = [f"C{i}" for i in range(10)]
    if len(labels) > 10:
        palette = [to_hex(colormaps["tab20"](i)) for i in range(20)]
    return {label: palette[i % len(palette)] for i, label in enumerate(labels)}


def _figure(
    drawn: dict[str, dict[str, dict[str, tuple[np.ndarray, ...]]]],
    groups: dict[str, list[RunData]],
    xlabels: dict[str, str],
) -> Figure:
    panels = [p for p in PANELS if p in drawn]
    n_cols = 1 if len(panels) <= 1 else (2 if len(panels) in (2, 4) else 3)
    n_rows = max(1, math.ceil(len(panels) / n_cols))
    width = 4.6 * n_cols
    # legend columns the longest entry leaves room for (about 11 characters an inch; the
    # entry adds " (n=3 seeds, no data yet)"), and a row of height for each legend row
    longest = max(len(label) for label in groups) + 24
    legend_cols = max(1, min(3, len(groups), int(width * 11 // longest)))
    legend_rows = math.ceil(len(groups) / legend_cols)
    fig = new_figure(width, 3.4 * n_rows + 0.65 + 0.25 * legend_rows)
    spread = "mean and min-max over seeds" if any(len(g) > 1 for g in groups.values()) else ""
    fig.suptitle("learning curves" + (f" ({spread})" if spread else ""))
    if not panels:
        _draw_empty(
            fig,
            "no episodes, losses or evaluations logged yet in:\n"
            + "\n".join(str(r.path) for g in groups.values() for r in g),
        )
        return fig
    colours = group_colours(list(groups))
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
    fig.legend(handles=handles, loc="outside lower center", ncols=legend_cols, frameon=False)
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
