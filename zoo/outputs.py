"""Where ``record``, ``maps`` and ``robustness`` write when not told (``--out``).

A run folder of one's own (``runs/...``, ignored by git) takes its videos, figures and tables
itself. A run folder under version control (the committed ``results/...``) is left as it is:
its outputs go to ``runs/<the folder's path in its repository>`` under the current
directory instead, e.g. ``runs/results/doorkey/pi/video.mp4``, so trying a command on a
shipped run never changes tracked files.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

GIT_TIMEOUT = 10.0
"""Seconds a ``git ls-files`` may take before the folder counts as untracked."""


def tracked_root(folder: str | Path) -> Path | None:
    """The top of the git work tree when ``folder`` holds a tracked file; None otherwise
    (no git, not a repository, or nothing in it tracked)."""
    folder = Path(folder)
    git = shutil.which("git")
    if git is None or not folder.is_dir():
        return None
    try:
        listed = subprocess.run(
            [git, "-C", str(folder), "ls-files", "--full-name", "-z", "--", "."],
            capture_output=True,
            timeout=GIT_TIMEOUT,
            check=False,
        )
        if listed.returncode != 0 or not listed.stdout:
            return None
        top = subprocess.run(
            [git, "-C", str(folder), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return Path(top.stdout.strip()) if top.returncode == 0 and top.stdout.strip() else None


def output_folder(run: str | Path, base: str | Path = "runs") -> Path:
    """Where a command's outputs for the run folder ``run`` go by default.

    Args:
        run: the run folder.
        base: the folder that takes the outputs of tracked runs (relative: to the cwd).

    Returns:
        ``run`` itself, or ``base/<run's path in its repository>`` when git tracks files in
        ``run``.
    """
    run = Path(run)
    top = tracked_root(run)
    if top is None:
        return run
    try:
        return Path(base) / run.resolve().relative_to(top.resolve())
    except ValueError:  # resolved outside its work tree (a link): its name alone
        return Path(base) / run.resolve().name
