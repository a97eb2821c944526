"""Test helper: a trainer's metrics.csv against its own progress table."""

from __future__ import annotations

from pathlib import Path

from zoo.metrics import legacy_metrics, read_metrics, series


def metrics_match_own_table(path: Path, names: tuple[str, ...]) -> None:
    """metrics.csv holds what the trainer's own table holds (read through the adapter)."""
    new, old = read_metrics(path), legacy_metrics(path)
    for name in names:
        assert len(series(new, name)[0]), name
        assert [a.tolist() for a in series(new, name)] == [a.tolist() for a in series(old, name)]


def same_metrics(a: Path, b: Path) -> bool:
    """Two run folders logged the same steps, metrics and values (wall times aside)."""
    x, y = read_metrics(a), read_metrics(b)
    return all(x[k].tolist() == y[k].tolist() for k in ("step", "metric", "value"))
