"""attn-zoo: YAML experiment configs and the ``attn-zoo`` CLI over a programmatic API.

>>> import zoo
>>> "cartpole_pi" in zoo.list_experiments()
True
"""

from __future__ import annotations

from typing import Any

from zoo.config import ConfigError, EvalConfig, RunConfig, list_experiments, load_runs
from zoo.runs import Run, evaluate, load, resume, train, train_all

__all__ = [
    "ConfigError",
    "EvalConfig",
    "Run",
    "RunConfig",
    "evaluate",
    "list_experiments",
    "load",
    "load_runs",
    "resume",
    "robustness_sweep",
    "train",
    "train_all",
]


def __getattr__(name: str) -> Any:
    # zoo.robustness pulls in the env factory (SB3, ~0.3 s): imported on first use only
    if name == "robustness_sweep":
        from zoo.robustness import robustness_sweep

        return robustness_sweep
    raise AttributeError(f"module 'zoo' has no attribute {name!r}")
