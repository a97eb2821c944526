"""Tests for attn_policies.algorithms.cmaes: the CMA-ES loop, checkpoints, safe loading."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from unittest.mock import ANY

import numpy as np
import pytest

from attn_policies.algorithms.cmaes import (
    CMAES,
    CMAESConfig,
    CMAESTrainer,
    StateFormatError,
    convert_pickled_state,
    slim_checkpoint,
)
from attn_policies.algorithms.es_eval import BatchedEvaluator, PolicyFactory, RolloutSpec


class Quadratic:
    """Fitness -||x - target||^2 for every repeat, so the optimum is known."""

    def __init__(self, dim: int = 6) -> None:
        self.num_parameters, self.env_steps, self.calls = dim, 0, []
        self.target = np.linspace(-0.5, 0.5, dim)

    def evaluate(self, solutions: np.ndarray, seeds: list[int]) -> np.ndarray:
        self.calls.append(list(seeds))
        self.env_steps += len(solutions) * len(seeds)
        fitness = -((solutions - self.target) ** 2).sum(axis=1)
        return np.repeat(fitness[:, None], len(seeds), axis=1)

    def close(self) -> None: ...


def test_cmaes_maximises_fitness_and_records_generations() -> None:
    evaluator = Quadratic()
    trainer = CMAESTrainer(evaluator, CMAESConfig(population=12, repeats=3, sigma0=0.1, seed=1))
    first = trainer.step()
    for _ in range(60):
        record = trainer.step()
    assert record["generation"] == 61 and trainer.generation == 61
    assert record["fitness_mean"] > first["fitness_mean"] + 0.5  # it climbs, not descends
    np.testing.assert_allclose(trainer.favourite, evaluator.target, atol=0.05)
    assert trainer.best_fitness >= record["fitness_best"]
    assert record["fitness_worst"] <= record["fitness_mean"] <= record["fitness_best"]
    assert trainer.env_steps == 61 * 12 * 3
    assert all(len(set(c)) == 3 for c in evaluator.calls)  # 3 distinct task seeds per generation
    assert evaluator.calls[0] != evaluator.calls[1]  # new tasks every generation


def test_x0_is_zero_and_sigma0_is_used() -> None:
    opt = CMAES(50, CMAESConfig(population=400, sigma0=0.1, seed=3))
    x = opt.ask()
    assert x.shape == (400, 50)
    assert abs(x.mean()) < 0.01 and x.std() == pytest.approx(0.1, rel=0.05)
    np.testing.assert_array_equal(opt.favourite, np.zeros(50))


def _trainer(seed: int = 0) -> CMAESTrainer:
    spec = RolloutSpec(
        PolicyFactory("attn_policies.es_policies:AttentionNeuronPolicy.cartpole"),
        env_id="attn_envs:attn_envs/CartPoleSwingUpHarder-v0",
        max_steps=30,
    )
    return CMAESTrainer(BatchedEvaluator(spec), CMAESConfig(population=6, repeats=2, seed=seed))


def test_restore_continues_bit_for_bit(tmp_path: Path) -> None:
    straight = _trainer()
    records = [straight.step() for _ in range(4)]
    first = _trainer()
    for _ in range(2):
        first.step()
    first.save(tmp_path)
    np.random.seed(12345)  # noqa: NPY002 - the global numpy RNG must not matter
    resumed = _trainer(seed=99)  # config seed is overwritten by the checkpoint's state
    resumed.restore(tmp_path)
    assert resumed.generation == 2
    again = [resumed.step() for _ in range(2)]
    for a, b in zip(records[2:], again, strict=True):
        for key in ("generation", "env_steps", "fitness_best", "fitness_mean", "sigma"):
            assert a[key] == b[key], key
    np.testing.assert_array_equal(straight.favourite, resumed.favourite)
    np.testing.assert_array_equal(straight.best, resumed.best)


def test_a_slim_checkpoint_is_smaller_and_resumes_to_float32_rounding(tmp_path: Path) -> None:
    """slim_checkpoint (float32, each array once, compressed) restores an optimiser that
    samples what the full checkpoint's does up to float32 rounding, and trains on."""
    full, slim = tmp_path / "full", tmp_path / "slim"
    trainer = _trainer()  # E3's 913 parameters: the covariance dominates the file
    for _ in range(3):
        trainer.step()
    trainer.save(full)
    trainer.save(slim)
    state = slim_checkpoint(slim)
    (full_state,) = full.glob("cma_state-*.npz")
    assert state.name == full_state.name and state.stat().st_size < full_state.stat().st_size / 3
    a, b = _trainer(), _trainer()
    a.restore(full)
    b.restore(slim)
    assert (a.generation, a.env_steps) == (b.generation, b.env_steps)
    xa, xb = a.optimizer.ask(), b.optimizer.ask()
    assert 0 < np.abs(xa - xb).max() < 1e-5 * np.abs(xa).max()  # rounded, not bit for bit
    c = _trainer()
    c.restore(slim)
    assert c.step()["generation"] == 4
    assert c.optimizer.es.sm.C.dtype == np.float64  # the optimiser works in float64 again


def test_a_save_killed_midway_leaves_the_previous_checkpoint_usable(tmp_path: Path) -> None:
    trainer = _trainer()
    trainer.step()
    trainer.save(tmp_path)
    expected = trainer.step()
    # Generation 2's state files are written, then the process dies before trainer.json.
    (tmp_path / "cma_state-2.npz").write_bytes(trainer.optimizer.dumps())
    resumed = _trainer()
    resumed.restore(tmp_path)
    assert resumed.generation == 1
    assert resumed.step() == {**expected, "time_ask_tell": ANY, "time_evaluate": ANY}


def _numpy_bypass_pickle(marker: Path) -> bytes:
    """The old unpickler admitted ``numpy.*``: ``numpy.testing._private.utils.os.system``."""
    module, name, command = b"numpy", b"testing._private.utils.os.system", f"touch {marker}"
    return (
        b"\x80\x04"
        + b"\x8c" + bytes([len(module)]) + module
        + b"\x8c" + bytes([len(name)]) + name
        + b"\x93"  # STACK_GLOBAL
        + b"\x8c" + bytes([len(command)]) + command.encode()
        + b"\x85R."  # TUPLE1, REDUCE, STOP
    )  # fmt: skip


def test_pickled_state_with_a_bypass_payload_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = _numpy_bypass_pickle(marker)
    trainer = _trainer()
    trainer.step()
    trainer.save(tmp_path)
    state = next(tmp_path.glob("cma_state-*.npz"))
    state.write_bytes(payload)
    with pytest.raises(StateFormatError, match="pickled pycma state"):
        _trainer().restore(tmp_path)
    with pytest.raises(StateFormatError, match="pickled"):
        CMAES.loads(payload, CMAESConfig(population=4))
    assert not marker.exists()


def test_trusted_old_pickles_convert_to_the_data_format(tmp_path: Path) -> None:
    trainer = _trainer()
    trainer.step()
    trainer.save(tmp_path)
    expected = _trainer()
    expected.restore(tmp_path)
    old = tmp_path / "cma_state-1.pkl"
    old.write_bytes(pickle.dumps(trainer.optimizer.es))
    (tmp_path / "cma_state-1.npz").unlink()
    meta = json.loads((tmp_path / "trainer.json").read_text())
    meta["files"]["cma_state"] = old.name
    (tmp_path / "trainer.json").write_text(json.dumps(meta))
    convert_pickled_state(old, trainer.config)
    resumed = _trainer()
    resumed.restore(tmp_path)
    assert resumed.step()["fitness_mean"] == expected.step()["fitness_mean"]


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="population must be an integer >= 2"):
        CMAESConfig(population=1)
    for bad in (2.5, True, "8"):
        with pytest.raises(ValueError, match="population must be an integer >= 2"):
            CMAESConfig(population=bad)
    with pytest.raises(ValueError, match="repeats must be a positive integer"):
        CMAESConfig(repeats=0)
    with pytest.raises(ValueError, match="sigma0"):
        CMAESConfig(sigma0=0.0)


def test_x0_starts_the_search_and_must_fit() -> None:
    start = np.linspace(-1.0, 1.0, 7)
    opt = CMAES(7, CMAESConfig(population=6, sigma0=1e-8, x0=start))
    np.testing.assert_allclose(opt.ask(), np.broadcast_to(start, (6, 7)), atol=1e-6)
    with pytest.raises(ValueError, match="x0 has 5 values, the policy 7 parameters"):
        CMAES(7, CMAESConfig(population=6, x0=np.zeros(5)))
    with pytest.raises(ValueError, match="finite 1-D"):
        CMAESConfig(x0=np.array([0.0, np.nan]))
