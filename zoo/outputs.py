"""Where ``record``, ``maps`` and ``robustness`` write when not told (``--out``).

A run folder of one's own (``runs/...``, ignored by git) takes its videos, figures and tables
itself. A run folder that the project's repository (the one holding the working directory)
tracks, such as the committed ``results/...``, is left as it is: its outputs go to
``runs/<the folder's path in its repository>`` under the current directory instead, e.g.
``runs/results/doorkey/pi/video.mp4``, so trying a command on a shipped run never changes
tracked files. Git is asked only about that repository, with its command-running settings
off; a run folder's own ``.git`` is never consulted (:func:`tracked_root`).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from attn_policies.atomic import make_folder

GIT_TIMEOUT = 10.0
"""Seconds a ``git ls-files`` may take before the folder counts as untracked."""

# Git runs commands a repository's config names (core.fsmonitor when it reads the index,
# hooks): forced off on the command line, which outranks every config file.
GIT_SAFE = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "--no-pager")


def project_root(start: str | Path | None = None) -> Path | None:
    """The top of the git work tree holding ``start`` (default: the working directory), found
    by looking for ``.git`` upwards, without running git; None outside any."""
    here = Path(start if start is not None else Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / ".git").exists():
            return folder
    return None


def tracked_root(folder: str | Path) -> Path | None:
    """The top of the project's work tree (the repository of the working directory) when git
    tracks a file in ``folder``; None otherwise (no git, not in that repository, nothing in it
    tracked, or ``folder`` inside a repository of its own).

    Git runs only in the project's repository, never in ``folder``: a shared run folder can
    carry its own ``.git`` whose config runs a command (``core.fsmonitor = "touch MARK"``)
    whenever git reads its index. A ``.git`` in ``folder`` or between it and the project's
    top makes it another repository, which this function never asks.
    """
    folder = Path(folder)
    git = shutil.which("git")
    top = project_root()
    if git is None or top is None or not folder.is_dir():
        return None
    resolved = folder.resolve()
    try:
        inside = resolved.relative_to(top)
    except ValueError:  # outside the project: not its tracked file
        return None
    if any((top / p / ".git").exists() for p in (inside, *inside.parents) if str(p) != "."):
        return None  # a repository of its own (a stranger's .git): never consulted
    try:
        listed = subprocess.run(
            [git, *GIT_SAFE, "-C", str(top), "ls-files", "-z", "--", str(inside)],
            capture_output=True,
            timeout=GIT_TIMEOUT,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return top if listed.returncode == 0 and listed.stdout else None


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


def make_output_folder(run: str | Path, *parts: str, base: str | Path = "runs") -> Path:
    """:func:`output_folder` of ``run`` joined with ``parts`` (``"robustness"``), created.

    Every default output folder of a run is made here with
    :func:`attn_policies.atomic.make_folder`: a link at any folder below the run folder (or
    below ``base`` for a tracked run) is replaced by a real folder, never followed, so a
    shared run whose ``robustness/`` links to another folder cannot have it written. The run
    folder itself is the path the user named and stays as it is.
    """
    run = Path(run)
    folder = output_folder(run, base)
    inside = run if folder == run else Path(base)
    path = folder.joinpath(*parts)
    if path == inside:
        return run if folder == run else make_folder(path)
    return make_folder(path, inside=inside)
