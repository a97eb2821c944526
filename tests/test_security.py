"""Loading a stranger's run folder, checkpoint or config never runs code (issue 16).

Every payload here writes a marker file when it runs; each test checks the payload is live
where that matters (plain SB3 loading does run it) and that the zoo refuses or ignores it
with a clear error, leaving no marker.
"""

from __future__ import annotations

import base64
import json
import os
import resource
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from stable_baselines3 import PPO
from test_config_checks import billion_laughs

import zoo.cli
from zoo.config import ConfigError

CARTPOLE_PPO: dict[str, Any] = {
    "algo": "ppo",
    "env": "CartPole-v1",
    "policy": "MlpPolicy",
    "n_envs": 1,
    "n_steps": 32,
    "batch_size": 32,
    "n_epochs": 1,
    "n_timesteps": 64,
    "save_freq": 32,
    "normalize": True,
    "policy_kwargs": {"net_arch": [8]},
    "eval": {"freq": 0, "final_episodes": 2},
}


def payload(marker: Path) -> bytes:
    """A pickle that runs ``os.system("touch <marker>")`` when unpickled."""
    module, name, command = b"os", b"system", f"touch {marker}".encode()
    return (
        b"\x80\x04"
        + b"\x8c" + bytes([len(module)]) + module
        + b"\x8c" + bytes([len(name)]) + name
        + b"\x93"
        + b"\x8c" + bytes([len(command)]) + command
        + b"\x85R."
    )  # fmt: skip


def write_config(folder: Path, name: str, body: dict[str, Any]) -> Path:
    path = folder / f"{name}.yml"
    path.write_text(yaml.safe_dump({name: body}, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("security")
    return zoo.train(write_config(folder, "cart", CARTPOLE_PPO), root=folder / "runs").path


def poison_zip(file: Path, marker: Path) -> None:
    """Replace the pickled ``policy_class`` entry of an SB3 zip's data with the payload."""
    with zipfile.ZipFile(file) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    data = json.loads(entries["data"])
    data["policy_class"][":serialized:"] = base64.b64encode(payload(marker)).decode()
    entries["data"] = json.dumps(data).encode()
    with zipfile.ZipFile(file, "w") as archive:
        for name, content in entries.items():
            archive.writestr(name, content)


def test_poisoned_model_zip_is_live_for_sb3_but_not_run_by_evaluate(
    trained: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(trained, run_dir)
    marker = tmp_path / "pwned"
    expected = zoo.evaluate(run_dir)["policies"]
    poison_zip(run_dir / "model.zip", marker)
    with pytest.raises(Exception):
        PPO.load(run_dir / "model.zip")
    assert marker.exists()  # the payload is live for plain SB3 loading
    marker.unlink()
    assert zoo.evaluate(run_dir)["policies"] == expected  # tensors only: same figures
    assert zoo.load(run_dir).model("last").num_timesteps == 64
    assert not marker.exists()


def test_poisoned_checkpoint_is_not_run_on_resume(trained: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(trained, run_dir)
    status = json.loads((run_dir / "status.json").read_text())
    (run_dir / "status.json").write_text(json.dumps({**status, "state": "interrupted"}))
    marker = tmp_path / "pwned"
    poison_zip(run_dir / "checkpoints" / "last.zip", marker)
    run = zoo.resume(run_dir)
    assert run.status["state"] == "finished" and not marker.exists()


@pytest.mark.parametrize(
    ("name", "what"),
    [
        ("checkpoints/last_replay_buffer.pkl", "resume"),
        ("checkpoints/last_vecnormalize.pkl", "resume"),
        ("vecnormalize.pkl", "evaluate"),
    ],
)
def test_pickled_buffers_and_statistics_are_refused(
    trained: Path, tmp_path: Path, name: str, what: str
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(trained, run_dir)
    marker = tmp_path / "pwned"
    (run_dir / name).write_bytes(payload(marker))
    (run_dir / name).with_suffix(".npz").unlink(missing_ok=True)
    if what == "resume":
        status = json.loads((run_dir / "status.json").read_text())
        (run_dir / "status.json").write_text(json.dumps({**status, "state": "interrupted"}))
        with pytest.raises(ConfigError, match="pickled"):
            zoo.resume(run_dir)
    else:
        with pytest.raises(ConfigError, match="pickled VecNormalize"):
            zoo.evaluate(run_dir)
    assert not marker.exists()


def test_damaged_statistics_are_one_clear_error(trained: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(trained, run_dir)
    (run_dir / "vecnormalize.npz").write_bytes(b"not an npz")
    with pytest.raises(ConfigError, match=r"vecnormalize\.npz: not readable"):
        zoo.evaluate(run_dir)
    (run_dir / "model.zip").write_bytes(b"truncated")
    with pytest.raises(ConfigError, match=r"model\.zip: not a readable SB3 model"):
        zoo.evaluate(run_dir, which="last")


CMAES_FNN: dict[str, Any] = {
    "algo": "cmaes",
    "env": "attn_envs/CartPoleSwingUpHarder-v0",
    "policy": "fnn",
    "n_generations": 2,
    "population": 4,
    "repeats": 1,
    "max_episode_steps": 5,
    "eval": {"freq": 0, "final_episodes": 2},
}


@pytest.mark.parametrize(
    ("algo_body", "change"),
    [
        (CMAES_FNN, {"policy": "os:system", "policy_kwargs": {"command": "touch {marker}"}}),
        (CMAES_FNN, {"action_fn": "os:system"}),
        (CMAES_FNN, {"action_fn": "shutil:rmtree"}),
        (CARTPOLE_PPO, {"policy": "os:system"}),
        (CARTPOLE_PPO, {"algo": "os:system"}),
        (CARTPOLE_PPO, {"env_wrapper": [{"os:system": {"command": "touch {marker}"}}]}),
        (CARTPOLE_PPO, {"policy_kwargs": {"features_extractor_class": "os:system"}}),
        (CARTPOLE_PPO, {"policy_kwargs": {"activation_fn": "os:system"}}),
        (CARTPOLE_PPO, {"policy_kwargs": {"optimizer_class": "os:system"}}),
    ],
)
def test_configs_naming_arbitrary_callables_are_refused(
    tmp_path: Path, algo_body: dict[str, Any], change: dict[str, Any]
) -> None:
    marker = tmp_path / "pwned"
    body = json.loads(json.dumps({**algo_body, **change}).replace("{marker}", str(marker)))
    config = write_config(tmp_path, "evil", body)
    with pytest.raises(ConfigError, match=r"os:system|shutil:rmtree"):
        zoo.train(config, root=tmp_path / "runs")
    assert not marker.exists() and not (tmp_path / "runs").exists()


def test_dqn_replay_buffer_class_must_be_a_replay_buffer(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    body = {
        "algo": "dqn",
        "env": "CartPole-v1",
        "policy": "MlpPolicy",
        "n_timesteps": 10,
        "replay_buffer_class": "stable_baselines3.common.save_util:load_from_pkl",
    }
    with pytest.raises(ConfigError, match="not a subclass of ReplayBuffer"):
        zoo.train(write_config(tmp_path, "evil", body), root=tmp_path / "runs")
    assert not marker.exists()


def test_foreign_run_folder_config_cannot_call_code_on_evaluate(
    trained: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(trained, run_dir)
    marker = tmp_path / "pwned"
    config = yaml.safe_load((run_dir / "config.yml").read_text())
    body = next(iter(config.values()))
    body.update(algo="cmaes", policy="os:system", policy_kwargs={"command": f"touch {marker}"})
    for key in ("n_steps", "batch_size", "n_epochs", "n_envs", "normalize", "save_freq"):
        body.pop(key, None)
    body["n_generations"] = 1
    (run_dir / "config.yml").write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError, match="os:system"):
        zoo.evaluate(run_dir)
    assert not marker.exists()


def test_unsafe_yaml_tags_are_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.yml"
    evil.write_text(f"evil: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(ConfigError, match="unsafe or unknown YAML tag"):
        zoo.train(evil, root=tmp_path / "runs")
    assert not marker.exists()


# --- issue 46: no code from an attribute path, a teacher pickle or a named module ------------

LOADER = "stable_baselines3.common.policies:BasePolicy.load"  # torch.load(weights_only=False)


def stderr_line(capsys: pytest.CaptureFixture[str]) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attn-zoo: error:"), lines
    return lines[0]


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("how", ["config", "--set", "--ray"])
def test_an_es_policy_classmethod_never_loads_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    marker, evil = tmp_path / "pwned", tmp_path / "evil.pt"
    evil.write_bytes(payload(marker))
    body = dict(CMAES_FNN)
    if how == "config":
        body.update(policy=LOADER, policy_kwargs={"path": str(evil)})
    args = ["train", str(write_config(tmp_path, "evil", body)), "--root", str(tmp_path / "runs")]
    if how != "config":
        args += ["--set", f"policy={LOADER}", f"policy_kwargs.path={evil}"]
    if how == "--ray":
        args.append("--ray")
    assert zoo.cli.main([*args, "--no-progress"]) == 2
    assert f"policy '{LOADER}' names an attribute of 'BasePolicy'" in stderr_line(capsys)
    assert not marker.exists() and not (tmp_path / "runs").exists()


@pytest.fixture(scope="module")
def es_trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("es")
    return zoo.train(write_config(folder, "es", CMAES_FNN), root=folder / "runs").path


@pytest.mark.parametrize("command", ["evaluate", "maps", "resume"])
def test_a_shared_es_run_pointing_a_loader_at_its_own_model_is_refused_untouched(
    es_trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(es_trained, run_dir)
    marker = tmp_path / "pwned"
    (run_dir / "best_model.pt").write_bytes(payload(marker))
    config = yaml.safe_load((run_dir / "config.yml").read_text())
    next(iter(config.values())).update(
        policy=LOADER, policy_kwargs={"path": str(run_dir / "best_model.pt")}
    )
    (run_dir / "config.yml").write_text(yaml.safe_dump(config))
    status = json.loads((run_dir / "status.json").read_text())
    (run_dir / "status.json").write_text(json.dumps({**status, "state": "interrupted"}))
    before = folder_bytes(run_dir)
    args = {"evaluate": ["evaluate"], "maps": ["maps"], "resume": ["train", "--resume"]}[command]
    assert zoo.cli.main([*args, str(run_dir)]) == 2
    assert "never an attribute" in stderr_line(capsys)
    assert not marker.exists() and folder_bytes(run_dir) == before


BC_ZIP_TEACHER: dict[str, Any] = {
    "algo": "bc",
    "env": "CartPole-v1",
    "teacher_algo": "ppo",
    "n_timesteps": 64,
    "policy_kwargs": {"net_arch": [8]},
    "epochs": 1,
    "batch_size": 32,
    "eval": {"freq": 0, "final_episodes": 2},
}


def test_a_pickled_bc_teacher_loads_only_when_the_command_line_trusts_it(
    trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker, teacher = tmp_path / "pwned", tmp_path / "teacher.zip"
    shutil.copy(trained / "model.zip", teacher)
    poison_zip(teacher, marker)
    body = {**BC_ZIP_TEACHER, "teacher": str(teacher)}
    config, root = write_config(tmp_path, "bc", body), tmp_path / "runs"
    assert zoo.cli.main(["train", str(config), "--root", str(root)]) == 2
    assert f"add --trust-teacher {teacher}" in stderr_line(capsys)
    assert not marker.exists() and not root.exists()
    # The same teacher as a run folder is rebuilt from its config (tensors only): no trust needed.
    folder = tmp_path / "teacher_run"
    shutil.copytree(trained, folder)
    for model in folder.glob("*model.zip"):
        poison_zip(model, marker)
    body_folder = {**BC_ZIP_TEACHER, "teacher": str(folder)}
    run = zoo.train(write_config(tmp_path, "bc_folder", body_folder), root=root)
    assert run.status["state"] == "finished" and not marker.exists()
    with pytest.raises(Exception):  # named on the command line, it is unpickled: the payload runs
        zoo.train(config, root=root, trust_teacher=[teacher])
    assert marker.exists()
    marker.unlink()
    (failed,) = (root / "bc").iterdir()  # its config.yml names the teacher: still not trusted
    before = folder_bytes(failed)
    with pytest.raises(ConfigError, match="--trust-teacher"):
        zoo.resume(failed)
    assert not marker.exists() and folder_bytes(failed) == before


def test_teacher_statistics_are_npz_arrays_or_a_trusted_pickle(
    trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker, pickled = tmp_path / "pwned", tmp_path / "vecnormalize.pkl"
    pickled.write_bytes(payload(marker))
    teacher = trained / "model.zip"
    body = {**BC_ZIP_TEACHER, "teacher": str(teacher), "teacher_vecnormalize": str(pickled)}
    config, root = write_config(tmp_path, "bc", body), tmp_path / "runs"
    args = ["train", str(config), "--root", str(root), "--trust-teacher", str(teacher)]
    assert zoo.cli.main(args) == 2  # the .zip is trusted, its statistics pickle is not
    line = stderr_line(capsys)
    assert f"statistics file (give .npz arrays) {pickled} is a pickle" in line
    assert not marker.exists() and not root.exists()
    with pytest.raises(Exception):
        zoo.train(config, root=root, trust_teacher=[teacher, pickled])
    assert marker.exists()
    npz = {**body, "teacher_vecnormalize": str(trained / "vecnormalize.npz")}
    run = zoo.train(write_config(tmp_path, "bc", npz), root=root, trust_teacher=[teacher])
    assert run.status["state"] == "finished"


def test_a_module_a_config_names_is_imported_only_with_allow_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from zoo.registry import ALLOW_IMPORT_ENV

    marker, name = tmp_path / "imported", "evil_env_module_46"
    (tmp_path / f"{name}.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(ALLOW_IMPORT_ENV, "")
    monkeypatch.delitem(__import__("sys").modules, name, raising=False)
    root = tmp_path / "runs"
    for change in (
        {"env": f"{name}:CartPole-v1"},
        {"env_wrapper": [f"{name}:Wrapper"]},
        {"policy_kwargs": {"net_arch": [8], "activation_fn": f"{name}:Tanh"}},
    ):
        config = write_config(tmp_path, "evil", {**CARTPOLE_PPO, **change})
        assert zoo.cli.main(["train", str(config), "--root", str(root)]) == 2
        assert f"if you trust '{name}', add --allow-import {name}" in stderr_line(capsys)
        assert not marker.exists() and not root.exists()
    config = write_config(tmp_path, "ok", {**CARTPOLE_PPO, "env": f"{name}:CartPole-v1"})
    assert zoo.cli.main(["train", str(config), "--root", str(root), "--allow-import", name]) == 0
    assert marker.exists()


# -- issue 46, items 5-8: bombs, symlinks, the Ray address and memory (sec-dos) -----------


def attn_zoo(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The real CLI in a subprocess (``timeout`` seconds at most, 6 GiB of address space:
    a refusal that fails allocates no more than that)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, 6 * 2**30))

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [sys.executable, "-m", "zoo.cli", *args],
        capture_output=True, text=True, env=env, timeout=timeout, check=False,
        preexec_fn=limit,
    )  # fmt: skip


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The one ``attn-zoo: error:`` line of a refused command (exit 2, no traceback)."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("attn-zoo: error:"), proc.stderr[-2000:]
    return lines[0]


def test_no_command_writes_through_a_symlink_in_a_shared_run_folder(
    trained: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    victims = {}
    links = (
        "curves.csv", "curves.png", "video.mp4", "robustness/shuffle.csv",
        "robustness/shuffle.md", "robustness/shuffle.png",
        "monitor/train_p1_0.monitor.csv",  # the Monitor file of the resumed part
    )  # fmt: skip
    elsewhere = tmp_path / "elsewhere"  # the shared folder's checkpoints/ links here
    shutil.copytree(run / "checkpoints", elsewhere)
    shutil.rmtree(run / "checkpoints")
    (run / "checkpoints").symlink_to(elsewhere)
    kept = {p.name: p.read_bytes() for p in elsewhere.iterdir()}
    for k, name in enumerate(links):
        victim = tmp_path / f"victim{k}.txt"
        victim.write_text("precious")
        (run / name).parent.mkdir(exist_ok=True)
        (run / name).unlink(missing_ok=True)
        (run / name).symlink_to(victim)
        victims[name] = victim
    status = json.loads((run / "status.json").read_text())
    (run / "status.json").write_text(json.dumps({**status, "state": "interrupted"}))
    config = (run / "config.yml").read_text()  # 32 more steps for the resumed part
    (run / "config.yml").write_text(config.replace("n_timesteps: 64", "n_timesteps: 96"))
    for command in (
        ["plot", str(run)],
        ["record", str(run), "--steps", "5"],
        ["robustness", str(run), "--sweep", "shuffle", "--episodes", "1"],
        ["train", "--resume", str(run), "--no-progress"],
    ):
        proc = attn_zoo(*command)
        assert proc.returncode == 0, proc.stderr[-2000:]
    for name, victim in victims.items():
        assert victim.read_text() == "precious", name
        assert not (run / name).is_symlink(), name
    assert {p.name: p.read_bytes() for p in elsewhere.iterdir()} == kept
    assert not (run / "checkpoints").is_symlink()


def test_a_yaml_bomb_in_a_config_or_run_folder_is_refused_within_seconds(
    trained: Path, tmp_path: Path
) -> None:
    bomb = tmp_path / "bomb.yml"
    bomb.write_text(billion_laughs())
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    lol = billion_laughs().split("\n", 4)[4]  # the nine lolN lines, indented as body keys
    (run / "config.yml").write_text((run / "config.yml").read_text() + lol)
    before = sorted(p.name for p in run.iterdir())
    for command in (
        ["train", str(bomb), "--root", str(tmp_path / "runs")],
        ["show", str(bomb)],
        ["show", str(run)],
        ["evaluate", str(run)],
        ["show", str(write_config(tmp_path, "cart", CARTPOLE_PPO)), "--set", "seed=&a [*a]"],
    ):
        start = time.perf_counter()
        line = one_error_line(attn_zoo(*command, timeout=30))
        assert time.perf_counter() - start < 10, command  # a hang of minutes before
        assert "expands to more than" in line or "contains itself" in line, line
    assert not (tmp_path / "runs").exists()
    assert sorted(p.name for p in run.iterdir()) == before


CARTPOLE_ES: dict[str, Any] = {
    "algo": "cmaes",
    "env": "attn_envs/CartPoleSwingUpHarder-v0",
    "policy": "fnn",
    "n_generations": 1,
    "population": 16,
    "repeats": 1,
    "max_episode_steps": 10,
    "eval": {"freq": 0, "final_episodes": 1},
}
CARTPOLE_DQN: dict[str, Any] = {
    "algo": "dqn",
    "env": "CartPole-v1",
    "policy": "MlpPolicy",
    "n_timesteps": 200,
    "buffer_size": 200,
    "learning_starts": 100,
    "eval": {"freq": 0, "final_episodes": 1},
}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (  # the 10**7 x 113 needs 12.6 GiB; a wider policy exceeds any machine
            {**CARTPOLE_ES, "population": 10**7, "policy_kwargs": {"hidden": 256}},
            "a population of 10,000,000 x 1,793 parameters",
        ),
        ({**CARTPOLE_ES, "policy_kwargs": {"hidden": 10**9}}, "x 7,000,000,001 parameters"),
        ({**CARTPOLE_DQN, "batch_size": 10**8}, "a batch of 100,000,000 transitions"),
        ({**CARTPOLE_PPO, "n_steps": 10**9}, "a rollout buffer of 1,000,000,000 steps"),
    ],
)
def test_memory_is_estimated_from_the_config_before_anything_is_allocated(
    tmp_path: Path, body: dict[str, Any], message: str
) -> None:
    root = tmp_path / "runs"
    proc = attn_zoo("train", str(write_config(tmp_path, "big", body)), "--root", str(root))
    line = one_error_line(proc)
    assert message in line and "needs about" in line, line
    assert not root.exists()
