"""Experiment configs: YAML families -> budgets and overrides -> matrix -> validated runs.

A family file under ``zoo/configs/`` maps experiment names to configs whose keys follow
rl-baselines3-zoo (``n_timesteps``, ``policy``, ``policy_kwargs``, ``n_envs``, ``frame_stack``,
``env_wrapper``, ``env_kwargs``, ``normalize`` and the algorithm's own hyper-parameters at top
level) plus four of ours:

``budgets``
    ``{smoke|cpu|full: {key: value}}`` overrides merged over the config (``full``, the
    published settings, is the config itself unless it says otherwise).
``eval``
    the evaluation block (:class:`EvalConfig`).
``matrix``
    axes that expand one config into runs. A list axis named after a config key sets that key
    (``seed: [0, 1, 2]``, ``env_kwargs.n_distractors: [0, 1, 3]``); a list axis with another
    name is a template variable substituted into ``{name}`` in string values
    (``game: [Pong, Breakout]`` with ``env: ALE/{game}-v5``); a mapping axis names variants,
    each a set of overrides (``variant: {cnn: {}, fc: {policy_kwargs: ...}}``).
``algo``
    ``ppo``, ``a2c``, ``dqn``, ``double_dqn``, ``qrdqn``, ``recurrent_ppo``, ``classifier``.

Loading never runs code from the file: YAML is read with ``safe_load`` and classes are
resolved by import from short names (:mod:`zoo.registry`). Every run is validated before any
file is written; errors name the key and the nearest valid choices.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import difflib
import itertools
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

CONFIG_DIR = Path(__file__).parent / "configs"
BUDGETS = ("smoke", "cpu", "full")


class ConfigError(ValueError):
    """A config that cannot run: unknown key, wrong type, unknown class, misfit wrapper."""


def nearest(name: str, choices: Iterable[str], n: int = 3) -> str:
    """``" Did you mean 'x'?"`` for the closest choices, or ``""``."""
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=n, cutoff=0.6)
    return f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def deep_merge(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``update`` merged in; nested mappings merge, everything else replaces."""
    out = copy.deepcopy(dict(base))
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def set_dotted(body: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``a.b.c`` in nested dicts, creating the intermediate dicts."""
    *parents, leaf = dotted.split(".")
    node = body
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"cannot set {dotted!r}: {part!r} is not a mapping")
    node[leaf] = value


def safe_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load`` with one-line errors naming ``where``; tags such as
    ``!!python/object`` are refused (``safe_load`` never constructs objects).

    Example:
        >>> safe_yaml("a: !!python/object/apply:os.system [ls]", "x.yml")
        Traceback (most recent call last):
        ...
        zoo.config.ConfigError: x.yml: unsafe or unknown YAML tag '...:os.system' (line 1)
    """
    try:
        return yaml.safe_load(text)
    except yaml.constructor.ConstructorError as err:
        mark = f" (line {err.problem_mark.line + 1})" if err.problem_mark else ""
        problem = " ".join(str(err.problem or "").split())
        if "constructor for the tag" in problem:
            tag = problem.rsplit("tag ", 1)[-1].strip("'")
            raise ConfigError(f"{where}: unsafe or unknown YAML tag {tag!r}{mark}") from None
        raise ConfigError(f"{where}: cannot read a YAML value{mark}: {problem}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or type(err).__name__
        raise ConfigError(f"{where}: YAML syntax error{line}: {problem}") from None


def parse_overrides(pairs: Iterable[str]) -> dict[str, Any]:
    """``["a.b=1", "policy=MlpPolicy"]`` -> ``{"a.b": 1, "policy": "MlpPolicy"}`` (YAML values).

    Example:
        >>> parse_overrides(["learning_rate=1e-3", "eval.freq=0", "game=[Pong, Breakout]"])
        {'learning_rate': 0.001, 'eval.freq': 0, 'game': ['Pong', 'Breakout']}
    """
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects key=value, got {pair!r}")
        value = safe_yaml(raw, f"--set {pair}") if raw else ""
        # YAML reads 1e-3 as a string; a float is what every such key means.
        if isinstance(value, str) and any(c in value for c in ".eE"):
            with contextlib.suppress(ValueError):
                value = float(value)
        out[key.strip()] = value
    return out


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

    METRICS = ("success_rate", "mean_reward", "mean_length")

    def __post_init__(self) -> None:
        for name in (
            "freq", "n_episodes", "final_episodes", "final_steps", "n_envs", "seed", "test_seed"
        ):  # fmt: skip
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"eval.{name} must be a non-negative integer, got {value!r}")
        if self.n_envs < 1 or self.n_episodes < 1:
            raise ConfigError("eval.n_envs and eval.n_episodes must be at least 1")
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


def available_files() -> list[Path]:
    return sorted(CONFIG_DIR.glob("*.yml")) + sorted(CONFIG_DIR.glob("*.yaml"))


def read_family(path: str | Path) -> dict[str, dict[str, Any]]:
    """The experiments of one YAML family file, ``{name: raw config}``."""
    path = Path(path)
    with path.open() as fh:
        data = safe_yaml(fh.read(), str(path))
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ConfigError(f"{path}: expected a mapping of experiment name -> config mapping")
    return data


def list_experiments() -> dict[str, Path]:
    """Every experiment in ``zoo/configs``, ``{name: family file}``."""
    found: dict[str, Path] = {}
    for path in available_files():
        for name in read_family(path):
            if name in found:
                raise ConfigError(f"experiment {name!r} is defined in {found[name]} and {path}")
            found[name] = path
    return found


def find_experiment(name_or_path: str | Path) -> tuple[str, dict[str, Any], str]:
    """``(name, raw config, source)`` for a registered name, a YAML path or ``path:name``."""
    text = str(name_or_path)
    path_part, _, exp = text.partition(":") if text.count(":") == 1 else (text, "", "")
    path = Path(path_part)
    if path.suffix in (".yml", ".yaml") or path.is_dir():
        if path.is_dir():
            path = path / "config.yml"
        if not path.is_file():
            raise ConfigError(f"no config file at {path}")
        family = read_family(path)
        if exp:
            if exp not in family:
                raise ConfigError(f"{path} has no experiment {exp!r}.{nearest(exp, family)}")
            return exp, family[exp], str(path)
        if len(family) != 1:
            raise ConfigError(
                f"{path} holds {len(family)} experiments ({', '.join(family)}); "
                f"name one as {path}:NAME"
            )
        ((name, raw),) = family.items()
        return name, raw, str(path)
    known = list_experiments()
    if text not in known:
        raise ConfigError(
            f"unknown experiment {text!r}.{nearest(text, known)} "
            "Run `attn-zoo list` to see them all, or give a YAML path."
        )
    return text, read_family(known[text])[text], str(known[text].relative_to(CONFIG_DIR.parent))


def _apply_budget(raw: dict[str, Any], budget: str, name: str) -> dict[str, Any]:
    budgets = raw.get("budgets") or {}
    if not isinstance(budgets, dict):
        raise ConfigError(f"{name}: 'budgets' must be a mapping of budget name -> overrides")
    if budget not in budgets and budget != "full":
        raise ConfigError(
            f"{name} has no budget {budget!r}; it has: {', '.join(budgets) or 'none'}."
            f"{nearest(budget, budgets)}"
        )
    update = budgets.get(budget) or {}
    if not isinstance(update, dict):
        raise ConfigError(
            f"{name}: budgets.{budget} must be a mapping of overrides, got {update!r}"
        )
    update = dict(update)
    body = {k: v for k, v in raw.items() if k != "budgets"}
    matrix_update = update.pop("matrix", None)
    body = deep_merge(body, update)
    if matrix_update is not None:
        body["matrix"] = _restrict_matrix(body.get("matrix") or {}, matrix_update, name)
    return body


def _restrict_matrix(matrix: dict[str, Any], update: dict[str, Any], name: str) -> dict[str, Any]:
    """Axes in ``update`` replace axes of ``matrix``; a list of names subsets a named axis."""
    out = dict(matrix)
    for axis, values in update.items():
        base = matrix.get(axis)
        if isinstance(base, dict) and not isinstance(values, dict):
            picks = values if isinstance(values, list) else [values]
            missing = [p for p in picks if p not in base]
            if missing:
                raise ConfigError(
                    f"{name}: matrix axis {axis!r} has no variant {missing[0]!r}."
                    f"{nearest(missing[0], base)} Variants: {', '.join(base)}"
                )
            out[axis] = {p: base[p] for p in picks}
        else:
            out[axis] = values if isinstance(values, (list, dict)) else [values]
    return out


def _substitute(value: Any, variables: Mapping[str, Any]) -> Any:
    if isinstance(value, str):
        for var, sub in variables.items():
            token = "{" + var + "}"
            if value == token:
                return sub
            value = value.replace(token, str(sub))
        return value
    if isinstance(value, dict):
        return {k: _substitute(v, variables) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, variables) for v in value]
    return value


def expand(body: dict[str, Any], known_keys: Iterable[str]) -> list[tuple[str, dict[str, Any]]]:
    """Every ``(tag, body)`` cell of the config's matrix (one ``("", body)`` without one).

    A string value ``"{seed}"`` becomes the cell's seed (an int); ``{<axis>}`` the axis value.
    """
    matrix = body.get("matrix") or {}
    if not isinstance(matrix, dict):
        raise ConfigError(f"'matrix' must be a mapping of axis -> values, got {matrix!r}")
    base = {k: v for k, v in body.items() if k != "matrix"}
    if not matrix:
        return [("", _substitute(base, {"seed": base.get("seed", 0)}))]
    known = set(known_keys)
    axes: list[list[tuple[str, str, Any]]] = []
    for axis, values in matrix.items():
        if isinstance(values, dict):
            axes.append([(axis, str(n), overrides or {}) for n, overrides in values.items()])
        elif isinstance(values, list) and values:
            axes.append([(axis, str(v), v) for v in values])
        else:
            raise ConfigError(f"matrix axis {axis!r} must be a non-empty list or mapping")
    text = yaml.safe_dump(base)
    for axis, values in matrix.items():
        used = "{" + axis + "}" in text
        if isinstance(values, list) and axis.split(".")[0] not in known and not used:
            raise ConfigError(
                f"matrix axis {axis!r} is neither a config key nor a {{{axis}}} template "
                f"variable used by the config.{nearest(axis.split('.')[0], known)}"
            )
    cells = []
    for combo in itertools.product(*axes):
        cell = copy.deepcopy(base)
        variables: dict[str, Any] = {}
        for axis, label, value in combo:
            if isinstance(matrix[axis], dict):
                cell = deep_merge(cell, value)
                variables[axis] = label
            elif axis.split(".")[0] in known:
                set_dotted(cell, axis, value)
            else:
                variables[axis] = value
        # "{seed}" is the run's seed (E7's env_kwargs.order_seed), after a seed axis is set
        cell = _substitute(cell, {"seed": cell.get("seed", 0), **variables})
        # Seeds share a folder per cell (runs/<experiment>/<tag>/<seed>-<time>).
        tag = "-".join(label for axis, label, _ in combo if axis != "seed")
        cells.append((tag, cell))
    return cells


def load_runs(
    name_or_path: str | Path,
    budget: str = "full",
    overrides: Mapping[str, Any] | None = None,
    seed: int | None = None,
) -> list[RunConfig]:
    """Resolve an experiment into validated :class:`RunConfig` s (one per matrix cell).

    Args:
        name_or_path: a name from ``attn-zoo list``, a YAML file, ``file.yml:name`` or a run
            folder (its ``config.yml``).
        budget: ``"smoke"``, ``"cpu"`` or ``"full"``.
        overrides: ``{dotted key: value}`` applied after the budget. A key that names a matrix
            axis keeps only the given value(s) of that axis.
        seed: overrides ``seed`` (and a ``seed`` matrix axis).

    Raises:
        ConfigError: before anything is written, for any key, type or class that is wrong.

    Example:
        >>> runs = load_runs("doorkey", budget="smoke")
        >>> runs[0].algo, runs[0].body["policy"], runs[0].body["n_timesteps"] <= 1000
        ('double_dqn', 'relational_dqn', True)
    """
    from zoo.trainers import get_trainer

    name, raw, source = find_experiment(name_or_path)
    if not isinstance(raw.get("matrix") or {}, dict):
        raise ConfigError(f"{name}: 'matrix' must be a mapping of axis -> values")
    body = _apply_budget(raw, budget, name)
    overrides = dict(overrides or {})
    if seed is not None:
        overrides["seed"] = seed
    matrix = body.get("matrix") or {}
    axis_overrides = {k: v for k, v in overrides.items() if k in matrix}
    if axis_overrides:
        body["matrix"] = _restrict_matrix(matrix, axis_overrides, name)
    for key, value in overrides.items():
        if key not in matrix:
            set_dotted(body, key, value)
    if "algo" not in body:
        raise ConfigError(f"{name}: missing required key 'algo'")
    if not isinstance(body["algo"], str):
        raise ConfigError(f"{name}: 'algo' must be a string, got {body['algo']!r}")
    trainer = get_trainer(body["algo"])
    known = set(COMMON_KEYS) | set(trainer.config_keys(body))
    runs = []
    for tag, cell in expand(body, known):
        where = f"{name}/{tag}" if tag else name
        try:
            evaluation = EvalConfig.from_dict(cell.get("eval"))
        except ConfigError as err:
            raise ConfigError(f"{where}: {err}") from None
        run = RunConfig(name, tag, budget, cell, evaluation, source)
        check_keys(run, known)
        trainer.validate(run)
        check_ranges(run)
        runs.append(run)
    return runs


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
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if number and not (math.isfinite(value) and value > 0):
            raise ConfigError(f"{run.name}: {key!r} must be finite and positive, got {value}")


def check_type(where: str, key: str, value: Any, types: tuple[type, ...] | None) -> None:
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
        if key not in known:
            raise ConfigError(f"{run.name}: unknown key {key!r}.{nearest(key, known)}")
        if key in COMMON_KEYS:
            check_type(run.name, key, value, COMMON_KEYS[key])
