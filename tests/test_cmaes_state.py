"""Tests for attn_policies.algorithms.cmaes_state (CMA-ES state as data only)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from attn_policies.algorithms.cmaes import CMAES, CMAESConfig
from attn_policies.algorithms.cmaes_state import StateFormatError


def _tampered(opt: CMAES, edit: object) -> bytes:
    """``opt``'s state with its JSON description edited by ``edit(meta)``."""
    import io

    with np.load(io.BytesIO(opt.dumps()), allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    meta = json.loads(arrays["meta"].tobytes())
    edit(meta)  # type: ignore[operator]
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def test_state_naming_a_class_outside_pycma_is_refused() -> None:
    opt = CMAES(5, CMAESConfig(population=4))
    opt.tell(opt.ask(), np.arange(4.0))

    def swap_class(meta: dict) -> None:
        meta["es"]["attrs"]["sm"]["__obj__"] = "os:system"

    def name_a_function(meta: dict) -> None:
        meta["es"]["attrs"]["sm"]["attrs"]["randn"] = {"__config__": "os:system"}

    def add_a_function(meta: dict) -> None:
        meta["es"]["attrs"]["hook"] = {"__config__": "os:system"}

    with pytest.raises(StateFormatError, match="not a pycma state class"):
        CMAES.loads(_tampered(opt, swap_class), opt.config)
    # Functions only ever come from the optimiser rebuilt from the config.
    restored = CMAES.loads(_tampered(opt, name_a_function), opt.config)
    assert restored.es.sm.randn == restored.sampler.randn
    with pytest.raises(StateFormatError, match=r"no value for es\.hook"):
        CMAES.loads(_tampered(opt, add_a_function), opt.config)


def test_object_arrays_and_damaged_files_are_refused() -> None:
    import io

    buffer = io.BytesIO()
    np.savez(buffer, meta=np.array([os.system], dtype=object))
    with pytest.raises(StateFormatError, match="not a readable"):
        CMAES.loads(buffer.getvalue(), CMAESConfig(population=4))
    data = CMAES(5, CMAESConfig(population=4)).dumps()
    with pytest.raises(StateFormatError, match="not a readable"):
        CMAES.loads(data[: len(data) // 2], CMAESConfig(population=4))


@pytest.mark.parametrize(
    ("population", "options"),
    # pycma keeps a different archive class from population 33 on (E3 uses 256)
    [(6, {}), (6, {"CMA_diagonal": True}), (40, {}), (40, {"CMA_diagonal": True})],
)
def test_data_only_state_round_trips_bit_for_bit(population: int, options: dict) -> None:
    config = CMAESConfig(population=population, options=options)
    opt = CMAES(7, config)
    for _ in range(3):
        x = opt.ask()
        opt.tell(x, -(x**2).sum(axis=1))
    restored = CMAES.loads(opt.dumps(), config)
    for _ in range(3):
        a, b = opt.ask(), restored.ask()
        np.testing.assert_array_equal(a, b)  # sampler state travelled too
        opt.tell(a, -(a**2).sum(axis=1))
        restored.tell(b, -(b**2).sum(axis=1))
    np.testing.assert_array_equal(opt.favourite, restored.favourite)
    assert opt.sigma == restored.sigma


@pytest.mark.parametrize("options", [{}, {"CMA_diagonal": True}])
def test_a_restored_optimiser_saves_a_state_that_restores_again(options: dict) -> None:
    """Reading ``favourite`` runs pycma's stop checks, which keep a second reference to the
    options; a restored optimiser's state must still restore (a resumed run resumed again)
    and the twice-restored search must equal an uninterrupted one."""
    config = CMAESConfig(population=6, sigma0=0.2, options=options)

    def generations(opt: CMAES, n: int) -> None:
        for _ in range(n):
            xs = opt.ask()
            opt.tell(xs, -(xs**2).sum(axis=1))
            opt.favourite  # noqa: B018 - the property is what calls es.stop()

    first = CMAES(7, config)
    generations(first, 3)
    second = CMAES.loads(first.dumps(), config)
    generations(second, 2)
    third = CMAES.loads(second.dumps(), config)
    generations(third, 2)
    straight = CMAES(7, config)
    generations(straight, 7)
    np.testing.assert_array_equal(third.favourite, straight.favourite)
    assert third.es._stopdict.opts is third.es.opts
