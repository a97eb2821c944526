"""A recipe's stages end to end, on stage folders made here."""

from __future__ import annotations

import json
from pathlib import Path

from zoo.report_chains import chain_rows, plot_chain, recipe_chains


def _stages(
    root: Path, plan: list[tuple[str, float, list[tuple[int, float]], float]]
) -> list[Path]:
    """Stage folders ``root/stages/<k>_stage`` as a recipe writes them."""
    stages = []
    for i, (count, wall, checks, final) in enumerate(plan):
        stage = root / "stages" / f"{i + 1}_stage"
        stage.mkdir(parents=True)
        status = {"wall_seconds": wall, count: checks[-1][0] or 10}
        (stage / "status.json").write_text(json.dumps(status))
        rows = [{count: c, "test_mean": m} for c, m in checks]
        (stage / "evaluations.json").write_text(json.dumps(rows))
        policy = {"deterministic": {"mean_reward": final}}
        (stage / "eval.json").write_text(json.dumps({"policies": policy}))
        stages.append(stage)
    return stages


def test_chain_places_stages_end_to_end_by_wall_time(tmp_path: Path) -> None:
    plan = [
        ("update", 600.0, [(50, 10.0), (100, 20.0)], 15.0),
        ("generation", 300.0, [(0, 18.0)], 30.0),
    ]
    stages = _stages(tmp_path, plan)
    assert chain_rows(stages) == [
        ("1_stage", "check", 5.0, 10.0),
        ("1_stage", "check", 10.0, 20.0),
        ("1_stage", "final", 10.0, 15.0),
        ("2_stage", "check", 10.0, 18.0),  # generation 0: the second stage's start
        ("2_stage", "final", 15.0, 30.0),
    ]
    out = plot_chain({"seed 0": stages}, tmp_path / "chain.png", goal=25.0)
    assert out.stat().st_size > 0
    lines = (tmp_path / "chain.csv").read_text().splitlines()
    assert lines[0] == "run,stage,kind,minutes,mean_return"
    assert lines[-1] == "seed 0,2_stage,final,15.0,30.0"


def test_recipe_chains_are_each_seeds_stages_in_stage_order(tmp_path: Path) -> None:
    plan = [("update", 60.0, [(10, 1.0)], 1.0)] * 11  # 10_stage sorts after 9_stage
    for seed in (1, 0):
        run = tmp_path / "recipe" / f"{seed}-20260101-000000"
        _stages(run, plan)
        (run / "status.json").write_text(json.dumps({"seed": seed}))
    chains = recipe_chains("recipe/*", tmp_path)
    assert list(chains) == ["seed 0", "seed 1"]
    assert [p.name for p in chains["seed 0"]] == [f"{k}_stage" for k in range(1, 12)]
    assert recipe_chains("nothing/*", tmp_path) == {}
