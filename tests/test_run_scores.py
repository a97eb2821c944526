"""What a report reads of run folders: scores, their spread, seeds, and the rows of cells."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _run_folders import e7_grid, finished_run

from zoo.config_checks import ConfigError
from zoo.experiments import find_experiment
from zoo.run_scores import collect, md_row, read_score, runs_in


def test_runs_in_is_the_folder_itself_or_its_finished_children_sorted(tmp_path: Path) -> None:
    cell = tmp_path / "cell"
    finished_run(cell / "1-b", 1, 0.0, [0.0])
    finished_run(cell / "0-a", 0, 0.0, [0.0])
    (cell / "2-running").mkdir()  # no eval.json: not finished, not a row
    assert runs_in(cell) == [cell / "0-a", cell / "1-b"]
    assert runs_in(cell / "0-a") == [cell / "0-a"]
    assert runs_in(tmp_path / "missing") == []


def test_read_score_reads_the_policy_its_spread_and_the_runs_status(tmp_path: Path) -> None:
    run = finished_run(tmp_path / "r", 3, -7.0, [-21.0] * 9 + [-11.0])
    score = read_score(run, "test return")
    assert (score.seed, score.score, score.score_sd, score.episodes) == (3, -7.0, 1.5, 10)
    assert (score.num_timesteps, score.wall_minutes) == (1000, 2.0)
    # the last 10% of 1,000 steps, 900 to 1,000, holds the last two episodes
    assert score.final_return == -16.0
    # a final of 1 or more is steps: 500 to 1,000 holds six
    assert read_score(run, "test return", final=500).final_return == pytest.approx(-116 / 6)
    with pytest.raises(ConfigError, match="has no policy 'greedy'"):
        read_score(run, "test return", "greedy")


def test_read_score_of_success_and_accuracy_and_the_final_from_eval(tmp_path: Path) -> None:
    run = tmp_path / "r"
    run.mkdir()
    policy = {"success_rate": 0.97, "mean_reward": 0.5, "n_episodes": 100}
    result = {"policies": {"eps": policy}, "training_return": {"mean_reward": -3.25}}
    (run / "eval.json").write_text(json.dumps(result))
    score = read_score(run, "test success", final_from_eval=True)
    assert (score.score, score.score_sd, score.seed, score.final_return) == (
        0.97,
        None,
        None,
        -3.25,
    )
    with pytest.raises(ConfigError, match="no test_accuracy"):
        read_score(run, "test accuracy")


def test_collect_raises_on_a_cell_without_a_finished_run(tmp_path: Path) -> None:
    e7_grid(tmp_path)
    exp = find_experiment("E7")
    with pytest.raises(ConfigError, match="no finished run folder"):
        collect(exp, tmp_path / "results")  # E7's other cells have no runs here
    (row,) = collect(exp, folders=[tmp_path / "results" / "atariari" / "Pong-L-g_awrl"])
    assert [r.seed for r in row.runs] == [0, 1] and row.cell.label.endswith("Pong-L-g_awrl")


def test_md_row_leaves_empty_cells_empty() -> None:
    assert md_row(["a", "", 1]) == "| a | | 1 |"


def rewrite(file: Path, change: dict, *, inside: str | None = None) -> None:
    data = json.loads(file.read_text())
    (data["policies"]["stochastic"] if inside else data).update(change)
    file.write_text(json.dumps(data))


BAD_VALUES = [
    ("eval.json", "policy", {"mean_reward": "abc"}, "mean_reward must be a number"),
    ("eval.json", "policy", {"mean_reward": {}}, "mean_reward must be a number"),
    ("eval.json", "policy", {"mean_reward": [1]}, "mean_reward must be a number"),
    ("eval.json", "policy", {"mean_reward": None}, "mean_reward must be a number"),
    ("eval.json", "policy", {"mean_reward": float("nan")}, "mean_reward is nan"),
    ("eval.json", "policy", {"std_reward": float("inf")}, "std_reward is inf"),
    ("eval.json", "policy", {"n_episodes": "<script>alert(1)</script><!-- report: x -->"},
     "n_episodes must be a whole number"),
    ("eval.json", "policy", {"n_episodes": 2.5}, "n_episodes must be a whole number"),
    ("eval.json", "policy", {"n_episodes": True}, "n_episodes must be a whole number"),
    ("status.json", None, {"seed": "<b>0</b>"}, "seed must be a whole number"),
    ("status.json", None, {"num_timesteps": -1}, "num_timesteps must be a whole number"),
    ("status.json", None, {"wall_seconds": "12"}, "wall_seconds must be a number"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "inside", "change", "message"), BAD_VALUES)
def test_every_value_read_from_a_run_folder_is_checked_by_type_and_range(
    tmp_path: Path, name: str, inside: str | None, change: dict, message: str
) -> None:
    # issue 68, items 6 and 8: read_score kept n_episodes, seed and num_timesteps as they
    # came, and float() of "abc", {} or null was an internal error
    run = finished_run(tmp_path / "r", 3, -7.0, [-21.0] * 10)
    rewrite(run / name, change, inside=inside)
    with pytest.raises(ConfigError, match=message):
        read_score(run, "test return")


@pytest.mark.parametrize("name", ["eval.json", "status.json"])
def test_a_json_file_nested_100k_deep_is_one_config_error(tmp_path: Path, name: str) -> None:
    run = finished_run(tmp_path / "r", 3, -7.0, [-21.0] * 10)
    (run / name).write_text("[" * 100_000 + "]" * 100_000)  # RecursionError in json before
    with pytest.raises(ConfigError, match="nested more than 100 levels"):
        read_score(run, "test return")


def test_text_reaching_markdown_is_escaped() -> None:
    row = md_row(["<script>alert(1)</script>", "a|b", "<!-- report: x -->", "line\nbreak"])
    assert "<" not in row and ">" not in row and row.count(" | ") == 3  # four cells
    assert row == (
        "| &lt;script&gt;alert(1)&lt;/script&gt; | a\\|b | &lt;!-- report: x --&gt; | line break |"
    )
