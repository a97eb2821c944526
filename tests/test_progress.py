"""Tests of zoo.progress: run folder and progress lines for output that is not a terminal."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from zoo import progress
from zoo.console import log_to_console


@pytest.fixture(autouse=True)
def lines_off() -> Iterator[None]:
    yield
    progress.configure(on=False)


def test_off_by_default_prints_nothing_but_remembers_the_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    progress.configure(on=False)
    assert progress.lines("x", 10) is None and progress.sb3_callback("x", 10) is None
    progress.announce("runs/x/0-1")
    assert capsys.readouterr().out == ""
    assert progress.current_run() == Path("runs/x/0-1")
    progress.configure(on=False)  # a new command forgets it
    assert progress.current_run() is None


def test_on_the_run_folder_then_lines_at_the_interval(
    capsys: pytest.CaptureFixture[str],
) -> None:
    progress.configure(on=True, every=10)
    with log_to_console():  # as the command line shows them
        progress.announce("runs/x/0-1", resume=True)
        times = iter([0.0, 4.0, 12.0, 15.0, 30.0, 31.0])
        lines = progress.ProgressLines("x", 1000, "steps", start=100, clock=times.__next__)
        for done in (200, 400, 500, 700):  # at 4 s (too soon), 12 s, 15 s (too soon), 30 s
            lines.update(done, latest="eval 3")
        lines.close()
    out = capsys.readouterr()
    assert out.err == ""
    assert out.out.splitlines() == [
        "resuming, run folder: runs/x/0-1",
        "[x] 400/1,000 steps (40%)  25.0 steps/s  ETA 24s  latest eval 3",
        "[x] 700/1,000 steps (70%)  20.0 steps/s  ETA 15s  latest eval 3",
        "[x] done: 700/1,000 steps in 31s  (19.4 steps/s)",
    ]


def test_lines_are_log_records_the_library_does_not_print(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    progress.configure(on=True, every=10)
    with caplog.at_level(logging.INFO, logger="zoo.progress"):
        progress.announce("runs/x/0-1")
        progress.ProgressLines("x", 10, clock=iter([0.0, 1.0]).__next__).close(10)
    assert capsys.readouterr().out == ""
    assert [(r.name, r.levelname) for r in caplog.records] == [("zoo.progress", "INFO")] * 2
    assert caplog.messages == [
        "training, run folder: runs/x/0-1",
        "[x] done: 10/10 steps in 1s  (10.0 steps/s)",
    ]


def test_bad_interval() -> None:
    with pytest.raises(ValueError, match="> 0 seconds"):
        progress.configure(on=True, every=0)
