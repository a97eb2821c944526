"""One metrics file per run folder, written by every trainer: ``metrics.csv``.

Long format, one row per value, columns :data:`COLUMNS`:

- ``step``: the trainer's own progress counter: env steps (SB3, CMA-ES, DAgger; also of
  ``episode_*`` rows: the step at the episode's end), iterations (classifier), epochs (BC);
- ``wall_time``: seconds since the run started, summed over resumed sessions (empty where a
  converted old run folder does not know it);
- ``metric``: the name, ``/`` separating its group;
- ``value``: a float.

Metric names:

- ``episode_return``, ``episode_length``: every finished training episode (SB3 runs; the
  ``monitor/`` files stay for SB3 tools);
- SB3's logger records as SB3 names them (``train/loss``, ``rollout/ep_rew_mean``,
  ``time/fps``, ``eval/<policy>/mean_reward``, ...), through :class:`MetricsLogger`'s
  :meth:`~MetricsLogger.sb3_writer` (TensorBoard and ``logs/part<k>/progress.csv`` stay);
- ``eval/<policy>/{mean_reward,std_reward,mean_length,success_rate}``: periodic tests
  (``policy`` is ``test`` for CMA-ES and DAgger);
- ``fitness/{best,mean,worst}``, ``cmaes/{best_ever,sigma}`` (CMA-ES generations);
- ``train/loss``, ``dagger/beta`` (DAgger rounds); ``bc/loss``, ``bc/test_mean_reward``
  (BC epochs: the step counts epochs, not env steps);
- ``classifier/{loss,train_accuracy,test_accuracy}`` (classifier iterations);
- ``apg/{cost,grad_norm,restarts,learning_rate}`` (analytic policy gradient updates).

Rows are appended and flushed as they are logged, so a killed run keeps what it logged; a
resumed run first drops the rows past its checkpoint's step. :func:`read_metrics` returns the
table of a run folder; folders trained before ``metrics.csv`` existed are read through
:func:`legacy_metrics` from the files they have.

Example:
    >>> import tempfile
    >>> run = Path(tempfile.mkdtemp())
    >>> with MetricsLogger(run) as log:
    ...     log.log(10, {"train/loss": 0.5, "eval/test/mean_reward": None})
    ...     log.log(20, {"train/loss": 0.25})
    >>> with MetricsLogger(run, resume_step=10) as log:  # resumed from the step-10 checkpoint
    ...     log.log(30, {"train/loss": 0.125})
    >>> table = read_metrics(run)
    >>> table["step"].tolist(), table["metric"].tolist(), table["value"].tolist()
    ([10.0, 30.0], ['train/loss', 'train/loss'], [0.5, 0.125])
"""

from __future__ import annotations

import csv
import json
import math
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from attn_policies.atomic import atomic_path, open_append
from zoo.config_checks import ConfigError, read_json, read_lines

if TYPE_CHECKING:  # SB3 is imported when these are built, not with this module
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.logger import KVWriter

FILE = "metrics.csv"
COLUMNS = ("step", "wall_time", "metric", "value")

Table = dict[str, np.ndarray]
"""``step``, ``wall_time``, ``value`` (float arrays) and ``metric`` (str array), row-aligned."""


def _number(value: Any) -> float | None:
    """``value`` as a float, or None for what is not a real number (None, str, NaN, bools)."""
    if isinstance(value, (bool, np.bool_)) or value is None:
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


class MetricsLogger:
    """Appends rows to ``<run_dir>/metrics.csv``, flushed per row.

    Args:
        run_dir: the run folder (created if missing).
        resume_step: a resumed run's checkpoint step: rows past it are dropped and wall time
            continues from the last kept row. None starts a new file.
        clock: seconds, monotonic (tests pass a fake one).
    """

    def __init__(
        self,
        run_dir: str | Path,
        resume_step: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(run_dir) / FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        kept: list[list[str]] = []
        if resume_step is not None and self.path.is_file():
            rows = list(csv.reader(read_lines(self.path)))[1:]  # line lengths checked
            kept = [r for r in rows if len(r) == 4 and float(r[0]) <= resume_step]
        with atomic_path(self.path) as tmp, tmp.open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(COLUMNS)
            writer.writerows(kept)
        times = [float(r[1]) for r in kept if r[1]]
        self.offset = max(times, default=0.0)
        self.clock = clock
        self.start = clock()
        self._fh = open_append(self.path)
        self._writer = csv.writer(self._fh)

    def wall_time(self) -> float:
        """Seconds since the run started (over resumed sessions)."""
        return self.offset + self.clock() - self.start

    def log(self, step: float, values: Mapping[str, Any]) -> None:
        """One row per real-number value at ``step`` (None, NaN and text are skipped)."""
        if self._fh.closed:
            raise ValueError(f"{self.path}: the metrics logger is closed")
        now = round(self.wall_time(), 3)
        for metric, raw in values.items():
            value = _number(raw)
            if value is not None:
                self._writer.writerow((_step_text(step), now, metric, repr(value)))
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def sb3_writer(self) -> KVWriter:
        """An SB3 ``KVWriter`` that logs each ``logger.dump(step)`` here (keys excluded
        from ``csv`` are left out). Add it to an SB3 ``Logger``'s ``output_formats``."""
        from stable_baselines3.common.logger import KVWriter

        logger = self

        class MetricsWriter(KVWriter):
            def write(
                self,
                key_values: dict[str, Any],
                key_excluded: dict[str, tuple[str, ...]],
                step: int = 0,
            ) -> None:
                excluded = {k for k, v in key_excluded.items() if v and "csv" in v}
                logger.log(step, {k: v for k, v in key_values.items() if k not in excluded})

            def close(self) -> None:
                logger.close()

        return MetricsWriter()

    def episode_callback(self) -> BaseCallback:
        """An SB3 callback logging ``episode_return`` and ``episode_length`` of each
        finished training episode (from the ``Monitor`` info) at the current step."""
        from stable_baselines3.common.callbacks import BaseCallback

        logger = self

        class EpisodeMetrics(BaseCallback):
            def _on_step(self) -> bool:
                for info in self.locals.get("infos", ()):
                    episode = info.get("episode")
                    if episode is not None:
                        logger.log(
                            self.num_timesteps,
                            {"episode_return": episode["r"], "episode_length": episode["l"]},
                        )
                return True

        return EpisodeMetrics()


def _step_text(step: float) -> str:
    return str(int(step)) if float(step).is_integer() else repr(float(step))


def _table(rows: list[tuple[float, float, str, float]]) -> Table:
    step, wall, metric, value = zip(*rows, strict=True) if rows else ((), (), (), ())
    return {
        "step": np.asarray(step, dtype=np.float64),
        "wall_time": np.asarray(wall, dtype=np.float64),
        "metric": np.asarray(metric, dtype=str),
        "value": np.asarray(value, dtype=np.float64),
    }


def read_metrics(run_dir: str | Path) -> Table:
    """The long table of a run folder: its ``metrics.csv``, else :func:`legacy_metrics`.

    Raises:
        ConfigError: a ``metrics.csv`` whose header is not :data:`COLUMNS`.
    """
    path = Path(run_dir) / FILE
    if not path.is_file():
        return legacy_metrics(run_dir)
    rows = list(csv.reader(read_lines(path)))  # a 1 GB line is refused, never read whole
    if not rows or tuple(rows[0]) != COLUMNS:
        raise ConfigError(f"{path}: the header must be {','.join(COLUMNS)}")
    return _table([(float(s), float(w) if w else math.nan, m, float(v)) for s, w, m, v in rows[1:]])


def series(table: Table, metric: str, x: str = "step") -> tuple[np.ndarray, np.ndarray]:
    """``(x, value)`` of one metric in logged order; ``x`` is ``"step"`` or ``"wall_time"``.

    Example:
        >>> t = _table([(1, 0.5, "a", 2.0), (1, 0.5, "b", 3.0), (2, 0.9, "a", 4.0)])
        >>> [v.tolist() for v in series(t, "a", "wall_time")]
        [[0.5, 0.9], [2.0, 4.0]]
    """
    rows = table["metric"] == metric
    return table[x][rows], table["value"][rows]


# -- old run folders --------------------------------------------------------------------------


def _read_columns(path: Path, skip: int = 0) -> dict[str, np.ndarray]:
    """A CSV file as float columns; empty or text cells become NaN."""
    rows = list(csv.reader(read_lines(path, skip)))
    if not rows:
        return {}
    header, body = rows[0], [r for r in rows[1:] if r]
    table = np.array([[_number(c) for c in r] for r in body], dtype=np.float64)
    table = table.reshape(len(body), len(header))
    return {name: table[:, j] for j, name in enumerate(header)}


def read_monitor(run_dir: str | Path) -> dict[str, np.ndarray]:
    """Episodes of all ``monitor/train_*.monitor.csv`` files, merged by end time.

    Returns:
        ``r`` (return), ``l`` (length), ``step`` (running sum of ``l``: the approximate env
        step of the episode end) and ``time`` (seconds since the earliest file's ``t_start``),
        in order of end time; empty arrays without episodes. With ``n`` parallel envs the
        step misses the unfinished episodes of the other envs (behind by less than ``n - 1``
        episode lengths); it is exact for one env.
    """
    returns, lengths, ends, starts = [], [], [], []
    for file in sorted((Path(run_dir) / "monitor").glob("train_*.monitor.csv")):
        first = next(iter(read_lines(file)), "")
        t_start = float(json.loads(first.lstrip("#")).get("t_start", 0.0)) if first else 0.0
        table = _read_columns(file, skip=1)
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


def read_progress(run_dir: str | Path) -> dict[str, np.ndarray]:
    """SB3's ``logs/part*/progress.csv`` concatenated in part order (a resume starts a new
    part); ``time/time_elapsed`` restarts with each part, so it is offset by the previous
    parts' last value to count training time across the whole run."""
    parts = sorted(
        (Path(run_dir) / "logs").glob("part*/progress.csv"),
        key=lambda p: int(re.sub(r"\D", "", p.parent.name) or 0),
    )
    tables = [t for t in (_read_columns(p) for p in parts) if t]
    if not tables:
        return {}
    names = list(dict.fromkeys(n for t in tables for n in t))
    out: dict[str, list[np.ndarray]] = {n: [] for n in names}
    offset = 0.0
    for t in tables:
        n_rows = len(next(iter(t.values())))
        for name in names:
            column = t.get(name, np.full(n_rows, np.nan))
            out[name].append(column + offset if name == "time/time_elapsed" else column)
        elapsed = t.get("time/time_elapsed")
        if elapsed is not None and np.isfinite(elapsed).any():
            offset += float(np.nanmax(elapsed))
    return {n: np.concatenate(cols) for n, cols in out.items()}


# Column of a trainer's own progress table -> metric name (the trainers log these names and
# the old folders' tables convert by them).
CMAES_METRICS = {
    "fitness_best": "fitness/best",
    "fitness_mean": "fitness/mean",
    "fitness_worst": "fitness/worst",
    "best_ever": "cmaes/best_ever",
    "sigma": "cmaes/sigma",
    "test_mean": "eval/test/mean_reward",
    "test_std": "eval/test/std_reward",
}
DAGGER_METRICS = {
    "loss": "train/loss",
    "beta": "dagger/beta",
    "test_mean": "eval/test/mean_reward",
    "test_std": "eval/test/std_reward",
}
BC_METRICS = {"loss": "bc/loss", "test_mean": "bc/test_mean_reward"}
APG_METRICS = {
    "cost": "apg/cost",
    "grad_norm": "apg/grad_norm",
    "restarts": "apg/restarts",
    "learning_rate": "apg/learning_rate",
    "test_mean": "eval/test/mean_reward",
    "test_std": "eval/test/std_reward",
}
CLASSIFIER_METRICS = {
    "loss": "classifier/loss",
    "train_accuracy": "classifier/train_accuracy",
    "test_accuracy": "classifier/test_accuracy",
}
# Old tables: the column naming the row, the step column, wall-time increments (summed).
_OLD_PROGRESS: tuple[tuple[str, str, tuple[str, ...], dict[str, str]], ...] = (
    ("generation", "env_steps", ("time_ask_tell", "time_evaluate"), CMAES_METRICS),
    ("round", "env_steps", ("seconds",), DAGGER_METRICS),
    ("update", "env_steps", ("seconds",), APG_METRICS),
    ("epoch", "epoch", (), BC_METRICS),
    ("iteration", "iteration", (), CLASSIFIER_METRICS),  # classifier history.csv
)


def renamed(record: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """The values of ``record`` named in ``names``, under their metric names.

    Example:
        >>> renamed({"loss": 0.5, "epoch": 3}, BC_METRICS)
        {'bc/loss': 0.5}
    """
    return {metric: record[key] for key, metric in names.items() if key in record}


def _columns_rows(
    step: np.ndarray, wall: np.ndarray, columns: Mapping[str, np.ndarray]
) -> list[tuple[float, float, str, float]]:
    """Long rows of wide columns sharing ``step`` and ``wall``: row by row, then by column,
    skipping non-finite steps and values."""
    rows = []
    for i in np.flatnonzero(np.isfinite(step)):
        for name, column in columns.items():
            if np.isfinite(column[i]):
                rows.append((float(step[i]), float(wall[i]), name, float(column[i])))
    return rows


def legacy_metrics(run_dir: str | Path) -> Table:
    """The long table of a run folder trained before ``metrics.csv``, from its old files.

    - ``monitor/train_*.monitor.csv``: ``episode_return``/``episode_length`` at the
      approximate step of the episode end (:func:`read_monitor`);
    - ``logs/part*/progress.csv`` (SB3): every column except ``eval/*`` (those come from
      ``evaluations.json``) at ``time/total_timesteps``, wall time ``time/time_elapsed``;
      rows without a step are left out;
    - ``evaluations.json`` with ``step`` records (SB3, BC): ``eval/<policy>/<metric>``, wall
      time interpolated from the episodes' (step, time) (empty with fewer than 2 episodes);
    - ``progress.csv`` of CMA-ES, DAgger or BC runs and the classifier's ``history.csv``,
      recognised by their columns (:data:`_OLD_PROGRESS`).
    """
    path = Path(run_dir)
    rows: list[tuple[float, float, str, float]] = []
    episodes = read_monitor(path)
    for i in range(episodes["r"].size):
        step, wall = float(episodes["step"][i]), float(episodes["time"][i])
        rows.append((step, wall, "episode_return", float(episodes["r"][i])))
        rows.append((step, wall, "episode_length", float(episodes["l"][i])))
    progress = read_progress(path)
    if "time/total_timesteps" in progress:
        n = len(progress["time/total_timesteps"])
        walls = progress.get("time/time_elapsed", np.full(n, np.nan))
        kept = {k: v for k, v in progress.items() if not k.startswith("eval/")}
        rows += _columns_rows(progress["time/total_timesteps"], walls, kept)
    history_file = path / "evaluations.json"
    history = read_json(history_file) if history_file.is_file() else []
    for record in (h for h in history if isinstance(h, dict) and "step" in h):
        step = float(record["step"])
        wall = (
            float(np.interp(step, episodes["step"], episodes["time"]))
            if episodes["step"].size >= 2
            else math.nan
        )
        for policy, result in record.items():
            if isinstance(result, dict):
                for metric in ("success_rate", "mean_reward", "std_reward", "mean_length"):
                    value = _number(result.get(metric))
                    if value is not None:
                        rows.append((step, wall, f"eval/{policy}/{metric}", value))
    for file in (path / "progress.csv", path / "history.csv"):
        table = _read_columns(file) if file.is_file() else {}
        for key, step_column, times, names in _OLD_PROGRESS:
            if key in table and step_column in table:
                n = len(table[key])
                walls = (
                    np.cumsum(sum((table[t] for t in times), np.zeros(n)))
                    if times
                    else np.full(n, np.nan)
                )
                columns = {names[c]: table[c] for c in names if c in table}
                rows += _columns_rows(table[step_column], walls, columns)
                break
    return _table(rows)
