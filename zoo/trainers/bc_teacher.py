"""The teacher of a BC run (``algo: bc``): which files may be unpickled, and loading it.

``teacher`` names a zoo experiment trained into the run folder first, a finished zoo run
folder, a saved SB3 model (a pickle: loaded only when the person running the command trusts
it, see :func:`check_trusted`) or an import path to a callable; ``teacher_obs`` maps the
student env's observation to the teacher's. See :mod:`zoo.trainers.bc_trainer` for the keys.
"""

from __future__ import annotations

import pickle
import shlex
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from gymnasium import spaces

import zoo
from attn_policies.algorithms.bc_data import Obs
from zoo.config_checks import ConfigError, RunConfig
from zoo.registry import resolve, resolve_function
from zoo.trainers.base import train_teacher_experiment
from zoo.trainers.bc_keys import BCKeys
from zoo.trainers.keys import value
from zoo.trainers.sb3_state import normalizer
from zoo.trainers.sb3_trainer import SB3Trainer


def _entry_view(key: str, space: spaces.Space | None) -> Callable[[Obs], Obs]:
    """``obs[key]``; its newest step if the student's window has one axis more than ``space``."""
    shape = getattr(space, "shape", None)

    def view(obs: Obs) -> Obs:
        if not isinstance(obs, dict) or key not in obs:
            entries = list(obs) if isinstance(obs, dict) else type(obs).__name__
            raise ConfigError(f"teacher_obs: the observation has no entry {key!r} ({entries})")
        value = obs[key]
        if shape is not None and value.shape[1:] != shape and value.shape[2:] == shape:
            return value[:, -1]
        return value

    return view


def _normalizer(file: Path | None, teacher_run: RunConfig | None) -> Callable[[Obs], Obs] | None:
    """``normalize_obs`` of a teacher's saved statistics: a ``.npz`` (read as arrays; a zoo
    run's with the run's settings), or a ``VecNormalize`` pickle that :func:`check_trusted`
    let through (the person running the command named it)."""
    if file is None or not file.exists():
        return None
    if teacher_run is not None or file.suffix == ".npz":
        return normalizer(file, teacher_run)
    with file.open("rb") as fh:
        norm = pickle.load(fh)  # named on the command line: --trust-teacher
    norm.training = False
    return norm.normalize_obs


def pickled_teacher_files(run: RunConfig) -> list[Path]:
    """The files of ``teacher`` and ``teacher_vecnormalize`` that loading would unpickle:
    an SB3 ``.zip`` and statistics that are not ``.npz`` arrays (a ``VecNormalize`` pickle)."""
    spec = run.body.get("teacher")
    if not isinstance(spec, str) or not spec.endswith(".zip") or Path(spec).is_dir():
        return []  # a zoo run folder (tensors only), a teacher trained here, or a function
    files = [Path(spec)]
    stats = run.body.get("teacher_vecnormalize")
    if stats and Path(stats).suffix != ".npz":
        files.append(Path(stats))
    return files


def check_trusted(run: RunConfig, trusted: Collection[str | Path]) -> None:
    """Refuse a pickled teacher file the person running the command did not name.

    Unpickling runs whatever code the file holds, so a config or a run folder naming a
    pickle is not enough: ``attn-zoo train ... --trust-teacher FILE`` (``trust_teacher`` of
    :func:`zoo.train`) is.

    Raises:
        ConfigError: before anything is loaded or written, saying how to allow the file.
    """
    names = {Path(t).resolve() for t in trusted}
    for file in pickled_teacher_files(run):
        if file.resolve() not in names:
            kind = "SB3 model" if file.suffix == ".zip" else "statistics file (give .npz arrays)"
            raise ConfigError(
                f"{run.name}: teacher {kind} {file} is a pickle, and loading one runs any code "
                f"it holds; if you trust it, add --trust-teacher {shlex.quote(str(file))}"
            )


def config_function(run: RunConfig, key: str, name: str) -> Callable[..., Any]:
    """An import path of the config that must name a plain function of a package (checked
    before it is called: ``os:system`` and the like are refused)."""
    try:
        return resolve_function(name, key)
    except ValueError as err:
        raise ConfigError(f"{run.name}: {key!r}: {err}") from None


def load_teacher(
    run: RunConfig, path: Path, trusted: Collection[str | Path] = ()
) -> tuple[Any, Callable[[Obs], Obs] | None]:
    """The teacher and the map from the student env's observation to the teacher's.

    ``teacher`` is ``{experiment, budget, overrides}`` (trained into ``path / "teacher"``
    first; a finished teacher there is reused), a zoo run folder, an SB3 ``.zip`` (a pickle:
    only when ``trusted`` names it, see :func:`check_trusted`) or an import path to a callable.
    """
    check_trusted(run, trusted)
    spec = run.body["teacher"]
    norm_file: Path | None = None
    folder: Path | None = None
    if isinstance(spec, dict):
        folder = train_teacher_experiment(run, spec, path / "teacher")
    elif Path(spec).is_dir():
        folder = Path(spec)
    teacher_run: RunConfig | None = None
    if folder is not None:
        teacher_handle = zoo.load(folder)
        teacher, teacher_run = teacher_handle.model("best"), teacher_handle.config
        if hasattr(teacher, "policy"):
            _, norm_file = SB3Trainer().model_file(folder, "best")
    elif spec.endswith(".zip"):
        teacher = resolve("algo", value(BCKeys, run, "teacher_algo")).load(spec, device="cpu")
        if run.body.get("teacher_vecnormalize"):
            norm_file = Path(run.body["teacher_vecnormalize"])
            if not norm_file.exists():
                raise ConfigError(f"{run.name}: teacher_vecnormalize {norm_file} does not exist")
    else:
        teacher = config_function(run, "teacher", spec)
    view_spec = run.body.get("teacher_obs")
    view: Callable[[Obs], Obs] | None = None
    if view_spec and ("." in view_spec or ":" in view_spec):
        view = config_function(run, "teacher_obs", view_spec)
    elif view_spec:
        view = _entry_view(view_spec, getattr(teacher, "observation_space", None))
    normalize = _normalizer(norm_file, teacher_run)
    if normalize is None:
        return teacher, view
    if view is None:
        return teacher, normalize
    inner = view
    return teacher, lambda obs: normalize(inner(obs))
