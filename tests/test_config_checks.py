"""Tests for zoo.config_checks: the error type, nearest names, the eval block, require_int."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import zoo.config
from zoo.config import ConfigError, EvalConfig, nearest, require_int, safe_yaml


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


@pytest.mark.parametrize(
    "kwargs",
    [
        {"seed": 1_000_000, "test_seed": 1_000_000},
        {"seed": 0, "test_seed": 50, "n_episodes": 60},
        {"seed": 100, "test_seed": 0, "final_episodes": 101},
        {"seed": 0, "test_seed": 8, "n_episodes": 5, "n_envs": 2},
    ],
)
def test_test_episodes_never_overlap_the_keep_best_checks(kwargs: dict[str, Any]) -> None:
    """Selection and test apart: a test seed range that meets the checks' is refused."""
    with pytest.raises(ConfigError, match="overlap the keep-best checks"):
        EvalConfig(**kwargs)


def test_check_and_test_seeds_side_by_side_are_fine() -> None:
    cfg = EvalConfig(seed=0, test_seed=10, n_episodes=10, final_episodes=5)
    assert (cfg.seed, cfg.test_seed) == (0, 10)
    default = EvalConfig()
    assert default.test_seed >= default.seed + default.n_episodes  # the defaults are apart


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


# --- safe_yaml: the one YAML reader (issue 46, item 5) ---------------------------------------


def billion_laughs(levels: int = 9, width: int = 9) -> str:
    """A config whose aliases expand to ``width ** levels`` strings under unknown keys."""
    lines = ["bomb:", "  algo: ppo", "  env: CartPole-v1", "  policy: MlpPolicy"]
    lines.append("  lol0: &lol0 [" + ", ".join(["lol"] * width) + "]")
    for k in range(1, levels):
        lines.append(f"  lol{k}: &lol{k} [" + ", ".join([f"*lol{k - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_at_once() -> None:
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=r"bomb\.yml: the YAML document expands to more than"):
        safe_yaml(billion_laughs(), "bomb.yml")
    assert time.perf_counter() - start < 1.0


def test_a_value_that_contains_itself_is_refused() -> None:
    with pytest.raises(ConfigError, match="contains itself"):
        safe_yaml("a: &a [1, *a]\n", "loop.yml")


def test_anchors_within_the_bound_still_load() -> None:
    text = "base: &base {lr: 0.001, arch: [64, 64]}\nrun: {<<: *base, seed: 3}\n"
    assert safe_yaml(text, "ok.yml")["run"] == {"lr": 0.001, "arch": [64, 64], "seed": 3}
    assert safe_yaml(billion_laughs(levels=4), "ok.yml")["bomb"]["lol3"][0][0][0] == ["lol"] * 9


@pytest.mark.parametrize("name", ["status.json", "eval.json", "provenance.json"])
def test_a_run_folder_s_json_nested_100k_deep_is_one_line(tmp_path: Path, name: str) -> None:
    # issue 68, item 8: json's parser ended in a RecursionError (exit 1, a traceback file)
    from zoo.config_checks import read_json

    (tmp_path / name).write_text('{"a": ' * 100_000 + "1" + "}" * 100_000)
    with pytest.raises(ConfigError, match="nested more than 100 levels deep"):
        read_json(tmp_path / name)
    (tmp_path / name).write_text('{"a": "[[[[{{{{", "b": [[1]]}')  # brackets in text: fine
    assert read_json(tmp_path / name) == {"a": "[[[[{{{{", "b": [[1]]}
