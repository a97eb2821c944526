"""A smoke zoo run trained once per test session and shared by the test files that plot,
record and map it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from filelock import FileLock

import zoo

# Smoke DoorKey, smaller: 30-step episodes (Monitor rows), 25 gradient steps, one evaluation.
TINY_DOORKEY = {
    "n_timesteps": 150,
    "train_freq": 4,
    "env_kwargs.max_steps": 30,
    "eval.n_episodes": 1,
    "eval.final_episodes": 1,
}


def trained(
    tmp_path_factory: pytest.TempPathFactory,
    key: str,
    experiment: str,
    seed: int = 0,
    **overrides: object,
) -> Path:
    """A smoke run trained once per session, shared by the xdist workers (file lock)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's folder, common to its workers
    root = base / "zoo_runs"
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / f"{key}.lock")):
        marker = root / f"{key}.txt"
        if marker.exists():
            return Path(marker.read_text())
        run = zoo.train(experiment, budget="smoke", root=root / key, seed=seed, overrides=overrides)
        marker.write_text(str(run.path))
        return run.path


def tracked_copy(run: Path, repo: Path, where: str = "results/doorkey/pi") -> Path:
    """A copy of ``run`` at ``repo/where``, in a fresh git repository that tracks its files
    (as the committed ``results/`` folders are)."""
    import shutil
    import subprocess

    folder = repo / where
    # without what other tests wrote into the shared run (videos, figures, tables)
    outputs = shutil.ignore_patterns("video.*", "*.png", "robustness")
    shutil.copytree(run, folder, ignore=outputs)
    subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=60)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True, timeout=60)
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "r"],
        check=True, timeout=60,
    )  # fmt: skip
    return folder


def git_changes(repo: Path, under: str = "results") -> str:
    """``git status --porcelain`` below ``under``: files changed, removed or added there."""
    import subprocess

    done = subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain", "--", under],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return done.stdout
