"""Tests for zoo.registry: short names and import paths the YAML configs may use."""

from __future__ import annotations

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
from zoo.registry import REGISTRIES, is_activation, resolve

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
    with pytest.raises(ValueError, match=f"{kind} 'os:system' is a builtin_function_or_method"):
        resolve(kind, "os:system")
    with pytest.raises(ValueError, match="is a class dict, not a subclass"):
        resolve(kind, "builtins:dict")


def test_policy_builders_and_functions_are_checked() -> None:
    from zoo.registry import resolve_function, resolve_module_builder

    assert resolve_module_builder("attn_policies.es_policies:FNNPolicy").__name__ == "FNNPolicy"
    assert resolve_module_builder("attn_policies.es_policies:AttentionNeuronPolicy.cartpole")
    for name in ("os:system", "subprocess:run", "builtins:eval"):
        with pytest.raises(ValueError, match=r"not a torch\.nn\.Module subclass"):
            resolve_module_builder(name)
    assert resolve_function("attn_policies.algorithms.es_workers:timed", "f").__name__ == "timed"
    with pytest.raises(ValueError, match="not a Python function"):
        resolve_function("os:system", "action_fn")
    with pytest.raises(ValueError, match="standard-library function"):
        resolve_function("shutil:rmtree", "action_fn")
