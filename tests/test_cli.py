"""Tests for zoo.cli (``attn-zoo``) through ``main([...])`` and the console script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from stable_baselines3.common.callbacks import BaseCallback

import zoo
import zoo.cli
import zoo.cli_commands
import zoo.config
from zoo.cli import main

# A cheap PPO run whose episodes can count as solved (terminated before the time limit).
CARTPOLE: dict[str, Any] = {
    "algo": "ppo",
    "env": "CartPole-v1",
    "policy": "MlpPolicy",
    "n_steps": 32,
    "batch_size": 32,
    "n_epochs": 1,
    "n_timesteps": 64,
    "policy_kwargs": {"net_arch": [8]},
    "eval": {"final_episodes": 3, "success": "terminated"},
}


def write_config(tmp_path: Path, name: str, body: dict[str, Any]) -> Path:
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump({name: body}, sort_keys=False))
    return path


def yaml_documents(text: str) -> list[dict[str, Any]]:
    """The YAML configs ``show`` printed (each starts with a ``# name (budget ...)`` line)."""
    defaults = ("#   ", "# defaults of the keys", "# this folder:")  # comments under a run
    text = "\n".join(line for line in text.splitlines() if not line.startswith(defaults))
    chunks = [c for c in text.split("\n# ") if c.strip() and not c.startswith("# ...")]
    return [yaml.safe_load(chunk.split("\n", 1)[1]) for chunk in chunks]


class InterruptAt(BaseCallback):
    def __init__(self, step: int) -> None:
        super().__init__()
        self.step = step

    def _on_step(self) -> bool:
        if self.num_timesteps >= self.step:
            raise KeyboardInterrupt
        return True


# --- list and show ----------------------------------------------------------------------------


def test_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == sorted(zoo.list_experiments())
    doorkey = next(line for line in lines if line.startswith("doorkey "))
    assert doorkey.split()[1] == "double_dqn"
    assert "runs]" not in doorkey


def test_list_cells(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--cells", "--budget", "smoke"]) == 0
    out = capsys.readouterr().out
    for name in zoo.list_experiments():
        n = len(zoo.load_runs(name, budget="smoke"))
        line = next(line for line in out.splitlines() if line.startswith(f"{name} "))
        assert line.endswith(f"[{n} runs]")


def test_show_with_budget_and_set(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "doorkey", "--budget", "smoke", "--set", "learning_rate=2e-3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# doorkey (budget smoke)")
    (doc,) = yaml_documents(out)
    body = doc["doorkey"]
    smoke = zoo.load_runs("doorkey", budget="smoke")[0]
    assert body["learning_rate"] == 0.002
    assert body["n_timesteps"] == smoke.body["n_timesteps"]
    assert body["eval"]["freq"] == smoke.eval.freq


def test_show_lists_the_defaults_of_keys_the_config_leaves_out(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["show", "cartpole_pi_x0", "--budget", "smoke", "--set", "n_workers=3"]) == 0
    out = capsys.readouterr().out
    comments = [line for line in out.splitlines() if line.startswith("#   ")]
    assert "#   es: cmaes  # the search: CMA-ES, or PGPE in the same loop" in comments
    assert not any(line.startswith("#   n_workers:") for line in comments)  # set here
    assert not any(line.startswith("#   population:") for line in comments)  # the config's


def test_show_a_run_folder_names_the_budget_and_cell_it_ran(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the folder's config.yml is resolved (no budgets, no matrix): status.json says from what
    body = {**CARTPOLE, "matrix": {"gamma": [0.9]}, "budgets": {"cpu": {"n_timesteps": 32}}}
    run = zoo.train(write_config(tmp_path, "cartpole", body), budget="cpu", root=tmp_path)
    assert main(["show", str(run.path)]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert header.startswith(f"# cartpole/{run.config.tag} (budget cpu), resolved by attn-zoo")
    assert run.config.tag


def test_show_opens_a_run_folder_whose_warm_start_is_gone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a committed folder's `init` may name a run on another machine: the trained folder opens
    first = zoo.train("cartpole_fnn", budget="smoke", root=tmp_path / "a")
    run = zoo.train(
        "cartpole_fnn", budget="smoke", overrides={"init": str(first.path)}, root=tmp_path / "b"
    )
    shutil.rmtree(first.path)
    assert main(["show", str(run.path)]) == 0
    out = capsys.readouterr().out
    assert f"\n# this folder:\n#   init: {first.path} is not here (read when the run trained" in out
    assert "holds no trained model" not in out
    assert yaml_documents(out)[0]["cartpole_fnn"]["init"] == str(first.path)

    # weights that do not fit the config: the folder does not open (one line, exit 2)
    config = run.path / "config.yml"
    config.write_text(config.read_text().replace("hidden: 16", "hidden: 8"))
    assert main(["show", str(run.path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "does not fit" in err

    # no weights at all (an imported agent is committed without them): shown, and said
    config.write_text(config.read_text().replace("hidden: 8", "hidden: 16"))
    for name in ("model.pt", "best_model.pt"):
        (run.path / name).unlink()
    assert main(["show", str(run.path)]) == 0
    assert "#   " + f"{run.path} holds no trained model" in capsys.readouterr().out


def test_closed_pipe_stops_quietly() -> None:
    # `attn-zoo show ... | head -1` where the reader has already left: stdout is a pipe whose
    # read end is closed before the command starts, so its first write meets a closed pipe
    # whatever the timing (a reader that leaves mid-output raced the command's final flush).
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            ["attn-zoo", "show", "atari_nonlocal", "--budget", "full"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 141
    assert proc.stderr.decode() == ""


@pytest.mark.parametrize("stderr", ["own", "into-stdout"], ids=["stdout", "stdout-and-stderr"])
def test_a_reader_leaving_train_interrupts_the_run(tmp_path: Path, stderr: str) -> None:
    # `attn-zoo train ... | head -3` and `... 2>&1 | head -3`: exit 141, the run resumable
    # (status interrupted with the resume command), as on Ctrl-C; not a failed run.
    argv = ["attn-zoo", "train", "doorkey", "--budget", "smoke", "--root", str(tmp_path)]
    proc = subprocess.Popen(
        [*argv, "--progress-every", "1e-9"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if stderr == "own" else subprocess.STDOUT,
    )
    assert proc.stdout is not None
    for _ in range(3):
        proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode() if proc.stderr is not None else ""
    assert proc.wait(timeout=120) == 141
    (folder,) = (tmp_path / "doorkey").iterdir()
    status = json.loads((folder / "status.json").read_text())
    resume = f"attn-zoo train --resume {folder}"
    assert status["state"] == "interrupted"
    assert status["reason"] == f"output closed; to resume: {resume}"
    if stderr == "own":
        assert err == f"attn-zoo: stdout closed; to resume: {resume}\n"


def test_other_broken_pipe_is_a_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    # A pipe other than stdout (an evaluator worker's) breaking is not a reader that left.
    def broken(args: Any) -> int:
        raise BrokenPipeError("worker pipe")

    monkeypatch.setattr(zoo.cli_commands, "cmd_list", broken)
    assert main(["list"]) == 1


def test_show_matrix_limit(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "atari_nonlocal", "--budget", "smoke", "--limit", "2"]) == 0
    out = capsys.readouterr().out
    n = len(zoo.load_runs("atari_nonlocal", budget="smoke"))
    assert out.count("# atari_nonlocal/") == 2
    assert f"# ... and {n - 2} more runs ({n} in all)" in out
    assert main(["show", "atari_nonlocal", "--budget", "smoke", "--set", "variant=all"]) == 0
    (doc,) = yaml_documents(capsys.readouterr().out)
    positions = doc["atari_nonlocal"]["policy_kwargs"]["features_extractor_kwargs"]["positions"]
    assert positions == ["conv1", "conv2", "conv3", "fc"]


# --- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "must_contain"),
    [
        (["show", "doorkey", "--set", "n_timestep=3"], ["'n_timestep'", "'n_timesteps'"]),
        (["show", "doorkey", "--set", "n_envs=two"], ["'n_envs'"]),
        (["show", "doorkey", "--set", "eval.selct=x"], ["'eval.selct'"]),
        (["show", "doorkey", "--budget", "smok"], ["'smok'", "smoke"]),
        (["show", "doorky"], ["'doorky'", "'doorkey'"]),
        (["show", "doorkey", "--set", "learning_rate"], ["key=value"]),
        (["show", "atari_nonlocal", "--set", "variant=fcc"], ["'fcc'", "'fc'"]),
        (["train"], ["NAME"]),
        (["train", "atari_nonlocal", "--budget", "smoke", "--set", "game=Pongg"], ["Pongg"]),
        (["show", "atari_nonlocal", "--set", "game=Breakot"], ["Breakot", "Breakout"]),
        (["evaluate", "/nonexistent/run"], ["/nonexistent/run does not exist"]),
        (["evaluate", str(Path(__file__).parent / "_zoo.py")], ["not a run folder"]),
    ],
    ids=[
        "unknown-key",
        "wrong-type",
        "unknown-eval-key",
        "unknown-budget",
        "unknown-experiment",
        "set-without-value",
        "unknown-variant",
        "train-without-name",
        "unknown-game",
        "show-unknown-game",
        "evaluate-does-not-exist",
        "evaluate-not-a-run",
    ],
)
def test_errors_exit_2_with_a_message_naming_the_key(
    capsys: pytest.CaptureFixture[str], argv: list[str], must_contain: list[str]
) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("attn-zoo: error: ")
    for text in must_contain:
        assert text in captured.err
    assert "Traceback" not in captured.err


def test_misfit_wrapper_exits_2_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, "misfit", {**CARTPOLE, "env_wrapper": ["PatchObservation"]})
    root = tmp_path / "runs"
    assert main(["train", str(config), "--root", str(root), "--no-progress"]) == 2
    assert "PatchObservation" in capsys.readouterr().err
    assert not root.exists()


def test_usage_errors_exit_2() -> None:
    with pytest.raises(SystemExit) as err:
        main(["frobnicate"])
    assert err.value.code == 2


# --- train and evaluate -----------------------------------------------------------------------


def test_train_smoke_into_root(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["train", "mnist", "--budget", "smoke", "--root", str(tmp_path), "--no-progress"]
    assert main(argv) == 0
    plan, *lines = capsys.readouterr().out.splitlines()
    cells = zoo.load_runs("mnist", budget="smoke")
    assert plan.startswith(f"mnist: budget smoke, {len(cells)} runs of ")
    assert len(lines) == len(cells)
    for line, cell in zip(lines, cells, strict=True):
        folder, _, headline = line.partition(": ")
        run = zoo.load(folder)
        assert Path(folder).parent == tmp_path / "mnist" / cell.tag
        assert run.status["state"] == "finished"
        assert headline == f"test accuracy {run.eval['test_accuracy']:.1%}"
        # command.txt records the command that was run, not the host process's argv.
        assert (Path(folder) / "command.txt").read_text().strip() == "attn-zoo " + " ".join(argv)


def test_train_and_evaluate_print_success(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, "cartpole", CARTPOLE)
    assert main(["train", str(config), "--root", str(tmp_path), "--no-progress"]) == 0
    plan, line = capsys.readouterr().out.strip().splitlines()
    # the budget said first, even for one run (a config without budgets runs as written)
    assert plan == (
        f"{config}: budget full (the default; --budget smoke, cpu or full), 1 run of 64 steps"
    )
    folder = line.split(": ")[0]
    assert "deterministic success " in line and "deterministic return " in line

    assert main(["evaluate", folder]) == 0
    out = capsys.readouterr().out.strip()
    assert out == line  # the same test episodes give the same headline
    rate = zoo.load(folder).eval["policies"]["deterministic"]["success_rate"]
    assert f"deterministic success {rate:.0%}" in out

    assert main(["evaluate", folder, "--json", "--episodes", "2", "--which", "last"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["model"] == "model.zip"
    assert result["policies"]["deterministic"]["n_episodes"] == 2
    assert "policies_episodes" not in result  # per-episode lists are left out
    assert result["n_episodes"] == 2  # ... but not the episode count

    # Other policy modes than the run's, tested on the same episodes; never written.
    argv = ["evaluate", folder, "--json", "--episodes", "2", "--which", "last", "--policy"]
    argv += ["stochastic"]
    assert main([*argv, "--policy", "0.5", "--policy", "deterministic"]) == 0
    other = json.loads(capsys.readouterr().out)
    assert list(other["policies"]) == ["stochastic", "0.5", "deterministic"]
    assert other["policies"]["deterministic"] == result["policies"]["deterministic"]
    before = (Path(folder) / "eval.json").read_bytes()
    for bad, message in ((["--policy", "greedy"], "'greedy'"), (["--policy", "2"], "epsilon"),
                         (["--policy", "stochastic", "--write"], "not written")):  # fmt: skip
        assert main(["evaluate", folder, *bad]) == 2
        assert message in capsys.readouterr().err
    assert (Path(folder) / "eval.json").read_bytes() == before


def test_robustness_writes_tables_and_refuses_what_the_env_cannot_take(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = zoo.train(write_config(tmp_path, "cartpole", CARTPOLE), root=tmp_path).path
    out = tmp_path / "tables"
    argv = ["robustness", str(folder), "--sweep", "shuffle", "--sweep", "reshuffle=2,5"]
    assert main([*argv, "--episodes", "2", "--seed", "3", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    names = ["reshuffle.csv", "reshuffle.md", "reshuffle.png", "shuffle.csv", "shuffle.md"]
    assert sorted(p.name for p in out.iterdir()) == ["cells", *names, "shuffle.png"]
    assert len(list((out / "cells").glob("*/*.json"))) == 4  # one per finished cell
    assert (out / "shuffle.md").read_text() in printed  # the table, then the file paths
    assert printed.splitlines()[-1] == str(out / "reshuffle.png")
    assert "| agent | reshuffle every 2 | reshuffle every 5 |" in printed
    # read back, or played again with --fresh: the same episodes, the same tables
    table = (out / "reshuffle.md").read_text()
    for again in ([], ["--fresh"]):
        assert main([*argv, "--episodes", "2", "--seed", "3", "--out", str(out), *again]) == 0
        capsys.readouterr()
        assert (out / "reshuffle.md").read_text() == table
    # Spec errors and perturbations the env refuses exit 2 before any episode or file.
    assert main(["robustness", str(folder), "--sweep", "shuffle", "--sweep", "shufle"]) == 2
    assert "Did you mean 'shuffle'" in capsys.readouterr().err
    image = tmp_path / "image_run"
    image.mkdir()
    body = {**CARTPOLE, "env": "CarRacing-v3", "policy": "CnnPolicy", "policy_kwargs": {}}
    write_config(image, "config", body)  # a run folder's config.yml, never trained
    assert main(["robustness", str(image), "--sweep", "shuffle", "--sweep", "channels"]) == 2
    err = capsys.readouterr().err
    assert "CarRacing-v3 cannot take the condition 'duplicated x2, shuffled'" in err
    assert "Traceback" not in err
    assert sorted(p.name for p in image.iterdir()) == ["config.yml"]


def test_robustness_takes_latest_names_rows_by_folder_and_spares_tracked_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from _zoo import git_changes, tracked_copy

    folder = zoo.train(write_config(tmp_path, "cartpole", CARTPOLE), root=tmp_path).path
    repo = tmp_path / "repo"
    tracked_copy(folder, repo, "results/cartpole_pi/pi")
    monkeypatch.chdir(repo)
    argv = ["robustness", "results/cartpole_pi/latest", "--sweep", "shuffle", "--episodes", "1"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "\n| pi | " in printed  # the folder's name, not the config's (cartpole)
    out = Path("runs/results/cartpole_pi/pi/robustness")
    assert printed.splitlines()[-1] == str(out / "shuffle.png") and (out / "shuffle.md").is_file()
    assert git_changes(repo) == ""


def test_a_cell_the_agent_cannot_play_is_not_exit_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An MLP over CartPole's 4 inputs cannot take 2 of them: the table says n/a, and so do
    # the exit status and stderr, with the whole first line of the reason.
    folder = zoo.train(write_config(tmp_path, "cartpole", CARTPOLE), root=tmp_path).path
    argv = ["robustness", str(folder), "--sweep", "occlusion=0,0.5", "--episodes", "1"]
    assert main([*argv, "--out", str(tmp_path / "tables")]) == 1
    captured = capsys.readouterr()
    assert "| n/a |" in captured.out
    assert captured.err.startswith("attn-zoo: 1 of 2 cells could not be played: ")
    assert "occlusion 0.5: n/a: " in captured.err and len(captured.err.splitlines()) == 1


def test_train_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, "cartpole", CARTPOLE)
    with pytest.raises(KeyboardInterrupt):
        zoo.train(config, root=tmp_path, callbacks=[InterruptAt(40)])
    (folder,) = (tmp_path / "cartpole").iterdir()
    assert main(["train", "--resume", str(folder), "--no-progress"]) == 0
    plan, line = capsys.readouterr().out.splitlines()
    assert plan == f"resuming {folder}: budget full, 1 run of 64 steps"
    assert line.startswith(f"{folder}: ")
    assert zoo.load(folder).status["state"] == "finished"
    assert main(["train", "--resume", str(folder)]) == 2
    assert "finished" in capsys.readouterr().err


def test_keyboard_interrupt_exits_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(zoo, "train_all", interrupted)
    assert main(["train", "doorkey", "--budget", "smoke", "--no-progress"]) == 130
    assert "nothing to resume" in capsys.readouterr().err  # no run folder was made


# --- the console script -----------------------------------------------------------------------


def test_console_script_lists_experiments() -> None:
    exe = shutil.which("attn-zoo")
    assert exe is not None, "attn-zoo is not on PATH (pip install -e .)"
    done = subprocess.run([exe, "list"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert {line.split()[0] for line in done.stdout.splitlines()} == set(zoo.list_experiments())
    bad = subprocess.run(
        [exe, "show", "doorky"], capture_output=True, text=True, timeout=120, check=False
    )
    assert bad.returncode == 2 and "'doorkey'" in bad.stderr


def test_sigterm_checkpoints_and_resume_finishes(tmp_path: Path) -> None:
    """A background job stopped with SIGTERM saves like Ctrl-C and resumes where it was."""
    import signal
    import sys
    import time

    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "zoo.cli", "train", "cartpole_fnn", "--budget", "smoke",
           "--set", "n_generations=100000", "--run-dir", str(run_dir)]  # fmt: skip
    # start_new_session + an ignored SIGINT: what a shell's `cmd &` gives a background job.
    job = subprocess.Popen(
        cmd, start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)
    )
    status = run_dir / "status.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if status.exists() and json.loads(status.read_text()).get("generation", 0) >= 2:
            break
        time.sleep(0.2)
    job.send_signal(signal.SIGTERM)
    assert job.wait(timeout=60) == 130
    state = json.loads(status.read_text())
    assert state["state"] == "interrupted" and state["generation"] >= 2
    config = run_dir / "config.yml"
    body = yaml.safe_load(config.read_text())
    body["cartpole_fnn"]["n_generations"] = state["generation"] + 1
    config.write_text(yaml.safe_dump(body))
    assert main(["train", "--resume", str(run_dir)]) == 0
    assert json.loads(status.read_text())["generation"] == state["generation"] + 1


# --- what users hit first ---------------------------------------------------------------------


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as err:
        main(["--version"])
    assert err.value.code == 0
    assert capsys.readouterr().out.strip() == f"attn-zoo {zoo.__version__}"
    assert zoo.__version__[0].isdigit()


def test_help_loads_no_heavy_module() -> None:
    import sys

    code = (
        "import sys, contextlib, io, zoo.cli\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    zoo.cli.main(['--help'])\n"
        "print(sorted(m for m in ('torch', 'gymnasium', 'stable_baselines3', 'numpy')"
        " if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_unexpected_error_is_reported_with_its_log_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def broken(args: Any) -> int:
        raise KeyError("boom")

    monkeypatch.setattr(zoo.cli_commands, "cmd_maps", broken)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    assert main(["maps", "runs/x"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.splitlines()[0] == "attn-zoo: internal error: KeyError: 'boom'"
    assert "run folder: runs/x" in err
    (log,) = tmp_path.glob("attn-zoo-error-*.log")
    assert f"traceback: {log}" in err
    assert "KeyError: 'boom'" in log.read_text() and "maps runs/x" in log.read_text()


def test_an_internal_value_error_is_a_bug_with_its_traceback_not_a_user_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A ValueError from deep inside (numpy's own) is no mistake of the user's: exit 1 and a
    # traceback file, not exit 2 and one line blaming the input.
    def broken(path: Any) -> dict:
        return np.broadcast_to(np.zeros(2), (3,))  # ValueError: operands could not be ...

    monkeypatch.setattr(zoo.config, "read_family", broken)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    assert main(["list"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("attn-zoo: internal error: ValueError: ")
    (log,) = tmp_path.glob("attn-zoo-error-*.log")
    assert f"traceback: {log}" in err
    assert "Traceback" in log.read_text() and "broadcast" in log.read_text()


@pytest.mark.parametrize(
    "argv",
    [
        ["list", "--allow-import", "not-a-package"],  # zoo.registry's check
        ["train", "cartpole_fnn", "--budget", "smoke", "--progress-every", "0"],  # zoo.progress
    ],
)
def test_checks_of_user_input_below_the_cli_are_user_errors(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("attn-zoo: error: ") and len(err.splitlines()) == 1, err


def test_user_errors_are_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def bad(args: Any) -> int:
        raise zoo.ConfigError("first part\n  second part")

    monkeypatch.setattr(zoo.cli_commands, "cmd_list", bad)
    assert main(["list"]) == 2
    assert capsys.readouterr().err == "attn-zoo: error: first part second part\n"


def test_a_grid_at_the_default_budget_needs_consent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, "grid", {**CARTPOLE, "matrix": {"seed": [0, 1]}})
    root = tmp_path / "runs"
    assert main(["train", str(config), "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert "is 2 runs of 64 steps, 128 env steps in all" in err and "--budget full" in err
    assert not root.exists()
    assert main(["train", str(config), "--root", str(root), "--yes", "--no-progress"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        f"{config}: budget full (the default; --budget smoke, cpu or full), 2 runs of 64 steps, "
        "128 env steps in all"
    )
    assert len(list((root / "grid").iterdir())) == 2


def test_the_default_budget_is_a_laptops_and_said_first(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `attn-zoo train doorkey`: the cpu budget, not full, and the first line says so.
    started: dict[str, Any] = {}

    def train_all(name: str, **kwargs: Any) -> list[Any]:
        started.update(kwargs)
        return []

    monkeypatch.setattr(zoo, "train_all", train_all)
    assert main(["train", "doorkey", "--no-progress"]) == 0
    steps = zoo.load_runs("doorkey", budget="cpu")[0].body["n_timesteps"]
    first = capsys.readouterr().out.splitlines()[0]
    assert first == (
        f"doorkey: budget cpu (the default; --budget smoke, cpu or full), 1 run of {steps:,} steps"
    )
    assert started["budget"] == "cpu"
    train_help = subprocess.run(
        ["attn-zoo", "train", "--help"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert "default cpu" in " ".join(train_help.split())
    assert main(["show", "doorkey"]) == 0
    assert capsys.readouterr().out.startswith("# doorkey (budget cpu)")


def test_without_a_terminal_the_run_folder_comes_first_then_progress_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, "cartpole", CARTPOLE)
    argv = ["train", str(config), "--root", str(tmp_path), "--progress-every", "1e-9"]
    assert main(argv) == 0  # capsys' stdout is not a TTY
    out = capsys.readouterr().out.splitlines()
    (folder,) = (tmp_path / "cartpole").iterdir()
    assert out[1] == f"training, run folder: {folder}"
    steps = [line for line in out if line.startswith("[cartpole] ") and "steps/s" in line]
    assert steps and "/64 steps (" in steps[0] and "ETA" in steps[0]
    assert out[-2].startswith("[cartpole] done: 64/64 steps in ")
    assert out[-1].startswith(f"{folder}: ")


def test_interrupt_names_the_real_run_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, "cartpole", CARTPOLE)
    real = zoo.train_all

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        return real(*args, **{**kwargs, "callbacks": [InterruptAt(40)]})

    monkeypatch.setattr(zoo, "train_all", interrupted)
    assert main(["train", str(config), "--root", str(tmp_path), "--no-progress"]) == 130
    (folder,) = (tmp_path / "cartpole").iterdir()
    assert f"`attn-zoo train --resume {folder}`" in capsys.readouterr().err


def test_run_arguments_name_folders_experiments_and_latest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    experiment = tmp_path / "runs" / "doorkey"
    old, new = experiment / "0-20250101-000000", experiment / "cell" / "1-20250102-000000"
    for i, run in enumerate((old, new)):
        run.mkdir(parents=True)
        (run / "config.yml").write_text("x: {}\n")
        os.utime(run / "config.yml", (1_000 + i, 1_000 + i))
    assert zoo.cli_commands.resolve_run(old) == old
    assert capsys.readouterr().err == ""
    assert zoo.cli_commands.resolve_run(experiment) == new
    assert f"the latest run in {experiment} (of 2): {new}" in capsys.readouterr().err
    assert zoo.cli_commands.resolve_run(f"{experiment}/latest") == new
    assert zoo.cli_commands.resolve_run(f"{new.parent}/latest") == new
    with pytest.raises(zoo.ConfigError, match="does not exist"):
        zoo.cli_commands.resolve_run(experiment / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(zoo.ConfigError, match="holds none"):
        zoo.cli_commands.resolve_run(tmp_path / "empty")


# --- signals at the edges of a run -----------------------------------------------------------


def test_sigterm_before_any_run_folder_claims_no_checkpoint(tmp_path: Path) -> None:
    """SIGTERM as the plan line appears (imports and the dry build still to come): no run
    folder exists, and the message must not send the user to --resume one."""
    import signal

    from _train_process import TrainProcess

    root = tmp_path / "runs"
    job = TrainProcess([str(write_config(tmp_path, "cartpole", CARTPOLE)), "--root", str(root)])
    job.wait_for_line("1 run of 64 steps")  # the plan line
    job.signal(signal.SIGTERM)
    code, err = job.finish()
    assert code == 130, err
    assert not list(root.rglob("config.yml")), "the SIGTERM came after the run started"
    assert "nothing to resume" in err
    assert "checkpoint was saved" not in err and "--resume" not in err


def test_a_second_ctrl_c_while_a_cmaes_run_exits_keeps_exit_130(tmp_path: Path) -> None:
    """The first SIGINT stops the run at once (its checkpoints are per generation); the second
    comes while the process shuts down, when Python has put back the default SIGINT action:
    it used to end the process by the signal (exit -2)."""
    import signal
    import time

    from _train_process import TrainProcess

    body = {
        "algo": "cmaes",
        "env": "attn_envs/CartPoleSwingUpHarder-v0",
        "policy": "fnn",
        "n_generations": 1000,
        "population": 8,
        "repeats": 1,
        "max_episode_steps": 50,
    }
    job = TrainProcess([str(write_config(tmp_path, "es", body)), "--root", str(tmp_path)])
    job.wait_for_step(2)  # "[es] 2/1,000 generations"
    job.signal(signal.SIGINT)
    job.wait_for_line("interrupted: a checkpoint was saved", stream="err")
    time.sleep(0.02)  # into the shutdown
    job.signal(signal.SIGINT)
    code, err = job.finish()
    assert code == 130, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("algo", "module", "model", "field", "body", "expected"),
    [
        ("cmaes", "cmaes_trainer", "CMAESKeys", "population", {"n_generations": 3},
         "3 generations x 160 episodes"),  # 10 x the default repeats, 16
        ("apg", "apg_trainer", "APGKeys", "batch_size", {"n_updates": 2},
         "2 updates of 10 x 100 steps"),
        ("dagger", "dagger_trainer", "DAggerKeys", "n_envs", {"n_rounds": 4},
         "4 rounds x 10 episodes"),
        ("classifier", "classifier_trainer", "ClassifierKeys", "iterations", {},
         "10 iterations"),  # the trainer's default, not 0
    ],
)  # fmt: skip
def test_the_run_size_line_reads_the_trainers_defaults(
    monkeypatch: pytest.MonkeyPatch,
    algo: str,
    module: str,
    model: str,
    field: str,
    body: dict[str, Any],
    expected: str,
) -> None:
    """The train command's size line takes a key the config leaves out from the trainer's
    config model, so a default changed there is the default the line counts."""
    import dataclasses
    import importlib

    trainer_module = importlib.import_module(f"zoo.trainers.{module}")
    original = getattr(trainer_module, model)
    changed = dataclasses.make_dataclass(
        model,
        [(field, int, dataclasses.field(default=10))],
        bases=(original,),
        frozen=True,
    )
    monkeypatch.setattr(trainer_module, model, changed)
    run = zoo.config.RunConfig("x", "", "full", {"algo": algo, **body}, zoo.config.EvalConfig())
    assert zoo.cli_commands._run_size(run) == (0, expected)
