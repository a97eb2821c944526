"""What a resolved config may hold: the error type, the evaluation block, the run record and
the key, type and range checks every run passes before anything is written.

Everything here is re-exported by :mod:`zoo.config` (its public home): import from there.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from attn_policies import checks, safe_reads


class ConfigError(ValueError):
    """A config that cannot run: unknown key, wrong type, unknown class, misfit wrapper."""


ConfigError.__module__ = "zoo.config"  # its public home (tracebacks, docs, pickles)

USER_ERRORS: tuple[type[Exception], ...] = (
    ConfigError,
    FileNotFoundError,
    NotADirectoryError,
    PermissionError,
    safe_reads.UnsafeFileError,  # a file the algorithms' own readers refuse (a zip bomb)
)
"""The user-error family: what a user can fix (a config, a value, a path they named), told in
one line with exit 2 by ``attn-zoo``. A bare ``ValueError`` is not in it: raised deep in numpy
or torch it is a bug, so a check of user input raises :class:`ConfigError` (a ``ValueError``
too, for library callers that catch that)."""


def nearest(name: str, choices: Iterable[str], n: int = 3) -> str:
    """``" Did you mean 'x'?"`` for the closest choices, or ``""``."""
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=n, cutoff=0.6)
    return f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""


# Most YAML nodes a document may expand to, an alias counting its whole value again. The
# largest config of the zoo has under 700; a "billion laughs" (9 levels of 9 aliases) has
# 9**9, which the merge step would copy node by node for minutes.
MAX_YAML_NODES = 100_000


def _expanded_nodes(root: yaml.Node, where: str) -> int:
    """How many nodes ``root`` stands for once every alias is expanded, counted without
    expanding (each node's count is kept): a :class:`ConfigError` past
    :data:`MAX_YAML_NODES`, or for a value that contains itself."""
    counts: dict[int, int] = {}
    open_nodes: set[int] = set()

    def count(node: yaml.Node) -> int:
        key = id(node)
        if key in counts:
            return counts[key]
        if key in open_nodes:
            line = node.start_mark.line + 1 if node.start_mark else "?"
            raise ConfigError(f"{where}: a YAML value contains itself (alias at line {line})")
        open_nodes.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(count(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(count(k) + count(v) for k, v in node.value)
        open_nodes.discard(key)
        if total > MAX_YAML_NODES:
            raise ConfigError(
                f"{where}: the YAML document expands to more than {MAX_YAML_NODES:,} values "
                "(aliases repeat what they name); refused"
            )
        counts[key] = total
        return total

    return count(root)


def safe_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load`` with one-line errors naming ``where``: the zoo's one YAML reader
    (configs, run folders' ``config.yml`` and ``status.json``, ``--set`` values).

    Tags such as ``!!python/object`` are refused (``safe_load`` never constructs objects),
    and so is a document whose aliases expand past :data:`MAX_YAML_NODES` values (a
    "billion laughs"), before anything is built from it.

    Example:
        >>> safe_yaml("a: !!python/object/apply:os.system [ls]", "x.yml")
        Traceback (most recent call last):
        ...
        zoo.config.ConfigError: x.yml: unsafe or unknown YAML tag '...:os.system' (line 1)
        >>> laughs = "{l0: &l0 [" + ", ".join(["x"] * 10) + "]" + "".join(
        ...     f", l{k}: &l{k} [" + ", ".join([f"*l{k - 1}"] * 10) + "]" for k in range(1, 6)
        ... ) + "}"
        >>> safe_yaml(laughs, "bomb.yml")
        Traceback (most recent call last):
        ...
        zoo.config.ConfigError: bomb.yml: the YAML document expands to more than 100,000 ...
    """
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_nodes(node, where)
        return loader.construct_document(node)
    except RecursionError:
        raise ConfigError(f"{where}: the YAML document is nested too deeply") from None
    except yaml.constructor.ConstructorError as err:
        mark = f" (line {err.problem_mark.line + 1})" if err.problem_mark else ""
        problem = " ".join(str(err.problem or "").split())
        if "constructor for the tag" in problem:
            tag = problem.rsplit("tag ", 1)[-1].strip("'")
            raise ConfigError(f"{where}: unsafe or unknown YAML tag {tag!r}{mark}") from None
        raise ConfigError(f"{where}: cannot read a YAML value{mark}: {problem}") from None
    except yaml.YAMLError as err:
        at = getattr(err, "problem_mark", None)
        line = f" at line {at.line + 1}, column {at.column + 1}" if at else ""
        problem = getattr(err, "problem", None) or type(err).__name__
        raise ConfigError(f"{where}: YAML syntax error{line}: {problem}") from None
    finally:
        loader.dispose()


# What one run, import or file may plan to hold: this share of the memory available when
# it starts (the rest is the envs', the OS's, other jobs' and the estimates' margin).
MEMORY_SHARE = safe_reads.MEMORY_SHARE
MAX_JSON_DEPTH = safe_reads.MAX_JSON_DEPTH
MAX_JSON_BYTES = safe_reads.MAX_JSON_BYTES


def parse_json(text: str | bytes, where: str) -> Any:
    """A JSON document from a run folder (or a zip entry): nesting past
    :data:`MAX_JSON_DEPTH`, a syntax error or bytes that are not UTF-8 are one
    :class:`ConfigError` naming ``where``, before the parser recurses
    (:func:`attn_policies.safe_reads.parse_json`).

    Example:
        >>> parse_json("[" * 100_000 + "]" * 100_000, "status.json")
        Traceback (most recent call last):
        ...
        zoo.config.ConfigError: status.json: the JSON is nested more than 100 levels deep
    """
    return safe_reads.parse_json(text, where, ConfigError)


def read_json(path: str | Path) -> Any:
    """A run folder's JSON file (``status.json``, ``eval.json``, ``provenance.json``, ...)
    through :func:`parse_json`, after its size (:data:`MAX_JSON_BYTES`); a missing file is
    ``FileNotFoundError``, another read error a :class:`ConfigError`. The one reader of a
    run folder's JSON: its values are checked by type where they are used."""
    return safe_reads.read_json(path, ConfigError)


def read_lines(path: str | Path, skip: int = 0) -> list[str]:
    """A run folder's text table (``metrics.csv``, ``progress.csv``) as lines, a line past
    64 KiB or a file past 1 GiB one :class:`ConfigError` (a 1 GB line is never read whole):
    :func:`attn_policies.safe_reads.read_lines`."""
    return safe_reads.read_lines(path, ConfigError, skip)


available_memory = safe_reads.available_memory


def check_memory(where: str, need: float, what: str, fix: str) -> None:
    """The zoo's one memory bound: ``need`` bytes, estimated from a config or a file's
    headers before anything is allocated or written, must fit in :data:`MEMORY_SHARE` of
    :func:`available_memory`.

    Example:
        >>> check_memory("es", 2**80, "a population of 10,000,000 x 113 parameters",
        ...              "lower population")
        Traceback (most recent call last):
        ...
        zoo.config.ConfigError: es: a population of 10,000,000 x 113 parameters needs about ...
    """
    safe_reads.check_memory(where, need, what, fix, ConfigError)


def npz_arrays(path: str | Path) -> dict[str, tuple[tuple[int, ...], Any]]:
    """``{name: (shape, dtype)}`` of an ``.npz`` file's arrays, read from their ``.npy``
    headers without decompressing anything (a small file may inflate to gigabytes).

    Raises:
        ConfigError: not a zip of ``.npy`` arrays, or a header numpy cannot read.
    """
    import zipfile

    import numpy as np

    arrays: dict[str, tuple[tuple[int, ...], Any]] = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if not info.filename.endswith(".npy"):
                    continue
                with archive.open(info) as fh:
                    version = np.lib.format.read_magic(fh)
                    read = (
                        np.lib.format.read_array_header_1_0
                        if version == (1, 0)
                        else np.lib.format.read_array_header_2_0
                    )
                    shape, _, dtype = read(fh)
                arrays[info.filename.removesuffix(".npy")] = (tuple(shape), dtype)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise ConfigError(f"{path} is not a plain numpy .npz file: {err}") from None
    return arrays


def check_npz_memory(path: str | Path) -> dict[str, tuple[tuple[int, ...], Any]]:
    """:func:`npz_arrays`, refused by :func:`check_memory` when the arrays, decompressed,
    would not fit."""
    import math as _math

    arrays = npz_arrays(path)
    need = sum(_math.prod(shape) * dtype.itemsize for shape, dtype in arrays.values())
    check_memory(str(path), need, "its arrays, decompressed,", "the file is refused")
    return arrays


FOLDER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,99}")
"""An experiment name or matrix cell: one folder of ``runs/`` (letters, digits, ``_ . + -``;
at most 100 characters; never starting with ``.`` or ``-``)."""


def check_folder_name(name: object, what: str) -> str:
    """``name`` if it can be one path component of a run folder's path, else a
    :class:`ConfigError` naming ``what`` it is.

    The experiment name (a config's top-level key) and the matrix cell become folders of
    ``runs/``: ``../../x`` or ``/some/where`` would place a run anywhere, and a name of 300
    characters is longer than a file system's name. Unicode letters are refused too (one
    name, one spelling on every file system and shell).

    Example:
        >>> check_folder_name("../../x", "experiment name")
        Traceback (most recent call last):
        ...
        zoo.config.ConfigError: experiment name '../../x' is not a folder name: ...
    """
    if isinstance(name, str) and FOLDER_NAME.fullmatch(name):
        return name
    shown = repr(name) if len(repr(name)) <= 60 else repr(name)[:57] + "..."
    raise ConfigError(
        f"{what} {shown} is not a folder name: it names a folder of runs/, so it takes "
        "letters, digits, '_', '.', '+' and '-' only (at most 100, not starting with '.' or '-')"
    )


def require_int(value: Any, name: str, minimum: int = 0) -> int:
    """``value`` if it is an ``int`` >= ``minimum``, else a :class:`ConfigError` naming it.

    The zoo's one integer check (bools are refused: ``freq: true`` is a slip, not a count):
    :func:`attn_policies.checks.require_int` with a :class:`ConfigError`.

    Example:
        >>> require_int(3, "eval.freq")
        3
        >>> require_int(True, "eval.n_envs", minimum=1)
        Traceback (most recent call last):
        ...
        zoo.config.ConfigError: eval.n_envs must be a positive integer, got True
    """
    try:  # the one rule of attn_policies.checks, reported as a user error
        return checks.require_int(value, name, minimum)
    except ValueError as err:
        raise ConfigError(str(err)) from None


@dataclass
class EvalConfig:
    """How a run is evaluated, during training (keep-best) and at the end (``eval.json``).

    Attributes:
        freq: env steps between evaluations during training; 0 evaluates only at the end.
        n_episodes: episodes per policy per evaluation during training.
        final_episodes: test episodes per policy written to ``eval.json``.
        final_steps: when > 0, ``eval.json`` leads with the mean return of the training
            episodes that end in the final ``final_steps`` time steps, from the Monitor logs
            (seed 003's table 1 metric; see :func:`zoo.evaluation.final_steps_return`).
        n_envs: parallel evaluation envs (episodes are split evenly across them).
        policies: name -> ``"deterministic"``, ``"stochastic"`` or an ε in ``[0, 1]``
            (ε-greedy around the deterministic action, for value-based agents).
        final_policies: more policies of the same form, for the final test only (they cost
            no time during training).
        select: ``"<policy>/<metric>"`` that picks the best model (``success_rate``,
            ``mean_reward``, ``mean_length``); ties go to the later, more trained model.
        success: how an episode counts as solved: ``"terminated"`` (ended by termination,
            not by the time limit), ``"is_success"`` (the env's info flag) or ``None``.
        seed: seed of the evaluation envs during training (the same episodes each time,
            so checkpoints are compared on equal terms).
        test_seed: seed of the final test episodes, disjoint from ``seed``.
        env_kwargs: one mapping per evaluation env (so ``n_envs`` of them), merged over the
            run's ``env_kwargs`` for the checks during training only, e.g. one fixed start
            per env (``[{noops: 4}, {noops: 1}, ...]``) so that every check plays the same
            chosen games; ``None``: the run's own envs. The final test keeps the run's envs.
    """

    freq: int = 0
    n_episodes: int = 10
    final_episodes: int = 100
    final_steps: int = 0
    n_envs: int = 1
    policies: dict[str, Any] = field(default_factory=lambda: {"deterministic": "deterministic"})
    final_policies: dict[str, Any] = field(default_factory=dict)
    select: str | None = None
    success: str | None = None
    seed: int = 1_000_000
    test_seed: int = 2_000_000
    env_kwargs: list[dict[str, Any]] | None = None

    METRICS = ("success_rate", "mean_reward", "mean_length")

    def __post_init__(self) -> None:
        for name in (
            "freq", "n_episodes", "final_episodes", "final_steps", "n_envs", "seed", "test_seed"
        ):  # fmt: skip
            minimum = 1 if name in ("n_envs", "n_episodes") else 0
            require_int(getattr(self, name), f"eval.{name}", minimum=minimum)
        # Selection and test apart: the checks play the episodes seeded seed, seed + 1, ...;
        # the test those seeded test_seed, ... (each trainer's rule): the ranges must not meet.
        checks = range(self.seed, self.seed + self.n_episodes * self.n_envs)
        test = range(self.test_seed, self.test_seed + max(self.final_episodes, 1))
        if checks.start < test.stop and test.start < checks.stop:
            raise ConfigError(
                f"eval.test_seed {self.test_seed}: the test episodes (seeds {test.start}-"
                f"{test.stop - 1}) overlap the keep-best checks' (eval.seed {self.seed}: "
                f"{checks.start}-{checks.stop - 1}); give the test seeds of their own"
            )
        if not isinstance(self.policies, dict) or not self.policies:
            raise ConfigError(f"eval.policies must be a non-empty mapping, got {self.policies!r}")
        if not isinstance(self.final_policies, dict):
            raise ConfigError(f"eval.final_policies must be a mapping, got {self.final_policies!r}")
        for block, modes in (("policies", self.policies), ("final_policies", self.final_policies)):
            for name, mode in modes.items():
                ok = mode in ("deterministic", "stochastic") or (
                    isinstance(mode, (int, float)) and not isinstance(mode, bool) and 0 <= mode <= 1
                )
                if not ok:
                    raise ConfigError(
                        f"eval.{block}.{name} must be 'deterministic', 'stochastic' or an "
                        f"epsilon in [0, 1], got {mode!r}"
                    )
        if self.env_kwargs is not None:
            if not isinstance(self.env_kwargs, list) or not all(
                isinstance(kwargs, dict) for kwargs in self.env_kwargs
            ):
                raise ConfigError(
                    f"eval.env_kwargs must be a list of mappings, one per eval env, "
                    f"got {self.env_kwargs!r}"
                )
            if len(self.env_kwargs) != self.n_envs:
                raise ConfigError(
                    f"eval.env_kwargs has {len(self.env_kwargs)} mappings but eval.n_envs is "
                    f"{self.n_envs}: give one per eval env"
                )
        if self.success not in (None, "terminated", "is_success"):
            raise ConfigError(
                f"eval.success must be 'terminated', 'is_success' or null, got {self.success!r}"
            )
        if self.select is None:
            first = next(iter(self.policies))
            self.select = f"{first}/{'success_rate' if self.success else 'mean_reward'}"
        policy, _, metric = self.select.partition("/")
        if policy not in self.policies:
            raise ConfigError(
                f"eval.select names policy {policy!r}, not in eval.policies "
                f"({', '.join(self.policies)}).{nearest(policy, self.policies)}"
            )
        if metric not in self.METRICS or (metric == "success_rate" and not self.success):
            raise ConfigError(
                f"eval.select metric {metric!r} must be one of {', '.join(self.METRICS)} "
                f"(success_rate needs eval.success).{nearest(metric, self.METRICS)}"
            )

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None) -> EvalConfig:
        if raw is not None and not isinstance(raw, Mapping):
            raise ConfigError(f"'eval' must be a mapping of evaluation settings, got {raw!r}")
        raw = dict(raw or {})
        names = [f.name for f in dataclasses.fields(cls)]
        for key in raw:
            if key not in names:
                raise ConfigError(f"unknown key 'eval.{key}'.{nearest(key, names)}")
        return cls(**raw)


# Keys every config may have, with the types they accept (None: any).
COMMON_KEYS: dict[str, tuple[type, ...] | None] = {
    "description": (str,),
    "algo": (str,),
    "seed": (int,),
    "n_timesteps": (int,),
    "device": (str,),
    "eval": (dict,),
    "save_freq": (int,),
    "budgets": (dict,),
    "matrix": (dict,),
    "resources": (dict,),  # per matrix cell under --ray (zoo.ray_cluster.cell_resources)
}

# Keys a config may not hold, with why: where a stranger's config must not choose.
REFUSED_KEYS: dict[str, str] = {
    "ray_address": "the Ray cluster comes from the command line (--ray ADDRESS) or the "
    "RAY_ADDRESS environment variable, never from a config",
}


@dataclass
class RunConfig:
    """One fully resolved run: a config with its budget, overrides and matrix cell applied.

    Attributes:
        experiment: the experiment name (the key in the family file).
        tag: the matrix cell (``"Pong-fc"``), ``""`` for a config without a matrix.
        budget: the budget applied.
        body: every key of the config (algorithm hyper-parameters included), as YAML values.
        eval: the parsed evaluation block.
        source: the file the config came from.
    """

    experiment: str
    tag: str
    budget: str
    body: dict[str, Any]
    eval: EvalConfig
    source: str = ""

    @property
    def algo(self) -> str:
        return self.body["algo"]

    @property
    def seed(self) -> int:
        return int(self.body.get("seed", 0))

    @property
    def name(self) -> str:
        return f"{self.experiment}/{self.tag}" if self.tag else self.experiment

    def get(self, key: str, default: Any = None) -> Any:
        return self.body.get(key, default)

    def to_yaml(self) -> str:
        """The run as a loadable single-experiment YAML file (what ``config.yml`` holds)."""
        body = copy.deepcopy(self.body)
        body["eval"] = dataclasses.asdict(self.eval)
        body.pop("budgets", None)
        body.pop("matrix", None)
        header = (
            f"# {self.name} (budget {self.budget}), resolved by attn-zoo from "
            f"{self.source or 'an in-memory config'}\n"
        )
        return header + yaml.safe_dump({self.experiment: body}, sort_keys=False)


def _max_threads() -> int:
    return 4 * (os.cpu_count() or 1)


# Inclusive integer bounds of budgets and sizes (beyond them runs crash, hang or exhaust
# memory long after the folder exists: torch_threads=100000 segfaults).
INT_RANGES: dict[str, tuple[int, int | Callable[[], int]]] = {
    "n_timesteps": (1, 10**12),
    "n_generations": (1, 10**9),
    "n_rounds": (1, 10**9),
    "max_episode_steps": (1, 10**9),
    "buffer_size": (1, 10**10),
    "batch_size": (1, 10**8),
    "save_freq": (0, 10**12),
    "n_envs": (1, 1024),
    "n_workers": (1, 1024),
    "torch_threads": (1, _max_threads),
    "population": (2, 10**7),
    "repeats": (1, 10**6),
    "epochs": (1, 10**7),
    "frame_stack": (1, 1024),
    "n_steps": (1, 10**9),
    "learning_starts": (0, 10**12),
    "gradient_steps": (-1, 10**6),
}


def check_ranges(run: RunConfig) -> None:
    """Budgets and sizes in range, ``gamma`` in [0, 1], ``sigma0`` finite and positive.

    Example:
        >>> body = {"algo": "ppo", "torch_threads": 100000}
        >>> check_ranges(RunConfig("x", "", "full", body, EvalConfig()))
        Traceback (most recent call last):
        ...
        zoo.config.ConfigError: x: 'torch_threads' must be between 1 and ..., got 100000
    """
    for key, (low, high) in INT_RANGES.items():
        value = run.body.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            continue
        top = high() if callable(high) else high
        if not low <= value <= top:
            raise ConfigError(f"{run.name}: {key!r} must be between {low} and {top}, got {value}")
    gamma = run.body.get("gamma")
    if isinstance(gamma, (int, float)) and not isinstance(gamma, bool) and not 0 <= gamma <= 1:
        raise ConfigError(f"{run.name}: 'gamma' must be in [0, 1], got {gamma}")
    for key in ("sigma0", "learning_rate"):
        value = run.body.get(key)
        if (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and not (math.isfinite(value) and value > 0)
        ):
            raise ConfigError(f"{run.name}: {key!r} must be finite and positive, got {value}")


def check_type(where: str, key: str, value: object, types: tuple[type, ...] | None) -> None:
    if types is None or value is None:
        return
    if bool in types and isinstance(value, bool):
        return
    if isinstance(value, bool) and bool not in types:
        raise ConfigError(f"{where}: {key!r} must be {_type_names(types)}, got {value!r}")
    if float in types and isinstance(value, int):
        return
    if not isinstance(value, types):
        raise ConfigError(
            f"{where}: {key!r} must be {_type_names(types)}, got {type(value).__name__} {value!r}"
        )


def _type_names(types: tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in types)


def check_keys(run: RunConfig, known: Iterable[str]) -> None:
    known = set(known)
    for key, value in run.body.items():
        if key in REFUSED_KEYS:
            raise ConfigError(f"{run.name}: {key!r} is not a config key: {REFUSED_KEYS[key]}")
        if key not in known:
            raise ConfigError(f"{run.name}: unknown key {key!r}.{nearest(key, known)}")
        if key in COMMON_KEYS:
            check_type(run.name, key, value, COMMON_KEYS[key])
