"""A trainer's config keys as one typed model: each key once, with its types, default, range
and one line of documentation.

A trainer declares a frozen dataclass whose fields are the keys it accepts beyond the common
ones, each made with :func:`key`::

    @dataclass(frozen=True)
    class CMAESKeys:
        population: int = key(256, "solutions per generation", range=(2, None))
        es: Literal["cmaes", "pgpe"] = key("cmaes", "the search")

Everything else reads that model: :func:`key_types` is the ``KeyTypes`` table validation
checks values against (``float | int`` -> ``(float, int)``, ``Literal[...]`` -> its values'
type, ``Any`` -> any), :func:`check` applies it (with the required keys and ranges),
:func:`value` and :func:`values` read a run's value or the model's default, and
:func:`markdown_table` writes the docs' table. A key given as ``null`` counts as not given.

This module imports no trainer (and neither torch nor SB3) until :func:`config_models` asks
for them all.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union

import yaml

from zoo.config_checks import INT_RANGES, ConfigError, RunConfig, check_type
from zoo.trainers import MODULES, get_trainer
from zoo.trainers.contract import KeyTypes

__all__ = [
    "check",
    "choices",
    "config_models",
    "default",
    "defaults_comment",
    "key",
    "key_types",
    "keys_page",
    "markdown_page",
    "markdown_table",
    "value",
    "values",
]

Model = TypeVar("Model")
Bound = tuple[float | None, float | None]


def key(
    default: Any = None,
    doc: str = "",
    *,
    range: Bound | None = None,
    required: bool = False,
) -> Any:
    """One config key of a model: its ``default`` (a dict or list is copied for each use),
    one line of ``doc``, the ``range`` ``(low, high)`` a number must lie in (None: open)
    that :func:`check` enforces, and whether the key is ``required``."""
    metadata = {"doc": doc, "range": range, "required": required}
    if isinstance(default, dict | list):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def _fields(model: type) -> tuple[dataclasses.Field[Any], ...]:
    if not (isinstance(model, type) and dataclasses.is_dataclass(model)):
        raise TypeError(f"a config model is a dataclass, got {model!r}")
    return dataclasses.fields(model)


def _field(model: type, name: str) -> dataclasses.Field[Any]:
    for f in _fields(model):
        if f.name == name:
            return f
    raise KeyError(f"{model.__name__} has no key {name!r}")


def _hints(model: type) -> dict[str, Any]:
    return typing.get_type_hints(model)


def _members(hint: Any) -> tuple[Any, ...]:
    """The members of a union annotation (``None`` left out), or the annotation itself."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        return tuple(a for a in typing.get_args(hint) if a is not type(None))
    return (hint,)


def _types_of(hint: Any) -> tuple[type, ...] | None:
    """``float | int`` -> ``(float, int)``; ``dict[str, Any]`` -> ``(dict,)``;
    ``Literal["a", "b"]`` -> ``(str,)``; ``Any`` (or a member that is) -> None (any)."""
    out: list[type] = []
    for member in _members(hint):
        if member is Any:
            return None
        origin = typing.get_origin(member)
        if origin is Literal:
            out.extend(type(v) for v in typing.get_args(member))
        else:
            out.append(origin or member)
    return tuple(dict.fromkeys(out))


def key_types(model: type) -> KeyTypes:
    """``{key: the types its value may have (None: any)}`` in the model's order: the table
    :func:`zoo.config_checks.check_type` checks against."""
    return dict(_key_types(model))


@functools.cache
def _key_types(model: type) -> KeyTypes:
    hints = _hints(model)
    return {f.name: _types_of(hints[f.name]) for f in _fields(model)}


def choices(model: type, name: str) -> tuple[Any, ...]:
    """The values a ``Literal[...]`` key may take (in the annotation's order)."""
    found = [
        v
        for member in _members(_hints(model)[name])
        if typing.get_origin(member) is Literal
        for v in typing.get_args(member)
    ]
    if not found:
        raise TypeError(f"{model.__name__}.{name} is not a Literal key")
    return tuple(found)


def default(model: type, name: str) -> Any:
    """The model's default for key ``name`` (a fresh copy of a dict or list)."""
    f = _field(model, name)
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None if f.default is dataclasses.MISSING else f.default


def _body(run: RunConfig | Mapping[str, Any]) -> Mapping[str, Any]:
    return run.body if isinstance(run, RunConfig) else run


def value(model: type, run: RunConfig | Mapping[str, Any], name: str) -> Any:
    """The run's (or a config body's) value of key ``name``, or the model's default where it
    is not given or ``null``."""
    given = _body(run).get(name)
    return default(model, name) if given is None else given


def values(model: type[Model], run: RunConfig | Mapping[str, Any]) -> Model:
    """The model filled with the run's values, the defaults where a key is not given (values
    are as written, not converted: check them with :func:`check` first)."""
    body = _body(run)
    return model(**{f.name: body[f.name] for f in _fields(model) if body.get(f.name) is not None})


def check(model: type, run: RunConfig) -> None:
    """Refuse (:class:`~zoo.config_checks.ConfigError`) a value of the wrong type, then a
    missing required key, then a number outside its range, in the model's order."""
    table = key_types(model)
    for name, allowed in table.items():
        check_type(run.name, name, run.body.get(name), allowed)
    for f in _fields(model):
        if f.metadata.get("required") and f.name not in run.body:
            raise ConfigError(f"{run.name}: missing required key {f.name!r}")
    for f in _fields(model):
        bound, given = f.metadata.get("range"), run.body.get(f.name)
        if bound is None or not isinstance(given, int | float) or isinstance(given, bool):
            continue
        low, high = bound
        if low is not None and given < low:
            raise ConfigError(f"{run.name}: {f.name} must be >= {low}")
        if high is not None and given > high:
            raise ConfigError(f"{run.name}: {f.name} must be <= {high}")


def _type_text(f: dataclasses.Field[Any], hint: Any) -> str:
    """``int``, ``float or int``, the values of a ``Literal``, ``any``; and the range."""
    parts = []
    for member in _members(hint):
        if member is Any:
            parts = ["any"]
            break
        if typing.get_origin(member) is Literal:
            parts.extend(f"`{v}`" for v in typing.get_args(member))
        else:
            parts.append((typing.get_origin(member) or member).__name__)
    text = " or ".join(dict.fromkeys(parts))
    low, high = (_number(b) for b in _bound(f))
    if low and high:
        return f"{text} in [{low}, {high}]"
    if low or high:
        return f"{text} {'>=' if low else '<='} {low or high}"
    return text


def _number(bound: float | None) -> str:
    """A bound as written in the docs: ``0``, ``0.5``, ``1e12`` for a large power of ten."""
    if bound is None:
        return ""
    if isinstance(bound, int) and bound >= 10**4 and str(bound).rstrip("0") == "1":
        return f"1e{len(str(bound)) - 1}"
    return str(bound)


def _bound(f: dataclasses.Field[Any]) -> Bound:
    """The key's range: the model's own, else the bound every run's sizes are checked
    against (:data:`~zoo.config_checks.INT_RANGES`; a bound that depends on the machine is
    left open)."""
    if f.metadata.get("range") is not None:
        return f.metadata["range"]
    low, high = INT_RANGES.get(f.name, (None, None))
    return low, None if callable(high) else high


def _default_text(f: dataclasses.Field[Any], model: type) -> str:
    return "required" if f.metadata.get("required") else _yaml_text(default(model, f.name))


def _yaml_text(v: Any) -> str:
    """``v`` as it is written in a config: ``null``, ``true``, ``{}``, ``0.001``."""
    if v is None:
        return "`null`"
    if isinstance(v, bool):
        return f"`{str(v).lower()}`"
    if isinstance(v, dict | list):
        return f"`{yaml.safe_dump(v, default_flow_style=True, sort_keys=False).strip()}`"
    return f"`{v}`"


def defaults_comment(model: type, run: RunConfig) -> str:
    """The keys ``run`` leaves out (or sets to null) with the defaults the trainer uses for
    them, as YAML comment lines (what ``attn-zoo show`` prints under a run)."""
    body = _body(run)
    lines = [
        f"#   {f.name}: {_yaml_text(default(model, f.name)).strip('`')}"
        + (f"  # {f.metadata['doc']}" if f.metadata.get("doc") else "")
        for f in _fields(model)
        if body.get(f.name) is None and not f.metadata.get("required")
    ]
    if not lines:
        return ""
    return "# defaults of the keys not set here (the trainer's config model):\n" + "\n".join(lines)


def markdown_table(model: type) -> str:
    """The model as a Markdown table: key, type (and range), default, doc."""
    hints = _hints(model)
    rows = ["| key | type | default | what |", "| --- | --- | --- | --- |"]
    for f in _fields(model):
        doc = str(f.metadata.get("doc", "")).replace("|", "\\|")
        rows.append(
            f"| `{f.name}` | {_type_text(f, hints[f.name])} | {_default_text(f, model)} | {doc} |"
        )
    return "\n".join(rows)


PAGE_HEAD = """\
# Trainer keys

What each `algo` accepts besides the common keys (`algo`, `seed`, `n_timesteps`, `eval`,
`budgets`, `matrix`, ...: see [the zoo](zoo.md#configs)); `algo: recipe` runs stages of other
experiments ([budgets and recipes](zoo.md#budgets-and-recipes)). Each table is generated from
the trainer's config model (module `zoo.trainers.keys`), the one place a key's type, default
and range are written, and `tests/test_docs.py` checks that this page is what they give;
refresh it with
`python -c "import zoo.trainers.keys as k; print(k.keys_page(), end='')" > docs/trainer_keys.md`.
A key left out, or given as `null`, takes its default; a range is checked before a run starts.
"""

ROLE = re.compile(r":(?:class|func|mod|data):`~?([^`]+)`")


def markdown_page(models: Mapping[str, type]) -> str:
    """The text of ``docs/trainer_keys.md``: for each ``{title: model}`` a section with the
    model's docstring and its :func:`markdown_table`."""
    sections = []
    for title, model in models.items():
        doc = ROLE.sub(lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", inspect.getdoc(model) or "")
        sections.append(f"## {title}\n\n{' '.join(doc.split())}\n\n{markdown_table(model)}\n")
    return "\n".join([PAGE_HEAD, *sections])


def config_models() -> dict[str, type]:
    """``{title: config model}`` of every trainer (its ``config_model``), titled by the
    ``algo`` values it trains, in :data:`~zoo.trainers.MODULES`' order."""
    algos: dict[str, list[str]] = {}
    for algo, module in MODULES.items():
        algos.setdefault(module, []).append(algo)
    models = {}
    for names in algos.values():
        models["algo: " + ", ".join(names)] = get_trainer(names[0]).config_model
    return models


def keys_page() -> str:
    """The text of ``docs/trainer_keys.md``: every trainer's keys, from its config model."""
    return markdown_page(config_models())
