"""Trainers: one per family of ``algo`` values, each owning its keys, training loop and loading.

A trainer is an object with

- ``config_keys(body) -> dict[str, types]``: the keys it accepts beyond the common ones;
- ``validate(run)``: raise :class:`~zoo.config.ConfigError` before anything is written;
- optionally ``check_trusted(run, trusted)``: refuse, before training, a pickled file the run
  would load that the caller did not name in ``trusted`` (``--trust-teacher``);
- ``train(run, run_dir, callbacks, progress_bar, resume)``: train into the run folder;
- optionally ``check_resume(run_dir, run)``: read the checkpoint a resume continues from,
  writing nothing (a refused one leaves the folder as it was);
- ``load(run_dir, run, which)``: the trained model;
- ``evaluate(run_dir, run, n_episodes, which, seed)``: a results dict for ``eval.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zoo.config import ConfigError, nearest

SB3_ALGOS = ("ppo", "a2c", "dqn", "double_dqn", "qrdqn", "recurrent_ppo")


def get_trainer(algo: str) -> Any:
    """The trainer for an ``algo`` value (SB3 algorithms, import paths, ``classifier``,
    ``cmaes``, ``bc``, ``dagger``, ``apg``)."""
    if algo == "classifier":
        from zoo.trainers.classifier_trainer import ClassifierTrainer

        return ClassifierTrainer()
    if algo == "cmaes":
        from zoo.trainers.cmaes_trainer import CMAESZooTrainer

        return CMAESZooTrainer()
    if algo == "apg":
        from zoo.trainers.apg_trainer import APGZooTrainer

        return APGZooTrainer()
    if algo == "bc":
        from zoo.trainers.bc_trainer import BCTrainer

        return BCTrainer()
    if algo == "dagger":
        from zoo.trainers.dagger_trainer import DAggerZooTrainer

        return DAggerZooTrainer()
    if algo in SB3_ALGOS or "." in algo or ":" in algo:
        from zoo.trainers.sb3_trainer import SB3Trainer

        return SB3Trainer()
    known = (*SB3_ALGOS, "classifier", "cmaes", "bc", "dagger", "apg")
    raise ConfigError(
        f"unknown algo {algo!r}.{nearest(algo, known)} Known: {', '.join(known)}, "
        "or an import path to an SB3 algorithm class."
    )


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
            "; an imported agent's weights are not stored with it: re-import it with"
            " `attn-zoo import` (source in provenance.json)"
        )
    raise FileNotFoundError(f"{path} holds no trained model (model.pt or best_model.pt){hint}")
