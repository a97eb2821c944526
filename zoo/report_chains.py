"""A recipe's stages end to end: each stage's checks and final test against wall time
from scratch (:func:`chain_rows`), drawn per seed (:func:`plot_chain`)."""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path

from attn_policies.atomic import atomic_path
from zoo.config_checks import read_json

__all__ = ["chain_rows", "plot_chain", "recipe_chains"]


def chain_rows(stages: Sequence[str | Path]) -> list[tuple[str, str, float, float]]:
    """A curriculum's stages end to end: ``(stage, kind, minutes, mean return)`` rows.

    Each stage's periodic checks (``evaluations.json``: ``test_mean`` at an ``update`` or
    ``generation``) are placed at the wall time they were reached, assuming an even pace
    through the stage (``status.json``'s ``wall_seconds`` over its count), after the wall
    time of the stages before it (kind ``check``); its final test (``eval.json``'s first
    policy) at its end (kind ``final``).

    Example:
        >>> import json, tempfile
        >>> stage = Path(tempfile.mkdtemp()) / "1_hold"
        >>> stage.mkdir()
        >>> status = {"wall_seconds": 120.0, "update": 10}
        >>> _ = (stage / "status.json").write_text(json.dumps(status))
        >>> checks = [{"update": 5, "test_mean": 1.0}, {"update": 10, "test_mean": 3.0}]
        >>> _ = (stage / "evaluations.json").write_text(json.dumps(checks))
        >>> final = {"policies": {"deterministic": {"mean_reward": 2.5}}}
        >>> _ = (stage / "eval.json").write_text(json.dumps(final))
        >>> for row in chain_rows([stage, stage]):  # the same stage twice: 2 min each
        ...     print(row)
        ('1_hold', 'check', 1.0, 1.0)
        ('1_hold', 'check', 2.0, 3.0)
        ('1_hold', 'final', 2.0, 2.5)
        ('1_hold', 'check', 3.0, 1.0)
        ('1_hold', 'check', 4.0, 3.0)
        ('1_hold', 'final', 4.0, 2.5)
    """
    rows: list[tuple[str, str, float, float]] = []
    offset = 0.0
    for stage in map(Path, stages):
        status = read_json(stage / "status.json")
        wall = float(status["wall_seconds"])
        count = "update" if "update" in status else "generation"
        total = max(float(status[count]), 1.0)
        for check in read_json(stage / "evaluations.json"):
            minutes = (offset + wall * check[count] / total) / 60
            rows.append((stage.name, "check", round(minutes, 2), float(check["test_mean"])))
        offset += wall
        if (stage / "eval.json").is_file():
            policies = read_json(stage / "eval.json")["policies"]
            score = float(next(iter(policies.values()))["mean_reward"])
            rows.append((stage.name, "final", round(offset / 60, 2), score))
    return rows


def plot_chain(
    chains: Mapping[str, Sequence[str | Path]],
    out: str | Path,
    goal: float | None = None,
    title: str = "",
) -> Path:
    """Draw each chain of :func:`chain_rows` (a recipe seed's stages, by label) as one line of
    its checks against wall time from scratch, its stages' final tests as dots of the same
    colour, to the PNG ``out``; the rows go to a CSV beside it (same stem, with a ``run``
    column); returns the PNG path."""
    from attn_policies.canvas import new_figure, save_figure

    out = Path(out)
    fig = new_figure(8.0, 4.5)
    ax = fig.subplots()
    table: list[tuple[str, str, str, float, float]] = []
    for label, stages in chains.items():
        rows = chain_rows(stages)
        table += [(label, *row) for row in rows]
        checks = [r for r in rows if r[1] == "check"]
        (line,) = ax.plot([r[2] for r in checks], [r[3] for r in checks], lw=1, label=label)
        finals = [r for r in rows if r[1] == "final"]
        ax.plot([r[2] for r in finals], [r[3] for r in finals], "o", ms=4, color=line.get_color())
    if goal is not None:
        ax.axhline(goal, color="r", lw=0.8, ls=":", label=f"goal {goal:g}")
    ax.set_xlabel("wall minutes from scratch (stages end to end; dots: each stage's test)")
    ax.set_ylabel("mean test return")
    ax.set_title(title or "recipe stages end to end")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    save_figure(fig, out, dpi=110)
    with atomic_path(out.with_suffix(".csv")) as tmp, tmp.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(("run", "stage", "kind", "minutes", "mean_return"))
        writer.writerows(table)
    return out


def recipe_chains(pattern: str, results: str | Path) -> dict[str, list[Path]]:
    """The stage folders (``stages/<k>_<name>``, in order) of each recipe run folder that
    ``pattern`` matches under ``results``, labelled ``seed S``."""
    chains: dict[str, list[Path]] = {}
    for run in sorted(Path(results).glob(pattern)):
        stages = sorted(
            (p for p in (run / "stages").glob("*_*") if p.is_dir()),
            key=lambda p: int(p.name.split("_", 1)[0]),
        )
        status = run / "status.json"
        seed = read_json(status).get("seed") if status.is_file() else None
        if stages:
            chains[run.name if seed is None else f"seed {seed}"] = stages
    return chains
