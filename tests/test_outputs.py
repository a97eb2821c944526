"""Tests for zoo.outputs: where record, maps and robustness write by default."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from zoo.outputs import output_folder, tracked_root


def test_a_tracked_run_folder_sends_its_outputs_under_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    run = repo / "results" / "doorkey" / "pi"
    run.mkdir(parents=True)
    (run / "config.yml").write_text("doorkey: {}\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=60)
    monkeypatch.chdir(repo)  # the project's repository is the working directory's
    # in a repository but nothing tracked yet: the run folder is the user's own
    assert tracked_root(run) is None and output_folder(run) == run
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True, timeout=60)
    assert tracked_root(run) == repo.resolve()
    assert output_folder(run) == Path("runs/results/doorkey/pi")
    assert output_folder(run, base=tmp_path / "out") == tmp_path / "out/results/doorkey/pi"
    # from outside that repository, its files are not the project's: the folder itself
    monkeypatch.chdir(tmp_path)
    assert tracked_root(run) is None and output_folder(run) == run
    monkeypatch.chdir(repo)
    # outside any repository, or without git: the run folder itself
    alone = tmp_path / "alone"
    alone.mkdir()
    assert output_folder(alone) == alone
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert output_folder(run) == run


def git(*args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True, timeout=60, capture_output=True,
    )  # fmt: skip


def hostile_repository(folder: Path, marker: Path) -> None:
    """``folder`` as a git repository with a tracked file and an index whose configured
    ``core.fsmonitor`` runs ``touch marker`` whenever git reads the index."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yml").write_text("cart: {}\n")
    git("init", "-q", str(folder))
    git("-C", str(folder), "add", ".")
    git("-C", str(folder), "commit", "-qm", "run")
    git("-C", str(folder), "config", "core.fsmonitor", f"touch {marker}")
    git("-C", str(folder), "config", "core.hooksPath", str(folder / "hooks"))


@pytest.mark.parametrize("where", ["alone", "inside the project"])
def test_a_run_folder_s_own_git_never_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    # A shared run folder (an unpacked tarball) carrying its own .git: asking git about it
    # ran its core.fsmonitor command (issue 68, item 1).
    marker = tmp_path / "MARK"
    project = tmp_path / "project"
    project.mkdir()
    if where == "inside the project":
        git("init", "-q", str(project))
    monkeypatch.chdir(project)
    run = project / "runs" / "shared" if where != "alone" else tmp_path / "shared"
    hostile_repository(run, marker)
    assert output_folder(run) == run  # not the project's tracked file: its own outputs
    assert not marker.exists()


def test_the_project_s_own_fsmonitor_is_forced_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "MARK"
    project = tmp_path / "project"
    hostile_repository(project, marker)
    monkeypatch.chdir(project)
    assert tracked_root(project) == project.resolve()  # still told apart: its files are tracked
    assert output_folder(project) == Path("runs")
    assert not marker.exists()
