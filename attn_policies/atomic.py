"""Atomic file writes: a kill or a full disk at any moment leaves the old file or the new one,
and no write ever goes through a symlink.

Every write goes to a fresh temporary file in the same folder (same file system, so the final
``os.replace`` is atomic), is flushed to disk, and only then replaces the target; on any
error the temporary file is removed and the previous file is untouched. ``os.replace``
replaces a symlink at the target by the new file, never the file the link points at, so a
shared run folder whose ``curves.png`` links to ``~/.bashrc`` cannot make a command write
there. The temporary file is created exclusively (``O_EXCL``, a random name), so a planted
link cannot catch it either. Files that grow by appends are opened with
:func:`open_append`, which refuses a symlink, and the folders a run keeps inside its own
folder (``checkpoints``, ``monitor``, ``robustness``) are made with :func:`make_folder`,
which replaces a symlink there by a real folder.

Example:
    >>> import tempfile, json
    >>> folder = Path(tempfile.mkdtemp())
    >>> atomic_write(folder / "status.json", json.dumps({"state": "running"}))
    >>> with atomic_path(folder / "model.bin") as tmp:
    ...     _ = tmp.write_bytes(b"weights")
    >>> sorted(p.name for p in folder.iterdir())
    ['model.bin', 'status.json']
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = [
    "atomic_path",
    "atomic_write",
    "commit",
    "discard",
    "make_folder",
    "new_folder",
    "open_append",
    "temp_path",
]


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not every platform can open a folder
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def temp_path(path: str | Path) -> Path:
    """A new, empty temporary file beside ``path`` to write its next content to.

    Its name keeps ``path``'s suffix (libraries such as SB3 append ``.zip`` to names without
    it, OpenCV and matplotlib pick the format from it) and starts with a dot, so globs over
    the folder skip it. It is created with ``O_EXCL | O_NOFOLLOW`` under a random name:
    nothing planted in the folder can redirect the write. Finish with :func:`commit` or
    :func:`discard`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    while True:
        tmp = path.with_name(f".{path.stem}.{secrets.token_hex(4)}.tmp{path.suffix}")
        try:
            os.close(os.open(tmp, flags, 0o666))  # 0o666 & ~umask, as open() would give
            return tmp
        except FileExistsError:
            continue
        except BaseException:  # Ctrl-C or SIGTERM between the open and the return
            discard(tmp)
            raise


def commit(tmp: Path, path: str | Path) -> None:
    """Flush ``tmp`` to disk and put it in ``path``'s place (a symlink there is replaced)."""
    path = Path(path)
    with open(tmp, "rb+") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def discard(tmp: Path) -> None:
    """Remove an unfinished temporary file (if it is still there)."""
    with contextlib.suppress(OSError):
        tmp.unlink()


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path to write ``path``'s new content to; it replaces ``path`` on success.

    For writers that take a path (``torch.save``, SB3's ``save``, ``savefig``): see
    :func:`temp_path` for the name.
    """
    tmp = temp_path(path)
    try:
        yield tmp
        commit(tmp, path)
    except BaseException:  # KeyboardInterrupt included: never leave a half-written target
        discard(tmp)
        raise


def atomic_write(path: str | Path, data: bytes | str) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` atomically."""
    payload = data.encode() if isinstance(data, str) else data
    with atomic_path(path) as tmp:
        tmp.write_bytes(payload)


def open_append(path: str | Path) -> IO[str]:
    """``path`` opened for appending text (created if missing); a symlink there is refused
    (``OSError``, ``ELOOP``) rather than followed."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    return os.fdopen(os.open(path, flags, 0o666), "a", newline="")


def make_folder(path: str | Path, inside: str | Path | None = None) -> Path:
    """``path`` as a real folder, created with its parents. A symlink at ``path`` (and, with
    ``inside``, at any folder between ``inside`` and ``path``) is replaced by an empty folder,
    never followed: a shared run folder whose ``checkpoints`` links to ``~`` must not receive
    our files there. What the link pointed at is left as it was.
    """
    path = Path(path)
    parts = [path]
    if inside is not None:
        below = path.relative_to(inside).parents  # "a/b/c" -> a/b, a, .
        parts = [Path(inside) / p for p in reversed(below) if str(p) != "."] + [path]
    for folder in parts:
        if folder.is_symlink():
            folder.unlink()
        folder.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def new_folder(path: str | Path) -> Iterator[Path]:
    """A folder that appears whole or not at all: its files go to a hidden temporary folder
    beside ``path`` (yielded), renamed to ``path`` once the block ends without error. On an
    error (a full disk, Ctrl-C) the temporary folder is removed and ``path`` is as it was;
    after a SIGKILL only the hidden ``.<name>.*.tmp`` folder stays. ``path`` must not exist
    or be an empty folder (``rename`` replaces nothing else, a symlink included)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        try:
            os.mkdir(tmp, 0o700)
            break
        except FileExistsError:
            continue
        except BaseException:  # Ctrl-C or SIGTERM just after the mkdir
            with contextlib.suppress(OSError):
                tmp.rmdir()
            raise
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700, as mkdir would have made it
        yield tmp
        os.rename(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
