"""Tests for zoo.robustness_tables (CSV, Markdown and PNG tables of a robustness sweep)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure
from PIL import Image

import zoo.robustness_tables
from attn_policies.canvas import new_figure
from zoo.robustness_tables import markdown, plot, write_table


def row(experiment: str, condition: str, mean: float, **extra: object) -> dict:
    return {
        "run": f"runs/{experiment}",
        "experiment": experiment,
        "condition": condition,
        "value": None,
        "train_ratio": 0.0,
        "mean_reward": mean,
        "std_reward": 1.0,
        "n_episodes": 0 if math.isnan(mean) else 5,
        "note": "",
        **extra,
    }


def test_markdown_has_runs_as_rows_and_conditions_as_columns() -> None:
    rows = [
        row("pi", "as is", 10.0),
        row("pi", "shuffled", 9.5),
        row("fnn", "as is", 8.0),
        row("fnn", "shuffled", math.nan, note="n/a: 10 inputs"),
    ]
    lines = markdown(rows).splitlines()
    assert lines[:4] == [
        "| agent | as is | shuffled |",
        "| --- | --- | --- |",
        "| pi | 10.0 ± 1.0 | 9.5 ± 1.0 |",
        "| fnn | 8.0 ± 1.0 | n/a |",
    ]
    assert "Episodes per cell: 5." in lines
    assert lines[-1] == "- fnn, shuffled: n/a: 10 inputs"


def test_markdown_of_a_regression_sweep() -> None:
    rows = [{"experiment": "pi", "condition": "obs[0]", "r2": 0.91234, "n_episodes": 3}]
    assert "| pi | 0.912 |" in markdown(rows)


def test_write_table_writes_csv_markdown_and_bar_chart(tmp_path: Path) -> None:
    rows = [row("pi", "as is", 10.0), row("pi", "shuffled", 4.0)]
    paths = write_table(rows, "shuffle", tmp_path / "out")
    assert [p.name for p in paths] == ["shuffle.csv", "shuffle.md", "shuffle.png"]
    with paths[0].open() as fh:
        assert [r["condition"] for r in csv.DictReader(fh)] == ["as is", "shuffled"]
    assert paths[1].read_text() == markdown(rows)
    with Image.open(paths[2]) as image:
        assert image.format == "PNG" and image.size == (880, 495)  # 8 x 4.5 in at 110 dpi


def drawn(monkeypatch: pytest.MonkeyPatch) -> list[Figure]:
    """Collect the figures zoo.robustness_tables draws."""
    figures: list[Figure] = []

    def spy(*args: object, **kwargs: object) -> Figure:
        figures.append(new_figure(*args, **kwargs))
        return figures[-1]

    monkeypatch.setattr(zoo.robustness_tables, "new_figure", spy)
    return figures


def test_occlusion_of_several_runs_is_a_heat_map(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures = drawn(monkeypatch)
    rows = [
        row(f"run{k}", f"occlusion {test:g}", 10 - 10 * test, value=test, train_ratio=train)
        for k, train in enumerate((0.0, 0.5, 0.5))  # two seeds share train ratio 0.5
        for test in (0.0, 0.5)
    ]
    rows[2]["mean_reward"] = 6.0  # second run, test 0: averaged with the third's 10
    rows[-1].update(mean_reward=math.nan, n_episodes=0)  # n/a cells are left out
    plot(rows, "occlusion", tmp_path / "heat.png")
    (ax, _) = figures[-1].axes  # the map and its colour bar
    np.testing.assert_array_equal(ax.images[0].get_array(), [[10.0, 5.0], [8.0, 5.0]])
    assert [t.get_text() for t in ax.texts] == ["10", "5", "8", "5"]
    assert ax.get_xlabel() == "test occlusion ratio"
    # one run: a bar chart of its conditions, no heat map
    plot(rows[:2], "occlusion", tmp_path / "bars.png")
    (ax,) = figures[-1].axes
    assert not ax.images and [b.get_height() for b in ax.patches] == [10.0, 5.0]
    assert (tmp_path / "heat.png").stat().st_size > 5000
