"""Read one of the seed 001 authors' published folders without running any of its code.

A folder of google/brain-tokyo-workshop holds ``config.gin`` (the authors' settings, parsed
line by line with :func:`ast.literal_eval`: nothing is imported or run), ``model.npz`` (key
``params``: one flat float vector, loaded with ``allow_pickle=False``) and, for some agents,
``test_log*.txt`` (their logged test scores). :func:`read_checkpoint` returns them checked,
as a :class:`Checkpoint`; :mod:`zoo.pretrained` turns it into a run folder.

Example:
    >>> parse_gin('a.B.x = 3  # note\\nutil.create_task.task_loader = @rl.T()\\n')
    {'a.B.x': 3, 'util.create_task.task_loader': Reference(name='rl.T')}
"""

from __future__ import annotations

import ast
import functools
import hashlib
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from zoo.config import ConfigError, check_npz_memory

__all__ = ["Checkpoint", "Reference", "parse_gin", "read_checkpoint"]

_BINDING = re.compile(r"^([A-Za-z_][\w.]*)\s*=\s*(.+)$")
_LOG_EPISODE = re.compile(r"Episode: (\d+), reward: (-?[\d.]+)")
_LOG_SUMMARY = re.compile(r"Avg reward: (-?[\d.]+), sd: ([\d.]+)")


class Reference(NamedTuple):
    """A gin reference ``@module.Name`` or ``@module.Name()``."""

    name: str


def parse_gin(text: str, where: str = "config.gin") -> dict[str, Any]:
    """The bindings of a gin file as ``{dotted name: value}``; nothing is imported or run.

    Values are Python literals (:func:`ast.literal_eval`) or references ``@name``
    (:class:`Reference`); ``import`` lines and comments are skipped.

    Raises:
        ConfigError: a line that is not a binding of a literal or a reference.
    """
    bindings: dict[str, Any] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if "#" in line and not re.search(r"[\"'].*#.*[\"']", line):
            line = line.split("#", 1)[0].strip()
        if not line or line.startswith("import "):
            continue
        match = _BINDING.match(line)
        if not match:
            raise ConfigError(f"{where}:{number}: not a gin binding: {line[:80]!r}")
        key, value = match.group(1), match.group(2).strip()
        if value.startswith("@"):
            bindings[key] = Reference(value[1:].removesuffix("()"))
            continue
        try:
            bindings[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise ConfigError(
                f"{where}:{number}: {key} = {value[:60]!r} is not a literal or a reference"
            ) from None
    return bindings


@dataclass
class Checkpoint:
    """One authors' folder, read and checked.

    Attributes:
        folder: the folder.
        solution: the solution class name (``PIFCSolution``, ...).
        task: the task class name (``CartPoleSwingUpTask``, ...).
        solution_args: the solution's gin settings, ``{argument: value}``.
        task_args: the task's gin settings, plus ``create_task`` arguments of the 2020 code.
        n_params: the length of the flat parameter vector, from ``model.npz``'s header
            (compare it with the policy's size before reading :attr:`params`).
        sha256: ``{file name: sha256}`` of ``config.gin`` and ``model.npz``.
        logs: ``{log file: {mean, std, n_episodes}}`` from ``test_log*.txt``.
    """

    folder: Path
    solution: str
    task: str
    solution_args: dict[str, Any]
    task_args: dict[str, Any]
    n_params: int
    sha256: dict[str, str]
    logs: dict[str, dict[str, float]] = field(default_factory=dict)

    @functools.cached_property
    def params(self) -> np.ndarray:
        """The flat parameter vector (float64 as stored), decompressed on first use."""
        return _read_params(self.folder / "model.npz")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _loader(bindings: dict[str, Any], what: str) -> str:
    """The class bound to ``*.create_<what>.<what>_loader`` (its last name)."""
    for key, value in bindings.items():
        if key.endswith(f"create_{what}.{what}_loader"):
            if not isinstance(value, Reference):
                raise ConfigError(f"config.gin: {key} must be a reference (@...), got {value!r}")
            return value.name.rsplit(".", 1)[-1]
    raise ConfigError(f"config.gin binds no {what} (no create_{what}.{what}_loader)")


def _arguments(bindings: dict[str, Any], cls: str) -> dict[str, Any]:
    prefix = f".{cls}."
    out = {}
    for key, value in bindings.items():
        head, sep, arg = key.rpartition(".")
        if sep and ("." + head + ".").endswith(prefix):
            out[arg] = value
    return out


def _params_size(path: Path) -> int:
    """The length of ``model.npz``'s ``params`` vector, from its header alone: nothing is
    decompressed (a 1 MB file of zeros inflates to gigabytes), and an array that would not
    fit in memory is refused (:func:`zoo.config.check_npz_memory`)."""
    with path.open("rb") as fh:
        if fh.read(6) == b"\x93NUMPY":
            raise ConfigError(f"{path} is not an .npz archive (it holds a single array)")
    arrays = check_npz_memory(path)
    if "params" not in arrays:
        raise ConfigError(f"{path} has no 'params' array (it has {sorted(arrays)})")
    shape, dtype = arrays["params"]
    if dtype.hasobject:
        raise ConfigError(f"{path}: 'params' is not a plain numeric array (it holds objects)")
    if len(shape) != 1 or not np.issubdtype(dtype, np.floating):
        raise ConfigError(f"{path}: 'params' must be a 1-D float vector, got {dtype} {shape}")
    return int(shape[0])


def _read_params(path: Path) -> np.ndarray:
    try:
        data = np.load(path, allow_pickle=False)
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as err:
        raise ConfigError(f"{path} is not a plain numpy .npz file: {err}") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise ConfigError(f"{path} is not an .npz archive (it holds a single array)")
    with data:
        if "params" not in data.files:
            raise ConfigError(f"{path} has no 'params' array (it has {sorted(data.files)})")
        try:
            params = data["params"]
        except ValueError as err:  # an object array needs pickle: refused
            raise ConfigError(f"{path}: 'params' is not a plain numeric array: {err}") from None
    if params.ndim != 1 or not np.issubdtype(params.dtype, np.floating):
        raise ConfigError(
            f"{path}: 'params' must be a 1-D float vector, got {params.dtype} {params.shape}"
        )
    if not np.isfinite(params).all():
        raise ConfigError(f"{path}: 'params' holds NaN or infinite values")
    return params


def _read_logs(folder: Path) -> dict[str, dict[str, float]]:
    logs = {}
    for path in sorted(folder.glob("test_log*.txt")):
        text = path.read_text(errors="replace")
        summary = _LOG_SUMMARY.search(text)
        if summary:
            logs[path.name] = {
                "mean": float(summary.group(1)),
                "std": float(summary.group(2)),
                "n_episodes": len(_LOG_EPISODE.findall(text)),
            }
    return logs


def read_checkpoint(path: str | Path) -> Checkpoint:
    """Read and check one authors' folder (``config.gin`` + ``model.npz``).

    Raises:
        ConfigError: missing files, an unparsable gin file, a file that is not a plain npz.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise ConfigError(
            f"{folder} is not a folder (expected the authors' config.gin + model.npz)"
        )
    missing = [n for n in ("config.gin", "model.npz") if not (folder / n).is_file()]
    if missing:
        raise ConfigError(f"{folder} lacks {' and '.join(missing)}")
    gin_file = folder / "config.gin"
    bindings = parse_gin(gin_file.read_text(errors="replace"), str(gin_file))
    solution, task = _loader(bindings, "solution"), _loader(bindings, "task")
    task_args = _arguments(bindings, task)
    task_args.update(_arguments(bindings, "create_task"))  # the 2020 code's task settings
    task_args.pop("task_loader", None)
    return Checkpoint(
        folder=folder,
        solution=solution,
        task=task,
        solution_args=_arguments(bindings, solution),
        task_args=task_args,
        n_params=_params_size(folder / "model.npz"),
        sha256={n: _sha256(folder / n) for n in ("config.gin", "model.npz")},
        logs=_read_logs(folder),
    )
