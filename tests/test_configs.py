"""Acceptance tests over every config in zoo/configs: each budget resolves and validates, and
``attn-zoo train <any config> --budget smoke`` trains every smoke cell end to end.

Each experiment is its own test (parametrised over ``zoo.list_experiments()``), so a broken
config names itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import zoo
from zoo.config import BUDGETS, read_family

EXPERIMENTS = sorted(zoo.list_experiments())


def test_there_are_experiments() -> None:
    assert {"doorkey", "mnist", "atariari", "atari_nonlocal"} <= set(EXPERIMENTS)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_budget_resolves_and_validates(name: str) -> None:
    for budget in BUDGETS:
        runs = zoo.load_runs(name, budget=budget)  # validates every matrix cell
        assert runs, (name, budget)
        assert {r.budget for r in runs} == {budget}
        assert {r.experiment for r in runs} == {name}
        cells = [(r.tag, r.seed) for r in runs]
        assert len(set(cells)) == len(cells), f"{name}/{budget}: two cells share a folder"


# What a budget's size is measured in, per algo (SB3 algorithms and bc: n_timesteps).
LENGTH_KEYS = {
    "classifier": "iterations",
    "cmaes": "n_generations",
    "dagger": "n_rounds",
    "apg": "n_updates",
}


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_has_smoke_and_full_budgets_and_smoke_is_smaller(name: str) -> None:
    raw = read_family(zoo.list_experiments()[name])[name]
    assert isinstance(raw.get("description"), str) and raw["description"]
    budgets = raw.get("budgets") or {}
    assert {"smoke", "full"} <= set(budgets), f"{name} budgets: {sorted(budgets)}"
    smoke, full = (zoo.load_runs(name, budget=b) for b in ("smoke", "full"))
    assert len(smoke) <= len(full)
    if smoke[0].algo == "recipe":  # a recipe's size is its stages': each is checked here
        return
    length = LENGTH_KEYS.get(smoke[0].algo, "n_timesteps")
    assert max(r.body[length] for r in smoke) < min(r.body[length] for r in full)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_smoke_trains_every_cell(name: str, tmp_path: Path) -> None:
    cells = zoo.load_runs(name, budget="smoke")
    for cell in cells:  # E4 BC's teacher is the authors' ant_mlp, imported (git-ignored)
        teacher = cell.body.get("teacher")
        if cell.algo == "dagger" and (
            teacher is None or (isinstance(teacher, str) and not Path(teacher).exists())
        ):
            pytest.skip(f"{name}: its teacher is the authors' ant_mlp, named with --set teacher")
    runs = zoo.train_all(name, budget="smoke", root=tmp_path)
    assert [r.config.tag for r in runs] == [c.tag for c in cells]
    for run in runs:
        assert run.status["state"] == "finished", run.path
        assert run.path.is_relative_to(tmp_path / name)
        result = json.loads((run.path / "eval.json").read_text())
        assert (result["experiment"], result["tag"], result["budget"]) == (
            name,
            run.config.tag,
            "smoke",
        )
        if run.config.algo == "classifier":
            assert 0.0 <= result["test_accuracy"] <= 1.0
        elif run.config.algo == "cmaes":
            assert run.status["generation"] == run.config.body["n_generations"]
        elif run.config.algo == "dagger":
            assert run.status["round"] == run.config.body["n_rounds"]
        elif run.config.algo == "recipe":
            stages = sorted((run.path / "stages").iterdir())
            assert len(stages) == len(run.config.body["stages"])
            assert all(zoo.load(s).status["state"] == "finished" for s in stages)
            assert result["stage"] == stages[-1].relative_to(run.path).as_posix()
        elif run.config.algo == "apg":
            assert run.status["update"] == run.config.body["n_updates"]
        else:
            assert run.status["num_timesteps"] >= run.config.body["n_timesteps"]
            for summary in result["policies"].values():
                assert summary["n_episodes"] == run.config.eval.final_episodes


def test_e7_ppo_and_atari_settings_are_the_theses() -> None:
    # thesis table 7.1 + appendix C (value clipping with the policy's clip), AtariARI's envs
    # (NoFrameskip-v4: frame skip 4, no sticky actions, up to 30 no-ops at reset)
    for run in zoo.load_runs("atariari", budget="full", overrides={"game": "Pong"}):
        body = run.body
        assert body["clip_range_vf"] == body["clip_range"] == 0.2
        assert (body["n_steps"], body["batch_size"], body["n_epochs"], body["n_envs"]) == (
            128, 256, 3, 8,
        )  # fmt: skip
        kwargs = body["env_kwargs"]
        assert (kwargs["frameskip"], kwargs["repeat_action_probability"]) == (4, 0.0)
        assert body["env_wrapper"][0] == {"NoopResetEnv": {"noop_max": 30}}
        assert kwargs["order_seed"] == run.seed == 0  # one feature order per run
    for seed in (0, 3):
        runs = zoo.load_runs("atariari", budget="cpu", seed=seed)
        assert {r.body["env_kwargs"]["order_seed"] for r in runs} == {seed}
        assert f"order_seed: {seed}\n" in runs[0].to_yaml()  # what `attn-zoo show` prints
        assert body["normalize"]["clip_obs"] == float("inf")  # appendix C: no obs clipping


def test_e7_cpu_budget_is_issue_18s_grid() -> None:
    # Pong at L and 4L, 3 seeds, 2M steps (the FC curve at L: -20 to -3 in 2M steps)
    runs = zoo.load_runs("atariari", budget="cpu")
    cells = {(r.tag, r.seed) for r in runs}
    for condition in ("L", "4L"):
        for model in ("g_awrl", "fc"):
            assert {(f"Pong-{condition}-{model}", s) for s in (0, 1, 2)} <= cells
    assert {r.body["n_timesteps"] for r in runs} == {2_000_000}
    picked = zoo.load_runs("atariari", budget="cpu", overrides={"condition": "L", "model": "fc"})
    assert sorted(r.seed for r in picked) == [0, 1, 2]


def test_e8_reports_the_final_10k_steps_return() -> None:
    for run in zoo.load_runs("atari_nonlocal", budget="full", overrides={"game": "Pong"}):
        assert run.eval.final_steps == 10_000
        assert run.body["env_wrapper"] == ["AtariCropWrapper"]


def test_e8_cpu_budget_keeps_its_recorded_kernels_and_full_runs_the_fast_ones() -> None:
    """The committed 2M runs replay to the last bit only on the kernels they trained with."""
    for budget, fast in (("cpu", False), ("full", True)):
        runs = zoo.load_runs("atari_nonlocal", budget=budget, overrides={"game": "Pong"})
        for run in runs:
            kwargs = run.body["policy_kwargs"]["features_extractor_kwargs"]
            assert (kwargs["channels_last"], kwargs["fast_rows"]) == (fast, fast), run.tag
            assert run.body["algo"] == ("a2c_graph" if fast else "a2c"), run.tag
            assert run.body["vec_env"] == "dummy"
    assert {r.body["n_envs"] for r in zoo.load_runs("atari_nonlocal", budget="full")} == {16}


def test_seed_template_follows_the_seed_of_each_cell(tmp_path: Path) -> None:
    import yaml

    body = {
        "algo": "ppo",
        "env": "CartPole-v1",
        "policy": "MlpPolicy",
        "n_timesteps": 64,
        "env_kwargs": {"max_episode_steps": "{seed}"},
    }
    path = tmp_path / "t.yml"
    path.write_text(yaml.safe_dump({"t": {**body, "seed": 7}}))
    assert zoo.load_runs(path)[0].body["env_kwargs"]["max_episode_steps"] == 7
    assert zoo.load_runs(path, seed=9)[0].body["env_kwargs"]["max_episode_steps"] == 9
    path.write_text(yaml.safe_dump({"t": {**body, "matrix": {"seed": [1, 2]}}}))
    assert [r.body["env_kwargs"]["max_episode_steps"] for r in zoo.load_runs(path)] == [1, 2]


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_no_shipped_config_points_into_results_or_runs(name: str) -> None:
    # an installed package has neither folder: a warm start or teacher names an experiment
    # to train first (a recipe stage, teacher: {experiment: ...}) or a path the user passes
    raw = read_family(zoo.list_experiments()[name])[name]
    found = [s for s in _strings(raw) if s.startswith(("results/", "runs/", "./results", "./runs"))]
    assert not found, f"{name} points at {found}"
