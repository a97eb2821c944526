"""Tests for zoo.trainers.sb3_checkpoint: ``checkpoints/last*`` written as one unit, at a
step a resume can continue from. (Resumes themselves are tested through training in
test_sb3_trainer.py and test_runs.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_sb3_state import _dqn

from zoo.config import ConfigError
from zoo.trainers import sb3_state
from zoo.trainers.sb3_checkpoint import default_save_freq, save_checkpoint


def test_default_first_checkpoint_comes_early() -> None:
    assert default_save_freq(50_000) == 1_000  # 2% (was 10%)
    assert default_save_freq(10_000_000) == 10_000
    assert default_save_freq(10) == 1


def test_a_checkpoint_cut_midway_keeps_the_previous_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _dqn(steps=40)
    save_checkpoint(model, tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    model.learn(40, reset_num_timesteps=False)

    def second_ctrl_c(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(model, "save", second_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(model, tmp_path)
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert after["last.zip"] == before["last.zip"]  # the model (written last) is intact
    assert sb3_state.read_counters(tmp_path / "last.zip")["num_timesteps"] == 40
    # ... and so is the buffer it points at; the newer one is an uncommitted leftover.
    assert after["last_replay_buffer-40.npz"] == before["last_replay_buffer-40.npz"]
    monkeypatch.undo()
    save_checkpoint(model, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.zip", "last_replay_buffer-80.npz"]


def test_a_checkpoint_keeps_the_logger_values_not_yet_dumped(tmp_path: Path) -> None:
    """The values SB3 writes at its next dump travel in ``last.zip``, as plain JSON; an
    entry that is anything else is refused, naming the file."""
    import json
    import zipfile

    from stable_baselines3.common.logger import configure

    model = _dqn(steps=40)
    model.logger.dump()  # what learn left pending is not this test's
    model.logger.record("train/loss", np.float32(0.25))
    model.logger.record("train/n_updates", 5, exclude="tensorboard")
    model.logger.record_mean("rollout/mean", 1.0)
    model.logger.record_mean("rollout/mean", 2.0)
    model.logger.record("note", "text is no metric")
    save_checkpoint(model, tmp_path)
    fresh = configure(None, [])
    sb3_state.restore_logger(fresh, sb3_state.read_logger_state(tmp_path / "last.zip"))
    assert dict(fresh.name_to_value) == {
        "train/loss": 0.25,
        "train/n_updates": 5,
        "rollout/mean": 1.5,
    }
    assert fresh.name_to_count["rollout/mean"] == 2
    assert fresh.name_to_excluded["train/n_updates"] == ("tensorboard",)

    with zipfile.ZipFile(tmp_path / "last.zip", "a") as archive:
        archive.writestr(sb3_state.LOGGER_ENTRY, json.dumps({"values": {"a": "os.system"}}))
    with pytest.raises(ConfigError, match=r"last\.zip: its zoo_logger\.json is not"):
        sb3_state.read_logger_state(tmp_path / "last.zip")
