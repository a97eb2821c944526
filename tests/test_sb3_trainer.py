"""Tests for zoo.trainers.sb3_trainer's metrics.csv (its training and resume are tested through
the zoo API in test_runs.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from test_runs import CARTPOLE_PPO, InterruptAt

import zoo
from zoo.metrics import legacy_metrics, read_metrics, series
from zoo.trainers.sb3_state import read_counters

PPO_CARTPOLE = {**CARTPOLE_PPO, "n_timesteps": 256, "save_freq": 64}


def config(tmp_path: Path) -> Path:
    path = tmp_path / "cartppo.yml"
    path.write_text(yaml.safe_dump({"cartppo": PPO_CARTPOLE}))
    return path


def test_logger_records_episodes_and_evaluations_in_metrics(tmp_path: Path) -> None:
    run = zoo.train(config(tmp_path), root=tmp_path)
    table = read_metrics(run.path)
    names = set(table["metric"].tolist())
    assert {"train/loss", "train/value_loss", "rollout/ep_rew_mean", "time/fps"} <= names
    assert (run.path / "logs" / "part0" / "progress.csv").is_file()  # SB3's own logs stay
    assert list((run.path / "logs" / "part0").glob("events.out.tfevents.*"))
    step, loss = series(table, "train/loss")
    assert len(step) >= 2 and np.all(np.diff(step) > 0) and np.isfinite(loss).all()
    evaluations = json.loads((run.path / "evaluations.json").read_text())
    eval_step, reward = series(table, "eval/deterministic/mean_reward")
    assert eval_step.tolist() == [h["step"] for h in evaluations] == [100, 200]
    assert reward.tolist() == [h["deterministic"]["mean_reward"] for h in evaluations]
    # Episodes: the same returns as the Monitor files, at an exact env step.
    old = legacy_metrics(run.path)
    np.testing.assert_allclose(
        np.sort(series(table, "episode_return")[1]), np.sort(series(old, "episode_return")[1])
    )
    assert np.all(np.diff(series(table, "episode_return")[0]) >= 0)
    assert np.all(np.diff(table["wall_time"]) >= 0)


def test_resume_drops_what_was_logged_past_the_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        zoo.train(config(tmp_path), root=tmp_path, callbacks=[InterruptAt(150)])
    (path,) = (tmp_path / "cartppo").iterdir()
    logged = read_metrics(path)
    done = read_counters(path / "checkpoints" / "last.zip")["num_timesteps"]
    assert logged["step"].max() > done  # the rollout cut short was logged
    zoo.resume(path)
    table = read_metrics(path)
    resumed = table["step"] > done
    before = ~resumed
    assert table["step"][before].tolist() == logged["step"][logged["step"] <= done].tolist()
    # After the checkpoint, each step is logged once: by the resumed part only.
    for name in ("train/loss", "eval/deterministic/mean_reward", "time/total_timesteps"):
        step = series(table, name)[0]
        assert len(set(step.tolist())) == len(step) and np.all(np.diff(step) > 0), name
    assert series(table, "eval/deterministic/mean_reward")[0].tolist() == [100, 200]
    # The episodes past the checkpoint are those of the resumed part's Monitor files.
    monitors = (path / "monitor").glob("train_p1_*.monitor.csv")
    n_resumed = sum(len(f.read_text().splitlines()) - 2 for f in monitors)
    assert (series(table, "episode_return")[0] > done).sum() == n_resumed > 0
    assert np.all(np.diff(table["wall_time"]) >= 0)  # wall time goes on from the first part
