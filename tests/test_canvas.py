"""Tests for attn_policies.canvas (the one off-screen figure canvas)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from attn_policies.attention_plots import plot_saliency
from attn_policies.canvas import new_figure, save_figure

PACKAGES = ("attn_envs", "attn_policies", "zoo")
ROOT = Path(__file__).resolve().parents[1]


def test_figures_use_no_pyplot_state() -> None:
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    fig = plot_saliency(np.zeros((8, 8)), np.ones(4))
    assert plt.get_fignums() == before  # not registered with pyplot: nothing leaks or shows
    assert isinstance(fig.canvas, FigureCanvasAgg)


def test_new_figure_is_off_screen_and_sized() -> None:
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    fig = new_figure(3.0, 2.0)
    assert plt.get_fignums() == before
    assert isinstance(fig.canvas, FigureCanvasAgg)
    assert fig.get_size_inches().tolist() == [3.0, 2.0]
    assert fig.get_layout_engine() is not None
    assert new_figure(1.0, 1.0, layout=None).get_layout_engine() is None


@pytest.mark.parametrize("name", ["plot.png", "plot", "plot.svg"])
def test_save_figure_makes_folders_and_defaults_to_png(tmp_path: Path, name: str) -> None:
    fig = new_figure(2.0, 2.0)
    fig.subplots().plot([0, 1], [1, 0])
    path = save_figure(fig, tmp_path / "a" / "b" / name, dpi=50)
    assert path == tmp_path / "a" / "b" / name
    data = path.read_bytes()
    if name.endswith(".svg"):
        assert b"<svg" in data[:500]
    else:
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        assert int.from_bytes(data[16:20], "big") == 100  # 2 inches at 50 dpi


def test_one_agg_canvas_in_the_packages() -> None:
    """Every figure goes through attn_policies.canvas: no other module sets up Agg or pyplot."""
    offenders = [
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.name != "canvas.py"
        and any(word in path.read_text() for word in ("FigureCanvasAgg", "pyplot"))
    ]
    assert offenders == []


def test_save_figure_replaces_a_symlink_instead_of_writing_through_it(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "attention_doorkey.png").symlink_to(victim)
    out = save_figure(new_figure(1.0, 1.0), tmp_path / "attention_doorkey.png")
    assert victim.read_text() == "precious"
    assert not out.is_symlink() and out.read_bytes()[:4] == b"\x89PNG"
