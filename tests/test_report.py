"""attn-zoo report: tables, CSV and curves from small run folders made here, the page block."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import pytest

from zoo.cli import main
from zoo.config_checks import ConfigError
from zoo.experiments import find_experiment
from zoo.report import (
    chain_rows,
    collect,
    curves_match,
    plot_chain,
    recipe_chains,
    report,
    summary_table,
    window_returns,
)

PAGE = "intro\n<!-- report: attn-zoo report E7 -->\nold table\n<!-- /report -->\nafter\n"


def _run(folder: Path, seed: int, test: float, returns: list[float]) -> Path:
    """A finished PPO-like run folder: eval.json, status.json, config.yml and metrics.csv."""
    folder.mkdir(parents=True)
    policy = {"n_episodes": 10, "mean_reward": test, "std_reward": 1.5}
    (folder / "eval.json").write_text(json.dumps({"policies": {"stochastic": policy}}))
    status = {"seed": seed, "state": "finished", "num_timesteps": 1000, "wall_seconds": 120.0}
    (folder / "status.json").write_text(json.dumps(status))
    (folder / "config.yml").write_text("# atariari/Pong-L-fc (budget cpu), seed 0\natariari:\n")
    rows = ["step,wall_time,metric,value"]
    rows += [f"{100 * (i + 1)},{i}.0,episode_return,{value}" for i, value in enumerate(returns)]
    (folder / "metrics.csv").write_text("\n".join(rows) + "\n")
    return folder


def _grid(root: Path) -> None:
    """E7's first two cells under ROOT/results, two seeds and one seed."""
    cell = root / "results" / "atariari" / "Pong-L-g_awrl"
    _run(cell / "0-20260101-000000", 0, -20.0, [-21.0] * 9 + [-19.0])
    _run(cell / "1-20260101-000000", 1, 10.0, [-21.0] * 9 + [11.0])
    _run(root / "results" / "atariari" / "Pong-L-fc" / "0-20260101-000000", 0, -5.0, [-4.0] * 10)


def test_table_mean_and_sd_over_seeds_and_over_episodes_for_one_run(tmp_path: Path) -> None:
    root = tmp_path
    _grid(root)
    exp = find_experiment("E7")
    small = dataclasses.replace(exp, cells=exp.cells[:2], probes=())
    lines = summary_table(collect(small, root / "results"), small).splitlines()
    assert lines[0].startswith("| cell | runs | test return | per run | training return")
    # two seeds: -5.0 ± sd(-20, 10) = 21.2; the final 10% of steps (900-1000) holds the last
    # two episodes: (-21 - 19) / 2 = -20 and (-21 + 11) / 2 = -5
    assert lines[2] == (
        "| Pong L, g-AWRL | 2 | -5.0 ± 21.2 (2 seeds) | -20.0 / 10.0 | -12.5 ± 10.6 | learns Pong |"
    )
    assert lines[3] == "| Pong L, FC | 1 | -5.0 ± 1.5 (10 episodes) | | -4.0 | |"


def test_report_writes_summary_csv_curves_and_refreshes_the_page(tmp_path: Path) -> None:
    root = tmp_path
    _grid(root)
    page = root / "docs" / "experiments" / "e7_atariari.md"
    page.parent.mkdir(parents=True)
    page.write_text(PAGE)
    exp = find_experiment("E7")
    with pytest.raises(ConfigError, match="no finished run folder"):
        report("E7", root=root, plot=False)  # the other six cells have no runs here
    assert page.read_text() == PAGE  # nothing written
    assert not (root / "results" / "atariari" / "report").exists()

    folders = [root / "results" / "atariari" / "Pong-L-g_awrl"]
    out = root / "out"
    result = report("E7", folders, root=root, out=out)
    assert result.experiment is exp
    assert {p.name for p in result.written} == {
        "summary.md",
        "summary.csv",
        "curves.png",
    }
    assert page.read_text() == PAGE  # other runs than the page's evidence: page untouched
    assert result.table in (out / "summary.md").read_text()
    with (out / "summary.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["seed"], r["score"], r["final_return"]) for r in rows] == [
        ("0", "-20", "-20"),
        ("1", "10", "-5"),
    ]
    assert (out / "curves.png").stat().st_size > 0 and (out / "curves.csv").is_file()


def test_folders_given_are_the_figure_groups_as_in_the_table(tmp_path: Path) -> None:
    # An A/B: the same cell (same config header) under two folders, one with a change.
    root = tmp_path
    _grid(root)
    a = root / "results" / "atariari" / "Pong-L-g_awrl"
    b = root / "results" / "atariari" / "ab" / "Pong-L-g_awrl"
    _run(b / "0-20260102-000000", 0, -7.0, [-21.0] * 8 + [-9.0, -7.0])
    result = report("E7", [a, b], root=root, out=root / "out")
    cells = [row.cell.label for row in result.cells]
    assert len(cells) == 2
    with (root / "out" / "curves.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["metric"] == "episode_return"]
    assert {r["group"]: int(r["n"]) for r in rows} == {cells[0]: 2, cells[1]: 1}


def test_default_cells_refresh_the_marked_page_table(tmp_path: Path, monkeypatch) -> None:
    root = tmp_path
    _grid(root)
    page = root / "docs" / "experiments" / "e7_atariari.md"
    page.parent.mkdir(parents=True)
    page.write_text(PAGE)
    exp = find_experiment("E7")
    small = dataclasses.replace(exp, cells=exp.cells[:2], probes=())
    monkeypatch.setattr("zoo.experiments.EXPERIMENTS", (small,))
    result = report("E7", root=root, plot=False)
    assert page in result.written
    text = page.read_text()
    assert "old table" not in text and result.table in text
    assert text.startswith("intro\n<!-- report: attn-zoo report E7 -->\n| cell |")
    assert (root / "results" / "atariari" / "report" / "summary.md").is_file()
    again = report("E7", root=root, plot=False)  # the same table: the page is not rewritten
    assert page not in again.written and page.read_text() == text

    page.write_text("no markers\n")
    (root / "results" / "atariari" / "report" / "summary.md").unlink()
    with pytest.raises(ValueError, match="needs one"):
        report("E7", root=root, plot=False)
    assert not (root / "results" / "atariari" / "report" / "summary.md").exists()


def test_cli_report_prints_the_table_and_user_errors_exit_2(tmp_path: Path, capsys) -> None:
    _grid(tmp_path)
    run = tmp_path / "results" / "atariari" / "Pong-L-fc"
    assert main(["report", "atariari", str(run), "--out", str(tmp_path / "o"), "--no-plot"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| cell | runs | test return |") and "| 1 | -5.0 ± 1.5" in out
    assert main(["report", "E9"]) == 2
    assert "attn-zoo: error: unknown experiment 'E9'" in capsys.readouterr().err
    assert main(["report", "E7", str(tmp_path / "missing"), "--no-plot"]) == 2
    assert not (tmp_path / "missing").exists()


def test_windows_table_is_each_cells_return_per_window_over_its_runs(tmp_path: Path) -> None:
    _grid(tmp_path)
    # episodes end at steps 100, 200, ..., 1000: windows of 500 hold five each
    run = tmp_path / "results" / "atariari" / "Pong-L-g_awrl" / "1-20260101-000000"
    assert window_returns(run, 500).tolist() == [-21.0, (-21.0 * 4 + 11.0) / 5]
    assert window_returns(run, 400).tolist() == [-21.0, -21.0, (-21.0 + 11.0) / 2]
    cells = [tmp_path / "results" / "atariari" / n for n in ("Pong-L-g_awrl", "Pong-L-fc")]
    out = tmp_path / "out"
    result = report("E7", cells, root=tmp_path, out=out, plot=False, windows=500)
    assert {p.name for p in result.written} >= {"windows.md", "windows.csv"}
    lines = (out / "windows.md").read_text().splitlines()
    assert lines[0] == "| cell | runs | 0-500 | 500-1k |"
    # seed 0: -21 then (-84 - 19) / 5 = -20.6; seed 1: -21 then -14.6
    assert lines[2] == (
        f"| {cells[0]} | 2 | -21.0 ± 0.0 (-21.0 / -21.0) | -17.6 ± 4.2 (-20.6 / -14.6) |"
    )
    assert lines[3] == f"| {cells[1]} | 1 | -4.0 | -4.0 |"
    with (out / "windows.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 6 and rows[3]["mean_return"] == "-14.6" and rows[3]["window_end"] == "1000"


def test_curves_match_is_the_rule_fixed_in_advance(tmp_path: Path) -> None:
    exp = find_experiment("E7")
    base = tmp_path / "base"
    _run(base / "0", 0, -10.0, [-21.0] * 5 + [-15.0] * 5)
    _run(base / "1", 1, -12.0, [-21.0] * 5 + [-17.0] * 5)  # windows of 500: -21, -16
    close, far = tmp_path / "close", tmp_path / "far"
    _run(close / "0", 0, -12.5, [-21.0] * 5 + [-16.5] * 5)  # gap 0.5; test -12.5 in -11 ± 2.8
    _run(far / "0", 0, -11.0, [-21.0] * 5 + [-17.5] * 5)  # gap 1.5
    (a, b, c) = collect(exp, folders=[base, close, far])
    verdict = curves_match(a, b, 500)
    assert verdict["match"] and verdict["window_means"] == [[-21.0, -16.0], [-21.0, -16.5]]
    assert verdict["largest_window_gap"] == 0.5 and verdict["windows_compared"] == 2
    assert verdict["test"] == {"base_mean": -11.0, "base_sd": 1.414, "new_mean": -12.5, "sds": 2.0}
    assert not curves_match(a, c, 500)["match"]  # one window 1.5 apart
    assert curves_match(a, c, 500, window_tolerance=1.5)["match"]
    assert not curves_match(a, b, 500, test_sds=1.0)["match"]  # -12.5 outside -11 ± 1.4
    with pytest.raises(ValueError, match="at least two base seeds"):
        curves_match(b, a, 500)


def test_cli_windows_must_be_positive_and_nothing_is_written(tmp_path: Path, capsys) -> None:
    _grid(tmp_path)
    run = tmp_path / "results" / "atariari" / "Pong-L-fc"
    out = tmp_path / "o"
    assert main(["report", "E7", str(run), "--out", str(out), "--windows", "0"]) == 2
    assert "--windows must be a positive number of steps" in capsys.readouterr().err
    assert not out.exists()
    assert main(["report", "E7", str(run), "--out", str(out), "--no-plot", "--windows", "1e3"]) == 0
    assert (out / "windows.md").read_text().count("\n") == 3


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


def test_report_replaces_symlinked_outputs_instead_of_writing_through(tmp_path: Path) -> None:
    _grid(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    victims = {}
    for name in ("summary.md", "summary.csv", "curves.png", "curves.csv"):
        victims[name] = tmp_path / f"victim-{name}"
        victims[name].write_text("precious")
        (out / name).symlink_to(victims[name])
    folders = [tmp_path / "results" / "atariari" / "Pong-L-g_awrl"]
    report("E7", folders, root=tmp_path, out=out)
    for name, victim in victims.items():
        assert victim.read_text() == "precious", name
        assert not (out / name).is_symlink() and (out / name).stat().st_size > 0, name


def test_probe_table_goes_to_probes_md_and_the_page_block(tmp_path: Path, monkeypatch) -> None:
    root = tmp_path
    _grid(root)
    probe = _run(root / "results" / "atariari" / "probes" / "p", 0, -20.0, [-21.0] * 10)
    with (probe / "metrics.csv").open("a") as fh:
        fh.write("1000,9.0,train/entropy_loss,-1.5\n1000,9.0,train/approx_kl,0.02\n")
        fh.write("1000,9.0,train/clip_fraction,0.2\n")
    page = root / "docs" / "experiments" / "e7_atariari.md"
    page.parent.mkdir(parents=True)
    page.write_text(PAGE + "<!-- probes: attn-zoo report E7 -->\nold\n<!-- /probes -->\n")
    exp = find_experiment("E7")
    small = dataclasses.replace(
        exp, cells=exp.cells[:2], probes=(("a probe", "atariari/probes/p"),)
    )
    monkeypatch.setattr("zoo.experiments.EXPERIMENTS", (small,))
    result = report("E7", root=root, plot=False)
    probes_md = root / "results" / "atariari" / "report" / "probes.md"
    assert probes_md in result.written and page in result.written
    row = (
        "| a probe (`p`) | 1,000 | -21.0 | -21.0 | n/a / n/a / n/a | 0.0200, 0.200 "
        "| 0.0200, 0.200 | -20.0 ± 1.5 |"
    )
    assert row in probes_md.read_text() and row in page.read_text()
    assert "old\n" not in page.read_text() and "old table" not in page.read_text()

    # a probe folder that is gone stops the report before anything is written
    missing = dataclasses.replace(small, probes=(("gone", "atariari/probes/gone"),))
    monkeypatch.setattr("zoo.experiments.EXPERIMENTS", (missing,))
    probes_md.unlink()
    before = page.read_text()
    with pytest.raises((ConfigError, FileNotFoundError)):
        report("E7", root=root, plot=False)
    assert page.read_text() == before and not probes_md.exists()

    # a page with the table's markers but not the probes' keeps its old table
    monkeypatch.setattr("zoo.experiments.EXPERIMENTS", (small,))
    page.write_text(PAGE)
    with pytest.raises(ConfigError, match="probes"):
        report("E7", root=root, plot=False)
    assert page.read_text() == PAGE and not probes_md.exists()
