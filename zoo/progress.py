"""Progress lines for long runs whose output is not a terminal (``nohup``, CI, ``> log``).

A progress bar redraws one line in a terminal; written to a file it is either absent or an
unreadable stream of carriage returns. When lines are on (:func:`configure`, which the
``attn-zoo train`` command does when stdout is not a TTY), every trainer logs its run
folder when it starts and then, at most every ``every`` seconds, one line::

    [doorkey] 12,500/50,000 steps (25%)  208 steps/s  ETA 3m00s  latest eval: 0.41

The lines are ``INFO`` records of this module's logger; the command line prints them on
stdout (:func:`zoo.console.log_to_console`). Lines are off by default, so library users and
tests see nothing unless they ask.

Example:
    >>> import io, sys
    >>> from zoo.console import log_to_console
    >>> saved, sys.stdout = sys.stdout, io.StringIO()
    >>> clock = iter([0.0, 5.0, 10.0, 20.0]).__next__
    >>> with log_to_console():
    ...     lines = ProgressLines("demo", total=100, unit="steps", every=8, clock=clock)
    ...     lines.update(10)  # 5 s: too soon for a line
    ...     lines.update(40, latest="eval 1.5")
    ...     lines.close(100)
    >>> out, sys.stdout = sys.stdout.getvalue(), saved
    >>> print(out, end="")
    [demo] 40/100 steps (40%)  4.0 steps/s  ETA 15s  latest eval 1.5
    [demo] done: 100/100 steps in 20s  (5.0 steps/s)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zoo.config_checks import ConfigError

if TYPE_CHECKING:
    from stable_baselines3.common.callbacks import BaseCallback

logger = logging.getLogger(__name__)

DEFAULT_EVERY = 30.0
"""Seconds between two progress lines."""

_settings: dict[str, Any] = {"on": False, "every": DEFAULT_EVERY}
_current: dict[str, Path | None] = {"run": None}


def configure(on: bool, every: float = DEFAULT_EVERY) -> None:
    """Turn progress lines on or off for the trainers of this process (and forget the
    current run: a command starts afresh).

    Args:
        on: log the run folder at the start and progress lines.
        every: seconds between lines (> 0).
    """
    if not every > 0:
        raise ConfigError(f"the progress interval must be > 0 seconds, got {every}")
    _settings.update(on=bool(on), every=float(every))
    _current["run"] = None


def enabled() -> bool:
    """Whether progress lines are on (:func:`configure`)."""
    return bool(_settings["on"])


def current_run() -> Path | None:
    """The run folder the last trainer of this process announced (None before any)."""
    return _current["run"]


def announce(path: str | Path, what: str = "training", resume: bool = False) -> None:
    """Note ``path`` as the current run and, when lines are on, log it, so a log says
    where its run lives at once (and an interrupt can name it)."""
    _current["run"] = Path(path)
    if enabled():
        logger.info("%s, run folder: %s", "resuming" if resume else what, Path(path))


def duration(seconds: float) -> str:
    """``"45s"``, ``"3m05s"``, ``"2h04m"``.

    Example:
        >>> duration(44.6), duration(185), duration(7440)
        ('45s', '3m05s', '2h04m')
    """
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class ProgressLines:
    """Steady progress lines: done/total, rate, ETA and the latest evaluation.

    The rate and ETA count from the first :meth:`update` call's ``start`` (work done before
    a resume is not in the rate).

    Args:
        name: shown in brackets at the start of each line (the experiment).
        total: the amount of work at the end (steps, generations, epochs).
        unit: what ``total`` counts.
        start: work already done (a resumed run).
        every: seconds between lines; default the :func:`configure` setting.
        clock: seconds, monotonic (tests pass a fake one).
    """

    def __init__(
        self,
        name: str,
        total: int,
        unit: str = "steps",
        start: int = 0,
        every: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name, self.total, self.unit = name, max(int(total), 0), unit
        self.start = self.done = int(start)
        self.every = float(every if every is not None else _settings["every"])
        self.clock = clock
        self.t0 = clock()
        self.last = self.t0

    def _rate(self, now: float) -> float:
        elapsed = now - self.t0
        return (self.done - self.start) / elapsed if elapsed > 0 else 0.0

    def _write(self, text: str) -> None:
        logger.info("[%s] %s", self.name, text)

    def update(self, done: int, latest: str | None = None) -> None:
        """Record progress; log a line when ``every`` seconds passed since the last one."""
        self.done = int(done)
        now = self.clock()
        if now - self.last < self.every:
            return
        self.last = now
        rate = self._rate(now)
        share = f" ({self.done / self.total:.0%})" if self.total else ""
        eta = (
            f"  ETA {duration((self.total - self.done) / rate)}"
            if rate > 0 and self.total > self.done
            else ""
        )
        tail = f"  latest {latest}" if latest else ""
        rate_text = f"{rate:,.1f}" if rate < 100 else f"{rate:,.0f}"
        self._write(
            f"{self.done:,}/{self.total:,} {self.unit}{share}  {rate_text} {self.unit}/s{eta}{tail}"
        )

    def close(self, done: int | None = None) -> None:
        """The final line: work done, time taken and the mean rate."""
        if done is not None:
            self.done = int(done)
        now = self.clock()
        rate = self._rate(now)
        rate_text = f"{rate:,.1f}" if rate < 100 else f"{rate:,.0f}"
        self._write(
            f"done: {self.done:,}/{self.total:,} {self.unit} in {duration(now - self.t0)}  "
            f"({rate_text} {self.unit}/s)"
        )


def lines(name: str, total: int, unit: str = "steps", start: int = 0) -> ProgressLines | None:
    """A :class:`ProgressLines` when lines are on (:func:`configure`), else None."""
    return ProgressLines(name, total, unit, start) if enabled() else None


def sb3_callback(
    name: str, total: int, latest: Callable[[], str | None] = lambda: None
) -> BaseCallback | None:
    """An SB3 callback logging :class:`ProgressLines` of ``num_timesteps`` (None when off).

    ``latest`` gives the text of the latest evaluation, if any.
    """
    if not enabled():
        return None
    from stable_baselines3.common.callbacks import BaseCallback

    class _Lines(BaseCallback):
        def _on_training_start(self) -> None:
            self.lines = ProgressLines(name, total, "steps", int(self.model.num_timesteps))

        def _on_step(self) -> bool:
            self.lines.update(self.num_timesteps, latest())
            return True

        def _on_training_end(self) -> None:
            self.lines.close(self.num_timesteps)

    return _Lines()
