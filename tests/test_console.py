"""Tests of zoo.console: the program's routing of the packages' log records to the console."""

from __future__ import annotations

import logging
import sys

import pytest

from zoo.console import PACKAGES, log_to_console


def test_notices_go_to_stdout_warnings_to_stderr_as_bare_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with log_to_console():
        logging.getLogger("zoo.progress").info("[x] 1/2 steps")
        logging.getLogger("zoo.runs").warning("run: taking over the stale lock of process %d", 7)
        logging.getLogger("attn_policies.algorithms").error("an error")
        logging.getLogger("zoo.runs").debug("not shown")
    out = capsys.readouterr()
    assert out.out == "[x] 1/2 steps\n"
    assert out.err.splitlines() == [
        "run: taking over the stale lock of process 7",
        "an error",
    ]


def test_the_loggers_are_as_they_were_afterwards(capsys: pytest.CaptureFixture[str]) -> None:
    before = {name: vars(logging.getLogger(name)).copy() for name in PACKAGES}
    with pytest.raises(RuntimeError), log_to_console():
        raise RuntimeError
    assert {name: vars(logging.getLogger(name)) for name in PACKAGES} == before
    logging.getLogger("zoo.progress").info("a notice with nothing configured")
    assert capsys.readouterr().out == ""


def test_a_closed_stdout_stops_the_command_as_a_print_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Closed:
        def write(self, text: str) -> int:
            raise BrokenPipeError

        def flush(self) -> None:
            raise BrokenPipeError

    monkeypatch.setattr(sys, "stdout", Closed())
    with pytest.raises(BrokenPipeError), log_to_console():  # StreamHandler would swallow it
        logging.getLogger("zoo.progress").info("[x] 1/2 steps")
