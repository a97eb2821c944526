"""attn-zoo: YAML experiment configs and the ``attn-zoo`` CLI over a programmatic API.

>>> import zoo
>>> "cartpole_pi" in zoo.list_experiments()
True
"""

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
    "train",
    "train_all",
]
