"""Tests for zoo.config_merge: overrides, merging, budgets and matrix rules (also its doctests,
which are the documented examples of the config DSL)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from zoo.config import ConfigError
from zoo.config_merge import (
    apply_budget,
    apply_overrides,
    deep_merge,
    expand,
    parse_overrides,
    restrict_matrix,
    set_dotted,
)

# --- parse_overrides / deep_merge / set_dotted ------------------------------------------------


def test_parse_overrides_reads_yaml_values() -> None:
    out = parse_overrides(
        [
            "learning_rate=1e-3",
            "eval.freq=0",
            "gamma=0.9",
            "normalize=true",
            "policy=relational_dqn",
            "game=[Pong, Breakout]",
            "policy_kwargs={net_arch: [8, 8]}",
            "eval.select=null",
            "env=ALE/Pong-v5",
            "learning_rate2=lin_2.5e-4",
            "description=a=b",
            " seed =3",
        ]
    )
    assert out == {
        "learning_rate": 0.001,
        "eval.freq": 0,
        "gamma": 0.9,
        "normalize": True,
        "policy": "relational_dqn",
        "game": ["Pong", "Breakout"],
        "policy_kwargs": {"net_arch": [8, 8]},
        "eval.select": None,
        "env": "ALE/Pong-v5",
        "learning_rate2": "lin_2.5e-4",
        "description": "a=b",
        "seed": 3,
    }
    assert isinstance(out["learning_rate"], float)
    assert isinstance(out["eval.freq"], int)


def test_parse_overrides_scientific_notation_without_dot_is_a_float() -> None:
    assert parse_overrides(["n=5e4", "m=1E-2"]) == {"n": 50000.0, "m": 0.01}


def test_parse_overrides_empty_value_is_empty_string() -> None:
    assert parse_overrides(["description="]) == {"description": ""}


@pytest.mark.parametrize("pair", ["learning_rate", "=3", ""])
def test_parse_overrides_rejects_pairs_without_key_or_equals(pair: str) -> None:
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides([pair])


def test_deep_merge_merges_nested_and_replaces_the_rest() -> None:
    base = {"a": 1, "eval": {"freq": 10, "policies": {"g": "deterministic"}}, "l": [1, 2]}
    update = {"eval": {"freq": 0, "policies": {"s": "stochastic"}}, "l": [3], "b": {"x": 1}}
    out = deep_merge(base, update)
    assert out == {
        "a": 1,
        "eval": {"freq": 0, "policies": {"g": "deterministic", "s": "stochastic"}},
        "l": [3],
        "b": {"x": 1},
    }


def test_deep_merge_mapping_and_scalar_replace_each_other() -> None:
    assert deep_merge({"a": 1}, {"a": {"x": 1}}) == {"a": {"x": 1}}
    assert deep_merge({"a": {"x": 1}}, {"a": None}) == {"a": None}


def test_deep_merge_copies_its_inputs() -> None:
    base = {"eval": {"policies": {"g": "deterministic"}}}
    update = {"extra": {"list": [1]}}
    snapshot = copy.deepcopy((base, update))
    out = deep_merge(base, update)
    out["eval"]["policies"]["s"] = "stochastic"
    out["extra"]["list"].append(2)
    assert (base, update) == snapshot


def test_set_dotted_creates_parents_and_refuses_scalars() -> None:
    body: dict[str, Any] = {"n_steps": 5}
    set_dotted(body, "env_kwargs.sub.n", 3)
    set_dotted(body, "seed", 1)
    assert body == {"n_steps": 5, "env_kwargs": {"sub": {"n": 3}}, "seed": 1}
    with pytest.raises(ConfigError, match="n_steps"):
        set_dotted(body, "n_steps.x", 1)


def test_apply_overrides_restricts_axes_and_copies_its_input() -> None:
    body = {"seed": 0, "matrix": {"game": ["Pong", "Breakout"], "model": {"a": {}, "b": {}}}}
    snapshot = copy.deepcopy(body)
    out = apply_overrides(body, {"model": "b", "eval.freq": 0, "seed": 2}, "x")
    assert out == {
        "seed": 2,
        "eval": {"freq": 0},
        "matrix": {"game": ["Pong", "Breakout"], "model": {"b": {}}},
    }
    assert body == snapshot
    with pytest.raises(ConfigError, match="no variant 'c'"):
        apply_overrides(body, {"model": ["c"]}, "x")


def test_budget_matrix_restricts_instead_of_merging() -> None:
    raw = {"n": 1, "matrix": {"game": ["A", "B"]}, "budgets": {"cpu": {"matrix": {"game": "C"}}}}
    assert apply_budget(raw, "cpu", "x") == {"n": 1, "matrix": {"game": ["C"]}}
    assert apply_budget(raw, "full", "x") == {"n": 1, "matrix": {"game": ["A", "B"]}}
    assert restrict_matrix({"v": {"a": {}, "b": {}}}, {"v": {"z": {}}}, "x") == {"v": {"z": {}}}


def test_the_dsl_reference_is_linked_from_the_readme() -> None:
    root = Path(__file__).parents[1]  # README -> docs/zoo.md (the zoo's page) -> the module
    assert "docs/zoo.md" in (root / "README.md").read_text()
    assert "zoo/config_merge.py" in (root / "docs" / "zoo.md").read_text()


def test_a_matrix_past_the_cell_bound_is_refused_before_any_cell_is_built() -> None:
    body = {"algo": "ppo", "env": "E{a}{b}{c}{d}{e}", "matrix": {}}
    body["matrix"] = {axis: list(range(10)) for axis in "abcde"}  # 10**5 cells
    with pytest.raises(ConfigError, match="100,000 cells"):
        expand(body, {"algo", "env"})
