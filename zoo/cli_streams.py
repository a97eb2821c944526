"""The ``attn-zoo`` process's streams and signals: SIGINT and SIGTERM as Ctrl-C, a reader
of stdout that leaves (``attn-zoo train ... | head``), native code's noise on stderr."""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import shlex
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from zoo import progress


@contextlib.contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Drop what native code writes to file descriptor 2 (ALE's banner) in this block;
    Python's own errors still reach the user through the exception."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def interrupt_on_signals() -> None:
    """SIGTERM (a scheduler's stop) and SIGINT act as Ctrl-C for every command: a trainer
    checkpoints, a half-written output is removed (atomic writes, ``new_folder``), exit 130.

    A job started in the background with ``&`` inherits an ignored SIGINT, so Python would
    not raise KeyboardInterrupt for ``kill -INT``; both handlers are set explicitly. Only the
    main thread may set handlers: called from another (a caller's thread), it does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, interrupt)


class OutputClosed(KeyboardInterrupt):
    """The reader of stdout or stderr left during ``train`` (``attn-zoo train ... | head``).

    Raised in place of the write's ``BrokenPipeError`` so the run stops as on Ctrl-C: the
    trainer saves its checkpoint and ``status.json`` says ``interrupted``, not ``failed``.
    """


class _Guarded:
    """A text stream whose writes raise :class:`OutputClosed` when its reader has left."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError as err:
            raise OutputClosed from err

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError as err:
            raise OutputClosed from err

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def guarded_output() -> Iterator[None]:
    """sys.stdout and sys.stderr as :class:`_Guarded` streams, for the length of a command."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Guarded(sys.stdout), _Guarded(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def train_folder(args: argparse.Namespace) -> Path | None:
    """The run folder a ``train`` command was writing: the one it started, or the resumed one."""
    return progress.current_run() or (Path(args.resume) if args.resume else None)


def ignore_interrupts() -> None:
    """Ignore SIGINT and SIGTERM from now on: the interpreter's shutdown takes a while
    (torch's finalisers) and restores the default handlers, so a second Ctrl-C then would
    kill the process by the signal (exit -2) instead of the status the command returned
    (130 for the first one)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has left (poll reports an error on it)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(event & select.POLLERR for _, event in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll, or a stdout without a descriptor
        return False


def reader_gone(args: argparse.Namespace) -> int:
    """stdout's reader left (``attn-zoo show ... | head``): stop quietly, as shell tools do.

    stdout is pointed at /dev/null first, or the interpreter's final flush raises again. A
    training run stopped this way says on stderr how to resume it.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    folder = train_folder(args) if args.command == "train" else None
    if folder and _stopped(folder):
        resume = f"attn-zoo train --resume {shlex.quote(str(folder))}"
        try:
            print(f"attn-zoo: stdout closed; to resume: {resume}", file=sys.stderr, flush=True)
        except BrokenPipeError:  # `2>&1 | head`: stderr left too; status.json has the hint
            os.dup2(devnull, sys.stderr.fileno())
    return 128 + 13  # SIGPIPE's exit status


def _stopped(folder: Path) -> bool:
    """Whether the run in ``folder`` was interrupted (not finished); if so its
    ``status.json`` gets the resume command as ``reason``, for when no stderr shows it."""
    from zoo.runs import load

    try:
        handle = load(folder)
    except (OSError, ValueError):  # not a run folder (yet): nothing to resume
        return False
    if handle.status.get("state") != "interrupted":
        return False
    resume = f"attn-zoo train --resume {shlex.quote(str(folder))}"
    handle.write_status(reason=f"output closed; to resume: {resume}")
    return True
