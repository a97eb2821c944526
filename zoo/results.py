"""From run folders to committed evidence: copy finished runs, average seeds, format spreads.

A grid (``attn-zoo train NAME --budget cpu``, locally or on Ray) leaves one run folder per
cell and seed under ``runs/<experiment>/<tag>/<seed>-<time>/``. These helpers copy the
finished ones into the repository's ``results/<experiment>/`` (:func:`collect_runs`: small
files only, ``metrics.csv`` trimmed to the rows a figure needs) and draw the mean ± spread
over seeds (:func:`mean_band`, :func:`spread`); ``attn-zoo report`` (:mod:`zoo.report`)
then tabulates them and puts its table into the experiment's page (:func:`replace_block`).

Example:
    >>> import json, tempfile
    >>> src, dst = Path(tempfile.mkdtemp()), Path(tempfile.mkdtemp())
    >>> run = src / "Pong-cnn" / "0-20260101-000000"
    >>> (run / "monitor").mkdir(parents=True)
    >>> status = {"state": "finished", "budget": "cpu", "seed": 0}
    >>> _ = (run / "status.json").write_text(json.dumps(status))
    >>> _ = (run / "eval.json").write_text("{}")
    >>> rows = "step,wall_time,metric,value\\n8,1.0,episode_return,-21\\n8,1.0,time/fps,500\\n"
    >>> _ = (run / "metrics.csv").write_text(rows)
    >>> [p.relative_to(dst).as_posix() for p in collect_runs(src, dst, "cpu", ["episode_return"])]
    ['Pong-cnn/0-20260101-000000']
    >>> (dst / "Pong-cnn/0-20260101-000000/metrics.csv").read_text().splitlines()
    ['step,wall_time,metric,value', '8,1.0,episode_return,-21']
    >>> collect_runs(src, dst, "cpu", ["episode_return"])  # already here: skipped
    []
"""

from __future__ import annotations

import csv
import shutil
import statistics
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from attn_policies.atomic import atomic_write
from zoo.config_checks import ConfigError, read_json, read_lines
from zoo.metrics import read_metrics, series
from zoo.plots import rolling_mean

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "KEEP_FILES",
    "MODEL_FILES",
    "RunResult",
    "collect_runs",
    "copy_half",
    "eval_policy",
    "final_return",
    "finished_runs",
    "mean_band",
    "plot_band",
    "read_run",
    "replace_block",
    "replace_blocks",
    "spread",
]

KEEP_FILES = ("command.txt", "config.yml", "eval.json", "status.json")
MODEL_FILES = ("model.zip", "vecnormalize.npz")
STATE_DICTS = ("best_model.pt", "model.pt")  # torch-module runs (bc, classifier, cmaes)


def collect_runs(
    source: str | Path,
    target: str | Path,
    budget: str,
    metrics: Collection[str],
    keep_model: Callable[[str, dict[str, Any]], bool] | None = None,
    max_model_bytes: int = 5_000_000,
) -> list[Path]:
    """Copy the finished runs of ``budget`` under ``source`` to ``target``.

    Runs are ``source/<tag>/<run>/`` folders with a ``status.json``; one is copied when its
    state is ``finished``, its budget is ``budget`` and ``target/<tag>/<run>`` does not exist
    yet (so collecting twice changes nothing). Copied: :data:`KEEP_FILES`, the ``monitor/``
    folder, ``metrics.csv`` cut to the rows whose metric is in ``metrics``, and
    :data:`MODEL_FILES` when ``keep_model(tag, status)`` says so and ``model.zip``, copied
    without its optimizer's running statistics
    (:func:`~zoo.trainers.sb3_state.drop_optimizer_statistics`: same weights, about half the
    bytes), is under ``max_model_bytes`` (checkpoints and TensorBoard logs stay behind).

    Returns:
        The run folders created under ``target``.
    """
    source, target = Path(source), Path(target)
    wanted = set(metrics)
    copied = []
    for status_file in sorted(source.glob("*/*/status.json")):
        run = status_file.parent
        status = read_json(status_file)
        out = target / run.parent.name / run.name
        if status.get("state") != "finished" or status.get("budget") != budget or out.exists():
            continue
        out.mkdir(parents=True)
        for name in KEEP_FILES:
            if (run / name).is_file():
                shutil.copy2(run / name, out / name)
        wanted_model = keep_model is not None and keep_model(run.parent.name, status)
        if wanted_model and (run / "model.zip").is_file():
            # torch and SB3 only here: the summaries that read CSVs do not need them
            from zoo.trainers.sb3_state import drop_optimizer_statistics

            if drop_optimizer_statistics(run / "model.zip", out / "model.zip") < max_model_bytes:
                if (run / "vecnormalize.npz").is_file():
                    shutil.copy2(run / "vecnormalize.npz", out / "vecnormalize.npz")
            else:
                (out / "model.zip").unlink()
        rows = csv.reader(read_lines(run / "metrics.csv"))  # line lengths checked
        header = next(rows)
        column = header.index("metric")
        with (out / "metrics.csv").open("w", newline="") as dst:
            writer = csv.writer(dst)
            writer.writerow(header)
            writer.writerows(row for row in rows if row[column] in wanted)
        if (run / "monitor").is_dir():
            shutil.copytree(run / "monitor", out / "monitor")
        copied.append(out)
    return copied


def copy_half(run: str | Path, out: str | Path) -> Path:
    """A finished run's small files, whole ``metrics.csv`` and ``progress.csv``, and its
    :data:`STATE_DICTS` with floating tensors stored in float16 (half the bytes: a 1.7M-
    parameter student is 3.4 MB instead of 6.7), in the new folder ``out``.

    The run's trainer loads the copy like the run (``load_state_dict`` casts to the module's
    float32), so quote figures measured on the copy, not on the run: rounding the weights
    can change a greedy policy's actions.

    Raises:
        ConfigError: ``run`` is not finished, or ``out`` exists.
        FileNotFoundError: ``run`` has none of :data:`STATE_DICTS`.
    """
    import torch  # the summaries that only read CSVs need not load torch

    run, out = Path(run), Path(out)
    status = read_json(run / "status.json")
    if status.get("state") != "finished":
        raise ConfigError(f"{run}: not finished (state {status.get('state')!r})")
    if out.exists():
        raise ConfigError(f"{out} exists already")
    weights = [name for name in STATE_DICTS if (run / name).is_file()]
    if not weights:
        raise FileNotFoundError(f"{run}: none of {', '.join(STATE_DICTS)}")
    out.mkdir(parents=True)
    for name in (*KEEP_FILES, "metrics.csv", "progress.csv"):
        if (run / name).is_file():
            shutil.copy2(run / name, out / name)
    for name in weights:
        from zoo.trainers.sb3_state import tensors_of  # SB3 with it: only here

        state = tensors_of(run / name)  # a zip bomb is refused unread
        half = {k: v.half() if v.is_floating_point() else v for k, v in state.items()}
        torch.save(half, out / name)
    return out


@dataclass(frozen=True)
class RunResult:
    """What a summary table needs of one finished run folder (:func:`read_run`)."""

    path: Path
    seed: int
    num_timesteps: int
    steps_per_s: float
    wall_minutes: float
    steps: np.ndarray  # env step at the end of each training episode
    returns: np.ndarray  # that episode's return
    eval: dict[str, Any]  # eval.json

    def curve(self, smooth: int) -> tuple[np.ndarray, np.ndarray]:
        """The episode returns' rolling mean over ``smooth`` episodes, against steps."""
        return self.steps, rolling_mean(self.returns, smooth)

    def final_return(self, fraction: float = 0.1) -> float:
        """:func:`final_return` of this run's training episodes."""
        return final_return(self.steps, self.returns, fraction)


def finished_runs(folder: str | Path) -> list[Path]:
    """The run folders ``folder/<seed>-<time>/`` that have an ``eval.json``, sorted."""
    return sorted(p for p in Path(folder).glob("*-*") if (p / "eval.json").is_file())


def read_run(path: str | Path) -> RunResult:
    """The training episodes (``metrics.csv``), ``status.json`` and ``eval.json`` of a run.

    The wall time is the larger of ``status.json``'s ``wall_seconds`` and the last
    ``wall_time`` of ``metrics.csv`` (summed over resumed parts): a run resumed after a kill,
    before the status kept its time while training, has only its last part in the status.
    """
    path = Path(path)
    table = read_metrics(path)
    steps, returns = series(table, "episode_return")
    status = read_json(path / "status.json")
    logged = table["wall_time"][~np.isnan(table["wall_time"])]
    wall = max(float(status["wall_seconds"]), float(logged.max(initial=0.0)))
    return RunResult(
        path=path,
        seed=int(status["seed"]),
        num_timesteps=int(status["num_timesteps"]),
        steps_per_s=status["num_timesteps"] / wall,
        wall_minutes=wall / 60,
        steps=np.asarray(steps, dtype=np.float64),
        returns=np.asarray(returns, dtype=np.float64),
        eval=read_json(path / "eval.json"),
    )


def final_return(steps: np.ndarray, returns: np.ndarray, fraction: float = 0.1) -> float:
    """Mean return of the episodes that end in the last ``fraction`` of the steps.

    Example:
        >>> final_return(np.array([10, 50, 95, 100]), np.array([-21.0, -5.0, 3.0, 5.0]))
        4.0
    """
    steps = np.asarray(steps, dtype=np.float64)
    last = steps >= (1.0 - fraction) * float(steps.max())
    return float(np.mean(np.asarray(returns, dtype=np.float64)[last]))


def mean_band(
    curves: Sequence[tuple[np.ndarray, np.ndarray]], points: int = 200
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mean over seeds and its band, on the step range every seed covers.

    The band is ± one standard deviation over seeds with three or more of them; with one or
    two it is their min-max (a standard deviation of two values says little).

    Returns:
        ``grid, mean, lo, hi``, each of ``points`` values.

    Example:
        >>> x = np.array([0.0, 10.0])
        >>> grid, mean, lo, hi = mean_band([(x, x), (x, x + 2.0)], points=3)
        >>> grid.tolist(), mean.tolist(), lo.tolist(), hi.tolist()
        ([0.0, 5.0, 10.0], [1.0, 6.0, 11.0], [0.0, 5.0, 10.0], [2.0, 7.0, 12.0])
    """
    start = max(float(x[0]) for x, _ in curves)
    end = min(float(x[-1]) for x, _ in curves)
    grid = np.linspace(start, end, points)
    ys = np.stack([np.interp(grid, x, y) for x, y in curves])
    mean = ys.mean(axis=0)
    if len(curves) >= 3:
        sd = ys.std(axis=0, ddof=1)
        return grid, mean, mean - sd, mean + sd
    return grid, mean, ys.min(axis=0), ys.max(axis=0)


def plot_band(
    ax: Axes,
    curves: Sequence[tuple[np.ndarray, np.ndarray]],
    color: str,
    label: str,
    points: int = 200,
) -> list[tuple[float, float, float, float]]:
    """Draw :func:`mean_band` of ``curves`` on a matplotlib axis; returns its
    ``(step, mean, lo, hi)`` rows (for a CSV beside the figure)."""
    grid, mean, lo, hi = mean_band(curves, points)
    ax.plot(grid, mean, color=color, label=label)
    ax.fill_between(grid, lo, hi, color=color, alpha=0.2, linewidth=0)
    return list(zip(grid.tolist(), mean.tolist(), lo.tolist(), hi.tolist(), strict=True))


def spread(values: Sequence[float], digits: int = 1) -> str:
    """``mean ± sd`` over seeds, or the one value with ``(1 seed)``.

    Example:
        >>> spread([1.0, 2.0, 3.0]), spread([-20.25])
        ('2.0 ± 1.0', '-20.2 (1 seed)')
    """
    if len(values) == 1:
        return f"{values[0]:.{digits}f} (1 seed)"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def eval_policy(result: Mapping[str, Any], policy: str | None = None) -> dict[str, Any] | None:
    """The entry of ``policy`` (default: the first policy tested) in a loaded ``eval.json``,
    or ``None`` when it has no such policy.

    Example:
        >>> eval_policy({"policies": {"best": {"mean_reward": 1.0}}})
        {'mean_reward': 1.0}
        >>> eval_policy({"policies": {"best": {}}}, "final") is None
        True
    """
    policies = result.get("policies") or {}
    return policies.get(policy or next(iter(policies), None))


def replace_block(path: str | Path, name: str, text: str) -> bool:
    """Put ``text`` between the lines ``<!-- name: ... -->`` and ``<!-- /name -->`` of a
    Markdown file (an experiment page's table kept equal to ``attn-zoo report``'s); returns
    whether the file changed (it is rewritten only then).

    Raises:
        ConfigError: the file lacks the pair of markers, or has it more than once.

    Example:
        >>> import tempfile
        >>> readme = Path(tempfile.mkdtemp()) / "README.md"
        >>> _ = readme.write_text("a\\n<!-- t: make -->\\nold\\n<!-- /t -->\\nb\\n")
        >>> replace_block(readme, "t", "| new |"), readme.read_text().splitlines()
        (True, ['a', '<!-- t: make -->', '| new |', '<!-- /t -->', 'b'])
    """
    return replace_blocks(path, {name: text})


def replace_blocks(path: str | Path, blocks: Mapping[str, str]) -> bool:
    """:func:`replace_block` for several blocks of one file: every pair of markers is
    checked before the file is written, and it is written at most once.

    Raises:
        ConfigError: the file lacks one of the pairs, or has one more than once; the file is
            then left as it was.
    """
    path = Path(path)
    lines = path.read_text().splitlines(keepends=True)
    old = "".join(lines)
    for name, text in blocks.items():
        opens = [i for i, line in enumerate(lines) if line.startswith(f"<!-- {name}:")]
        closes = [i for i, line in enumerate(lines) if line.strip() == f"<!-- /{name} -->"]
        if len(opens) != 1 or len(closes) != 1 or closes[0] < opens[0]:
            raise ConfigError(
                f"{path}: needs one '<!-- {name}: ... -->' ... '<!-- /{name} -->' pair"
            )
        lines = [*lines[: opens[0] + 1], text.rstrip("\n") + "\n", *lines[closes[0] :]]
    new = "".join(lines)
    if new == old:
        return False
    atomic_write(path, new)
    return True
