"""Where the packages' log records go when zoo runs as a program (``attn-zoo``, a Ray cell).

Library modules never print: they log (``logger = logging.getLogger(__name__)``) and the
program routes the records with :func:`log_to_console`: notices (progress lines, the run
folder a trainer starts, epoch lines) to stdout, warnings and errors to stderr, each as its
bare message, the text the command has always shown. A library user who configures nothing
sees the warnings on stderr (Python's last-resort handler) and no notices; to see the
notices, configure :mod:`logging` (e.g. ``logging.basicConfig(level=logging.INFO)``).

Example:
    >>> import io, sys
    >>> saved, sys.stdout = sys.stdout, io.StringIO()
    >>> with log_to_console():
    ...     logging.getLogger("zoo.demo").info("[demo] 10/100 steps")
    >>> out, sys.stdout = sys.stdout.getvalue(), saved
    >>> out
    '[demo] 10/100 steps\\n'
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator

PACKAGES = ("attn_envs", "attn_policies", "zoo")
"""The loggers (and their children) :func:`log_to_console` routes."""


class ConsoleHandler(logging.Handler):
    """Writes each record's message as ``print`` did: a line to ``sys.stdout`` or
    ``sys.stderr`` as they are at that moment (the CLI wraps them so that a reader that
    left stops a run, tests capture them), flushed.

    Unlike :class:`logging.StreamHandler` a failed write is not swallowed: a closed stdout
    stops the command as a ``print`` to it would.
    """

    def __init__(self, stream: str, below: int | None = None, level: int = logging.NOTSET):
        super().__init__(level)
        self.stream_name = stream
        if below is not None:
            self.addFilter(lambda record: record.levelno < below)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
        except Exception:  # a record whose arguments do not format: logging's own report
            self.handleError(record)
            return
        stream = getattr(sys, self.stream_name)
        stream.write(text + "\n")
        stream.flush()


@contextlib.contextmanager
def log_to_console(level: int = logging.INFO) -> Iterator[None]:
    """For this block, records of :data:`PACKAGES` at ``level`` and above go to the console:
    below ``WARNING`` to stdout, the rest to stderr, and nowhere else (not to the root
    logger's handlers). The loggers are as they were afterwards."""
    handlers = [
        ConsoleHandler("stdout", below=logging.WARNING),
        ConsoleHandler("stderr", level=logging.WARNING),
    ]
    saved = []
    for name in PACKAGES:
        logger = logging.getLogger(name)
        saved.append((logger, logger.level, logger.propagate))
        logger.setLevel(level)
        logger.propagate = False
        for handler in handlers:
            logger.addHandler(handler)
    try:
        yield
    finally:
        for logger, old_level, propagate in saved:
            for handler in handlers:
                logger.removeHandler(handler)
            logger.setLevel(old_level)
            logger.propagate = propagate
