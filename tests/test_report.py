"""attn-zoo report: tables, CSV and curves from small run folders made here, the page block."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import pytest
from _run_folders import e7_grid, finished_run

from zoo.cli import main
from zoo.config_checks import ConfigError
from zoo.experiments import find_experiment
from zoo.report import report, summary_table
from zoo.run_scores import collect

PAGE = "intro\n<!-- report: attn-zoo report E7 -->\nold table\n<!-- /report -->\nafter\n"


def test_table_mean_and_sd_over_seeds_and_over_episodes_for_onefinished_run(tmp_path: Path) -> None:
    root = tmp_path
    e7_grid(root)
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
    e7_grid(root)
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
    e7_grid(root)
    a = root / "results" / "atariari" / "Pong-L-g_awrl"
    b = root / "results" / "atariari" / "ab" / "Pong-L-g_awrl"
    finished_run(b / "0-20260102-000000", 0, -7.0, [-21.0] * 8 + [-9.0, -7.0])
    result = report("E7", [a, b], root=root, out=root / "out")
    cells = [row.cell.label for row in result.cells]
    assert len(cells) == 2
    with (root / "out" / "curves.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["metric"] == "episode_return"]
    assert {r["group"]: int(r["n"]) for r in rows} == {cells[0]: 2, cells[1]: 1}


def test_default_cells_refresh_the_marked_page_table(tmp_path: Path, monkeypatch) -> None:
    root = tmp_path
    e7_grid(root)
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
    e7_grid(tmp_path)
    run = tmp_path / "results" / "atariari" / "Pong-L-fc"
    assert main(["report", "atariari", str(run), "--out", str(tmp_path / "o"), "--no-plot"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| cell | runs | test return |") and "| 1 | -5.0 ± 1.5" in out
    assert main(["report", "E9"]) == 2
    assert "attn-zoo: error: unknown experiment 'E9'" in capsys.readouterr().err
    assert main(["report", "E7", str(tmp_path / "missing"), "--no-plot"]) == 2
    assert not (tmp_path / "missing").exists()


def test_windows_table_is_each_cells_return_per_window_over_its_runs(tmp_path: Path) -> None:
    e7_grid(tmp_path)
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


def test_cli_windows_must_be_positive_and_nothing_is_written(tmp_path: Path, capsys) -> None:
    e7_grid(tmp_path)
    run = tmp_path / "results" / "atariari" / "Pong-L-fc"
    out = tmp_path / "o"
    assert main(["report", "E7", str(run), "--out", str(out), "--windows", "0"]) == 2
    assert "--windows must be a positive number of steps" in capsys.readouterr().err
    assert not out.exists()
    assert main(["report", "E7", str(run), "--out", str(out), "--no-plot", "--windows", "1e3"]) == 0
    assert (out / "windows.md").read_text().count("\n") == 3


def test_report_replaces_symlinked_outputs_instead_of_writing_through(tmp_path: Path) -> None:
    e7_grid(tmp_path)
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
    e7_grid(root)
    probe = finished_run(root / "results" / "atariari" / "probes" / "p", 0, -20.0, [-21.0] * 10)
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


@pytest.mark.parametrize("default", ["folder given", "experiment's cells"])
def test_a_linked_report_folder_is_replaced_not_written_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, default: str
) -> None:
    # issue 68, item 5: report/ made with mkdir(exist_ok=True) followed a link planted in a
    # shared folder, and the target's summary.md was overwritten
    e7_grid(tmp_path)
    folder = tmp_path / "results" / "atariari" / "Pong-L-g_awrl"
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "summary.md").write_text("precious")
    if default == "folder given":
        (folder / "report").symlink_to(victim)
        report("E7", [folder], root=tmp_path, plot=False)
        target = folder / "report"
    else:
        exp = find_experiment("E7")
        small = dataclasses.replace(exp, cells=exp.cells[:2], probes=())
        monkeypatch.setattr("zoo.experiments.EXPERIMENTS", (small,))
        target = tmp_path / "results" / exp.folder / "report"
        target.symlink_to(victim)
        report("E7", root=tmp_path, plot=False)
    assert [p.name for p in victim.iterdir()] == ["summary.md"]
    assert (victim / "summary.md").read_text() == "precious"
    assert not target.is_symlink() and (target / "summary.md").is_file()


def test_a_contributed_eval_json_never_reaches_the_docs_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # issue 68, item 6: n_episodes holding <script> and a new report marker was pasted into
    # the experiment's page, and the next report refused the page
    e7_grid(tmp_path)
    page = tmp_path / "docs" / "experiments" / "e7_atariari.md"
    page.parent.mkdir(parents=True)
    page.write_text(PAGE)
    exp = find_experiment("E7")
    monkeypatch.setattr(
        "zoo.experiments.EXPERIMENTS", (dataclasses.replace(exp, cells=exp.cells[:2], probes=()),)
    )
    run = tmp_path / "results" / "atariari" / "Pong-L-fc" / "0-20260101-000000"
    result = json.loads((run / "eval.json").read_text())
    result["policies"]["stochastic"]["n_episodes"] = "<script>alert(1)</script>\n<!-- report: x -->"
    (run / "eval.json").write_text(json.dumps(result))
    monkeypatch.chdir(tmp_path)
    assert main(["report", "E7", "--no-plot"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "n_episodes must be a whole number" in err[0]
    assert page.read_text() == PAGE and not (tmp_path / "results" / "atariari" / "report").exists()
