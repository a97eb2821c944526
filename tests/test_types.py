"""The type checker: ``python -m mypy`` (configured in pyproject.toml's ``[tool.mypy]``) is
clean on attn_envs, attn_policies and zoo."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_is_clean() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=1200
    )
    assert out.returncode == 0, out.stdout[-8000:] + out.stderr[-2000:]
