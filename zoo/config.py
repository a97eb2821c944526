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
    axes that expand one config into runs: a config key (``seed: [0, 1, 2]``), a template
    variable (``game: [Pong, Breakout]`` with ``env: ALE/{game}-v5``) or named variants.
``algo``
    the trainer (:mod:`zoo.trainers`): ``ppo``, ``a2c``, ``a2c_graph`` (A2C reusing its acting
    forward passes in the update), ``dqn``, ``double_dqn``, ``qrdqn``, ``recurrent_ppo``,
    ``classifier``, ``cmaes``, ``bc``, ``dagger``, ``apg``.

How budgets, ``--set`` overrides, the matrix and ``{game}`` / ``{seed}`` templates combine is
written down, with checked examples, in :mod:`zoo.config_merge`; the checks every run passes
(keys, types, ranges, the ``eval`` block) are in :mod:`zoo.config_checks`. Both are
re-exported here, the public import path (the trainers, which :func:`load_runs` validates
with, import them from where they are defined).

Loading never runs code from the file: YAML is read with ``safe_load`` and classes are
resolved by import from short names (:mod:`zoo.registry`). Every run is validated before any
file is written; errors name the key and the nearest valid choices.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from zoo.config_checks import (
    COMMON_KEYS,
    INT_RANGES,
    ConfigError,
    EvalConfig,
    RunConfig,
    available_memory,
    check_folder_name,
    check_keys,
    check_memory,
    check_npz_memory,
    check_ranges,
    check_type,
    nearest,
    npz_arrays,
    require_int,
    safe_yaml,
)
from zoo.config_merge import (
    apply_budget,
    apply_overrides,
    deep_merge,
    expand,
    parse_overrides,
    restrict_matrix,
    set_dotted,
    substitute,
)
from zoo.trainers import get_trainer

__all__ = [
    "BUDGETS",
    "COMMON_KEYS",
    "CONFIG_DIR",
    "INT_RANGES",
    "ConfigError",
    "EvalConfig",
    "RunConfig",
    "apply_budget",
    "apply_overrides",
    "available_files",
    "available_memory",
    "check_folder_name",
    "check_keys",
    "check_memory",
    "check_npz_memory",
    "check_ranges",
    "check_type",
    "deep_merge",
    "expand",
    "find_experiment",
    "list_experiments",
    "load_runs",
    "nearest",
    "npz_arrays",
    "parse_overrides",
    "read_family",
    "require_int",
    "restrict_matrix",
    "safe_yaml",
    "set_dotted",
    "substitute",
]

CONFIG_DIR = Path(__file__).parent / "configs"
BUDGETS = ("smoke", "cpu", "full")


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
    from zoo.registry import check_env_ids  # imports torch: here, not with zoo.config

    name, raw, source = find_experiment(name_or_path)
    check_folder_name(name, f"{source}: the experiment name")  # runs/<name>/: one folder
    if not isinstance(raw.get("matrix") or {}, dict):
        raise ConfigError(f"{name}: 'matrix' must be a mapping of axis -> values")
    body = apply_budget(raw, budget, name)
    overrides = dict(overrides or {})
    if seed is not None:
        overrides["seed"] = seed
    body = apply_overrides(body, overrides, name)
    if "algo" not in body:
        raise ConfigError(f"{name}: missing required key 'algo'")
    if not isinstance(body["algo"], str):
        raise ConfigError(f"{name}: 'algo' must be a string, got {body['algo']!r}")
    trainer = get_trainer(body["algo"])
    known = set(COMMON_KEYS) | set(trainer.config_keys(body))
    runs = []
    for tag, cell in expand(body, known):
        where = f"{name}/{tag}" if tag else name
        if tag:  # runs/<name>/<tag>/: one folder too
            check_folder_name(tag, f"{name}: the matrix cell")
        try:
            evaluation = EvalConfig.from_dict(cell.get("eval"))
        except ConfigError as err:
            raise ConfigError(f"{where}: {err}") from None
        run = RunConfig(name, tag, budget, cell, evaluation, source)
        check_keys(run, known)
        try:  # gymnasium imports an id's "module:" part: an allowed module only
            check_env_ids(cell, where)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        trainer.validate(run)
        check_ranges(run)
        runs.append(run)
    return runs
