"""Tests for zoo.trainers.sb3_trainer's metrics.csv and ``init`` (its training and resume are
tested through the zoo API in test_runs.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.save_util import load_from_zip_file
from test_runs import CARTPOLE_PPO, InterruptAt
from torch.nn.utils import parameters_to_vector

import zoo
from zoo.config import ConfigError
from zoo.metrics import legacy_metrics, read_metrics, series
from zoo.trainers.sb3_state import read_counters
from zoo.trainers.sb3_trainer import SB3Trainer

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


class StartWeights(BaseCallback):
    """Keeps the policy's weights, step counter and observation count as training starts."""

    def _on_training_start(self) -> None:
        self.weights = parameters_to_vector(self.model.policy.parameters()).detach().clone()
        self.steps = self.model.num_timesteps
        self.obs_count = self.model.get_vec_normalize_env().obs_rms.count

    def _on_step(self) -> bool:
        return True


def test_init_starts_from_another_runs_weights_and_statistics(tmp_path: Path) -> None:
    """``init`` loads a finished run's best model and its VecNormalize statistics before
    the first step; the counters start at 0."""
    body = {**PPO_CARTPOLE, "normalize": True}
    first = zoo.train(_write(tmp_path, "first", body), root=tmp_path)
    file, stats = SB3Trainer().model_file(first.path, "best")
    start = StartWeights()
    zoo.train(
        _write(tmp_path, "second", {**body, "init": str(first.path)}),
        root=tmp_path,
        callbacks=[start],
    )
    policy = load_from_zip_file(file, load_data=False)[1]["policy"]
    expected = torch.cat([t.reshape(-1) for k, t in policy.items() if k in dict(
        start.model.policy.named_parameters())])  # fmt: skip
    assert torch.equal(start.weights, expected)
    assert start.steps == 0
    with np.load(stats) as npz:  # and the first reset's observations, one per env
        assert start.obs_count == float(npz["obs//count"]) + body["n_envs"] > 100


@pytest.mark.parametrize(
    ("init", "message"),
    [("nowhere", "'init': nowhere does not exist"), ("narrow", "'init': .*does not fit")],
)
def test_bad_init_is_one_config_error_and_writes_nothing(
    tmp_path: Path, init: str, message: str
) -> None:
    if init == "narrow":
        narrow = {**PPO_CARTPOLE, "policy_kwargs": {"net_arch": [8]}}
        init = str(zoo.train(_write(tmp_path, "narrow", narrow), root=tmp_path / "a").path)
    with pytest.raises(ConfigError, match=message) as err:
        zoo.train(_write(tmp_path, "wide", {**PPO_CARTPOLE, "init": init}), root=tmp_path / "b")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "b").exists()


def _write(tmp_path: Path, name: str, body: dict) -> Path:
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump({name: body}))
    return path


# --- Ctrl-C during a periodic evaluation ------------------------------------------------------

# DQN on MountainCar: every evaluation episode lasts 200 steps, so the 200-episode evaluation
# at step 300 takes seconds while a training step takes a millisecond (30 episodes took 0.46 s
# on a fast machine: shorter than the 0.5 s of quiet the test waits for, so the run ended
# before the signal).
SLOW_EVAL_DQN = {
    "algo": "dqn",
    "env": "MountainCar-v0",
    "policy": "MlpPolicy",
    "n_timesteps": 320,
    "learning_starts": 50,
    "buffer_size": 1000,
    "save_freq": 100,
    "policy_kwargs": {"net_arch": [8]},
    "eval": {"freq": 300, "n_episodes": 200, "final_episodes": 1},
}
# The logger's row at step 300 of an uninterrupted run: the evaluation and what SB3 recorded
# since its last dump (the updates' figures and the exploration rate).
EVAL_ROW = {
    "eval/deterministic/mean_reward",
    "train/loss",
    "train/n_updates",
    "train/learning_rate",
    "rollout/exploration_rate",
}


@pytest.mark.parametrize("signals", [1, 2])
def test_ctrl_c_during_an_evaluation_loses_no_logged_value(tmp_path: Path, signals: int) -> None:
    """A real SIGINT (or two, 10 ms apart) lands inside the evaluation at step 300; after
    ``--resume`` the step-300 row holds every value an uninterrupted run logs there, once."""
    import signal
    import time

    from _train_process import TrainProcess

    run_dir = tmp_path / "run"
    job = TrainProcess([str(_write(tmp_path, "slow", SLOW_EVAL_DQN)), "--run-dir", str(run_dir)])
    job.wait_for_step(299)
    job.wait_quiet(0.5)  # step 300's evaluation: no line until it ends
    for i in range(signals):
        time.sleep(0.01 * i)
        job.signal(signal.SIGINT)
    code, err = job.finish()
    assert code == 130, err
    assert not (run_dir / "evaluations.json").exists(), "the SIGINT missed the evaluation"
    if signals == 1:
        assert read_counters(run_dir / "checkpoints" / "last.zip")["num_timesteps"] == 300
    zoo.resume(run_dir)
    table = read_metrics(run_dir)
    at_300 = table["metric"][table["step"] == 300].tolist()
    assert set(at_300) >= EVAL_ROW
    assert len(at_300) == len(set(at_300))  # and none twice


def test_an_on_policy_resume_logs_every_row_an_uninterrupted_run_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PPO's update figures wait in the logger until the next dump (here the evaluation at
    step 100, inside the rollout after the update at 64). Interrupted in that evaluation, the
    run goes back to step 64; the resumed run must log the same (step, metric) rows."""
    import zoo.evaluation

    plain = zoo.train(config(tmp_path), root=tmp_path / "plain")
    real, calls = zoo.evaluation.evaluate_modes, []

    def cut_once(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 1:  # the evaluation at step 100
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(zoo.evaluation, "evaluate_modes", cut_once)
    with pytest.raises(KeyboardInterrupt):
        zoo.train(config(tmp_path), root=tmp_path / "cut")
    (path,) = (tmp_path / "cut" / "cartppo").iterdir()
    assert read_counters(path / "checkpoints" / "last.zip")["num_timesteps"] == 64
    zoo.resume(path)

    def rows(run: Path) -> list[tuple[float, str]]:
        table = read_metrics(run)
        keep = [not m.startswith(("episode_", "time/")) for m in table["metric"]]
        return sorted(
            zip(table["step"][keep].tolist(), table["metric"][keep].tolist(), strict=True)
        )

    assert (100.0, "train/loss") in rows(plain.path)
    assert rows(path) == rows(plain.path)


# A2C dumps its logs every 100 rollouts (SB3's default log_interval); 2 envs x 5 steps.
A2C_CARTPOLE = {
    "algo": "a2c",
    "env": "CartPole-v1",
    "policy": "MlpPolicy",
    "n_envs": 2,
    "n_steps": 5,
    "n_timesteps": 3000,
    "save_freq": 10_000,
    "policy_kwargs": {"net_arch": [8]},
    "eval": {"freq": 0, "final_episodes": 1},
}


def test_a_resumed_run_dumps_its_logs_at_the_uninterrupted_runs_steps(tmp_path: Path) -> None:
    """SB3's on-policy ``learn`` counts ``log_interval`` from its own start: resumed at step
    1,490, it would dump at 2,490 instead of 2,000 and 3,000. The run's rollout count decides."""
    path = tmp_path / "a2c.yml"
    path.write_text(yaml.safe_dump({"a2c": A2C_CARTPOLE}))
    plain = zoo.train(path, root=tmp_path / "plain")
    with pytest.raises(KeyboardInterrupt):
        zoo.train(path, root=tmp_path / "cut", callbacks=[InterruptAt(1500)])
    (cut,) = (tmp_path / "cut" / "a2c").iterdir()
    # cut in the rollout that ends at 1,500: the run goes back to 1,490
    assert read_counters(cut / "checkpoints" / "last.zip")["num_timesteps"] == 1490
    zoo.resume(cut)

    def dumps(run: Path) -> list[tuple[float, float]]:
        return [tuple(x) for x in np.stack(series(read_metrics(run), "time/iterations"), 1)]

    assert dumps(plain.path) == [(1000.0, 100.0), (2000.0, 200.0), (3000.0, 300.0)]
    assert dumps(cut) == dumps(plain.path)


def test_resume_through_a_linked_logs_folder_writes_only_inside_the_run(tmp_path: Path) -> None:
    # issue 68, item 2: SB3's logger made logs/part<k> outside make_folder, so a shared run
    # folder whose logs/ linked elsewhere had the target's part1/progress.csv truncated
    with pytest.raises(KeyboardInterrupt):
        zoo.train(config(tmp_path), root=tmp_path, callbacks=[InterruptAt(150)])
    (path,) = (tmp_path / "cartppo").iterdir()
    victim = tmp_path / "victim"
    (victim / "part1").mkdir(parents=True)
    (victim / "part1" / "progress.csv").write_text("precious\n")
    before = {str(p.relative_to(victim)): p.read_bytes() for p in victim.rglob("*") if p.is_file()}
    shutil.rmtree(path / "logs")
    (path / "logs").symlink_to(victim)
    zoo.resume(path)
    after = {str(p.relative_to(victim)): p.read_bytes() for p in victim.rglob("*") if p.is_file()}
    assert after == before  # not truncated, no tfevents beside it
    assert not (path / "logs").is_symlink()
    assert list((path / "logs").glob("part*/progress.csv"))
