"""Learning curves by window of steps and the A/B rule, on small run folders made here."""

from __future__ import annotations

from pathlib import Path

import pytest
from _run_folders import e7_grid, finished_run

from zoo.curve_windows import curves_match, window_returns
from zoo.experiments import find_experiment
from zoo.run_scores import collect


def test_window_returns_is_the_mean_of_the_episodes_ending_in_each_window(tmp_path: Path) -> None:
    e7_grid(tmp_path)
    # episodes end at steps 100, 200, ..., 1000: windows of 500 hold five each
    run = tmp_path / "results" / "atariari" / "Pong-L-g_awrl" / "1-20260101-000000"
    assert window_returns(run, 500).tolist() == [-21.0, (-21.0 * 4 + 11.0) / 5]
    assert window_returns(run, 400).tolist() == [-21.0, -21.0, (-21.0 + 11.0) / 2]


def test_curves_match_is_the_rule_fixed_in_advance(tmp_path: Path) -> None:
    exp = find_experiment("E7")
    base = tmp_path / "base"
    finished_run(base / "0", 0, -10.0, [-21.0] * 5 + [-15.0] * 5)
    finished_run(base / "1", 1, -12.0, [-21.0] * 5 + [-17.0] * 5)  # windows of 500: -21, -16
    close, far = tmp_path / "close", tmp_path / "far"
    # gap 0.5; test -12.5 in -11 ± 2.8
    finished_run(close / "0", 0, -12.5, [-21.0] * 5 + [-16.5] * 5)
    finished_run(far / "0", 0, -11.0, [-21.0] * 5 + [-17.5] * 5)  # gap 1.5
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
