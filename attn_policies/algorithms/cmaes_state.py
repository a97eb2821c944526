"""CMA-ES state as data only: pycma's object graph <-> JSON description + arrays.

:meth:`attn_policies.algorithms.cmaes.CMAES.dumps` writes an optimiser's state as an ``.npz``
of arrays plus a JSON tree of its objects; :meth:`~attn_policies.algorithms.cmaes.CMAES.loads`
reads it back with ``allow_pickle=False``. Only pycma's own state classes may be named (created
with ``__new__``, their ``__dict__`` filled with data, so none of their code runs); options,
the logger and every function come from a fresh optimiser built from the config, so a
tampered file cannot run code.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar, Protocol

import numpy as np


class FreshOptimiser(Protocol):
    """What :class:`StateDecoder` reads of the optimiser it restores into
    (:class:`~attn_policies.algorithms.cmaes.CMAES`): its fresh pycma strategy and sampler."""

    es: Any  # cma.CMAEvolutionStrategy (pycma ships no type hints)
    sampler: np.random.RandomState


__all__ = ["StateDecoder", "StateEncoder", "StateFormatError"]


class StateFormatError(ValueError):
    """A checkpoint file that is not a valid data-only CMA-ES state (names file and problem)."""


@functools.cache
def _cma_classes() -> dict[str, type]:
    """The exact pycma classes a ``CMAEvolutionStrategy`` is made of (pycma 4.x).

    The state file may only name these; they are created with ``__new__`` and their
    ``__dict__`` filled with data, so no code of the class (or of anything else) runs.
    """
    from cma import (
        boundary_handler,
        evolution_strategy,
        logger,
        optimization_tools,
        options_parameters,
        recombination_weights,
        sampler,
        sigma_adaptation,
        transformations,
    )
    from cma.utilities import utils

    classes = [
        evolution_strategy.CMAEvolutionStrategy,
        evolution_strategy._CMASolutionDict_functional,
        evolution_strategy._CMASolutionDict_empty,  # pycma's archive at population >= 33
        evolution_strategy._CMAStopDict,
        evolution_strategy._StopTolXStagnation,
        options_parameters.CMAOptions,
        options_parameters.CMAParameters,
        transformations.GenoPheno,
        transformations.DiagonalDecoding,
        transformations.RoundIntegerVariables,
        recombination_weights.RecombinationWeights,
        optimization_tools.BestSolution,
        logger.CMADataLogger,
        utils.SolutionDict,
        utils.BlancClass,
        utils.DictFromTagsInString,
        utils.ElapsedWCTime,
        utils.MoreToWrite,
    ]
    # The step-size rules, samplers and boundary handlers pycma picks by option.
    families = (
        (sigma_adaptation, sigma_adaptation.CMAAdaptSigmaBase),
        (sampler, sampler.GaussSampler),
        (boundary_handler, boundary_handler.BoundaryHandlerBase),
    )
    for module, base in families:
        classes += [
            c
            for c in vars(module).values()
            if isinstance(c, type) and c.__module__ == module.__name__ and issubclass(c, base)
        ]
    classes.append(sigma_adaptation._TPAParameters)
    return {f"{c.__module__}:{c.__qualname__}": c for c in classes}


# Taken from the optimiser built from the (trusted, validated) config, never from the file:
# pycma evaluates option strings, and the logger owns file names.
_FROM_CONFIG = ("opts", "inputargs", "logger")
_OPTIONS = "cma.options_parameters:CMAOptions"


class StateEncoder:
    """pycma object graph -> JSON tree + arrays; callables become placeholders."""

    def __init__(self, sampler: np.random.RandomState) -> None:
        self.sampler = sampler
        self.arrays: dict[str, np.ndarray] = {}
        self.memo: dict[int, int] = {}
        self.keep: list[Any] = []  # ids stay unique while encoding

    def __call__(self, obj: Any, top: bool = False) -> Any:
        if obj is None or isinstance(obj, (bool, int, float, str)):
            return obj
        if isinstance(obj, (np.ndarray, np.generic)):
            if np.asarray(obj).dtype.hasobject:
                raise TypeError("object arrays cannot be stored as data")
            key = f"a{len(self.arrays)}"
            self.arrays[key] = np.asarray(obj)
            return {"__nd__": key, "scalar": isinstance(obj, np.generic)}
        is_cma_instance = type(obj).__module__.startswith("cma") and hasattr(obj, "__dict__")
        if callable(obj) and not is_cma_instance:  # functions, methods, classes
            owner = getattr(obj, "__self__", None)
            if owner is self.sampler:
                return {"__config__": "sampler"}
            if owner is np.random.mtrand._rand:
                return {"__config__": "numpy.random:randn"}
            return {"__config__": f"{getattr(obj, '__module__', '')}:{obj.__qualname__}"}
        if type(obj) is range:
            return {"__range__": [obj.start, obj.stop, obj.step]}
        if id(obj) in self.memo:
            return {"__ref__": self.memo[id(obj)]}
        ref = self.memo[id(obj)] = len(self.memo)
        self.keep.append(obj)
        if type(obj) is tuple:
            return {"__tuple__": [self(v) for v in obj], "id": ref}
        if type(obj) in (set, frozenset):
            return {"__set__": [self(v) for v in sorted(obj, key=repr)], "id": ref}
        if type(obj) is list:
            return {"__list__": [self(v) for v in obj], "id": ref}
        name = f"{type(obj).__module__}:{type(obj).__qualname__}"
        if type(obj) is dict:
            return {"__dict__": [[self(k), self(v)] for k, v in obj.items()], "id": ref}
        if name not in _cma_classes():
            raise TypeError(f"cannot store {name} in a CMA-ES state")
        attrs = {
            k: ({"__config__": True} if top and k in _FROM_CONFIG else self(v))
            for k, v in vars(obj).items()
        }
        node: dict[str, Any] = {"__obj__": name, "attrs": attrs, "id": ref}
        if isinstance(obj, dict):
            node["items"] = [[self(k), self(v)] for k, v in obj.items()]
        elif isinstance(obj, list):  # RecombinationWeights is a list of weights
            node["list"] = [self(v) for v in obj]
        return node


class StateDecoder:
    """JSON tree + arrays -> pycma object graph; placeholders are filled from ``fresh``."""

    # Functions pycma may hold that a fresh optimiser need not have at the same place (a
    # sampler switched during the run); nothing else can be named.
    CALLABLES: ClassVar[dict[str, Any]] = {
        "numpy.random:randn": np.random.randn,
        "numpy.linalg:eigh": np.linalg.eigh,
    }

    def __init__(self, arrays: Any, fresh: FreshOptimiser, where: str) -> None:
        self.arrays, self.owner, self.fresh, self.where = arrays, fresh, fresh.es, where
        self.memo: dict[object, Any] = {}  # keyed by the file's ids, whatever JSON they are
        self.classes = _cma_classes()

    def fail(self, problem: str) -> StateFormatError:
        return StateFormatError(f"{self.where}: {problem}")

    def _from_config(self, path: tuple[Any, ...]) -> Any:
        node = self.fresh
        try:
            for kind, key in path:
                node = getattr(node, key) if kind == "attr" else node[key]
        except (AttributeError, KeyError, IndexError, TypeError):
            raise self.fail(f"no value for {_path_text(path)} in a fresh optimiser") from None
        return node

    def __call__(self, node: Any, path: tuple[Any, ...] = ()) -> Any:
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if isinstance(node, list):
            raise self.fail(f"bare list at {_path_text(path)}")
        if not isinstance(node, dict):
            raise self.fail(f"unexpected {type(node).__name__} at {_path_text(path)}")
        if "__config__" in node:
            tag = node["__config__"]
            if tag == "sampler":
                return self.owner.sampler.randn
            if isinstance(tag, str) and tag in self.CALLABLES:
                return self.CALLABLES[tag]
            return self._from_config(path)
        if "__ref__" in node:
            if node["__ref__"] not in self.memo:
                raise self.fail(f"dangling reference at {_path_text(path)}")
            return self.memo[node["__ref__"]]
        if "__nd__" in node:
            key = node["__nd__"]
            if not isinstance(key, str) or key not in self.arrays:
                raise self.fail(f"missing array {key!r}")
            array = self.arrays[key]
            return array[()] if node.get("scalar") else array
        if "__range__" in node:
            return range(*(int(v) for v in node["__range__"]))
        ref = node.get("id")
        if "__tuple__" in node or "__list__" in node or "__set__" in node:
            kind = next(k for k in ("__tuple__", "__list__", "__set__") if k in node)
            items = [self(v, (*path, ("item", i))) for i, v in enumerate(node[kind])]
            out: Any = {"__tuple__": tuple, "__list__": list, "__set__": set}[kind](items)
            self.memo[ref] = out
            return out
        if "__dict__" in node:
            out = self.memo[ref] = {}
            for k, v in node["__dict__"]:
                key = self(k, path)
                out[key] = self(v, (*path, ("item", key)))
            return out
        name = node.get("__obj__")
        if name == _OPTIONS:
            # Options come from the config, also where pycma keeps a second reference to
            # them (the stop dict's, set by ``es.stop()``): the file's copy is never used, and
            # a restored optimiser's state saved again still names the fresh options.
            self.memo[node.get("id")] = self.fresh.opts
            return self.fresh.opts
        if name not in self.classes:
            raise self.fail(f"refers to {name!r}, which is not a pycma state class")
        cls = self.classes[name]
        base = next((b for b in (dict, list) if issubclass(cls, b)), object)
        obj: Any = base.__new__(cls)  # a dict, a list or a plain instance of a pycma class
        self.memo[ref] = obj
        attrs = node.get("attrs", {})
        if not isinstance(attrs, dict):
            raise self.fail(f"bad attributes of {name}")
        vars(obj).update(
            {k: self(v, (*path, ("attr", k))) for k, v in attrs.items() if isinstance(k, str)}
        )
        for k, v in node.get("items", []):
            key = self(k, path)
            dict.__setitem__(obj, key, self(v, (*path, ("item", key))))
        if base is list:
            list.extend(obj, [self(v, (*path, ("item", i))) for i, v in enumerate(node["list"])])
        return obj


def _path_text(path: tuple[Any, ...]) -> str:
    return "es" + "".join(f".{k}" if kind == "attr" else f"[{k!r}]" for kind, k in path)
