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
        preexec_fn: run in the child before it starts (signal settings, limits).
    """

    def __init__(self, args: Sequence[str], preexec_fn: object = None) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "zoo.cli", "train", *args, "--progress-every", "1e-9"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            preexec_fn=preexec_fn,  # type: ignore[arg-type]
        )
        self.out = b""
        self.step = -1  # the step of the latest progress line

    def _read(self, timeout: float) -> bool:
        """Read what stdout has within ``timeout`` s; False when nothing came (or it ended)."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return False
        chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
        if not chunk:
            return False
        self.out += chunk
        for line in chunk.decode(errors="replace").splitlines():
            match = STEP.match(line)
            if match:
                self.step = max(self.step, int(match.group(1).replace(",", "")))
        return True

    def wait_for_line(self, text: str, timeout: float = 120) -> None:
        """Until stdout has shown ``text``."""
        deadline = time.monotonic() + timeout
        while text.encode() not in self.out:
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
        """The exit status and stderr once the process has ended."""
        out, err = self.proc.communicate(timeout=timeout)
        self.out += out
        return self.proc.returncode, err.decode(errors="replace")
