"""``attn-zoo``: a thin command line over :mod:`zoo` (``list``, ``show``, ``train``,
``evaluate``, ``record``, ``plot``, ``report``, ``robustness``, ``maps``, ``import``).

The parser is :mod:`zoo.cli_parser`, the commands :mod:`zoo.cli_commands`, the handling of
signals and a closed stdout :mod:`zoo.cli_streams`; here: the entry point and its exit
status (0 done, 1 an internal error with a traceback file, 2 a user error, 130 interrupted,
141 stdout closed).
"""

from __future__ import annotations

import argparse
import errno
import os
import shlex
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from attn_policies.atomic import atomic_write
from zoo import __version__
from zoo.cli_parser import build_parser
from zoo.cli_streams import (
    ignore_interrupts,
    interrupt_on_signals,
    reader_gone,
    stdout_reader_gone,
    train_folder,
)
from zoo.config_checks import USER_ERRORS
from zoo.console import log_to_console


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def _internal_error(err: BaseException, args: argparse.Namespace) -> int:
    """Anything else is a bug: say so, where the run folder is, and where the traceback went."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    file = Path(tempfile.gettempdir()) / f"attn-zoo-error-{stamp}.log"
    log: Path | None = file
    try:
        text = f"attn-zoo {__version__}: {shlex.join(args.argv)}\n{traceback.format_exc()}"
        atomic_write(file, text)  # never through a link planted in the shared temp folder
    except OSError:
        log = None
    print(f"attn-zoo: internal error: {type(err).__name__}: {_one_line(err)}", file=sys.stderr)
    folder = train_folder(args) if args.command == "train" else getattr(args, "run", None)
    if folder:
        print(f"  run folder: {folder} (status.json, logs/)", file=sys.stderr)
    if log is not None:
        print(f"  traceback: {log}", file=sys.stderr)
    else:
        traceback.print_exc()
    return 1


DISK_FULL = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}
"""The errors of a write that found no room: the disk, a quota or a file-size limit."""


def _disk_full(err: OSError) -> str:
    """One line for a write that found no room: every file is written to a temporary file
    first, so the previous files are whole; the command can simply run again."""
    where = f" writing {err.filename}" if err.filename else ""
    return (
        f"no room{where} ({err.strerror}: a full disk, a quota or a file-size limit); the "
        "files written before are kept whole: free space and run the command again"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``attn-zoo ARGV`` (default ``sys.argv[1:]``); its exit status.

    Only the user-error family (:data:`zoo.config_checks.USER_ERRORS`) is one
    ``attn-zoo: error:`` line and exit 2; any other exception (a ``ValueError`` from deep
    inside included) is an internal error: exit 1, its traceback in a file under the
    temporary folder.
    """
    program = argv is None  # the program itself, not a caller in Python
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    interrupt_on_signals()  # SIGTERM as Ctrl-C: every command cleans up what it half wrote
    try:
        if args.allow_import or os.environ.get("ATTN_ZOO_ALLOW_IMPORT"):
            from zoo.registry import allow_imports  # the person running says so, never a config

            allow_imports(args.allow_import or ())  # flags and environment: one check
        if args.allow_writer:  # the same for a class that writes where its arguments say
            from zoo.registry import allow_writers

            allow_writers(args.allow_writer)
        with log_to_console():  # the library's notices and warnings, as bare lines
            return int(args.func(args) or 0)
    except USER_ERRORS as err:
        print(f"attn-zoo: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nattn-zoo: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError as err:
        if not stdout_reader_gone():  # another pipe broke (a worker's): a bug, not the reader
            return _internal_error(err, args)
        return reader_gone(args)
    except OSError as err:
        if err.errno not in DISK_FULL:
            return _internal_error(err, args)
        print(f"attn-zoo: error: {_disk_full(err)}", file=sys.stderr)
        return 2
    except Exception as err:
        return _internal_error(err, args)
    finally:
        if program:  # its exit status is decided
            ignore_interrupts()


if __name__ == "__main__":
    sys.exit(main())
