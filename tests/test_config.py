"""Tests for zoo.config: overrides, merging, budgets, matrix expansion, validation, loading."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import zoo
from zoo.config import (
    ConfigError,
    find_experiment,
    load_runs,
    parse_overrides,
)

# A small PPO config every error case below starts from (validates without building anything).
BASE: dict[str, Any] = {
    "algo": "ppo",
    "env": "CartPole-v1",
    "policy": "MlpPolicy",
    "n_timesteps": 64,
    "n_steps": 32,
    "batch_size": 32,
}


def write_family(tmp_path: Path, family: dict[str, Any], name: str = "family.yml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(family, sort_keys=False))
    return path


def load_one(tmp_path: Path, budget: str = "full", **changes: Any) -> list[zoo.RunConfig]:
    """``load_runs`` of ``BASE`` with ``changes`` (``None`` deletes a key)."""
    body = {**BASE, **changes}
    body = {k: v for k, v in body.items() if v is not None}
    return load_runs(write_family(tmp_path, {"exp": body}), budget=budget)


# --- budgets ----------------------------------------------------------------------------------


def test_budgets_merge_over_the_config(tmp_path: Path) -> None:
    body = {
        **BASE,
        "gamma": 0.9,
        "eval": {"freq": 100, "n_episodes": 5, "policies": {"g": "deterministic"}},
        "budgets": {
            "smoke": {"n_timesteps": 8, "eval": {"freq": 4}},
            "cpu": {"gamma": 0.5, "policy_kwargs": {"net_arch": [4]}},
            "full": {},
        },
    }
    path = write_family(tmp_path, {"exp": body})
    full, smoke, cpu = (load_runs(path, budget=b)[0] for b in ("full", "smoke", "cpu"))
    assert (full.body["n_timesteps"], smoke.body["n_timesteps"], cpu.body["n_timesteps"]) == (
        64,
        8,
        64,
    )
    assert (full.body["gamma"], smoke.body["gamma"], cpu.body["gamma"]) == (0.9, 0.9, 0.5)
    assert cpu.body["policy_kwargs"] == {"net_arch": [4]}
    # Nested eval overrides keep the keys the budget does not mention.
    assert (smoke.eval.freq, smoke.eval.n_episodes, smoke.eval.policies) == (
        4,
        5,
        {"g": "deterministic"},
    )
    assert full.eval.freq == 100
    assert "budgets" not in smoke.body
    assert (smoke.budget, cpu.budget, full.budget) == ("smoke", "cpu", "full")


def test_doorkey_smoke_is_small_and_keeps_the_eval_policies() -> None:
    full, smoke = (load_runs("doorkey", budget=b)[0] for b in ("full", "smoke"))
    assert smoke.body["n_timesteps"] < full.body["n_timesteps"]
    assert smoke.eval.policies == full.eval.policies
    assert smoke.eval.select == full.eval.select


def test_full_budget_is_the_config_itself(tmp_path: Path) -> None:
    (run,) = load_one(tmp_path, budgets={"smoke": {"n_timesteps": 8}})
    assert run.body["n_timesteps"] == 64


def test_unknown_budget_names_the_available_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_runs("doorkey", budget="smok")
    assert "smoke, cpu, full" in str(err.value)
    assert "Did you mean 'smoke'" in str(err.value)
    with pytest.raises(ConfigError, match="none"):
        load_one(tmp_path, budget="cpu")


# --- matrix expansion -------------------------------------------------------------------------

GRID: dict[str, Any] = {
    **BASE,
    "env": "{envname}",
    "description": "PPO on {envname}",
    "n_steps": "{steps}",  # a whole-string token keeps the value's type
    "matrix": {
        "envname": ["CartPole-v1", "Acrobot-v1"],  # template variable
        "learning_rate": [0.001, 0.0003],  # a config key
        "env_kwargs.render_mode": ["rgb_array"],  # a dotted config key
        "steps": [32],
        "variant": {  # named variants
            "small": {"policy_kwargs": {"net_arch": [8]}},
            "big": {"policy_kwargs": {"net_arch": [64, 64]}},
        },
        "seed": [0, 1],
    },
    "budgets": {
        "smoke": {"matrix": {"variant": ["big"], "seed": [5]}},
        "cpu": {"matrix": {"variant": ["huge"]}},
    },
}


@pytest.fixture
def grid(tmp_path: Path) -> Path:
    return write_family(tmp_path, {"grid": GRID})


def test_matrix_expands_every_combination(grid: Path) -> None:
    runs = load_runs(grid)
    assert len(runs) == 2 * 2 * 2 * 2
    cells = {(r.tag, r.seed) for r in runs}
    assert len(cells) == 16
    # The seed axis is not part of the tag: seeds of a cell share its folder.
    assert {r.tag for r in runs} == {
        f"{env}-{lr}-rgb_array-32-{v}"
        for env in ("CartPole-v1", "Acrobot-v1")
        for lr in ("0.001", "0.0003")
        for v in ("small", "big")
    }
    run = next(r for r in runs if r.tag == "Acrobot-v1-0.0003-rgb_array-32-big" and r.seed == 1)
    assert run.name == "grid/Acrobot-v1-0.0003-rgb_array-32-big"
    assert run.body["env"] == "Acrobot-v1"
    assert run.body["description"] == "PPO on Acrobot-v1"
    assert run.body["learning_rate"] == 0.0003
    assert run.body["env_kwargs"] == {"render_mode": "rgb_array"}
    assert run.body["n_steps"] == 32 and isinstance(run.body["n_steps"], int)
    assert run.body["policy_kwargs"] == {"net_arch": [64, 64]}
    assert run.body["seed"] == 1
    assert "matrix" not in run.body


def test_overrides_on_axes_pick_a_cell(grid: Path) -> None:
    overrides = parse_overrides(["envname=Acrobot-v1", "variant=small", "learning_rate=1e-3"])
    runs = load_runs(grid, overrides=overrides, seed=1)
    assert len(runs) == 1
    (run,) = runs
    assert run.tag == "Acrobot-v1-0.001-rgb_array-32-small"
    assert (run.seed, run.body["policy_kwargs"], run.body["env"]) == (
        1,
        {"net_arch": [8]},
        "Acrobot-v1",
    )


def test_override_axis_with_a_list_and_plain_keys(grid: Path) -> None:
    runs = load_runs(grid, overrides={"variant": ["big"], "seed": [0, 1, 2], "gamma": 0.5})
    assert len(runs) == 2 * 2 * 3
    assert {r.body["gamma"] for r in runs} == {0.5}
    assert {r.seed for r in runs} == {0, 1, 2}


def test_budget_subsets_a_named_axis(grid: Path) -> None:
    runs = load_runs(grid, budget="smoke")
    assert len(runs) == 4
    assert {r.body["policy_kwargs"]["net_arch"][0] for r in runs} == {64}
    assert {r.seed for r in runs} == {5}


def test_unknown_variant_errors_name_the_variants(grid: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_runs(grid, overrides={"variant": "smal"})
    assert "'smal'" in str(err.value) and "Did you mean 'small'" in str(err.value)
    assert "small, big" in str(err.value)
    with pytest.raises(ConfigError, match="huge"):
        load_runs(grid, budget="cpu")


def test_empty_matrix_axis_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="matrix axis 'seed'"):
        load_one(tmp_path, matrix={"seed": []})


def test_matrix_axis_used_nowhere_is_an_error(tmp_path: Path) -> None:
    # A typo ("env_kwarg." for "env_kwargs.") must not silently give identical runs.
    with pytest.raises(ConfigError, match="env_kwarg"):
        load_one(tmp_path, matrix={"env_kwarg.n": [0, 1]})


def test_registered_matrices() -> None:
    # The papers' grids: 45 games x 8 architectures (E8), 3 games x 3 conditions x 7 models (E7).
    assert len(load_runs("atari_nonlocal")) == 45 * 8
    assert len(load_runs("atariari")) == 3 * 3 * 7
    (cell,) = load_runs("atari_nonlocal", overrides={"game": "Breakout", "variant": "cnn"})
    assert (cell.tag, cell.body["env"]) == ("Breakout-cnn", "ALE/Breakout-v5")
    assert cell.body["policy_kwargs"]["features_extractor_kwargs"]["positions"] == []
    overrides = {"game": "Pong", "condition": "4L", "model": "d_awrl"}
    (cell,) = load_runs("atariari", overrides=overrides)
    assert cell.tag == "Pong-4L-d_awrl"
    assert (cell.body["policy"], cell.body["env_kwargs"]["n_distractors"]) == ("dawrl", 3)


# --- validation errors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "must_contain"),
    [
        ({"n_timestep": 5}, ["'n_timestep'", "Did you mean 'n_timesteps'"]),
        ({"learning_rat": 1e-3}, ["'learning_rat'", "Did you mean 'learning_rate'"]),
        ({"n_envs": "two"}, ["'n_envs'", "int", "'two'"]),
        ({"n_envs": True}, ["'n_envs'"]),
        ({"n_steps": 3.5}, ["'n_steps'"]),
        ({"gamma": "high"}, ["'gamma'", "float"]),
        ({"seed": "zero"}, ["'seed'"]),
        ({"n_timesteps": 1.5}, ["'n_timesteps'"]),
        ({"policy_kwargs": [8]}, ["'policy_kwargs'"]),
        ({"env_wrapper": 5}, ["'env_wrapper'"]),
        ({"vec_env": "threads"}, ["'vec_env'"]),
        ({"env": None}, ["'env'"]),
        ({"policy": None}, ["'policy'"]),
        ({"n_timesteps": None}, ["'n_timesteps'"]),
        ({"algo": None}, ["'algo'"]),
        ({"learning_rate": "fast"}, ["'learning_rate'", "lin_"]),
        ({"learning_rate": "lin_fast"}, ["'learning_rate'", "lin_fast"]),
    ],
)
def test_bad_keys_and_types(
    tmp_path: Path, changes: dict[str, Any], must_contain: list[str]
) -> None:
    with pytest.raises(ConfigError) as err:
        load_one(tmp_path, **changes)
    for text in must_contain:
        assert text in str(err.value)


@pytest.mark.parametrize(
    ("changes", "must_contain"),
    [
        ({"algo": "ppoo"}, ["'ppoo'", "Did you mean 'ppo'"]),
        ({"algo": "double_dq"}, ["'double_dq'", "Did you mean 'double_dqn'"]),
        (
            {"algo": "dqn", "policy": "relational_dq", "n_steps": None, "batch_size": None},
            ["'relational_dq'", "Did you mean 'relational_dqn'"],
        ),
        ({"policy": "MlpPolicyy"}, ["'MlpPolicyy'", "Did you mean 'MlpPolicy'"]),
        (
            {"policy_kwargs": {"features_extractor_class": "awrll"}},
            ["'awrll'", "Did you mean 'awrl'", "features_extractor_class"],
        ),
        ({"env_wrapper": ["ShuffleObservaton"]}, ["Did you mean 'ShuffleObservation'"]),
        (
            {"env_wrapper": [{"ShuffleObservation": {"reshufle_every": 2}}]},
            ["'reshufle_every'", "Did you mean 'reshuffle_every'"],
        ),
        (
            {"algo": "dqn", "replay_buffer_class": "oversampleing", "n_steps": None},
            ["'oversampleing'", "Did you mean 'oversampling'", "replay_buffer_class"],
        ),
        (
            {"policy_kwargs": {"activation_fn": "relux"}},
            ["'relux'", "Did you mean 'relu'", "activation_fn"],
        ),
        (
            {"policy_kwargs": {"optimizer_class": "adamm"}},
            ["'adamm'", "Did you mean 'adam'"],
        ),
        ({"policy_kwargs": {"net_archh": [8]}}, ["'net_archh'", "Did you mean 'net_arch'"]),
        (
            {
                "policy_kwargs": {
                    "features_extractor_class": "awrl",
                    "features_extractor_kwargs": {"n_headz": 2},
                }
            },
            ["'n_headz'", "Did you mean 'n_heads'", "features_extractor_kwargs"],
        ),
    ],
    ids=[
        "algo",
        "algo2",
        "policy",
        "sb3-policy-alias",
        "extractor",
        "wrapper",
        "wrapper-kwarg",
        "replay-buffer",
        "activation",
        "optimizer",
        "policy-kwarg",
        "extractor-kwarg",
    ],
)
def test_unknown_names_get_suggestions(
    tmp_path: Path, changes: dict[str, Any], must_contain: list[str]
) -> None:
    with pytest.raises(ConfigError) as err:
        load_one(tmp_path, **changes)
    for text in must_contain:
        assert text in str(err.value)


@pytest.mark.parametrize(
    ("changes", "must_contain"),
    [
        (
            {
                "algo": "dqn",
                "replay_buffer_class": "oversampling",
                "n_steps": None,
                "replay_buffer_kwargs": {"copiez": 5},
            },
            ["'copiez'", "Did you mean 'copies'"],
        ),
        ({"algo": "double_dqn", "n_steps": None, "loss": "l1"}, ["'loss'", "'l1'"]),
    ],
    ids=["replay_buffer_kwargs", "double_dqn-loss"],
)
def test_static_checks_catch_kwargs_behind_var_keyword_and_literals(
    tmp_path: Path, changes: dict[str, Any], must_contain: list[str]
) -> None:
    """``load_runs`` is the static check (``attn-zoo show``, the config tests): a typo in
    ``replay_buffer_kwargs`` or a loss the algorithm refuses must fail there too."""
    with pytest.raises(ConfigError) as err:
        load_one(tmp_path, **changes)
    for text in must_contain:
        assert text in str(err.value)


@pytest.mark.parametrize(
    "changes",
    [
        {"eval": 5},
        {"eval": [1, 2]},
        {"matrix": 5},
        {"matrix": ["seed"]},
        {"algo": 5},
        {"budgets": {"full": 5}},
    ],
    ids=["eval-int", "eval-list", "matrix-int", "matrix-list", "algo-int", "budget-int"],
)
def test_malformed_blocks_raise_config_errors(tmp_path: Path, changes: dict[str, Any]) -> None:
    (key,) = changes
    with pytest.raises(ConfigError, match=key):
        load_one(tmp_path, **changes)


@pytest.mark.parametrize(
    ("eval_block", "must_contain"),
    [
        ({"frequ": 10}, ["'eval.frequ'", "Did you mean 'freq'"]),
        ({"n_envs": "two"}, ["eval.n_envs"]),
        ({"select": "greedy/mean_reward"}, ["'greedy'", "deterministic"]),
        ({"select": "deterministic/succes_rate"}, ["'succes_rate'", "success_rate"]),
        ({"select": "deterministic/success_rate"}, ["success_rate needs eval.success"]),
        ({"policies": {"g": "greedy"}}, ["eval.policies.g"]),
    ],
)
def test_eval_block_errors(
    tmp_path: Path, eval_block: dict[str, Any], must_contain: list[str]
) -> None:
    with pytest.raises(ConfigError) as err:
        load_one(tmp_path, eval=eval_block)
    assert str(err.value).startswith("exp: ")
    for text in must_contain:
        assert text in str(err.value)


def test_valid_config_loads(tmp_path: Path) -> None:
    (run,) = load_one(
        tmp_path,
        learning_rate="lin_1e-3",
        env_wrapper=[{"ShuffleObservation": {"reshuffle_every": 5}}],
        policy_kwargs={"net_arch": [8], "activation_fn": "tanh"},
        eval={"policies": {"greedy": "deterministic", "sample": "stochastic"}},
    )
    assert (run.experiment, run.tag, run.algo, run.seed) == ("exp", "", "ppo", 0)
    assert run.eval.select == "greedy/mean_reward"
    assert run.get("n_envs", 1) == 1


# --- loading from files -----------------------------------------------------------------------


def test_yaml_path_and_path_colon_name(tmp_path: Path) -> None:
    one = write_family(tmp_path, {"solo": BASE}, "one.yml")
    two = write_family(tmp_path, {"a": BASE, "b": {**BASE, "seed": 7}}, "two.yaml")
    (run,) = load_runs(one)
    assert (run.experiment, run.source) == ("solo", str(one))
    (run,) = load_runs(f"{two}:b")
    assert (run.experiment, run.seed) == ("b", 7)
    with pytest.raises(ConfigError, match="2 experiments"):
        load_runs(two)
    with pytest.raises(ConfigError, match="Did you mean 'b'"):
        load_runs(f"{two}:bb")
    with pytest.raises(ConfigError, match="no config file"):
        load_runs(tmp_path / "missing.yml")


def test_family_file_must_map_names_to_mappings(tmp_path: Path) -> None:
    path = tmp_path / "bad.yml"
    path.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_runs(path)


def test_registered_names_and_unknown_name(tmp_path: Path) -> None:
    found = zoo.list_experiments()
    assert {"doorkey", "mnist", "atariari", "atari_nonlocal"} <= set(found)
    name, raw, source = find_experiment("doorkey")
    assert (name, raw["algo"], source) == ("doorkey", "double_dqn", "configs/doorkey.yml")
    with pytest.raises(ConfigError) as err:
        load_runs("doorky")
    assert "Did you mean 'doorkey'" in str(err.value) and "attn-zoo list" in str(err.value)


def test_run_folder_loads_its_config_yml(tmp_path: Path) -> None:
    run = load_runs("doorkey", budget="smoke")[0]
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "config.yml").write_text(run.to_yaml())
    (again,) = load_runs(folder)
    assert again.experiment == "doorkey"
    assert again.body["n_timesteps"] == 300
    with pytest.raises(ConfigError, match="no config file"):
        load_runs(tmp_path)


# --- to_yaml round trip -----------------------------------------------------------------------


def strip_header(text: str) -> str:
    assert text.startswith("# ")
    return text.split("\n", 1)[1]


@pytest.mark.parametrize(
    ("name", "budget", "overrides"),
    [
        ("doorkey", "smoke", {}),
        ("doorkey", "full", {"learning_rate": 1e-3, "eval.freq": 0}),
        ("atari_nonlocal", "smoke", {"variant": "conv1x1"}),
        ("atariari", "smoke", {"model": "acnn"}),
        ("mnist", "smoke", {"model": "cnn"}),
    ],
)
def test_to_yaml_round_trips(
    tmp_path: Path, name: str, budget: str, overrides: dict[str, Any]
) -> None:
    (run,) = load_runs(name, budget=budget, overrides=overrides)
    path = tmp_path / "config.yml"
    path.write_text(run.to_yaml())
    (again,) = load_runs(path)
    assert again.experiment == run.experiment
    # The file spells out the whole eval block; everything else comes back as it was.
    assert {k: v for k, v in again.body.items() if k != "eval"} == {
        k: v for k, v in run.body.items() if k != "eval"
    }
    assert again.eval == run.eval
    assert strip_header(again.to_yaml()) == strip_header(run.to_yaml())
    assert f"(budget {budget})" in run.to_yaml().split("\n", 1)[0]


# --- range checks and unreadable files (issue 16) ----------------------------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"n_timesteps": 0}, "'n_timesteps' must be between 1 and"),
        ({"n_timesteps": -5}, "'n_timesteps' must be between 1 and"),
        ({"torch_threads": 100000}, "'torch_threads' must be between 1 and"),
        ({"n_envs": 0}, "'n_envs' must be between 1 and"),
        ({"batch_size": 0}, "'batch_size' must be between 1 and"),
        ({"save_freq": -1}, "'save_freq' must be between 0 and"),
        ({"gamma": 1.5}, r"'gamma' must be in \[0, 1\], got 1.5"),
        ({"gamma": -0.1}, r"'gamma' must be in \[0, 1\]"),
        ({"learning_rate": -1.0}, "'learning_rate' must be finite and positive"),
        ({"learning_rate": float("nan")}, "'learning_rate' must be finite and positive"),
    ],
)
def test_budgets_and_sizes_are_range_checked(
    tmp_path: Path, changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_one(tmp_path, **changes)


def test_yaml_syntax_errors_and_unsafe_tags_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("exp: {algo: ppo, env: [\n")
    with pytest.raises(ConfigError, match=r"bad\.yml: YAML syntax error at line"):
        load_runs(bad)
    marker = tmp_path / "pwned"
    bad.write_text(f"exp: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(ConfigError, match=r"bad\.yml: unsafe or unknown YAML tag"):
        load_runs(bad)
    assert not marker.exists()
    with pytest.raises(ConfigError, match="--set a=\\[1: YAML syntax error"):
        parse_overrides(["a=[1"])


@pytest.mark.parametrize(
    "name",
    ["../../../x", "/some/where", "a/b", "..", ".hidden", "-x", "x" * 300, "naïve", "a b"],
)
def test_an_experiment_name_is_one_folder_name(tmp_path: Path, name: str) -> None:
    # The name is the folder under runs/: '../../../x' and '/some/where' trained outside
    # --root, 300 characters ended in an internal OSError (issue 68, items 3 and 8).
    path = write_family(tmp_path, {name: BASE})
    with pytest.raises(ConfigError, match="is not a folder name"):
        load_runs(path)


def test_a_matrix_cell_is_one_folder_name(tmp_path: Path) -> None:
    body = {**BASE, "env": "{game}", "matrix": {"game": ["../../CartPole-v1"]}}
    with pytest.raises(ConfigError, match=r"the matrix cell .* is not a folder"):
        load_runs(write_family(tmp_path, {"exp": body}))
    assert [r.experiment for r in load_one(tmp_path)] == ["exp"]  # plain names still load
