"""What every trainer is: the :class:`Trainer` protocol and the registry of ``algo`` values.

A trainer owns one family of ``algo`` values: the config keys it accepts beyond the common
ones, the checks of their values, the training loop that fills a run folder, and the
loading and evaluation of what it trained. :mod:`zoo.config` validates with it,
:mod:`zoo.runs` trains and evaluates with it, :mod:`zoo.robustness` replays episodes with it.

Each trainer class registers its ``algo`` values where it is defined::

    @register("cmaes")
    class CMAESZooTrainer: ...

This module imports no trainer (and neither torch nor SB3), so :mod:`zoo.config` can read the
registry without the circle config -> trainer -> config.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from zoo.config_checks import RunConfig

if TYPE_CHECKING:  # annotations only: importing the registry stays cheap
    import gymnasium as gym
    from torch import nn

    from attn_policies.agents import Agent

__all__ = [
    "EpisodeTrainer",
    "KeyTypes",
    "ResumeChecker",
    "RunHandle",
    "Trainer",
    "TrustChecker",
    "register",
    "registered",
    "registry",
]

KeyTypes = dict[str, tuple[type, ...] | None]
"""Config key -> the Python types its value may have (None: any, checked elsewhere)."""


class RunHandle(Protocol):
    """The run folder a trainer trains into (:class:`zoo.runs.Run`); ``trusted``: the pickled
    files the caller named (``--trust-teacher``)."""

    path: Path
    config: RunConfig
    trusted: tuple[Path, ...]

    def write_status(self, **fields: Any) -> None:
        """Merge ``fields`` into the folder's ``status.json`` (progress seen by ``status``)."""


@runtime_checkable
class Trainer(Protocol):
    """One family of ``algo`` values: its keys, checks, training loop, loading and evaluation."""

    config_model: type
    """The frozen dataclass of its keys (:mod:`zoo.trainers.keys`): types, defaults, ranges and
    a line of doc each, read by validation, the train command's size line and the docs."""

    def config_keys(self, body: dict[str, Any]) -> KeyTypes:
        """The keys a config with this ``body`` may hold beyond ``COMMON_KEYS``: those of
        :attr:`config_model` (and for SB3 the algorithm's hyper-parameters)."""
        ...

    def validate(self, run: RunConfig) -> None:
        """Raise :class:`~zoo.config_checks.ConfigError` for a bad value, before anything is
        written (cheap: no env or model is built)."""
        ...

    def probe(self, run: RunConfig) -> None:
        """Build what training builds (envs, models) once, so that a mistake only a build
        shows is a :class:`~zoo.config_checks.ConfigError` before any folder is written."""
        ...

    def train(
        self,
        handle: RunHandle,
        callbacks: Sequence[Any] = (),
        progress_bar: bool = False,
        resume: bool = False,
    ) -> int:
        """Train into ``handle.path`` (from its last checkpoint when ``resume``) and return
        the steps trained. ``callbacks`` are the trainer's own kind (SB3 callbacks for SB3
        algorithms, ``cb(record) -> bool | None`` per generation/round for the others); one
        returning ``False`` stops training."""
        ...

    def load(self, path: Path, run: RunConfig, which: str = "best") -> nn.Module | Agent:
        """The trained model of the folder: ``"best"`` (kept by evaluation) or ``"last"``: an
        SB3 algorithm, a BC student, an ES policy or a classifier network."""
        ...

    def evaluate(
        self,
        path: Path,
        run: RunConfig,
        n_episodes: int | None = None,
        which: str = "best",
        seed: int | None = None,
    ) -> dict[str, Any]:
        """The results dict written to ``eval.json`` (defaults from ``run.eval``)."""
        ...


@runtime_checkable
class TrustChecker(Protocol):
    """A trainer whose runs may load a pickled file (BC's teacher): it has, besides
    :class:`Trainer`, the check :func:`zoo.runs.check_trusted` calls before anything is read."""

    def check_trusted(self, run: RunConfig, trusted: Collection[str | Path]) -> None:
        """Refuse (:class:`~zoo.config_checks.ConfigError`) a pickled file ``run`` would load
        that ``trusted`` does not name."""
        ...


@runtime_checkable
class ResumeChecker(Protocol):
    """A trainer that reads, before a resume writes anything, the checkpoint it would continue
    from (:func:`zoo.runs.resume` calls it): a refused one leaves the folder as it was."""

    def check_resume(self, path: Path, run: RunConfig) -> None:
        """Raise :class:`~zoo.config_checks.ConfigError` for a checkpoint in ``path`` that
        ``run`` cannot continue from; write nothing."""
        ...


@runtime_checkable
class EpisodeTrainer(Trainer, Protocol):
    """A trainer of agents that act in an env (every one but ``classifier``): what robustness
    sweeps and their caches need."""

    def model_file(self, path: Path, which: str) -> Path | tuple[Path, Path]:
        """The file(s) the trained agent is read from (SB3: the model and its
        ``VecNormalize`` statistics)."""
        ...

    def agent(self, path: Path, run: RunConfig, which: str = "best") -> Agent:
        """The trained model as an :class:`~attn_policies.agents.Agent` (SB3's ``predict``);
        :meth:`zoo.runs.Run.agent` is the loader callers use. An SB3 agent acts on
        observations normalised with the run's saved ``VecNormalize`` statistics."""
        ...

    def episode_returns(
        self,
        path: Path,
        run: RunConfig,
        *,
        wrappers: Sequence[Callable[[gym.Env], gym.Env]] = (),
        n_episodes: int,
        seed: int,
        which: str = "best",
        policy_kwargs: dict[str, Any] | None = None,
        n_envs: int | None = None,
    ) -> dict[str, list[float]]:
        """``{"rewards": [...], "lengths": [...]}`` of ``n_episodes`` episodes of the agent in
        ``run``'s env with ``wrappers`` added, seeded from ``seed``."""
        ...


TrainerClass = TypeVar("TrainerClass", bound=type[Trainer])

_REGISTRY: dict[str, type[Trainer]] = {}
_IMPORT_PATHS: list[type[Trainer]] = []  # the trainer of algo values that are import paths


def register(*algos: str, import_paths: bool = False) -> Callable[[TrainerClass], TrainerClass]:
    """A class decorator: the class trains these ``algo`` values (and, with
    ``import_paths``, any ``module:Class`` or ``module.Class`` algo value)."""

    def add(cls: TrainerClass) -> TrainerClass:
        for algo in algos:
            if _REGISTRY.setdefault(algo, cls) is not cls:
                raise ValueError(f"algo {algo!r} is registered twice ({_REGISTRY[algo]}, {cls})")
        if import_paths and cls not in _IMPORT_PATHS:
            _IMPORT_PATHS.append(cls)
        return cls

    return add


def registered(algo: str) -> type[Trainer] | None:
    """The registered trainer class of ``algo`` (an import path goes to the class registered
    with ``import_paths``), or None."""
    if algo in _REGISTRY:
        return _REGISTRY[algo]
    if _IMPORT_PATHS and ("." in algo or ":" in algo):
        return _IMPORT_PATHS[0]
    return None


def registry() -> Mapping[str, type[Trainer]]:
    """Every ``algo`` value registered so far (only imported trainer modules register)."""
    return dict(_REGISTRY)
