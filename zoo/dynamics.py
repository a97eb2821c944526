"""How a PPO run's policy moved early on: the probe table of ``attn-zoo report``.

A policy that collapses does so in its first updates, long before its return says so. For
each run folder :func:`ppo_dynamics` reads ``metrics.csv`` (SB3's ``train/*`` records and
the training episodes) and ``eval.json``, and gives the training return over the first and
the last ``window`` steps, the policy's entropy at a few steps, and the size of its steps
(approximate KL and clip fraction) at the first update and over the first ``early`` steps.
:func:`dynamics_table` renders runs side by side (E7's probes of g-AWRL's collapse).

Example:
    >>> import tempfile
    >>> from zoo.metrics import MetricsLogger
    >>> run = Path(tempfile.mkdtemp())
    >>> with MetricsLogger(run) as log:
    ...     for step in (1024, 2048, 3072):
    ...         log.log(step, {"train/entropy_loss": -1.7, "train/approx_kl": 0.01,
    ...                        "train/clip_fraction": 0.1})
    ...         log.log(step, {"episode_return": -21.0 + step / 1024})
    >>> d = ppo_dynamics(run, window=2048, at=(2048,), early=2048)
    >>> d.first_return, d.last_return, d.entropy, d.first_kl, d.early_clip
    (-19.5, -18.5, (1.7,), 0.01, 0.1)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zoo.config_checks import read_json
from zoo.metrics import read_metrics, series
from zoo.results import eval_policy

__all__ = ["PpoDynamics", "dynamics_table", "ppo_dynamics"]


@dataclass(frozen=True)
class PpoDynamics:
    """One run's early policy steps (``None`` where the run logged nothing there).

    Attributes:
        steps: the steps it ran (``status.json``; else the last step it logged).
        first_return: mean training return of the episodes ending in the first ``window``.
        last_return: the same over the last ``window`` steps it ran.
        entropy: the policy's entropy (``-train/entropy_loss``) at the first update at or
            after each step of ``at``.
        first_kl: approximate KL of the first update; first_clip: its clip fraction.
        early_kl: mean approximate KL of the updates in the first ``early`` steps;
            early_clip: their mean clip fraction.
        test: ``(mean, sd)`` of the test in ``eval.json``, ``None`` for a run stopped early.
    """

    steps: int
    first_return: float | None
    last_return: float | None
    entropy: tuple[float | None, ...]
    first_kl: float | None
    first_clip: float | None
    early_kl: float | None
    early_clip: float | None
    test: tuple[float, float] | None


def _mean(values: np.ndarray) -> float | None:
    return float(values.mean()) if len(values) else None


def _first(values: np.ndarray) -> float | None:
    return float(values[0]) if len(values) else None


def ppo_dynamics(
    run: str | Path,
    *,
    window: int = 100_000,
    at: Sequence[int] = (50_000, 100_000, 200_000),
    early: int = 200_000,
) -> PpoDynamics:
    """Read one PPO run folder's early policy steps (see :class:`PpoDynamics`).

    Raises:
        FileNotFoundError: no such folder.
        ConfigError: a ``metrics.csv`` that is not the zoo's format.
    """
    run = Path(run)
    if not run.is_dir():
        raise FileNotFoundError(f"{run}: no such run folder")
    table = read_metrics(run)
    status = run / "status.json"
    counted = read_json(status).get("num_timesteps") if status.is_file() else None
    # episode rows carry the step an episode ended at, past the last update's
    last = int(counted) if counted else int(table["step"].max()) if len(table["step"]) else 0
    ep_steps, returns = series(table, "episode_return")
    ent_steps, neg_entropy = series(table, "train/entropy_loss")
    kl_steps, kl = series(table, "train/approx_kl")
    clip_steps, clip = series(table, "train/clip_fraction")
    entropy = tuple(_first(-neg_entropy[ent_steps >= step]) for step in at)
    entry = eval_policy(read_json(run / "eval.json")) if (run / "eval.json").is_file() else None
    test = None if entry is None else (float(entry["mean_reward"]), float(entry["std_reward"]))
    return PpoDynamics(
        steps=last,
        first_return=_mean(returns[ep_steps <= window]),
        last_return=_mean(returns[ep_steps > last - window]),
        entropy=entropy,
        first_kl=_first(kl),
        first_clip=_first(clip),
        early_kl=_mean(kl[kl_steps <= early]),
        early_clip=_mean(clip[clip_steps <= early]),
        test=test,
    )


def _f(value: float | None, digits: int) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def dynamics_table(
    runs: Mapping[str, str | Path],
    *,
    window: int = 100_000,
    at: Sequence[int] = (50_000, 100_000, 200_000),
    early: int = 200_000,
) -> str:
    """A Markdown table of :func:`ppo_dynamics` for labelled run folders, one row each.

    Example:
        >>> head = dynamics_table({}, window=1000, at=(500,), early=1000).splitlines()[0]
        >>> head.split(" | ")[2:5]
        ['return, first 1k', 'return, last 1k', 'entropy at 0.5k']
    """

    def k(step: int) -> str:
        return f"{step / 1000:g}k"

    head = [
        "run",
        "steps run",
        f"return, first {k(window)}",
        f"return, last {k(window)}",
        "entropy at " + " / ".join(k(s) for s in at),
        "first update: KL, clip",
        f"first {k(early)}: mean KL, clip",
        "test return",
    ]
    lines = [
        "| " + " | ".join(head) + " |",
        "| --- | ---: | ---: | ---: | --- | --- | --- | ---: |",
    ]
    for label, folder in runs.items():
        d = ppo_dynamics(folder, window=window, at=at, early=early)
        test = "stopped early" if d.test is None else f"{d.test[0]:.1f} ± {d.test[1]:.1f}"
        row = [
            label,
            f"{d.steps:,}",
            _f(d.first_return, 1),
            _f(d.last_return, 1),
            " / ".join(_f(e, 2) for e in d.entropy),
            f"{_f(d.first_kl, 4)}, {_f(d.first_clip, 3)}",
            f"{_f(d.early_kl, 4)}, {_f(d.early_clip, 3)}",
            test,
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)
