"""Test helper: small finished run folders, as the trainers write them, for report tests."""

from __future__ import annotations

import json
from pathlib import Path


def finished_run(folder: Path, seed: int, test: float, returns: list[float]) -> Path:
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


def e7_grid(root: Path) -> None:
    """E7's first two cells under ROOT/results, two seeds and one seed."""
    cell = root / "results" / "atariari" / "Pong-L-g_awrl"
    finished_run(cell / "0-20260101-000000", 0, -20.0, [-21.0] * 9 + [-19.0])
    finished_run(cell / "1-20260101-000000", 1, 10.0, [-21.0] * 9 + [11.0])
    finished_run(
        root / "results" / "atariari" / "Pong-L-fc" / "0-20260101-000000", 0, -5.0, [-4.0] * 10
    )
