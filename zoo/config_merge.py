"""The config DSL: how a family's experiment becomes runs (budgets, overrides, matrix, templates).

This is the one place the merge rules are written down; each example below is a doctest
(``python -m pytest zoo/config_merge.py``), so it is checked with the code. A config resolves
in this order (:func:`zoo.config.load_runs` runs the steps, then validates every cell):

1. **Budget** (:func:`apply_budget`). ``budgets: {smoke|cpu|full: {...}}`` is merged over the
   config: nested mappings (``eval``, ``env_kwargs``, ``policy_kwargs``) merge key by key,
   everything else (numbers, strings, lists) is replaced (:func:`deep_merge`). ``full`` is the
   config itself unless it has a ``budgets.full``. A budget's ``matrix`` does not merge: it
   **restricts** axes (:func:`restrict_matrix`): on a mapping axis (named variants) a list of
   names keeps those variants; on a list axis the given values replace the axis.
2. **Overrides** (:func:`apply_overrides`; ``--set key=value``, read by
   :func:`parse_overrides` as YAML values, so ``1e-3`` is a float and ``[a, b]`` a list). A
   dotted key sets one nested value (``eval.freq=0``, ``env_kwargs.n_distractors=3``). A key
   that names a matrix axis restricts that axis as a budget does (``game=Breakout`` runs only
   Breakout). ``--seed N`` is the override ``seed=N``.
3. **Matrix** (:func:`expand`). The cells are every combination of the axes:

   - an axis named after a config key sets that key (``seed: [0, 1, 2]``,
     ``env_kwargs.n_distractors: [0, 1, 3]``);
   - any other list axis is a **template variable**: ``{name}`` in every string value is
     replaced by the cell's value (``env: ALE/{game}-v5``); an axis that is neither a key nor
     used as ``{name}`` is an error;
   - a mapping axis names variants, each a set of overrides deep-merged into the cell
     (``model: {fc: {policy_kwargs: ...}}``); its name is usable as ``{model}`` too.

   A cell's tag joins its axis labels in order (``Pong-fc``), leaving out ``seed``: the
   seeds of one cell share a folder (``runs/<experiment>/<tag>/<seed>-<time>``).
4. **Templates** (:func:`substitute`). After the cell's keys are set, ``{seed}`` is the
   cell's ``seed`` (0 if unset) and ``{<axis>}`` the axis value. A string that is exactly
   ``"{seed}"`` becomes the integer itself (E7's ``env_kwargs.order_seed``); inside a longer
   string it is text.
5. **Validation** (:mod:`zoo.config`): keys, types, ranges and classes of every cell, before
   anything is written; the written ``config.yml`` holds the resolved cell, without
   ``budgets`` and ``matrix``.

A **curriculum** (``algo`` of SB3 only: ``curriculum: [{n_timesteps: ..., env_kwargs: ...}]``)
is not expanded here: each stage is deep-merged over the resolved run when that stage starts
(:func:`zoo.trainers.sb3_config.stages`), by the same :func:`deep_merge` rule.

Example (a family shaped like ``zoo/configs/atariari.yml``):

    >>> raw = safe_yaml('''
    ... seed: 0
    ... env: ALE/{game}-v5
    ... env_kwargs: {frameskip: 4, order_seed: "{seed}"}
    ... algo: ppo
    ... n_timesteps: 10000000
    ... eval: {n_episodes: 10, final_episodes: 100}
    ... matrix:
    ...   game: [Pong, Breakout, Seaquest]
    ...   model:
    ...     attention: {}
    ...     fc: {policy_kwargs: {features_extractor_class: feature_fc}}
    ... budgets:
    ...   smoke:
    ...     n_timesteps: 64
    ...     eval: {n_episodes: 1}
    ...     matrix: {game: [Pong], model: [fc]}
    ... ''', "example.yml")

    The ``smoke`` budget replaces ``n_timesteps``, merges into ``eval`` and restricts both
    axes (the ``fc`` variant keeps its overrides):

    >>> smoke = apply_budget(raw, "smoke", "example")
    >>> smoke["n_timesteps"], smoke["eval"]
    (64, {'n_episodes': 1, 'final_episodes': 100})
    >>> smoke["matrix"]["game"], smoke["matrix"]["model"]["fc"]
    (['Pong'], {'policy_kwargs': {'features_extractor_class': 'feature_fc'}})
    >>> list(smoke["matrix"]["model"])
    ['fc']

    ``--set game=[Pong,Breakout] eval.freq=0 learning_rate=1e-3 --seed 1`` on the full
    budget (the config itself):

    >>> full = apply_budget(raw, "full", "example")
    >>> sets = parse_overrides(["game=[Pong,Breakout]", "eval.freq=0", "learning_rate=1e-3"])
    >>> body = apply_overrides(full, {**sets, "seed": 1}, "example")
    >>> body["matrix"]["game"], body["eval"]["freq"], body["learning_rate"], body["seed"]
    (['Pong', 'Breakout'], 0, 0.001, 1)

    Expansion: 2 games x 2 models, ``{game}`` and ``{seed}`` filled in per cell:

    >>> known = {"seed", "env", "env_kwargs", "algo", "n_timesteps", "eval", "learning_rate",
    ...          "policy_kwargs"}
    >>> cells = expand(body, known)
    >>> [tag for tag, _ in cells]
    ['Pong-attention', 'Pong-fc', 'Breakout-attention', 'Breakout-fc']
    >>> tag, cell = cells[3]
    >>> cell["env"], cell["env_kwargs"]
    ('ALE/Breakout-v5', {'frameskip': 4, 'order_seed': 1})
    >>> cell["policy_kwargs"]
    {'features_extractor_class': 'feature_fc'}

    A ``seed`` axis sets the key (and ``{seed}``) without adding to the tag; an axis the
    config never uses is an error:

    >>> seeds = {**body, "matrix": {"seed": [3, 4]}}
    >>> [(t, c["seed"], c["env_kwargs"]["order_seed"]) for t, c in expand(seeds, known)]
    [('', 3, 3), ('', 4, 4)]
    >>> expand({**body, "matrix": {"level": [1, 2]}}, known)
    Traceback (most recent call last):
    ...
    zoo.config.ConfigError: matrix axis 'level' is neither a config key nor a {level} ...
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import math
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from zoo.config_checks import ConfigError, nearest, safe_yaml

__all__ = [
    "apply_budget",
    "apply_overrides",
    "deep_merge",
    "expand",
    "parse_overrides",
    "restrict_matrix",
    "set_dotted",
    "substitute",
]


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


def apply_budget(raw: dict[str, Any], budget: str, name: str) -> dict[str, Any]:
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
        body["matrix"] = restrict_matrix(body.get("matrix") or {}, matrix_update, name)
    return body


def apply_overrides(
    body: dict[str, Any], overrides: Mapping[str, Any], name: str
) -> dict[str, Any]:
    """``body`` with ``--set`` overrides applied (after the budget): a key naming a matrix axis
    restricts that axis (:func:`restrict_matrix`); any other (dotted) key is set in place."""
    body = copy.deepcopy(body)
    matrix = body.get("matrix") or {}
    axis_overrides = {k: v for k, v in overrides.items() if k in matrix}
    if axis_overrides:
        body["matrix"] = restrict_matrix(matrix, axis_overrides, name)
    for key, value in overrides.items():
        if key not in matrix:
            set_dotted(body, key, value)
    return body


def restrict_matrix(matrix: dict[str, Any], update: dict[str, Any], name: str) -> dict[str, Any]:
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


def substitute(value: Any, variables: Mapping[str, Any]) -> Any:
    if isinstance(value, str):
        for var, sub in variables.items():
            token = "{" + var + "}"
            if value == token:
                return sub
            value = value.replace(token, str(sub))
        return value
    if isinstance(value, dict):
        return {k: substitute(v, variables) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, variables) for v in value]
    return value


# Most cells one config may expand to (the zoo's largest matrix has 360): past it the cells
# alone, copied before any check, would exhaust time and memory.
MAX_CELLS = 10_000


def expand(body: dict[str, Any], known_keys: Iterable[str]) -> list[tuple[str, dict[str, Any]]]:
    """Every ``(tag, body)`` cell of the config's matrix (one ``("", body)`` without one).

    A string value ``"{seed}"`` becomes the cell's seed (an int); ``{<axis>}`` the axis value.
    """
    matrix = body.get("matrix") or {}
    if not isinstance(matrix, dict):
        raise ConfigError(f"'matrix' must be a mapping of axis -> values, got {matrix!r}")
    base = {k: v for k, v in body.items() if k != "matrix"}
    if not matrix:
        return [("", substitute(base, {"seed": base.get("seed", 0)}))]
    known = set(known_keys)
    axes: list[list[tuple[str, str, Any]]] = []
    for axis, values in matrix.items():
        if isinstance(values, dict):
            axes.append([(axis, str(n), overrides or {}) for n, overrides in values.items()])
        elif isinstance(values, list) and values:
            axes.append([(axis, str(v), v) for v in values])
        else:
            raise ConfigError(f"matrix axis {axis!r} must be a non-empty list or mapping")
    n_cells = math.prod(len(values) for values in axes)
    if n_cells > MAX_CELLS:
        raise ConfigError(
            f"the matrix has {n_cells:,} cells ({' x '.join(str(len(v)) for v in axes)}); "
            f"at most {MAX_CELLS:,} are run from one config"
        )
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
        cell = substitute(cell, {"seed": cell.get("seed", 0), **variables})
        # Seeds share a folder per cell (runs/<experiment>/<tag>/<seed>-<time>).
        tag = "-".join(label for axis, label, _ in combo if axis != "seed")
        cells.append((tag, cell))
    return cells
