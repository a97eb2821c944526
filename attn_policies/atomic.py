"""Atomic file writes: a kill or a full disk at any moment leaves the old file or the new one.

Every write goes to a temporary file in the same folder (same file system, so the final
``os.replace`` is atomic), is flushed to disk, and only then replaces the target; on any
error the temporary file is removed and the previous file is untouched.

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
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "atomic_write"]


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not every platform can open a folder
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path to write ``path``'s new content to; it replaces ``path`` on success.

    The temporary name keeps ``path``'s suffix (libraries such as SB3 append ``.zip`` to
    names without it) and starts with a dot, so globs over the folder skip it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:  # KeyboardInterrupt included: never leave a half-written target
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(path.parent)


def atomic_write(path: str | Path, data: bytes | str) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` atomically."""
    payload = data.encode() if isinstance(data, str) else data
    with atomic_path(path) as tmp:
        tmp.write_bytes(payload)
