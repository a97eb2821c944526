"""A real ``attn-zoo train`` process for tests that send it signals, timed on its progress
lines (one line per step with ``--progress-every 1e-9``), not on sleeps alone."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import time
from collections.abc import Sequence

STEP = re.compile(r"^\[[^\]]*\] ([\d,]+)/[\d,]+ ")


class TrainProcess:
    """``python -m zoo.cli train ARGS --progress-every 1e-9`` with its stdout read here.

    Args:
        args: the ``train`` arguments.
    """

    def __init__(self, args: Sequence[str]) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "zoo.cli", "train", *args, "--progress-every", "1e-9"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.out = b""
        self.err = b""
        self.step = -1  # the step of the latest progress line

    def _read(self, timeout: float) -> bool:
        """Read what stdout and stderr have within ``timeout`` s; False when nothing came."""
        assert self.proc.stdout is not None and self.proc.stderr is not None
        streams = [s for s in (self.proc.stdout, self.proc.stderr) if not s.closed]
        ready, _, _ = select.select(streams, [], [], timeout)
        got = False
        for stream in ready:
            chunk = os.read(stream.fileno(), 1 << 16)
            if not chunk:
                stream.close()
                continue
            got = True
            if stream is self.proc.stderr:
                self.err += chunk
                continue
            self.out += chunk
            for line in chunk.decode(errors="replace").splitlines():
                match = STEP.match(line)
                if match:
                    self.step = max(self.step, int(match.group(1).replace(",", "")))
        return got

    def wait_for_line(self, text: str, stream: str = "out", timeout: float = 120) -> None:
        """Until stdout (or ``stream="err"``: stderr) has shown ``text``."""
        deadline = time.monotonic() + timeout
        while text.encode() not in (self.out if stream == "out" else self.err):
            if time.monotonic() > deadline or (
                not self._read(0.2) and self.proc.poll() is not None
            ):
                raise AssertionError(f"no {text!r} line; stdout: {self.out[-500:]!r}")

    def wait_for_step(self, step: int, timeout: float = 120) -> None:
        """Until a progress line has reported ``step``."""
        deadline = time.monotonic() + timeout
        while self.step < step:
            if time.monotonic() > deadline or (
                not self._read(0.2) and self.proc.poll() is not None
            ):
                raise AssertionError(f"no progress line at step {step}; got to {self.step}")

    def wait_quiet(self, seconds: float, timeout: float = 60) -> None:
        """Until no line has come for ``seconds``: with a line every step, the process is in
        a long call between two steps (an evaluation)."""
        deadline = time.monotonic() + timeout
        while self._read(seconds):
            if time.monotonic() > deadline:
                raise AssertionError("stdout never went quiet")

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def finish(self, timeout: float = 120) -> tuple[int, str]:
        """The exit status and all of stderr once the process has ended."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None or self._read(0):
            if time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError("the process did not end")
            self._read(0.2)
        return self.proc.returncode, self.err.decode(errors="replace")
