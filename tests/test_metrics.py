"""Tests for zoo.metrics (the one metrics file of every trainer, and old folders' adapter)."""

from __future__ import annotations

import csv
import json
import math
import subprocess
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3 import PPO
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv

from zoo.metrics import (
    COLUMNS,
    FILE,
    MetricsLogger,
    legacy_metrics,
    read_metrics,
    read_monitor,
    read_progress,
    series,
)

RESULTS = Path(__file__).resolve().parents[1] / "results"


def rows(run: Path) -> list[list[str]]:
    with (run / FILE).open(newline="") as fh:
        return list(csv.reader(fh))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_rows_are_flushed_as_logged_and_only_real_numbers_kept(tmp_path: Path) -> None:
    clock = Clock()
    log = MetricsLogger(tmp_path / "run", clock=clock)
    clock.now = 101.5
    log.log(3, {"a": 1, "b": None, "c": math.nan, "d": "text", "e": True, "f": np.float32(2.5)})
    # Still open: a killed run keeps what it logged.
    assert rows(tmp_path / "run") == [
        list(COLUMNS),
        ["3", "1.5", "a", "1.0"],
        ["3", "1.5", "f", "2.5"],
    ]
    log.close()
    with pytest.raises(ValueError, match="closed"):
        log.log(4, {"a": 1})
    table = read_metrics(tmp_path / "run")
    assert table["metric"].tolist() == ["a", "f"] and table["value"].tolist() == [1.0, 2.5]


def test_resume_drops_rows_past_the_checkpoint_and_continues_wall_time(tmp_path: Path) -> None:
    clock = Clock()
    with MetricsLogger(tmp_path, clock=clock) as log:
        for step in (10, 20, 30):
            clock.now += 5
            log.log(step, {"loss": step / 10})
    with MetricsLogger(tmp_path, resume_step=20, clock=clock) as log:
        clock.now += 1
        log.log(30, {"loss": 9.0})
    table = read_metrics(tmp_path)
    assert table["step"].tolist() == [10, 20, 30]
    assert table["value"].tolist() == [1.0, 2.0, 9.0]
    assert table["wall_time"].tolist() == [5.0, 10.0, 11.0]
    with MetricsLogger(tmp_path) as log:  # not a resume: a new file
        pass
    assert rows(tmp_path) == [list(COLUMNS)]


def test_bad_header_is_refused(tmp_path: Path) -> None:
    (tmp_path / FILE).write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="header"):
        read_metrics(tmp_path)


def test_sb3_writer_routes_logger_records(tmp_path: Path) -> None:
    metrics = MetricsLogger(tmp_path)
    logger = Logger(None, [metrics.sb3_writer()])
    logger.record("train/loss", 0.25)
    logger.record("rollout/ep_rew_mean", np.float64(3.0))
    logger.record("hidden", 7.0, exclude="csv")
    logger.record("note", "text")
    logger.dump(128)
    logger.close()
    table = read_metrics(tmp_path)
    assert table["metric"].tolist() == ["train/loss", "rollout/ep_rew_mean"]
    assert table["step"].tolist() == [128, 128]


def test_sb3_episodes_match_the_monitor_file(tmp_path: Path) -> None:
    env = DummyVecEnv([lambda: Monitor(gym.make("CartPole-v1"), str(tmp_path / "train_0"))])
    model = PPO("MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu")
    with MetricsLogger(tmp_path) as metrics:
        model.learn(256, callback=metrics.episode_callback())
    env.close()
    (tmp_path / "monitor").mkdir()
    (tmp_path / "train_0.monitor.csv").rename(tmp_path / "monitor" / "train_0.monitor.csv")
    table, episodes = read_metrics(tmp_path), read_monitor(tmp_path)
    steps, returns = series(table, "episode_return")
    assert len(returns) == len(episodes["r"]) > 3
    np.testing.assert_allclose(returns, episodes["r"])
    np.testing.assert_array_equal(series(table, "episode_length")[1], episodes["l"])
    np.testing.assert_array_equal(steps, episodes["step"])  # one env: the step is exact


def test_legacy_sb3_folder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "monitor").mkdir(parents=True)
    (run / "monitor" / "train_0.monitor.csv").write_text(
        '#{"t_start": 10.0}\nr,l,t\n1.0,5,1.0\n2.0,7,4.0\n'
    )
    (run / "monitor" / "train_1.monitor.csv").write_text('#{"t_start": 12.0}\nr,l,t\n3.0,4,1.5\n')
    for k, text in enumerate(
        [
            "train/loss,time/total_timesteps,time/time_elapsed,eval/x/mean_reward\n"
            "4.0,8,5,\n3.0,,6,9.0\n",
            "train/loss,time/total_timesteps,time/time_elapsed\n2.0,16,3\n",
        ]
    ):
        (run / "logs" / f"part{k}").mkdir(parents=True)
        (run / "logs" / f"part{k}" / "progress.csv").write_text(text)
    evaluations = [{"step": 9, "score": 1, "greedy": {"mean_reward": 5.0, "success_rate": None}}]
    (run / "evaluations.json").write_text(json.dumps(evaluations))
    table = read_metrics(run)  # no metrics.csv: the adapter
    assert series(table, "episode_return")[1].tolist() == [1.0, 3.0, 2.0]
    assert series(table, "episode_length")[0].tolist() == [5, 9, 16]
    assert series(table, "episode_return", "wall_time")[0].tolist() == [1.0, 3.5, 4.0]
    assert series(table, "train/loss")[0].tolist() == [8, 16]  # the row without a step: out
    assert series(table, "train/loss", "wall_time")[0].tolist() == [5.0, 9.0]
    assert "eval/x/mean_reward" not in table["metric"]  # evaluations.json is their source
    step, value = series(table, "eval/greedy/mean_reward")
    assert step.tolist() == [9] and value.tolist() == [5.0]
    assert series(table, "eval/greedy/mean_reward", "wall_time")[0].tolist() == [3.5]
    assert "eval/greedy/success_rate" not in table["metric"]
    assert read_progress(run)["time/time_elapsed"].tolist() == [5, 6, 9]


def test_legacy_trainer_tables(tmp_path: Path) -> None:
    (tmp_path / "history.csv").write_text(
        "iteration,loss,train_accuracy,test_accuracy\n10,2.0,0.3,0.25\n"
    )
    table = legacy_metrics(tmp_path)
    assert dict(zip(table["metric"], table["value"], strict=True)) == {
        "classifier/loss": 2.0,
        "classifier/train_accuracy": 0.3,
        "classifier/test_accuracy": 0.25,
    }
    (tmp_path / "history.csv").unlink()
    (tmp_path / "progress.csv").write_text("epoch,loss,test_mean\n1,0.5,\n2,0.25,3.0\n")
    table = legacy_metrics(tmp_path)
    assert series(table, "bc/loss")[0].tolist() == [1, 2]
    assert series(table, "bc/test_mean_reward")[0].tolist() == [2]
    assert legacy_metrics(tmp_path / "missing")["metric"].size == 0


def git_status(path: Path) -> str:
    return subprocess.run(
        ["git", "status", "--porcelain", "--", str(path)],
        capture_output=True,
        text=True,
        check=False,
        cwd=path,
    ).stdout


@pytest.mark.skipif(not (RESULTS / "doorkey").is_dir(), reason="no committed results")
def test_committed_result_folders_convert_without_writing() -> None:
    before = git_status(RESULTS)
    written = sorted(RESULTS.rglob(FILE))  # folders trained since the logger existed have one
    doorkey = legacy_metrics(RESULTS / "doorkey")
    with (RESULTS / "doorkey" / "monitor" / "train_p0_0.monitor.csv").open() as fh:
        monitor = list(csv.DictReader(fh.readlines()[1:]))
    np.testing.assert_allclose(
        series(doorkey, "episode_return")[1], [float(r["r"]) for r in monitor]
    )
    evaluations = json.loads((RESULTS / "doorkey" / "evaluations.json").read_text())
    step, success = series(doorkey, "eval/greedy/success_rate")
    assert step.tolist() == [e["step"] for e in evaluations]
    assert success.tolist() == [e["greedy"]["success_rate"] for e in evaluations]
    assert np.isfinite(series(doorkey, "train/loss")[1]).all()
    for name, metric, column in (
        ("pi", "fitness/best", "fitness_best"),
        ("pi_bc", "train/loss", "loss"),
    ):
        table = legacy_metrics(RESULTS / "cartpole_pi" / name)
        with (RESULTS / "cartpole_pi" / name / "progress.csv").open() as fh:
            progress = list(csv.DictReader(fh))
        step, value = series(table, metric)
        assert step.tolist() == [float(r["env_steps"]) for r in progress]
        assert value.tolist() == [float(r[column]) for r in progress]
        tested = [r for r in progress if r["test_mean"]]
        assert series(table, "eval/test/mean_reward")[1].tolist() == [
            float(r["test_mean"]) for r in tested
        ]
    assert legacy_metrics(RESULTS / "pretrained" / "cartpole_pi")["metric"].size == 0
    assert sorted(RESULTS.rglob(FILE)) == written and git_status(RESULTS) == before


def _one_gb_line(path: Path, header: str) -> None:
    with path.open("w") as fh:
        fh.write(header + "\n1,0.5,episode_return,")
        fh.truncate(2**30)  # sparse: a 1 GB second line that takes no disk


@pytest.mark.parametrize("reader", ["read_metrics", "MetricsLogger", "read_monitor"])
def test_a_1_gb_line_is_one_error_never_read_whole(tmp_path: Path, reader: str) -> None:
    """Issue 68: a shared run folder's ``metrics.csv`` (or monitor file) with a 1 GB line is
    a ConfigError naming the file and the line, read no further than the line limit."""
    import time

    from zoo.config import ConfigError

    start = time.perf_counter()
    with pytest.raises(ConfigError, match="line 2 is longer than 65,536 characters"):
        if reader == "read_monitor":
            (tmp_path / "monitor").mkdir()
            _one_gb_line(tmp_path / "monitor" / "train_0.monitor.csv", '#{"t_start": 0}')
            read_monitor(tmp_path)
        else:
            _one_gb_line(tmp_path / "metrics.csv", "step,wall_time,metric,value")
            if reader == "read_metrics":
                read_metrics(tmp_path)
            else:
                MetricsLogger(tmp_path, resume_step=1.0)
    assert time.perf_counter() - start < 5
