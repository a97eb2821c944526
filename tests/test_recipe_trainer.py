"""Tests for zoo.trainers.recipe_trainer: multi-stage recipes (``algo: recipe``) trained into
one run folder from one command, resumed stage by stage, and loaded through their final stage."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import zoo
from zoo.config_checks import ConfigError
from zoo.trainers.recipe_trainer import plan, stage_seed

# Two shipped ES experiments at their smoke budget: fast, and the second takes an `init`.
TWO_STAGES = [
    {"name": "first", "experiment": "cartpole_pi_x0"},
    {"name": "second", "experiment": "cartpole_pi_tune"},
]


def recipe_file(tmp_path: Path, stages: list[Any], **extra: Any) -> Path:
    body = {
        "algo": "recipe",
        "env": "attn_envs/CartPoleSwingUpHarder-v0",
        "stages": stages,
        "eval": {"final_episodes": 5, "test_seed": 3_000_000},
        "budgets": {"smoke": {}},
        **extra,
    }
    path = tmp_path / "recipe.yml"
    path.write_text(yaml.safe_dump({"my_recipe": body}))
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> zoo.Run:
    tmp = tmp_path_factory.mktemp("recipe")
    return zoo.train(recipe_file(tmp, TWO_STAGES), budget="smoke", seed=4, root=tmp / "runs")


def test_each_stage_is_a_run_folder_seeded_from_the_recipe_seed(trained: zoo.Run) -> None:
    first = zoo.load(trained.path / "stages" / "1_first")
    second = zoo.load(trained.path / "stages" / "2_second")
    assert (first.config.seed, second.config.seed) == (400, 401)
    assert [s.index for s in plan(trained.config)] == [0, 1]
    assert stage_seed(trained.config, plan(trained.config)[1]) == 401
    for stage in (first, second):
        assert stage.status["state"] == "finished" and (stage.path / "eval.json").exists()
        assert stage.config.budget == "smoke"
    assert trained.status["state"] == "finished"
    assert trained.status["stage"] == "2/2 second"


def test_a_stage_starts_from_the_previous_stages_best_model(trained: zoo.Run) -> None:
    second = zoo.load(trained.path / "stages" / "2_second")
    assert Path(second.config.body["init"]) == trained.path / "stages" / "1_first"
    # the tune stage tests its start first: generation 0 is the first stage's best model
    start = json.loads((second.path / "evaluations.json").read_text())[0]
    checks = second.config.eval
    first_best = zoo.evaluate(trained.path / "stages" / "1_first", n_episodes=checks.n_episodes,
                              seed=checks.seed)  # fmt: skip
    assert start["generation"] == 0
    assert start["test_mean"] == pytest.approx(
        first_best["policies"]["deterministic"]["mean_reward"]
    )


def test_the_recipe_is_tested_as_its_final_stage_on_its_own_test_draw(trained: zoo.Run) -> None:
    result = trained.eval
    assert result["stage"] == "stages/2_second"
    assert result["test_seed"] == 3_000_000 and result["n_episodes"] == 5
    again = zoo.evaluate(trained.path / "stages" / "2_second", n_episodes=5, seed=3_000_000)
    assert result["policies"] == again["policies"]
    other = zoo.evaluate(trained.path, n_episodes=3, seed=17)
    assert other["n_episodes"] == 3 and other["test_seed"] == 17
    assert trained.acting().path == trained.path / "stages" / "2_second"


def test_the_input_regression_of_a_recipe_is_its_final_stages(trained: zoo.Run) -> None:
    from zoo.analysis import input_regression

    recipe = input_regression(trained.path, n_episodes=3, seed=5)
    final = input_regression(trained.path / "stages" / "2_second", n_episodes=3, seed=5)
    assert recipe == final and len(recipe["inputs"]) == 5


def test_config_yml_records_each_stages_budget_and_reloads(trained: zoo.Run) -> None:
    saved = yaml.safe_load((trained.path / "config.yml").read_text())["my_recipe"]
    assert [s["budget"] for s in saved["stages"]] == ["smoke", "smoke"]
    again = zoo.load(trained.path)
    assert again.config.algo == "recipe"
    assert again.model("best") is not None


def test_an_interrupted_recipe_resumes_from_the_stage_that_was_cut(tmp_path: Path) -> None:
    path = recipe_file(tmp_path, TWO_STAGES)
    seen: list[int] = []

    def cut_the_second_stage(record: dict[str, Any]) -> None:
        seen.append(record["generation"])
        if len(seen) == 3:  # stage 1 has 2 generations: this is stage 2's first
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        zoo.train(path, budget="smoke", seed=1, callbacks=[cut_the_second_stage],
                  run_dir=tmp_path / "run")  # fmt: skip
    run = tmp_path / "run"
    assert zoo.load(run).status["state"] == "interrupted"
    assert zoo.load(run / "stages" / "2_second").status["state"] == "interrupted"
    first = run / "stages" / "1_first"
    before = {f: f.stat().st_mtime_ns for f in first.rglob("*") if f.is_file()}
    resumed = zoo.resume(run)
    assert resumed.status["state"] == "finished"
    assert zoo.load(run / "stages" / "2_second").status["state"] == "finished"
    assert {f: f.stat().st_mtime_ns for f in first.rglob("*") if f.is_file()} == before
    assert resumed.eval["stage"] == "stages/2_second"


def test_a_teacher_stage_is_passed_to_a_cloning_stage(tmp_path: Path) -> None:
    run = zoo.train("cartpole_pi_bc", budget="smoke", seed=2, run_dir=tmp_path / "bc")
    clone = zoo.load(run.path / "stages" / "2_clone")
    assert clone.config.algo == "dagger"
    assert Path(clone.config.body["teacher"]) == run.path / "stages" / "1_fnn"
    assert "init" not in clone.config.body  # dagger has no init key: init: null sets none
    assert run.eval["stage"] == "stages/2_clone"


@pytest.mark.parametrize(
    ("stages", "message"),
    [
        ([], "non-empty list"),
        ([{"experiment": "cartpole_pi_x0", "epochs": 3}], "unknown key 'epochs'"),
        ([{"name": "a"}], "needs 'experiment'"),
        ([{"experiment": "no_such_thing"}], "unknown experiment 'no_such_thing'"),
        ([{"experiment": "cartpole_pi_x0", "name": "a/b"}], "'name' must be letters"),
        (
            [
                {"experiment": "cartpole_pi_x0", "name": "a"},
                {"experiment": "cartpole_pi_tune", "name": "a"},
            ],
            "names are unique",
        ),
        (
            [
                {"experiment": "cartpole_pi_x0", "init": "later"},
                {"experiment": "cartpole_pi_tune", "name": "later"},
            ],
            "'init' must name an earlier stage",
        ),
        ([{"experiment": "cartpole_pi_x0", "overrides": {"seed": 3}}], "may not set 'seed'"),
        ([{"experiment": "cartpole_pi_x0", "overrides": {"n_generations": 0}}], "between 1"),
        ([{"experiment": "cartpole_pi"}], "cannot be a recipe"),
        ([{"experiment": "cartpole_pi_x0", "budget": "tiny"}], "tiny"),
    ],
)
def test_a_bad_recipe_is_refused_before_anything_is_written(
    tmp_path: Path, stages: list[Any], message: str
) -> None:
    path = recipe_file(tmp_path, stages)
    with pytest.raises(ConfigError, match=message):
        zoo.train(path, budget="smoke", root=tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


def test_the_shipped_e3_recipe_runs_the_committed_route() -> None:
    (run,) = zoo.load_runs("cartpole_pi", budget="cpu")
    stages = plan(run)
    assert [s.experiment for s in stages] == [
        "cartpole_pi_hold_harder", "cartpole_pi_catch", *["cartpole_pi_tune"] * 5
    ]  # fmt: skip
    assert stages[5].overrides == {"population": 512}
    assert run.eval.test_seed not in range(run.eval.seed, run.eval.seed + 10_000)


@pytest.mark.parametrize("linked", ["stages", "stages/2_second"])
def test_a_linked_stage_folder_is_replaced_never_written_through(
    tmp_path: Path, linked: str
) -> None:
    """Issue 68: a shared recipe folder whose ``stages/`` (or one stage folder) links
    elsewhere: ``--resume`` trains that stage in a real folder of its own; the link's
    target keeps every byte."""
    import shutil

    run = zoo.train(recipe_file(tmp_path, TWO_STAGES), budget="smoke", seed=1,
                    run_dir=tmp_path / "run").path  # fmt: skip
    victim = tmp_path / "victim"
    shutil.copytree(run / linked, victim)
    shutil.rmtree(run / linked)
    (run / linked).symlink_to(victim)
    if linked == "stages":
        shutil.rmtree(victim / "2_second")  # the stage to train again
    else:
        status = json.loads((victim / "status.json").read_text())
        (victim / "status.json").write_text(json.dumps({**status, "state": "interrupted"}))
    status = json.loads((run / "status.json").read_text())
    (run / "status.json").write_text(json.dumps({**status, "state": "interrupted"}))
    before = {p: p.read_bytes() for p in victim.rglob("*") if p.is_file()}
    resumed = zoo.resume(run)
    assert resumed.status["state"] == "finished"
    assert {p: p.read_bytes() for p in victim.rglob("*") if p.is_file()} == before
    assert not (run / linked).is_symlink()
    assert zoo.load(run / "stages" / "2_second").status["state"] == "finished"
