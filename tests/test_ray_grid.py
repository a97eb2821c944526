"""Tests for zoo.ray_grid: every matrix cell as a Ray task, resumable and retried."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_cli import CARTPOLE as CLI_CARTPOLE
from test_ray_cluster import closed_port

from zoo.cli import main
from zoo.config import ConfigError, EvalConfig, RunConfig, load_runs
from zoo.ray_cluster import cell_resources, cluster_address
from zoo.ray_grid import _check_feasible, cell_folders, plan_cell, plan_grid, run_grid
from zoo.run_lock import RunLock
from zoo.runs import new_run_dir

# Two cheap resumable PPO cells (seeds 0 and 1): test_cli's CartPole run as a seed matrix.
CARTPOLE: dict[str, Any] = {
    **CLI_CARTPOLE,
    "eval": {"final_episodes": 2},
    "matrix": {"seed": [0, 1]},
}


def write_config(tmp_path: Path, body: dict[str, Any], name: str = "grid") -> Path:
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump({name: body}, sort_keys=False))
    return path


def run_of(body: dict[str, Any]) -> RunConfig:
    return RunConfig("x", "", "full", {"algo": "ppo", **body}, EvalConfig())


def fake_folder(run: RunConfig, root: Path, state: str, eval_json: bool = False) -> Path:
    """A run folder as the local runner leaves it, without training."""
    path = new_run_dir(run, root)
    (path / "config.yml").write_text(run.to_yaml())
    status = {"state": state, "budget": run.budget, "tag": run.tag, "seed": run.seed}
    (path / "status.json").write_text(json.dumps(status))
    if eval_json:
        (path / "eval.json").write_text("{}")
    return path


# --- planning and resources (no Ray needed) -------------------------------------------------


def test_resources_key_is_accepted_and_type_checked_by_every_config(tmp_path: Path) -> None:
    body = {**CARTPOLE, "resources": {"num_cpus": 2}}
    runs = load_runs(write_config(tmp_path, body))
    assert [r.body["resources"] for r in runs] == [{"num_cpus": 2}] * 2
    with pytest.raises(ConfigError, match="'resources' must be dict"):
        load_runs(write_config(tmp_path, {**CARTPOLE, "resources": 2}))


def test_the_cluster_is_the_command_lines_or_ray_address_never_the_configs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert cluster_address(None) is None
    assert cluster_address("auto") == "auto"
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    assert cluster_address(None) == "auto"
    assert cluster_address("local") == "local"  # the command line wins
    with pytest.raises(ConfigError, match=r"'ray_address' is not a config key: .*--ray ADDRESS"):
        load_runs(write_config(tmp_path, {**CARTPOLE, "ray_address": "127.0.0.1:1"}))


def test_plan_skips_finished_resumes_unfinished_and_ignores_other_configs(
    tmp_path: Path,
) -> None:
    first, second = load_runs(write_config(tmp_path, CARTPOLE))
    assert plan_cell(first, tmp_path).state == "new"
    done = fake_folder(first, tmp_path, "finished", eval_json=True)
    cut = fake_folder(second, tmp_path, "interrupted")
    # the same cell under other overrides, or another budget, is another run
    other = load_runs(write_config(tmp_path, CARTPOLE), overrides={"n_timesteps": 128})[1]
    fake_folder(other, tmp_path, "failed")
    assert cell_folders(second, tmp_path) == [cut]
    plan = plan_grid(write_config(tmp_path, CARTPOLE), root=tmp_path)
    assert [(c.state, c.path) for c in plan] == [("skipped", done), ("resume", cut)]
    # "finished" without eval.json (cut while writing it) is resumed
    (done / "eval.json").unlink()
    assert (plan_cell(first, tmp_path).state, plan_cell(first, tmp_path).path) == ("resume", done)
    # the same config trained under another budget is another cell
    (done / "status.json").write_text(json.dumps({"state": "failed", "budget": "cpu"}))
    assert plan_cell(first, tmp_path).state == "new"


def test_plan_trains_a_non_resumable_algo_afresh(tmp_path: Path) -> None:
    (run,) = load_runs("mnist", budget="smoke", overrides={"model": "cnn"})
    fake_folder(run, tmp_path, "failed")
    assert plan_cell(run, tmp_path).state == "new"  # classifier runs cannot resume
    (bc,) = load_runs("puzzle_pong_bc", budget="smoke")
    folder = fake_folder(bc, tmp_path, "interrupted")
    assert (plan_cell(bc, tmp_path).state, plan_cell(bc, tmp_path).path) == ("resume", folder)


def test_infeasible_cells_fail_on_a_local_instance_and_warn_on_a_cluster(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Cluster:
        @staticmethod
        def cluster_resources() -> dict[str, float]:
            return {"CPU": 2.0, "memory": 1e9}

    (cell,) = plan_grid(run_of({"device": "cuda"}))
    options = {id(cell): cell_resources(cell.run)}
    with pytest.raises(ConfigError, match="asks for GPU=1 but the Ray cluster has 0"):
        _check_feasible(Cluster(), [cell], options, strict=True)
    with caplog.at_level(logging.WARNING, logger="zoo.ray_grid"):  # the CLI prints it on stderr
        _check_feasible(Cluster(), [cell], options, strict=False)
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "warning: x asks for GPU=1" in caplog.text


def test_cli_without_ray_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    root = tmp_path / "runs"
    code = main(["train", "mnist", "--budget", "smoke", "--ray", "--root", str(root)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err == ["attn-zoo: error: --ray needs Ray, which is not installed: "
                   "pip install 'attn-zoo[ray]'"]  # fmt: skip
    assert not root.exists()


@pytest.mark.parametrize("how", ["config", "--ray", "RAY_ADDRESS"])
def test_cli_a_cluster_that_does_not_answer_is_one_line_within_30_s(
    tmp_path: Path, how: str
) -> None:
    pytest.importorskip("ray")
    address = f"127.0.0.1:{closed_port()}"
    body = {**CARTPOLE, "ray_address": address} if how == "config" else CARTPOLE
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(OMP_NUM_THREADS="1", **({"RAY_ADDRESS": address} if how == "RAY_ADDRESS" else {}))
    root = tmp_path / "runs"
    command = ["train", str(write_config(tmp_path, body)), "--yes", "--root", str(root), "--ray"]
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "zoo.cli", *command, *([address] if how == "--ray" else [])],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert time.perf_counter() - start < 30  # Ray retried for minutes before
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    want = "'ray_address' is not a config key" if how == "config" else "cannot reach the Ray"
    assert lines[0].startswith("attn-zoo: error:") and want in lines[0], lines[0]
    assert not root.exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--run-dir", "x"], "takes no --run-dir"), (["--resume", "x"], "train command again")],
)
def test_cli_ray_refuses_single_run_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert main(["train", "mnist", "--budget", "smoke", "--ray", *extra]) == 2
    assert message in capsys.readouterr().err


# --- on a local Ray instance ----------------------------------------------------------------


@pytest.fixture(scope="module")
def local_ray() -> Any:
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_smoke_grid_then_second_invocation_skips(local_ray: Any, tmp_path: Path) -> None:
    result = run_grid("mnist", budget="smoke", root=tmp_path)
    assert result.ok and [c.state for c in result.cells] == ["finished", "finished"]
    folders = sorted(p.parent for p in tmp_path.rglob("eval.json"))
    # the local runner's layout: root/experiment/cell/seed-time
    assert [p.relative_to(tmp_path).parts[:2] for p in folders] == [
        ("mnist", "cnn"),
        ("mnist", "relational"),
    ]
    for cell in result.cells:
        assert json.loads((cell.path / "status.json").read_text())["state"] == "finished"
        assert "test_accuracy" in cell.result
    again = run_grid("mnist", budget="smoke", root=tmp_path)
    assert [c.state for c in again.cells] == ["skipped", "skipped"]
    assert sorted(p.parent for p in tmp_path.rglob("config.yml")) == folders


def test_failed_cell_is_retried_reported_then_resumed(
    local_ray: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(write_config(tmp_path, CARTPOLE))
    root = tmp_path / "runs"
    first = run_grid(config, root=root)
    assert first.ok
    # seed 1 died during its final test, and a live process still holds its folder
    cut = first.cells[1].path
    (cut / "eval.json").unlink()
    status = json.loads((cut / "status.json").read_text())
    (cut / "status.json").write_text(json.dumps({**status, "state": "failed"}))
    command = [
        "train",
        config,
        "--budget",
        "full",
        "--ray",
        "--max-retries",
        "1",
        "--root",
        str(root),
    ]
    with RunLock(cut):
        code = main(command)
    out = capsys.readouterr().out
    assert code == 1
    assert "2 cells: 0 trained, 1 already finished (skipped), 1 failed" in out
    assert f"FAILED grid seed 1 after 2 attempt(s): {cut}: RunLockedError" in out
    assert f"{cut}: attempt 1 failed (RunLockedError" in out  # the driver's lines (log records)
    assert not (cut / "eval.json").exists()
    # the lock is gone: the same command resumes the cell in its own folder
    assert main(command) == 0
    assert "2 cells: 1 trained, 1 already finished (skipped), 0 failed" in capsys.readouterr().out
    assert json.loads((cut / "status.json").read_text())["state"] == "finished"
    assert (cut / "eval.json").is_file()
    assert len(list(root.rglob("config.yml"))) == 2  # no new folder


def test_negative_retries_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="max_retries must be an integer >= 0"):
        run_grid("mnist", budget="smoke", root=tmp_path, max_retries=-1)
    assert not tmp_path.joinpath("mnist").exists()


# --- what the person running allowed travels with each task (issue 46) ---------------------


def test_a_task_gets_the_drivers_allowed_imports_as_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task on another node lacks the driver's environment: the ``--allow-import``
    packages are its arguments (as ``--trust-teacher`` files are), never the cell's config."""
    from zoo.ray_grid import _train_cell
    from zoo.registry import ALLOW_IMPORT_ENV

    name = "wrappers_ray_46"
    (tmp_path / f"{name}.py").write_text(
        "import gymnasium\nclass Wrap(gymnasium.Wrapper):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(ALLOW_IMPORT_ENV, name)
    body = {**CLI_CARTPOLE, "eval": {"final_episodes": 2}, "env_wrapper": [f"{name}:Wrap"]}
    (run,) = load_runs(write_config(tmp_path, body))
    monkeypatch.setenv(ALLOW_IMPORT_ENV, "")  # a node without the driver's environment
    folder = tmp_path / "cell"
    folder.mkdir()
    with pytest.raises(ConfigError, match=f"--allow-import {name}"):
        _train_cell(run, str(folder), False, "cmd", None)
    assert not any(folder.iterdir())
    result = _train_cell(run, str(folder), False, "cmd", None, allow_import=[name])
    assert result["n_episodes"] == 2
