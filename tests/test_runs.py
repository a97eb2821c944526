"""Tests for zoo.runs: run folders, evaluation, interrupt and resume, matrix handling."""

from __future__ import annotations

import csv
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.save_util import load_from_zip_file

import zoo
import zoo.cli
from zoo.config import ConfigError, EvalConfig, RunConfig
from zoo.runs import new_run_dir

# A cheap on-policy config: 2 envs x 32 steps = 64 per rollout, so 200 steps end at 256.
CARTPOLE_PPO: dict[str, Any] = {
    "algo": "ppo",
    "env": "CartPole-v1",
    "policy": "MlpPolicy",
    "n_envs": 2,
    "n_steps": 32,
    "batch_size": 32,
    "n_epochs": 1,
    "n_timesteps": 200,
    "policy_kwargs": {"net_arch": [16]},
    "eval": {"freq": 100, "n_episodes": 2, "final_episodes": 3, "n_envs": 2},
}
# DoorKey smoke, shorter and with a cheaper evaluation (its 400-step episodes are slow).
DOORKEY_CHEAP = {
    "n_timesteps": 160,
    "eval.freq": 0,
    "eval.final_episodes": 1,
    "eval.n_envs": 1,
    "eval.policies": {"greedy": "deterministic"},
    "eval.select": None,
}


class InterruptAt(BaseCallback):
    """Raise KeyboardInterrupt (as Ctrl-C would) once ``num_timesteps`` reaches ``step``."""

    def __init__(self, step: int) -> None:
        super().__init__()
        self.step = step

    def _on_step(self) -> bool:
        if self.num_timesteps >= self.step:
            raise KeyboardInterrupt
        return True


def write_config(tmp_path: Path, name: str, body: dict[str, Any]) -> Path:
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump({name: body}, sort_keys=False))
    return path


def checkpoint_steps(run_dir: Path) -> int:
    data, _, _ = load_from_zip_file(run_dir / "checkpoints" / "last.zip")
    return int(data["num_timesteps"])


def figures(result: dict[str, Any]) -> dict[str, Any]:
    """The evaluation figures of an ``eval.json``-like dict (no wall time)."""
    return {k: v for k, v in result.items() if k != "wall_seconds"}


def monitor_rows(run_dir: Path) -> set[str]:
    rows: set[str] = set()
    for file in (run_dir / "monitor").glob("train_*.monitor.csv"):
        rows |= {line for line in file.read_text().splitlines()[2:] if line}
    return rows


def only_run_dir(root: Path, experiment: str) -> Path:
    (path,) = (root / experiment).iterdir()
    return path


# --- a full smoke run -------------------------------------------------------------------------


def test_doorkey_smoke_run_folder_and_evaluation(tmp_path: Path) -> None:
    run = zoo.train("doorkey", budget="smoke", root=tmp_path, command="attn-zoo train doorkey")
    path = run.path
    assert path.parent == tmp_path / "doorkey"
    assert path.name.startswith("0-")
    n_timesteps = run.config.body["n_timesteps"]

    status = json.loads((path / "status.json").read_text())
    assert status["state"] == "finished"
    assert status["num_timesteps"] == n_timesteps
    assert status["wall_seconds"] > 0
    assert (path / "command.txt").read_text() == "attn-zoo train doorkey\n"

    # config.yml is the resolved run and loads back as it.
    loaded = zoo.load(path)
    assert loaded.config.body | {"eval": None} == run.config.body | {"eval": None}
    assert loaded.config.eval == run.config.eval
    assert (loaded.config.budget, loaded.config.tag) == ("smoke", "")

    for name in ("model.zip", "best_model.zip", "evaluations.json", "eval.json"):
        assert (path / name).is_file(), name
    assert (path / "checkpoints" / "last.zip").is_file()
    assert (path / "checkpoints" / f"last_replay_buffer-{n_timesteps}.npz").is_file()
    assert checkpoint_steps(path) == n_timesteps
    (monitor,) = (path / "monitor").glob("*.monitor.csv")  # one env, one part
    assert monitor.name.startswith("train_")
    # DQN dumps its log every 4 episodes, which a 300-step smoke run never completes.
    assert (path / "logs" / "part0" / "progress.csv").is_file()
    assert list((path / "logs" / "part0").glob("events.out.tfevents.*"))

    # Evaluations at every multiple of eval.freq; the best model is one of them.
    history = json.loads((path / "evaluations.json").read_text())
    freq = run.config.eval.freq
    assert [h["step"] for h in history] == list(range(freq, n_timesteps + 1, freq))
    assert history[0].get("best") is True

    result = run.eval
    assert (result["experiment"], result["budget"], result["model"]) == (
        "doorkey",
        "smoke",
        "best_model.zip",
    )
    assert set(result["policies"]) == {*run.config.eval.policies, *run.config.eval.final_policies}
    for summary in result["policies"].values():
        assert summary["n_episodes"] == run.config.eval.final_episodes
        assert summary["success_rate"] is not None
    assert result["last_model"]["num_timesteps"] == n_timesteps

    # The same test episodes again: the figures of eval.json exactly, from a Run or a path.
    assert figures(zoo.evaluate(run)) == figures(result)
    last = zoo.evaluate(str(path), which="last", n_episodes=1)
    assert last["model"] == "model.zip" and last["n_episodes"] == 1

    assert run.model("best").num_timesteps in [h["step"] for h in history if h.get("best")]
    assert run.model("last").num_timesteps == n_timesteps

    with pytest.raises(ConfigError, match="finished"):
        zoo.resume(path)


# --- interrupt and resume ---------------------------------------------------------------------


def test_off_policy_interrupt_and_resume(tmp_path: Path) -> None:
    full_steps = DOORKEY_CHEAP["n_timesteps"]
    with pytest.raises(KeyboardInterrupt):
        zoo.train(
            "doorkey",
            budget="smoke",
            overrides=DOORKEY_CHEAP,
            root=tmp_path,
            callbacks=[InterruptAt(100)],  # after learning_starts: the weights have moved
        )
    path = only_run_dir(tmp_path, "doorkey")
    status = json.loads((path / "status.json").read_text())
    assert (status["state"], status["num_timesteps"], status["parts"]) == ("interrupted", 100, 1)
    assert checkpoint_steps(path) == 100
    assert (path / "checkpoints" / "last_replay_buffer-100.npz").is_file()
    assert not (path / "model.zip").exists() and not (path / "eval.json").exists()

    run = zoo.resume(path)
    assert run.path == path
    assert (run.status["state"], run.status["parts"]) == ("finished", 2)  # one resume
    assert run.status["num_timesteps"] == full_steps == run.config.body["n_timesteps"]
    assert run.eval["num_timesteps"] == full_steps
    assert (run.config.budget, run.eval["budget"]) == ("smoke", "smoke")
    assert sorted(p.name for p in (path / "logs").iterdir()) == ["part0", "part1"]
    # The replay buffer came back: 99 transitions before the interrupt (the 100th step's
    # transition is stored after the callbacks) plus 60 after, unless oversampling filled it.
    buffer = path / "checkpoints" / f"last_replay_buffer-{full_steps}.npz"
    with np.load(buffer, allow_pickle=False) as npz:
        counters = json.loads(npz["__scalars__"].tobytes())
    assert counters["full"] or counters["pos"] >= full_steps - 1


def test_on_policy_interrupt_mid_rollout_and_resume(tmp_path: Path) -> None:
    config = write_config(tmp_path, "cartppo", CARTPOLE_PPO)
    plain = zoo.train(config, root=tmp_path / "plain")
    assert plain.status["num_timesteps"] == 256  # whole rollouts: 4 x 64

    root = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        zoo.train(config, root=root, callbacks=[InterruptAt(90)])  # in the 2nd rollout
    path = only_run_dir(root, "cartppo")
    status = json.loads((path / "status.json").read_text())
    # The partial rollout is dropped: the checkpoint is at its start and collects it again.
    assert (status["state"], status["num_timesteps"]) == ("interrupted", 64)
    assert checkpoint_steps(path) == 64

    run = zoo.resume(path)
    assert run.status["state"] == "finished"
    assert run.status["num_timesteps"] == plain.status["num_timesteps"] == 256
    assert run.eval["last_model"]["num_timesteps"] == 256
    steps = [h["step"] for h in json.loads((path / "evaluations.json").read_text())]
    plain_steps = [h["step"] for h in json.loads((plain.path / "evaluations.json").read_text())]
    assert steps == plain_steps == [100, 200]
    assert figures(zoo.evaluate(path)) == figures(run.eval)
    with (path / "logs" / "part1" / "progress.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    # The resumed part logs its own rollouts, up to the uninterrupted run's step count.
    steps = [int(r["time/total_timesteps"]) for r in rows if r.get("time/total_timesteps")]
    assert steps and steps[0] > 64 and steps[-1] == 256


def test_resume_keeps_the_monitor_episodes_logged_before_the_interrupt(tmp_path: Path) -> None:
    """Learning curves (zoo.plots) read monitor/train_*.monitor.csv: a resume must not
    overwrite the episodes of the first part."""
    config = write_config(tmp_path, "cartppo", CARTPOLE_PPO)
    with pytest.raises(KeyboardInterrupt):
        zoo.train(config, root=tmp_path, callbacks=[InterruptAt(90)])
    path = only_run_dir(tmp_path, "cartppo")
    before = monitor_rows(path)
    assert before  # CartPole episodes end within 90 random steps
    zoo.resume(path)
    assert before <= monitor_rows(path)


def test_on_policy_resume_keeps_one_evaluation_per_point(tmp_path: Path) -> None:
    """Interrupted right after an evaluation inside a rollout, the resumed run evaluates that
    point again (same weights); evaluations.json must still list each step once."""
    config = write_config(tmp_path, "cartppo", CARTPOLE_PPO)
    with pytest.raises(KeyboardInterrupt):
        zoo.train(config, root=tmp_path, callbacks=[InterruptAt(100)])
    path = only_run_dir(tmp_path, "cartppo")
    zoo.resume(path)
    steps = [h["step"] for h in json.loads((path / "evaluations.json").read_text())]
    assert steps == [100, 200]


class CrashAt(InterruptAt):
    """Fail like a crash or a kill would: no KeyboardInterrupt handler runs."""

    def _on_step(self) -> bool:
        if self.num_timesteps >= self.step:
            raise RuntimeError("crash")
        return True


def test_on_policy_resume_after_a_crash_ends_where_an_uninterrupted_run_would(
    tmp_path: Path,
) -> None:
    """After a crash only the periodic checkpoint is left; saved mid-rollout (step 80 of the
    64..128 rollout) it must still resume to the uninterrupted run's 256 steps."""
    config = write_config(tmp_path, "cartppo", {**CARTPOLE_PPO, "save_freq": 20})
    with pytest.raises(RuntimeError, match="crash"):
        zoo.train(config, root=tmp_path, callbacks=[CrashAt(90)])
    path = only_run_dir(tmp_path, "cartppo")
    status = json.loads((path / "status.json").read_text())
    assert status["state"] == "failed" and "crash" in status["reason"]
    run = zoo.resume(path)
    assert run.status["num_timesteps"] == 256


def test_run_killed_before_its_first_checkpoint_resumes_from_step_zero(tmp_path: Path) -> None:
    config = write_config(tmp_path, "cartppo", CARTPOLE_PPO)
    with pytest.raises(KeyboardInterrupt):
        zoo.train(config, root=tmp_path, callbacks=[InterruptAt(2)])
    path = only_run_dir(tmp_path, "cartppo")
    (path / "checkpoints" / "last.zip").unlink()  # as if killed before any checkpoint
    run = zoo.resume(path)
    assert run.status["state"] == "finished" and run.status["num_timesteps"] == 256


class StatusAt(BaseCallback):
    """At ``step``, wait ``seconds`` and record the ``status.json`` on disk then."""

    def __init__(self, path: Path, step: int, seconds: float) -> None:
        super().__init__()
        self.path, self.step, self.seconds = path, step, seconds
        self.seen: dict[str, Any] = {}

    def _on_step(self) -> bool:
        if self.num_timesteps == self.step:
            time.sleep(self.seconds)
            self.seen = json.loads((self.path / "status.json").read_text())
        return True


def test_a_running_run_keeps_its_wall_time_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process killed outright writes nothing at the end: the time it ran must already be
    in status.json for a resume to add to (it used to count from the resume only)."""
    monkeypatch.setattr(zoo.runs, "WALL_CLOCK_SECONDS", 0.05)
    config = write_config(tmp_path, "cartppo", CARTPOLE_PPO)
    run_dir = tmp_path / "run"
    probe = StatusAt(run_dir, 100, 0.5)
    zoo.train(config, root=tmp_path, run_dir=run_dir, callbacks=[probe])
    assert probe.seen["state"] == "running"
    assert probe.seen["wall_seconds"] >= 0.4
    assert json.loads((run_dir / "status.json").read_text())["wall_seconds"] >= 0.5


def test_run_folders_are_created_atomically_and_exclusively(tmp_path: Path) -> None:
    from zoo.config import load_runs
    from zoo.runs import new_run_dir

    (run,) = load_runs(write_config(tmp_path, "cartppo", CARTPOLE_PPO))
    folders = {new_run_dir(run, tmp_path / "runs") for _ in range(5)}  # same second
    assert len(folders) == 5 and all(f.is_dir() for f in folders)


def test_resume_of_a_live_run_is_refused_and_a_dead_holder_is_stale(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    import logging
    import subprocess
    import sys

    from zoo.run_lock import RunLock, RunLockedError

    config = write_config(tmp_path, "cartppo", CARTPOLE_PPO)
    with pytest.raises(KeyboardInterrupt):
        zoo.train(config, root=tmp_path, callbacks=[InterruptAt(2)])
    path = only_run_dir(tmp_path, "cartppo")
    with RunLock(path), pytest.raises(RunLockedError, match="in use by process"):
        zoo.resume(path)
    # A holder killed with SIGKILL leaves run.lock behind; the next taker sees it is stale.
    code = (
        f"from zoo.run_lock import RunLock; import os; RunLock({str(path)!r}).acquire(); "
        "os._exit(0)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    assert (path / "run.lock").read_text()
    with RunLock(path) as lock:
        assert lock.stale is not None and lock.stale["pid"] != os.getpid()
    # resume takes a stale lock over and says so as a warning record (the CLI prints it on
    # stderr), not a print of the library's own
    subprocess.run([sys.executable, "-c", code], check=True)
    capsys.readouterr()
    with caplog.at_level(logging.WARNING, logger="zoo.runs"):
        zoo.resume(path)
    assert [r.levelname for r in caplog.records if r.name == "zoo.runs"] == ["WARNING"]
    assert f"{path}: taking over the stale lock of process" in caplog.text
    assert capsys.readouterr().err == ""


def test_load_needs_a_run_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"config\.yml"):
        zoo.load(tmp_path)


def test_absent_sources_names_the_warm_start_and_teacher_paths_not_here(tmp_path: Path) -> None:
    from zoo.config import EvalConfig, RunConfig
    from zoo.runs import absent_sources

    def run(**body: Any) -> RunConfig:
        return RunConfig("bc", "", "full", {"algo": "bc", **body}, EvalConfig())

    here = tmp_path / "teacher_run"
    here.mkdir()
    gone = str(tmp_path / "gone")
    assert absent_sources(run(init=gone, teacher=str(here))) == {"init": gone}
    assert absent_sources(run(init="weights.pt")) == {"init": "weights.pt"}
    # an experiment trained with the run and an import path are not paths
    assert absent_sources(run(teacher={"experiment": "cartpole_fnn"})) == {}
    assert absent_sources(run(teacher="zoo.scripted:pong_teacher")) == {}


# --- matrices ---------------------------------------------------------------------------------

GRID = {
    **CARTPOLE_PPO,
    "n_envs": 1,
    "n_timesteps": 32,
    "eval": {"final_episodes": 1},
    "matrix": {"variant": {"small": {"policy_kwargs": {"net_arch": [4]}}, "big": {}}},
}


def test_train_on_a_matrix_needs_one_cell(tmp_path: Path) -> None:
    config = write_config(tmp_path, "grid", GRID)
    with pytest.raises(ConfigError) as err:
        zoo.train(config, root=tmp_path / "runs")
    assert "2 runs" in str(err.value) and "small" in str(err.value)
    assert "train_all" in str(err.value)
    assert not (tmp_path / "runs").exists()

    run = zoo.train(config, overrides={"variant": "small"}, root=tmp_path / "runs")
    assert run.path.parent == tmp_path / "runs" / "grid" / "small"
    assert run.config.tag == "small"
    assert zoo.load(run.path).config.tag == "small"
    assert run.eval["tag"] == "small"


def test_train_all_trains_every_cell(tmp_path: Path) -> None:
    config = write_config(tmp_path, "grid", GRID)
    runs = zoo.train_all(config, root=tmp_path, seed=4)
    assert [r.config.tag for r in runs] == ["small", "big"]
    for run in runs:
        assert run.path.parent == tmp_path / "grid" / run.config.tag
        assert run.path.name.startswith("4-")
        assert run.status["state"] == "finished"
        assert (run.path / "eval.json").is_file()


def test_curriculum_trains_each_stage_and_resumes_into_the_right_stage(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    with pytest.raises(KeyboardInterrupt):
        zoo.train("doorkey_curriculum", budget="smoke", root=root, callbacks=[InterruptAt(130)])
    path = next((root / "doorkey_curriculum").iterdir())
    assert json.loads((path / "status.json").read_text())["num_timesteps"] == 130
    monitors = sorted(p.name for p in (path / "monitor").iterdir())
    assert monitors == ["train_p0_s0_0.monitor.csv", "train_p0_s1_0.monitor.csv"]

    run = zoo.resume(path)
    assert run.status["num_timesteps"] == run.config.body["n_timesteps"] == 200
    # The resumed part finishes stage 1 (6x6) and trains stage 2 (8x8); 5x5 is not redone.
    resumed = sorted(p.name for p in (path / "monitor").iterdir() if "_p1_" in p.name)
    assert resumed == ["train_p1_s1_0.monitor.csv", "train_p1_s2_0.monitor.csv"]
    env_ids = {
        json.loads(p.read_text().splitlines()[0][1:])["env_id"]
        for p in (path / "monitor").iterdir()
    }
    assert env_ids == {f"attn_envs/EgocentricDoorKey-{n}x{n}-v0" for n in (5, 6, 8)}


def test_curriculum_stage_sums_and_keys_are_checked(tmp_path: Path) -> None:
    with pytest.raises(zoo.ConfigError, match="sum of the curriculum"):
        zoo.load_runs("doorkey_curriculum", budget="smoke", overrides={"n_timesteps": 150})
    with pytest.raises(zoo.ConfigError, match="curriculum\\[0\\] may set"):
        zoo.load_runs(
            "doorkey_curriculum",
            budget="smoke",
            overrides={"curriculum": [{"env": "x", "n_timesteps": 200, "gamma": 0.9}]},
        )


def test_an_evaluation_cut_by_ctrl_c_runs_again_on_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import zoo.evaluation

    body = {
        "algo": "dqn",
        "env": "CartPole-v1",
        "policy": "MlpPolicy",
        "n_timesteps": 120,
        "learning_starts": 10,
        "buffer_size": 500,
        "policy_kwargs": {"net_arch": [8]},
        "eval": {"freq": 50, "n_episodes": 1, "final_episodes": 1},
    }
    real = zoo.evaluation.evaluate_modes
    calls: list[int] = []

    def interrupted_once(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:  # the evaluation at step 100
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(zoo.evaluation, "evaluate_modes", interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        zoo.train(write_config(tmp_path, "cartdqn", body), root=tmp_path)
    path = only_run_dir(tmp_path, "cartdqn")
    assert [h["step"] for h in json.loads((path / "evaluations.json").read_text())] == [50]
    assert checkpoint_steps(path) == 100
    zoo.resume(path)
    steps = [h["step"] for h in json.loads((path / "evaluations.json").read_text())]
    assert steps == [50, 100]


@pytest.mark.parametrize("bad", [0, True, 2.5, "3"])
def test_evaluate_checks_the_episode_count_first(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(ConfigError, match="number of test episodes must be a positive integer"):
        zoo.evaluate(tmp_path / "no-run", n_episodes=bad)


# --- a start cut short ------------------------------------------------------------------------


def _file_size_limit(limit: int) -> Any:
    """A ``preexec_fn``: writes past ``limit`` bytes fail (EFBIG), as on a full disk."""
    import resource
    import signal

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.mark.parametrize("where", ["root", "run-dir"])
def test_a_full_disk_at_start_leaves_no_half_run_folder(tmp_path: Path, where: str) -> None:
    """The run's first file (config.yml) does not fit: the start leaves neither a folder
    (under --root) nor a file (in the --run-dir folder the user made), so the same command
    starts the run afterwards."""
    import subprocess
    import sys

    config = write_config(tmp_path, "cartppo", {**CARTPOLE_PPO, "n_timesteps": 64})
    target = ["--root", str(tmp_path / "runs")]
    if where == "run-dir":
        (tmp_path / "run").mkdir()
        target = ["--run-dir", str(tmp_path / "run")]
    argv = ["train", str(config), *target, "--no-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cut = subprocess.run(
        [sys.executable, "-m", "zoo.cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        preexec_fn=_file_size_limit(200),  # run.lock's 80 bytes fit, config.yml does not
    )
    assert cut.returncode != 0 and "File too large" in cut.stderr
    if where == "root":
        assert list((tmp_path / "runs").rglob("*")) == [tmp_path / "runs" / "cartppo"]
    else:
        assert list((tmp_path / "run").iterdir()) == []
    assert zoo.cli.main(argv) == 0


def test_a_folder_left_with_only_a_dead_runs_lock_is_taken_over(tmp_path: Path) -> None:
    """A start killed outright (SIGKILL) before its first file leaves run.lock alone; --run-dir
    takes such a folder over, unless a live process holds the lock."""
    import signal
    import subprocess
    import sys

    from zoo.run_lock import RunLock

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    code = (
        f"from zoo.run_lock import RunLock; import os; RunLock({str(run_dir)!r}).acquire(); "
        f"os.kill(os.getpid(), {int(signal.SIGKILL)})"
    )
    subprocess.run([sys.executable, "-c", code], check=False)
    assert [p.name for p in run_dir.iterdir()] == ["run.lock"]
    with pytest.raises(FileNotFoundError, match="--run-dir` takes it over"):
        zoo.resume(run_dir)
    config = write_config(tmp_path, "cartppo", {**CARTPOLE_PPO, "n_timesteps": 64})
    with RunLock(run_dir), pytest.raises(ConfigError, match="exists and is not empty"):
        zoo.train(config, run_dir=run_dir)
    assert zoo.train(config, run_dir=run_dir).status["state"] == "finished"


# --- a refused resume -------------------------------------------------------------------------


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


class StopAfter:
    """A CMA-ES or APG callback: Ctrl-C after ``n`` generations or updates."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self, record: dict[str, Any]) -> bool:
        self.n -= 1
        if self.n <= 0:
            raise KeyboardInterrupt
        return True


@pytest.mark.parametrize("algo", ["ppo", "cmaes", "apg"])
def test_a_refused_resume_leaves_the_run_folder_byte_identical(tmp_path: Path, algo: str) -> None:
    """An interrupted run whose checkpoint holds a pickle that would create a marker file:
    ``--resume`` refuses it (exit 2, one line) and changes no byte of the folder: not
    status.json (it used to say ``failed``), metrics.csv, logs/ or monitor/."""
    from test_security import payload

    marker = tmp_path / "pwned"
    if algo == "ppo":
        body = {**CARTPOLE_PPO, "normalize": True, "save_freq": 64}
        with pytest.raises(KeyboardInterrupt):
            zoo.train(
                write_config(tmp_path, "cut", body), root=tmp_path, callbacks=[InterruptAt(150)]
            )
        path = only_run_dir(tmp_path, "cut")
        (path / "checkpoints" / "last_vecnormalize.pkl").write_bytes(payload(marker))
    elif algo == "apg":
        with pytest.raises(KeyboardInterrupt):
            zoo.train("cartpole_pi_hold", budget="smoke", root=tmp_path, callbacks=[StopAfter(3)])
        path = only_run_dir(tmp_path, "cartpole_pi_hold")
        (path / "checkpoints" / "apg.pt").write_bytes(payload(marker))
    else:
        body = {
            "algo": "cmaes",
            "env": "attn_envs/CartPoleSwingUpHarder-v0",
            "policy": "fnn",
            "n_generations": 10,
            "population": 8,
            "repeats": 1,
            "max_episode_steps": 50,
            "eval": {"freq": 1, "n_episodes": 1, "final_episodes": 1},
        }
        with pytest.raises(KeyboardInterrupt):
            zoo.train(write_config(tmp_path, "cut", body), root=tmp_path, callbacks=[StopAfter(2)])
        path = only_run_dir(tmp_path, "cut")
        (state,) = (path / "checkpoints").glob("cma_state-*.npz")
        state.write_bytes(payload(marker))
    assert zoo.load(path).status["state"] == "interrupted"
    before = _snapshot(path)
    assert zoo.cli.main(["train", "--resume", str(path), "--no-progress"]) == 2
    assert not marker.exists()
    after = _snapshot(path)
    assert sorted(after) == sorted(before)
    assert [name for name in before if after[name] != before[name]] == []


@pytest.mark.parametrize(("threads", "expected"), [(None, 1), (2, 2)], ids=["unset", "set"])
def test_a_run_takes_one_torch_thread_unless_its_config_says(
    tmp_path: Path, threads: int | None, expected: int
) -> None:
    # torch's default (a thread per core) lost 70% of its speed beside one busy process on
    # 2 cores; the rule and its measurement: benchmarks/load.py.
    import torch

    seen: list[int] = []

    class Threads(BaseCallback):
        def _on_step(self) -> bool:
            seen.append(torch.get_num_threads())
            return True

    body = {**CARTPOLE_PPO, "n_timesteps": 64, "eval": {"freq": 0, "final_episodes": 1}}
    if threads is not None:
        body["torch_threads"] = threads
    before = torch.get_num_threads()
    torch.set_num_threads(3)  # what the process had before: neither answer
    try:
        zoo.train(write_config(tmp_path, "cart", body), root=tmp_path, callbacks=[Threads()])
    finally:
        torch.set_num_threads(before)
    assert seen and set(seen) == {expected}


# --- Run.agent: the one loader of what acts, for every kind of run -------------------------

IMPORTED_GIN = """import solutions.torch_solutions
torch_solutions.PIFCSolution.act_dim = 1
torch_solutions.PIFCSolution.hidden_dim = 16
torch_solutions.PIFCSolution.msg_dim = 32
torch_solutions.PIFCSolution.pos_em_dim = 8
torch_solutions.PIFCSolution.num_hidden_layers = 0
torch_solutions.PIFCSolution.pi_layer_bias = False
torch_solutions.PIFCSolution.pi_layer_scale = False
util.create_solution.solution_loader = @torch_solutions.PIFCSolution
util.create_task.task_loader = @rl_tasks.CartPoleSwingUpTask()
"""


def swing_teacher(obs: Any) -> tuple[np.ndarray, np.ndarray]:
    """A scripted BC teacher (named in a config: ``--allow-import test_runs``)."""
    target = np.clip(0.5 * obs[:, 3:4], -1, 1).astype(np.float32)
    return target, target


def _sb3_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    body = {**CARTPOLE_PPO, "n_timesteps": 64, "eval": {"freq": 0, "final_episodes": 1}}
    return zoo.train(write_config(tmp_path, "cart", body), root=tmp_path).path


def _es_recipe(tmp_path: Path) -> Path:
    body = {
        "algo": "recipe",
        "env": "attn_envs/CartPoleSwingUpHarder-v0",
        "stages": [{"name": "only", "experiment": "cartpole_pi_x0"}],
        "eval": {"final_episodes": 1},
        "budgets": {"smoke": {}},
    }
    return zoo.train(write_config(tmp_path, "one_stage", body), budget="smoke", root=tmp_path).path


def _cmaes_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return _es_recipe(tmp_path) / "stages" / "1_only"


def _recipe_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return _es_recipe(tmp_path)


def _dagger_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "teacher").mkdir()
    teacher = _cmaes_run(tmp_path / "teacher", monkeypatch)
    overrides = {"teacher": str(teacher), "eval.final_episodes": 1}
    return zoo.train("cartpole_pi_dagger", "smoke", overrides, root=tmp_path).path


def _bc_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from zoo.registry import ALLOW_IMPORT_ENV

    monkeypatch.setenv(ALLOW_IMPORT_ENV, "test_runs")
    body = {
        "algo": "bc",
        "env": "attn_envs/CartPoleSwingUpHarder-v0",
        "env_kwargs": {"max_episode_steps": 50},
        "n_envs": 2,
        "teacher": "test_runs:swing_teacher",
        "n_timesteps": 100,
        "policy_kwargs": {"net_arch": [8]},
        "epochs": 1,
        "eval": {"freq": 0, "final_episodes": 1},
    }
    return zoo.train(write_config(tmp_path, "swing_bc", body), root=tmp_path).path


def _imported_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from zoo.pretrained import import_checkpoint

    source = tmp_path / "cartpole_pi"
    source.mkdir()
    (source / "config.gin").write_text(IMPORTED_GIN)
    np.savez(source / "model.npz", params=np.random.default_rng(0).normal(0, 0.5, 913))
    return import_checkpoint(source, out=tmp_path / "run").path


@pytest.mark.parametrize(
    ("make", "agent_type"),
    [
        (_sb3_run, "PPO"),
        (_cmaes_run, "PolicyAgent"),
        (_dagger_run, "PolicyAgent"),
        (_bc_run, "StudentAgent"),
        (_imported_run, "PolicyAgent"),
        (_recipe_run, "PolicyAgent"),
    ],
    ids=["sb3", "cmaes", "dagger", "bc", "imported", "recipe"],
)
def test_run_agent_plays_every_kind_of_run_as_its_trainer_scores_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make: Any, agent_type: str
) -> None:
    """``Run.agent`` acts, step by step in the run's own env (as ``record`` and ``maps``
    play it), exactly as the trainer's episodes score the model (``evaluate``,
    ``robustness``)."""
    from attn_policies.agents import Agent
    from zoo.record import open_env
    from zoo.trainers import get_episode_trainer

    handle = zoo.load(make(tmp_path, monkeypatch))
    agent = handle.agent("best")
    assert isinstance(agent, Agent) and type(agent).__name__ == agent_type
    seed = 11
    expected = get_episode_trainer(handle.config.algo).episode_returns(
        handle.path, handle.config, n_episodes=1, seed=seed, n_envs=1
    )
    acting = handle.acting()
    cap = acting.config.body.get("max_episode_steps") or 10_000  # ES evaluators' own cap
    venv = open_env(acting, render=False)
    try:
        venv.seed(seed)
        obs, state, starts, total, steps = venv.reset(), None, np.ones(1, bool), 0.0, 0
        while steps < cap:
            action, state = agent.predict(obs, state, starts, deterministic=True)
            obs, reward, starts, _ = venv.step(action)
            total, steps = total + float(reward[0]), steps + 1
            if starts[0]:
                break
    finally:
        venv.close()
    assert steps == expected["lengths"][0]
    assert total == pytest.approx(expected["rewards"][0], rel=1e-4, abs=1e-4)


@pytest.mark.parametrize("name", ["../../../x", "/ABSOLUTE"])
def test_an_experiment_name_never_places_a_run_outside_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    # issue 68, item 3: the top-level key of a config was the run folder's path under --root
    work = tmp_path / "a" / "b" / "c"
    work.mkdir(parents=True)
    name = name.replace("/ABSOLUTE", str(tmp_path / "where"))
    body = {"algo": "ppo", "env": "CartPole-v1", "policy": "MlpPolicy", "n_timesteps": 64,
            "n_steps": 32, "batch_size": 32, "eval": {"freq": 0, "final_episodes": 1}}  # fmt: skip
    config = work / "evil.yml"
    config.write_text(yaml.safe_dump({name: body}))
    before = sorted(tmp_path.rglob("*"))
    code = zoo.cli.main(["train", str(config), "--root", str(work / "runs"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "is not a folder name" in err[0]
    assert sorted(tmp_path.rglob("*")) == before  # nothing written anywhere
    run = RunConfig(name, "", "full", body, EvalConfig())
    with pytest.raises(ConfigError, match="is not a folder name"):  # in Python too
        new_run_dir(run, work / "runs")
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("trusted", ["/no/such/teacher.zip", "/", ""])
def test_a_trust_teacher_naming_no_file_is_refused_before_anything(
    tmp_path: Path, trusted: str
) -> None:
    """Issue 68: ``--trust-teacher`` names the one pickled file a run may unpickle; a missing
    file, ``/`` or ``''`` (a folder) is one line, exit 2, and no folder is made."""
    config = tmp_path / "cart.yml"
    body = {"algo": "ppo", "env": "CartPole-v1", "policy": "MlpPolicy", "n_timesteps": 64}
    config.write_text(yaml.safe_dump({"cart": body}))
    with pytest.raises(ConfigError, match=r"--trust-teacher .*: not a file"):
        zoo.train(config, root=tmp_path / "runs", trust_teacher=[trusted])
    assert not (tmp_path / "runs").exists()
