"""Tests for zoo.registry: short names and import paths the YAML configs may use."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import gymnasium as gym
import pytest
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from attn_policies.algorithms import DoubleDQN, OversamplingReplayBuffer
from zoo.config import ConfigError
from zoo.registry import (
    ALLOW_IMPORT_ENV,
    ALLOW_WRITER_ENV,
    REGISTRIES,
    allow_imports,
    allow_writers,
    allowed_imports,
    allowed_writers,
    check_env_ids,
    is_activation,
    resolve,
)

# What every entry of each registry must resolve to.
BASES: dict[str, type] = {
    "algo": BaseAlgorithm,
    "policy": BasePolicy,
    "extractor": BaseFeaturesExtractor,
    "replay buffer": ReplayBuffer,
    "wrapper": gym.Wrapper,
    "optimizer": torch.optim.Optimizer,
    "activation": nn.Module,
}


def test_every_registry_is_checked() -> None:
    assert set(REGISTRIES) == set(BASES)


@pytest.mark.parametrize(
    ("kind", "name"),
    [(kind, name) for kind, registry in REGISTRIES.items() for name in registry],
)
def test_every_short_name_resolves_to_the_right_kind(kind: str, name: str) -> None:
    obj = resolve(kind, name)
    assert isinstance(obj, type) and issubclass(obj, BASES[kind]), (kind, name, obj)


def test_named_entries() -> None:
    assert resolve("algo", "double_dqn") is DoubleDQN
    assert resolve("algo", "ppo") is PPO
    assert resolve("replay buffer", "oversampling") is OversamplingReplayBuffer
    assert resolve("replay buffer", "replay") is ReplayBuffer
    assert resolve("optimizer", "adam") is torch.optim.Adam


@pytest.mark.parametrize("name", ["relu", "ReLU", "RELU", "nn.ReLU", "torch.nn:ReLU"])
def test_activation_names_are_case_insensitive(name: str) -> None:
    assert resolve("activation", name) is nn.ReLU


@pytest.mark.parametrize("name", ["adam", "Adam", "torch.optim:Adam", "torch.optim.Adam"])
def test_optimizer_names(name: str) -> None:
    assert resolve("optimizer", name) is torch.optim.Adam


@pytest.mark.parametrize(
    "path",
    ["attn_policies.algorithms:DoubleDQN", "attn_policies.algorithms.DoubleDQN"],
)
def test_import_paths(path: str) -> None:
    assert resolve("algo", path) is DoubleDQN


@pytest.mark.parametrize(
    ("kind", "name", "suggestion"),
    [
        ("algo", "double_dq", "'double_dqn'"),
        ("policy", "relational_dq", "'relational_dqn'"),
        ("extractor", "nonlocal_nature", "'nonlocal_nature_cnn'"),
        ("replay buffer", "oversample", "'oversampling'"),
        ("wrapper", "ShuffleObservaton", "'ShuffleObservation'"),
        ("optimizer", "rmsprp", "'rmsprop'"),
        ("activation", "tanhh", "'tanh'"),
    ],
)
def test_unknown_short_names_suggest_and_list(kind: str, name: str, suggestion: str) -> None:
    with pytest.raises(ValueError) as err:
        resolve(kind, name)
    message = str(err.value)
    assert f"unknown {kind} {name!r}" in message
    assert f"Did you mean {suggestion}" in message or f", {suggestion}" in message
    for known in REGISTRIES[kind]:
        assert known in message


def test_unknown_name_without_close_match_has_no_suggestion() -> None:
    with pytest.raises(ValueError) as err:
        resolve("algo", "zzzz")
    assert "Did you mean" not in str(err.value)
    assert "import path" in str(err.value)


@pytest.mark.parametrize(
    "path", ["no_such_module_xyz:Thing", "attn_policies.algorithms:DoubleDQNN"]
)
def test_bad_import_paths_raise_value_error(path: str) -> None:
    with pytest.raises(ValueError):
        resolve("algo", path)


def test_is_activation() -> None:
    assert is_activation(nn.ELU)
    assert not is_activation(nn.ELU())
    assert not is_activation(int)
    assert not is_activation("relu")


# --- names resolve only to classes of the expected kind (issue 16) -----------------------------


@pytest.mark.parametrize("kind", sorted(BASES))
def test_any_other_object_is_refused_before_it_is_called(kind: str) -> None:
    loader = "stable_baselines3.common.save_util:load_from_pkl"  # a function that unpickles
    with pytest.raises(ValueError, match=f"{kind} '{loader}' is a function, not a subclass"):
        resolve(kind, loader)
    with pytest.raises(ValueError, match="is a class Box, not a subclass"):
        resolve(kind, "gymnasium.spaces:Box")


def test_policy_builders_and_functions_are_checked() -> None:
    from zoo.registry import resolve_function, resolve_module_builder

    assert resolve_module_builder("attn_policies.es_policies:FNNPolicy").__name__ == "FNNPolicy"
    preset = "attn_policies.es_policies:AttentionNeuronPolicy.cartpole"
    assert resolve_module_builder(preset, presets=[preset]).__name__ == "cartpole"
    for name in ("stable_baselines3.common.save_util:load_from_pkl", "torch.nn:functional"):
        with pytest.raises(ValueError, match=r"not a torch\.nn\.Module subclass"):
            resolve_module_builder(name)
    assert resolve_function("attn_policies.algorithms.es_workers:timed", "f").__name__ == "timed"
    with pytest.raises(ValueError, match="not a Python function"):
        resolve_function("attn_policies.algorithms:DoubleDQN", "action_fn")
    with pytest.raises(ValueError, match="standard-library function"):
        resolve_function("zoo.runs:contextmanager", "action_fn")


# --- a config names classes, never an attribute that can reach a loader (issue 46) -------------


@pytest.mark.parametrize(
    "name",
    [
        "stable_baselines3.common.policies:BasePolicy.load",  # torch.load(weights_only=False)
        "attn_policies.es_policies:AttentionNeuronPolicy.cartpole",  # a preset: by its short name
        "stable_baselines3.common.policies.BasePolicy.load",
        "attn_policies.es_policies:_private",
    ],
)
def test_attribute_paths_are_refused_before_anything_is_called(name: str) -> None:
    from zoo.registry import resolve_module_builder

    with pytest.raises(ValueError, match=r"never an attribute|cannot import module"):
        resolve_module_builder(name)
    with pytest.raises(ValueError, match=r"never an attribute|cannot import module"):
        resolve("policy", name)


# --- only allowed packages are imported, checked before the import (issue 46) ------------------


@pytest.fixture
def evil_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """A module on sys.path whose top-level code creates a marker file when imported."""
    name, marker = f"evil_{tmp_path.name}".replace("-", "_"), tmp_path / "imported"
    (tmp_path / f"{name}.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n"
        "import gymnasium\nclass Wrap(gymnasium.Wrapper):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(ALLOW_IMPORT_ENV, "")  # restored after the test
    return name, marker


def test_a_module_outside_the_allow_list_is_not_imported_until_allowed(
    evil_module: tuple[str, Path],
) -> None:
    name, marker = evil_module
    with pytest.raises(ValueError, match=f"if you trust '{name}', add --allow-import {name}$"):
        resolve("wrapper", f"{name}:Wrap")
    with pytest.raises(ValueError, match=f"--allow-import {name}$"):
        check_env_ids({"curriculum": [{"env": f"{name}:CartPole-v1"}]}, "x")
    assert not marker.exists() and name not in sys.modules
    allow_imports([name])
    assert resolve("wrapper", f"{name}:Wrap").__name__ == "Wrap"
    assert marker.exists()  # the payload was live: only the allow-list kept it out
    check_env_ids({"env": f"{name}:CartPole-v1"}, "x")
    sys.modules.pop(name)


@pytest.mark.parametrize(
    ("kind", "name"),
    [("algo", "this:s"), ("wrapper", "venv.__main__:X"), ("policy", "attn_policies.__main__:X")],
)
def test_modules_with_side_effects_are_refused_before_import(
    kind: str, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    module = name.partition(":")[0]
    with pytest.raises(ValueError, match=r"--allow-import|private module"):
        resolve(kind, name)
    assert module not in sys.modules and capsys.readouterr().out == ""  # no Zen of Python


def test_allow_imports_takes_package_names_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ALLOW_IMPORT_ENV, "")
    with pytest.raises(ValueError, match="not a Python package name"):
        allow_imports(["my-pkg"])
    allow_imports(["a.b", "c"])
    allow_imports(["c"])
    assert allowed_imports()[-2:] == ("a.b", "c")


WRITING_WRAPPERS = [
    ("gymnasium.wrappers:RecordVideo", {"video_folder": "@"}, "video_folder"),
    ("stable_baselines3.common.monitor:Monitor", {"filename": "@/monitor"}, "filename"),
    ("gymnasium.wrappers:HumanRendering", {}, "window"),
]


@pytest.mark.parametrize(("name", "kwargs", "said"), WRITING_WRAPPERS)
def test_a_wrapper_that_writes_where_its_arguments_say_needs_the_command_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    name: str,
    kwargs: dict[str, str],
    said: str,
) -> None:
    # issue 68, item 4: `env_wrapper: gymnasium.wrappers:RecordVideo` with `video_folder:
    # /any/path` wrote videos there from a config alone
    import yaml

    import zoo.cli

    monkeypatch.setenv(ALLOW_WRITER_ENV, "")
    elsewhere = tmp_path / "elsewhere"
    kwargs = {k: v.replace("@", str(elsewhere)) for k, v in kwargs.items()}
    body = {
        "algo": "ppo", "env": "CartPole-v1", "policy": "MlpPolicy", "n_timesteps": 64,
        "n_steps": 32, "batch_size": 32, "env_kwargs": {"render_mode": "rgb_array"},
        "env_wrapper": [{name: kwargs}], "eval": {"freq": 0, "final_episodes": 1},
    }  # fmt: skip
    config = tmp_path / "evil.yml"
    config.write_text(yaml.safe_dump({"evil": body}))
    code = zoo.cli.main(["train", str(config), "--root", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "writes files" in err[0] and said in err[0], err
    assert not elsewhere.exists() and not (tmp_path / "runs").exists()
    with pytest.raises(ConfigError, match="--allow-writer"):
        resolve("wrapper", name)
    allow_writers([name.rpartition(":")[2]])  # the person running names it: resolved
    assert resolve("wrapper", name).__name__ == name.rpartition(":")[2]


def test_allow_writer_takes_class_names_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ALLOW_WRITER_ENV, "")
    for bad in ("os.system; rm", "a:b:c", "", "gymnasium.wrappers:"):
        with pytest.raises(ConfigError, match="--allow-writer"):
            allow_writers([bad])
    allow_writers(["RecordVideo", "gymnasium.wrappers:RecordVideo"])
    assert allowed_writers() == ["RecordVideo", "gymnasium.wrappers:RecordVideo"]


@pytest.mark.parametrize("value", ["os;touch x", "../../x", "a,,b c", "x" * 5000])
def test_names_from_the_environment_are_checked_as_allow_import_names_are(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """Issue 68: ``ATTN_ZOO_ALLOW_IMPORT`` goes through the check ``--allow-import`` does."""
    from zoo.registry import ALLOW_IMPORT_ENV, allow_imports, allowed_imports

    monkeypatch.setenv(ALLOW_IMPORT_ENV, value)
    with pytest.raises(ConfigError, match=r"ATTN_ZOO_ALLOW_IMPORT .*not a Python package name"):
        allowed_imports()
    with pytest.raises(ConfigError, match=r"ATTN_ZOO_ALLOW_IMPORT .*not a Python package name"):
        allow_imports(["my_pkg"])
    monkeypatch.setenv(ALLOW_IMPORT_ENV, "my_pkg,other.sub")
    assert allowed_imports()[-2:] == ("my_pkg", "other.sub")


def test_a_hostile_environment_value_is_one_line_on_the_command_line() -> None:
    import subprocess
    import sys

    env = {**os.environ, "ATTN_ZOO_ALLOW_IMPORT": "os;touch x"}
    proc = subprocess.run([sys.executable, "-m", "zoo.cli", "list"],
                          capture_output=True, text=True, env=env, check=False)  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "ATTN_ZOO_ALLOW_IMPORT 'os;touch x'" in proc.stderr
