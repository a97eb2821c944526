"""The keys of ``algo: bc`` runs (:mod:`zoo.trainers.bc_trainer`): one model that the trainer,
its teacher loading and its data collection read (defaults of the algorithm's keys from
:class:`~attn_policies.algorithms.bc.BCConfig`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from attn_policies.algorithms.bc import BCConfig
from zoo.trainers.keys import key

__all__ = ["BCKeys"]


@dataclass(frozen=True)
class BCKeys:
    """The keys of ``algo: bc`` runs."""

    env: str = key(doc="the student's env id", required=True)
    env_kwargs: dict[str, Any] = key({}, "kwargs of the env")
    env_wrapper: Any = key(
        [], "Gymnasium wrappers (E4: `[PreviousActionObservation]`: the student sees a_{t-1})"
    )
    n_envs: int = key(1, "envs side by side while collecting")
    n_timesteps: int = key(2000, "teacher steps recorded (all envs together)", range=(1, None))
    teacher: str | dict[str, Any] = key(
        doc="`{experiment: NAME, budget: B}` (trained into RUN/teacher first), a finished zoo "
        "run folder, an SB3 .zip (with teacher_algo; loaded only when `--trust-teacher` names "
        "it) or an import path to a callable obs -> (actions, targets)",
        required=True,
    )
    teacher_algo: str = key("ppo", "the SB3 algorithm of a .zip teacher")
    teacher_vecnormalize: str | None = key(
        None,
        "a .zip teacher's normalisation: .npz arrays obs//mean and obs//var (optional clip_obs "
        "and epsilon); a VecNormalize .pkl only with a `--trust-teacher` of its own",
    )
    teacher_obs: str | None = key(
        None, "the Dict entry the teacher sees, or an import path to a function of the obs"
    )
    collect_env_kwargs: dict[str, Any] = key(
        {},
        "env_kwargs changes while collecting (`{shuffle: false}`); Dict entries they add are "
        "the teacher's alone",
    )
    policy_kwargs: dict[str, Any] = key(
        {},
        "the student: features_extractor_class (default FlattenExtractor), "
        "features_extractor_kwargs, net_arch",
    )
    loss: Literal["mse", "cross_entropy", "kl"] = key(
        BCConfig.loss,
        "mse: the teacher's logits / means; cross_entropy: its actions; kl: its softmax "
        "(Discrete) at temperature",
    )
    temperature: float | int = key(BCConfig.temperature, "the kl loss's softmax temperature")
    epochs: int = key(BCConfig.epochs, "epochs of the first fit")
    batch_size: int = key(BCConfig.batch_size, "samples per minibatch")
    learning_rate: float = key(BCConfig.learning_rate, "Adam's step size")
    grad_clip: float | int = key(BCConfig.grad_clip, "gradient clipping norm")
    prev_action_noise: float | int = key(
        BCConfig.prev_action_noise, "std of the noise on the previous action fed in training"
    )
    occlusion: float | int | list[float] = key(
        BCConfig.occlusion, "share of tokens dropped per batch, or [low, high] to draw it from"
    )
    tokens_key: str | None = key(BCConfig.tokens_key, "the Dict entry of the tokens to occlude")
    torch_threads: int | None = key(None, "torch threads (null: one)")
    dagger_rounds: int = key(
        0,
        "DAgger rounds after the first fit, each recording dagger_steps steps played by the "
        "student and labelled by the teacher",
        range=(0, None),
    )
    dagger_steps: int = key(50000, "steps recorded per DAgger round", range=(1, None))
    dagger_epochs: int = key(2, "epochs on all data after each DAgger round", range=(1, None))
    epoch_samples: int = key(
        BCConfig.epoch_samples, "samples per epoch, a fresh random subset (0: all)"
    )
    lr_schedule: Literal["constant", "linear", "cosine"] = key(
        BCConfig.lr_schedule, "linear / cosine: the step size decays to 0 over lr_epochs"
    )
    lr_epochs: int = key(
        BCConfig.lr_epochs, "epochs of the decay (0: all of the run's, rounds included)"
    )
    init: str | None = key(
        None, "warm start: a bc run folder (its best model) or a state dict file of the student"
    )
    frame_store: dict[str, Any] = key(
        {},
        "`{observation: 4}`: Dict entries of frame-stacked tokens held as their distinct "
        "frames (~4x less memory for 4 frames; the same batches)",
    )
    teacher_actions: Literal["deterministic", "stochastic"] = key(
        "deterministic",
        "stochastic: the recorded steps play actions drawn from the teacher's softmax (the "
        "labels stay its deterministic ones; Discrete only)",
    )
    dagger_actions: Literal["deterministic", "stochastic"] = key(
        "deterministic", "stochastic: the student plays its DAgger rounds by sampling"
    )
