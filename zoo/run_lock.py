"""The lock on a run folder: one process trains or resumes it at a time, and a lock left by a
process that died (however it died) is stale by construction."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from zoo.config_checks import ConfigError


class RunLockedError(ConfigError):
    """The run folder is in use by a live process (training or resuming it)."""


class RunLock:
    """An exclusive lock on a run folder, held while a process trains or resumes it.

    ``run.lock`` is locked with ``flock``, which the kernel releases when the process dies
    however it dies, so a lock left by a killed process is stale by construction: the file
    still names the dead process, and the next taker says so (``stale``) and takes it.

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> with RunLock(folder):
        ...     RunLock(folder).acquire()
        Traceback (most recent call last):
        ...
        zoo.run_lock.RunLockedError: ... is in use by process ... (run.lock); wait for it to end
    """

    def __init__(self, path: str | Path) -> None:
        self.file = Path(path) / "run.lock"
        self.fd: int | None = None
        self.stale: dict[str, Any] | None = None

    def acquire(self) -> RunLock:
        import fcntl

        fd = os.open(self.file, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = self._read(fd)
            os.close(fd)
            raise RunLockedError(
                f"{self.file.parent} is in use by process {holder.get('pid', '?')} on "
                f"{holder.get('host', '?')} (run.lock); wait for it to end"
            ) from None
        try:
            previous = self._read(fd)
            if previous.get("pid") not in (None, os.getpid()):
                self.stale = previous  # its holder died without unlocking
            os.ftruncate(fd, 0)
            info = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
            os.pwrite(fd, json.dumps(info).encode(), 0)
        except BaseException:  # a full disk: the lock is not held
            os.close(fd)
            raise
        self.fd = fd
        return self

    @staticmethod
    def abandoned(path: str | Path) -> bool:
        """Whether folder ``path`` holds nothing but a ``run.lock`` no live process holds:
        what a start cut before its first file (a full disk, a kill) leaves."""
        import fcntl

        path = Path(path)
        if [p.name for p in path.iterdir()] != ["run.lock"]:
            return False
        fd = os.open(path / "run.lock", os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # held: a start under way
        finally:
            os.close(fd)  # closing drops the test lock
        return True

    @staticmethod
    def _read(fd: int) -> dict[str, Any]:
        try:
            data = json.loads(os.pread(fd, 4096, 0) or b"{}")
            return data if isinstance(data, dict) else {}
        except ValueError:
            return {}

    def release(self) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            os.close(self.fd)  # closing drops the flock
            self.fd = None

    def __enter__(self) -> RunLock:
        return self if self.fd is not None else self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
