"""Tests for zoo.config_checks: the error type, nearest names, the eval block, require_int."""

from __future__ import annotations

from typing import Any

import pytest

import zoo.config
from zoo.config import ConfigError, EvalConfig, nearest, require_int


def test_nearest() -> None:
    assert nearest("n_timestep", ["n_timesteps", "seed"]) == " Did you mean 'n_timesteps'?"
    assert nearest("zzz", ["n_timesteps", "seed"]) == ""


# --- EvalConfig -------------------------------------------------------------------------------


def test_eval_select_defaults_to_first_policy() -> None:
    assert EvalConfig().select == "deterministic/mean_reward"
    cfg = EvalConfig(policies={"eps": 0.05, "greedy": "deterministic"}, success="terminated")
    assert cfg.select == "eps/success_rate"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"freq": -1}, "eval.freq"),
        ({"n_envs": 0}, "eval.n_envs"),
        ({"n_episodes": True}, "eval.n_episodes"),
        ({"policies": {}}, "eval.policies"),
        ({"policies": {"a": 1.5}}, "eval.policies.a"),
        ({"policies": {"a": "greedy"}}, "eval.policies.a"),
        ({"success": "solved"}, "eval.success"),
        ({"env_kwargs": {"noops": 1}}, "eval.env_kwargs must be a list"),
        ({"env_kwargs": [{"noops": 1}, 2], "n_envs": 2}, "eval.env_kwargs must be a list"),
        ({"env_kwargs": [{"noops": 1}], "n_envs": 2}, "1 mappings but eval.n_envs is 2"),
    ],
)
def test_eval_config_rejects_bad_values(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        EvalConfig(**kwargs)


def test_eval_env_kwargs_one_mapping_per_env() -> None:
    cfg = EvalConfig.from_dict({"n_envs": 2, "env_kwargs": [{"noops": 4}, {"noops": 1}]})
    assert cfg.env_kwargs == [{"noops": 4}, {"noops": 1}]
    assert EvalConfig().env_kwargs is None


@pytest.mark.parametrize("name", ["n_envs", "n_episodes"])
def test_eval_counts_must_be_positive(name: str) -> None:
    with pytest.raises(ConfigError, match=f"eval.{name} must be a positive integer, got 0"):
        EvalConfig(**{name: 0})
    assert getattr(EvalConfig(**{name: 1}), name) == 1


@pytest.mark.parametrize(
    ("value", "minimum", "message"),
    [
        (-1, 0, "n must be a non-negative integer, got -1"),
        (0, 1, "n must be a positive integer, got 0"),
        (True, 0, "n must be a non-negative integer, got True"),
        (1.0, 0, "n must be a non-negative integer, got 1.0"),
        ("3", 0, "n must be a non-negative integer, got '3'"),
        (1, 2, "n must be an integer >= 2, got 1"),
    ],
)
def test_require_int(value: Any, minimum: int, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        require_int(value, "n", minimum=minimum)
    assert str(info.value) == message
    assert require_int(5, "n", minimum=minimum) == 5


def test_config_error_keeps_its_public_home() -> None:
    assert ConfigError.__module__ == "zoo.config" and zoo.config.ConfigError is ConfigError
    assert issubclass(ConfigError, ValueError)
