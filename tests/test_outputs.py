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
    # in a repository but nothing tracked yet: the run folder is the user's own
    assert tracked_root(run) is None and output_folder(run) == run
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True, timeout=60)
    assert tracked_root(run) == repo.resolve()
    assert output_folder(run) == Path("runs/results/doorkey/pi")
    assert output_folder(run, base=tmp_path / "out") == tmp_path / "out/results/doorkey/pi"
    # outside any repository, or without git: the run folder itself
    alone = tmp_path / "alone"
    alone.mkdir()
    assert output_folder(alone) == alone
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert output_folder(run) == run
