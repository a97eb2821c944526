"""Tests for attn_policies.atomic: writes leave the old file or the new one, never a torn one."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attn_policies.atomic import atomic_path, atomic_write, make_folder, open_append


def test_a_write_interrupted_midway_keeps_the_previous_file(tmp_path: Path) -> None:
    file = tmp_path / "last.zip"
    atomic_write(file, b"old checkpoint")
    with pytest.raises(KeyboardInterrupt), atomic_path(file) as tmp:
        tmp.write_bytes(b"half of the new")
        raise KeyboardInterrupt  # a second Ctrl-C during the save
    assert file.read_bytes() == b"old checkpoint"
    assert [p.name for p in tmp_path.iterdir()] == ["last.zip"]  # no temporary left


def test_a_full_disk_keeps_the_only_checkpoint(tmp_path: Path) -> None:
    file = tmp_path / "status.json"
    atomic_write(file, '{"state": "running"}')
    with pytest.raises(OSError, match="No space"), atomic_path(file) as tmp:
        tmp.write_text('{"sta')
        raise OSError(errno.ENOSPC, "No space left on device")
    assert file.read_text() == '{"state": "running"}'


def test_temporary_names_keep_the_suffix_and_are_hidden(tmp_path: Path) -> None:
    with atomic_path(tmp_path / "model.zip") as tmp:
        assert tmp.suffix == ".zip" and tmp.name.startswith(".")
        tmp.write_bytes(b"x")
    assert (tmp_path / "model.zip").read_bytes() == b"x"


WRITER = """
import sys
from attn_policies.atomic import atomic_write
k = 0
while True:
    k += 1
    atomic_write(sys.argv[1], bytes([k % 256]) * 2_000_000)
"""


def test_sigkill_during_writes_never_leaves_a_torn_file(tmp_path: Path) -> None:
    file = tmp_path / "buffer.npz"
    for delay in (0.05, 0.15, 0.3):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(file)])
        time.sleep(delay)
        while not file.exists() and proc.poll() is None:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        data = file.read_bytes()
        assert len(data) == 2_000_000 and len(set(data)) == 1  # one complete version


def test_a_planted_link_cannot_catch_the_temporary_file(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    run = tmp_path / "run"
    run.mkdir()
    # The old temporary name was predictable: .<stem>.<pid>.tmp<suffix>.
    (run / f".model.{os.getpid()}.tmp.zip").symlink_to(victim)
    (run / "model.zip").symlink_to(victim)  # the target itself: the link is replaced
    with atomic_path(run / "model.zip") as tmp:
        tmp.write_bytes(b"weights")
    assert victim.read_text() == "precious"
    assert not (run / "model.zip").is_symlink()
    assert (run / "model.zip").read_bytes() == b"weights"


def test_appends_refuse_a_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "metrics.csv").symlink_to(victim)
    with pytest.raises(OSError):
        open_append(tmp_path / "metrics.csv")
    with open_append(tmp_path / "log.csv") as fh:
        fh.write("a\n")
    with open_append(tmp_path / "log.csv") as fh:
        fh.write("b\n")
    assert victim.read_text() == "precious"
    assert (tmp_path / "log.csv").read_text() == "a\nb\n"


def test_make_folder_replaces_symlinked_folders_instead_of_following_them(
    tmp_path: Path,
) -> None:
    elsewhere = tmp_path / "home"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("precious")
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoints").symlink_to(elsewhere)
    (run / "robustness").symlink_to(elsewhere)
    folder = make_folder(run / "checkpoints")
    atomic_write(folder / "keep.txt", "ours")
    make_folder(run / "robustness" / "cells" / "shuffle", inside=run)
    assert not (run / "checkpoints").is_symlink() and (run / "checkpoints").is_dir()
    assert not (run / "robustness").is_symlink() and (run / "robustness/cells/shuffle").is_dir()
    assert sorted(p.name for p in elsewhere.iterdir()) == ["keep.txt"]
    assert (elsewhere / "keep.txt").read_text() == "precious"
