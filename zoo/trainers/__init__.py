"""Trainers: one per family of ``algo`` values, each owning its keys, training loop and loading.

What a trainer is (``config_model``, the dataclass of its keys, :mod:`zoo.trainers.keys`;
``config_keys``, ``validate``, ``probe``, ``train(handle, callbacks, progress_bar, resume)``,
``load``, ``evaluate``, and for agents that act in an env ``model_file``, ``agent`` and
``episode_returns``; optionally ``check_trusted`` and ``check_resume``) is
the :class:`~zoo.trainers.contract.Trainer` protocol (and ``TrustChecker``,
``ResumeChecker``); each trainer class registers its ``algo`` values with
:func:`~zoo.trainers.contract.register`. :func:`get_trainer` imports a trainer's module only
when its ``algo`` is asked for, so loading a config pulls in only the libraries its trainer
needs.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from zoo.config_checks import ConfigError, nearest
from zoo.trainers.contract import EpisodeTrainer, Trainer, registered

SB3_ALGOS = ("ppo", "a2c", "a2c_graph", "dqn", "double_dqn", "qrdqn", "recurrent_ppo")

# algo -> the module (of this package) whose import registers its trainer; an import path
# ("module:Class") is an SB3 algorithm class. tests/test_contract.py checks that each module
# registers exactly the algo values listed for it.
MODULES = {
    **dict.fromkeys(SB3_ALGOS, "sb3_trainer"),
    "classifier": "classifier_trainer",
    "cmaes": "cmaes_trainer",
    "bc": "bc_trainer",
    "dagger": "dagger_trainer",
    "apg": "apg_trainer",
    "recipe": "recipe_trainer",
}
IMPORT_PATH_MODULE = "sb3_trainer"


def get_trainer(algo: str) -> Trainer:
    """The trainer for an ``algo`` value (SB3 algorithms, import paths, ``classifier``,
    ``cmaes``, ``bc``, ``dagger``, ``apg``, ``recipe``).

    Raises:
        ConfigError: for an unknown ``algo``, naming the nearest known ones.
    """
    module = MODULES.get(algo) or (IMPORT_PATH_MODULE if "." in algo or ":" in algo else None)
    if module is None:
        raise ConfigError(
            f"unknown algo {algo!r}.{nearest(algo, MODULES)} Known: {', '.join(MODULES)}, "
            "or an import path to an SB3 algorithm class."
        )
    importlib.import_module(f"zoo.trainers.{module}")  # registers the module's trainers
    cls = registered(algo)
    if cls is None:  # the table above and the module's @register disagree
        raise RuntimeError(f"zoo.trainers.{module} registers no trainer for {algo!r}")
    return cls()


def get_episode_trainer(algo: str) -> EpisodeTrainer:
    """The trainer of an ``algo`` whose agents act in an env (every one but ``classifier``):
    one that replays episodes (robustness sweeps).

    Raises:
        ConfigError: for an unknown ``algo`` or one that trains no such agent.
    """
    trainer = get_trainer(algo)
    if not isinstance(trainer, EpisodeTrainer):
        raise ConfigError(f"algo {algo!r} trains no agent that acts in an env: no episodes")
    return trainer


def state_dict_file(path: str | Path, which: str) -> Path:
    """``best_model.pt`` (kept by periodic tests) or ``model.pt`` of a torch-trained run.

    ``which="best"`` falls back to ``model.pt`` when no test ran during training.
    """
    if which not in ("best", "last"):
        raise ValueError(f"which must be 'best' or 'last', got {which!r}")
    names = ["best_model.pt", "model.pt"] if which == "best" else ["model.pt"]
    for name in names:
        if (Path(path) / name).exists():
            return Path(path) / name
    hint = ""
    if (Path(path) / "provenance.json").exists():  # an imported agent committed without weights
        hint = (
            "; an imported agent is committed without the authors' weights: restore them with"
            f" `attn-zoo import SOURCE --restore {path}` (SOURCE in provenance.json)"
        )
    raise FileNotFoundError(f"{path} holds no trained model (model.pt or best_model.pt){hint}")
