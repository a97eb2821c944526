"""A trainer's config model (:mod:`zoo.trainers.keys`): the type table, defaults, checks and
docs table all come from the one dataclass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import pytest

from zoo.config_checks import ConfigError, EvalConfig, RunConfig
from zoo.trainers import keys
from zoo.trainers.keys import key


@dataclass(frozen=True)
class Toy:
    """A model with one key of each kind."""

    env: str = key(doc="the env id", required=True)
    es: Literal["cmaes", "pgpe"] = key("cmaes", "the search")
    sigma0: float | int = key(0.1, "initial step", range=(0, None))
    share: float = key(0.5, "a share", range=(0, 1))
    env_kwargs: dict[str, Any] = key({}, "env kwargs")
    wrappers: Any = key([], "wrappers, checked elsewhere")
    cap: int | None = key(None, "a cap (null: none)")


def _run(**body: Any) -> RunConfig:
    return RunConfig("toy", "", "full", {"algo": "toy", "env": "E", **body}, EvalConfig())


def test_the_type_table_follows_the_annotations_in_order() -> None:
    assert keys.key_types(Toy) == {
        "env": (str,),
        "es": (str,),
        "sigma0": (float, int),  # the order the error message names them in
        "share": (float,),
        "env_kwargs": (dict,),
        "wrappers": None,
        "cap": (int,),
    }
    assert keys.choices(Toy, "es") == ("cmaes", "pgpe")
    with pytest.raises(TypeError, match="not a Literal"):
        keys.choices(Toy, "env")


def test_a_value_not_given_or_null_is_the_default_and_defaults_are_fresh_copies() -> None:
    run = _run(sigma0=2, es=None)
    assert keys.value(Toy, run, "sigma0") == 2
    assert keys.value(Toy, run, "es") == "cmaes"
    assert keys.value(Toy, run.body, "cap") is None
    filled = keys.values(Toy, run)
    assert (filled.env, filled.sigma0, filled.share, filled.es) == ("E", 2, 0.5, "cmaes")
    keys.value(Toy, run, "env_kwargs")["x"] = 1  # a caller's change stays its own
    assert keys.default(Toy, "env_kwargs") == {} and keys.values(Toy, run).env_kwargs == {}
    with pytest.raises(KeyError, match="no key 'nope'"):
        keys.default(Toy, "nope")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"sigma0": "big"}, "toy: 'sigma0' must be float or int, got str 'big'"),
        ({"share": True}, "toy: 'share' must be float, got True"),
        ({"env": "drop"}, "toy: missing required key 'env'"),
        ({"sigma0": -1}, "toy: sigma0 must be >= 0"),
        ({"share": 1.5}, "toy: share must be <= 1"),
    ],
)
def test_check_refuses_types_then_missing_keys_then_ranges(
    body: dict[str, Any], message: str
) -> None:
    run = _run(**body)
    if body.get("env") == "drop":
        del run.body["env"]
    with pytest.raises(ConfigError) as err:
        keys.check(Toy, run)
    assert str(err.value) == message


def test_check_passes_values_in_range_and_nulls() -> None:
    keys.check(Toy, _run(sigma0=0, share=1, cap=None, wrappers=[{"x": 1}]))


def test_the_docs_table_reads_the_model() -> None:
    assert keys.markdown_table(Toy).splitlines() == [
        "| key | type | default | what |",
        "| --- | --- | --- | --- |",
        "| `env` | str | required | the env id |",
        "| `es` | `cmaes` or `pgpe` | `cmaes` | the search |",
        "| `sigma0` | float or int >= 0 | `0.1` | initial step |",
        "| `share` | float in [0, 1] | `0.5` | a share |",
        "| `env_kwargs` | dict | `{}` | env kwargs |",
        "| `wrappers` | any | `[]` | wrappers, checked elsewhere |",
        "| `cap` | int | `null` | a cap (null: none) |",
    ]


def test_a_model_is_a_dataclass() -> None:
    with pytest.raises(TypeError, match="a config model is a dataclass"):
        keys.key_types(dict)
