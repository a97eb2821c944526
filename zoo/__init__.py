"""attn-zoo: YAML experiment configs and the ``attn-zoo`` CLI over a programmatic API.

The names below are imported on first use: ``import zoo`` (and so ``attn-zoo --help``) does
not load torch, SB3 or gymnasium until a command needs them.

>>> import zoo
>>> "cartpole_pi" in zoo.list_experiments()
True
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import Any

try:
    __version__ = version("attn-zoo")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

# public name -> the module that defines it
_LAZY = {
    "ConfigError": "zoo.config",
    "EvalConfig": "zoo.config",
    "RunConfig": "zoo.config",
    "list_experiments": "zoo.config",
    "load_runs": "zoo.config",
    "Run": "zoo.runs",
    "evaluate": "zoo.runs",
    "load": "zoo.runs",
    "resume": "zoo.runs",
    "train": "zoo.runs",
    "train_all": "zoo.runs",
    "run_grid": "zoo.ray_grid",
    "robustness_sweep": "zoo.robustness",
    "import_checkpoint": "zoo.pretrained",
}

__all__ = ["__version__", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'zoo' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
