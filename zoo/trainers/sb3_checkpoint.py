"""Checkpoints of SB3 runs: ``checkpoints/last.zip`` with its replay buffer and
normalisation statistics, written as one unit every ``save_freq`` steps and on an interrupt,
at a step a resume can continue from.

The files are tensors and arrays (:mod:`zoo.trainers.sb3_state`), never pickles;
:class:`~zoo.trainers.sb3_trainer.SB3Trainer` reads them back on ``--resume``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

from attn_policies.atomic import make_folder
from zoo.trainers.sb3_state import logger_state, save_model, save_replay_buffer, save_vecnormalize


def default_save_freq(n_timesteps: int) -> int:
    """Checkpoint period without ``save_freq``: 2% of the run, at most 10,000 steps, so a
    kill early on loses little (the first checkpoint used to come at 10%)."""
    return max(min(n_timesteps // 50, 10_000), 1)


class CheckpointCallback(BaseCallback):
    """Save ``checkpoints/last*`` every ``save_freq`` steps, at a point a resume can continue.

    Off-policy algorithms are saved on the step (the replay buffer holds everything). On-policy
    algorithms are saved at the next rollout start, after the update, so the checkpoint never
    holds a half-collected rollout; an interrupt likewise records the step count at the start
    of the current rollout, so a resumed run collects it again and ends where an
    uninterrupted run would.

    Each checkpoint carries the logger's values not yet dumped at its step (for on-policy
    algorithms, those of the rollout start): the resumed run dumps them where the
    interrupted one would have (a periodic evaluation's row), so none is lost. The callback
    goes after the evaluation callback, so a checkpoint on an evaluation step follows the
    evaluation (and its dump), as a resume from it assumes.
    """

    def __init__(self, run_dir: Path, save_freq: int) -> None:
        super().__init__()
        self.dir = run_dir / "checkpoints"
        self.save_freq = save_freq
        self.rollout_start = 0
        self.rollout_log: dict[str, Any] | None = None
        self._last_bucket = 0
        self._pending = False

    def _init_callback(self) -> None:
        # At learn's start, before any callback's training start (an evaluation cut by the
        # interrupt runs again there): an interrupt from here on saves this step.
        self.rollout_start = int(self.model.num_timesteps)
        self.rollout_log = logger_state(self.logger)

    def _on_training_start(self) -> None:
        self.rollout_start = self.num_timesteps
        self.rollout_log = logger_state(self.logger)
        if self.save_freq:
            self._last_bucket = self.num_timesteps // self.save_freq

    def _on_rollout_start(self) -> None:
        self.rollout_start = self.num_timesteps
        self.rollout_log = logger_state(self.logger)
        if self._pending:
            self._pending = False
            save_checkpoint(self.model, self.dir, self.rollout_log)

    def _on_step(self) -> bool:
        if self.save_freq and self.num_timesteps // self.save_freq > self._last_bucket:
            self._last_bucket = self.num_timesteps // self.save_freq
            if isinstance(self.model, OffPolicyAlgorithm):
                save_checkpoint(self.model, self.dir)
            else:
                self._pending = True
        return True

    def save_now(self) -> None:
        """A checkpoint at the current step (a stage's end); an interrupt before the next
        rollout comes back to it."""
        self.rollout_start = int(self.model.num_timesteps)
        self.rollout_log = logger_state(self.logger)
        save_checkpoint(self.model, self.dir, self.rollout_log)

    def save_interrupted(self) -> bool:
        """The checkpoint of an interrupt: on-policy algorithms go back to the rollout start
        (the partial rollout is collected again), with the logger as it was then. Before
        training started (e.g. while a resume loads its checkpoint) nothing is saved: the
        checkpoint on disk stays. Returns whether one was saved."""
        if getattr(self, "model", None) is None:  # set when training starts
            return False
        if isinstance(self.model, OffPolicyAlgorithm):
            save_checkpoint(self.model, self.dir)
        else:
            self.model.num_timesteps = self.rollout_start
            save_checkpoint(self.model, self.dir, self.rollout_log)
        return True


def checkpoint_files(directory: Path, step: int) -> tuple[Path, Path]:
    """The replay buffer and statistics files that belong to ``last.zip`` at ``step``."""
    return (
        directory / f"last_replay_buffer-{step}.npz",
        directory / f"last_vecnormalize-{step}.npz",
    )


def save_checkpoint(
    model: BaseAlgorithm, directory: Path, logged: dict[str, Any] | None = None
) -> None:
    """``last.zip`` with its replay buffer and normalisation statistics, as one unit.

    ``last.zip`` holds the logger's values not yet dumped (``logged``, default the model
    logger's now; see :func:`~zoo.trainers.sb3_state.logger_state`).

    The buffer and statistics are written (atomically) under names carrying the step, then
    ``last.zip`` (atomically, last) commits them; older ones are removed only after. A kill
    or full disk at any moment leaves the previous consistent checkpoint.
    """
    make_folder(directory)  # a symlinked checkpoints/ is replaced, never written through
    step = int(model.num_timesteps)
    buffer_file, stats_file = checkpoint_files(directory, step)
    if isinstance(model, OffPolicyAlgorithm) and model.replay_buffer is not None:
        save_replay_buffer(model.replay_buffer, buffer_file)
    env = model.get_vec_normalize_env()
    if env is not None:
        save_vecnormalize(env, stats_file)
    if logged is None and getattr(model, "_logger", None) is not None:  # set by learn
        logged = logger_state(model.logger)
    save_model(model, directory / "last.zip", logged)
    for pattern in ("last_replay_buffer-*.npz", "last_vecnormalize-*.npz"):
        for old in directory.glob(pattern):
            if old not in (buffer_file, stats_file):
                old.unlink(missing_ok=True)
