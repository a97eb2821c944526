"""zoo.dynamics: a PPO run's early policy steps, read from metrics.csv made here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zoo.config_checks import ConfigError
from zoo.dynamics import dynamics_table, ppo_dynamics
from zoo.metrics import MetricsLogger


def _probe(folder: Path, *, kl: float, stopped: bool) -> Path:
    """Updates every 1,000 steps to 10,000; entropy 1.8 falling 0.1 an update; episodes
    ending every 500 steps with return -21 + step / 1,000."""
    folder.mkdir(parents=True)
    with MetricsLogger(folder) as log:
        for step in range(1000, 10_001, 1000):
            entropy = 1.8 - 0.1 * (step // 1000 - 1)
            log.log(
                step,
                {
                    "train/entropy_loss": -entropy,
                    "train/approx_kl": kl * step / 1000,
                    "train/clip_fraction": 0.01 * step / 1000,
                },
            )
        for step in range(500, 10_001, 500):
            log.log(step, {"episode_return": -21.0 + step / 1000})
    status = {"state": "interrupted" if stopped else "finished", "num_timesteps": 10_240}
    (folder / "status.json").write_text(json.dumps(status))
    if not stopped:
        policy = {"mean_reward": -3.25, "std_reward": 1.5, "n_episodes": 10}
        (folder / "eval.json").write_text(json.dumps({"policies": {"stochastic": policy}}))
    return folder


def test_windows_entropy_and_step_sizes(tmp_path: Path) -> None:
    d = ppo_dynamics(
        _probe(tmp_path / "a", kl=0.01, stopped=False),
        window=2000,
        at=(1000, 2500, 20_000),
        early=3000,
    )
    assert d.steps == 10_240  # status.json's count, not the last logged step
    # episodes ending at 500..2000: -20.5, -20, -19.5, -19; in the last 2,000 (> 8,240): 8.5k-10k
    assert d.first_return == pytest.approx(-19.75)
    assert d.last_return == pytest.approx((-12.5 - 12 - 11.5 - 11) / 4)
    # the first update at or after each step; none at or after 20,000
    assert d.entropy[:2] == pytest.approx((1.8, 1.6))
    assert d.entropy[2] is None
    assert (d.first_kl, d.first_clip) == pytest.approx((0.01, 0.01))
    assert (d.early_kl, d.early_clip) == pytest.approx((0.02, 0.02))  # updates at 1k, 2k, 3k
    assert d.test == (-3.25, 1.5)


def test_table_rows_and_a_run_stopped_early(tmp_path: Path) -> None:
    runs = {
        "finished": _probe(tmp_path / "a", kl=0.0004, stopped=False),
        "stopped": _probe(tmp_path / "b", kl=0.03, stopped=True),
    }
    lines = dynamics_table(runs, window=2000, at=(1000, 20_000), early=3000).splitlines()
    assert lines[0].startswith("| run | steps run | return, first 2k | return, last 2k ")
    assert lines[2] == (
        "| finished | 10,240 | -19.8 | -11.8 | 1.80 / n/a | 0.0004, 0.010 | 0.0008, 0.020 "
        "| -3.2 ± 1.5 |"
    )
    assert lines[3].endswith("| 0.0300, 0.010 | 0.0600, 0.020 | stopped early |")


def test_a_missing_folder_or_foreign_metrics_are_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such run folder"):
        ppo_dynamics(tmp_path / "gone")
    (tmp_path / "metrics.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError, match="header"):
        ppo_dynamics(tmp_path)
