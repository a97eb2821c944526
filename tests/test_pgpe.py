"""Tests for attn_policies.algorithms.pgpe: sampling, updates, rank invariance, safe states."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_policies.algorithms.cmaes import CMAESConfig, CMAESTrainer
from attn_policies.algorithms.cmaes_state import StateFormatError
from attn_policies.algorithms.pgpe import PGPE, PGPEConfig, centred_ranks


class Quadratic:
    """Fitness -||x - target||^2 for every repeat (an Evaluator with a known optimum)."""

    def __init__(self, dim: int = 6) -> None:
        self.num_parameters, self.env_steps = dim, 0
        self.target = np.linspace(-0.5, 0.5, dim)

    def evaluate(self, solutions: np.ndarray, seeds: list[int]) -> np.ndarray:
        self.env_steps += len(solutions) * len(seeds)
        fitness = -((solutions - self.target) ** 2).sum(axis=1)
        return np.repeat(fitness[:, None], len(seeds), axis=1)

    def close(self) -> None: ...


@pytest.mark.parametrize("optimizer", ["adam", "clipup"])
def test_trainer_runs_pgpe_to_the_optimum(optimizer: str) -> None:
    evaluator = Quadratic()
    config = PGPEConfig(
        population=16, repeats=2, sigma0=0.2, center_learning_rate=0.03, optimizer=optimizer
    )
    trainer = CMAESTrainer(evaluator, config)
    first = trainer.step()
    for _ in range(300):
        record = trainer.step()
    assert isinstance(trainer.optimizer, PGPE)
    assert record["fitness_mean"] > first["fitness_mean"] + 0.3
    np.testing.assert_allclose(trainer.favourite, evaluator.target, atol=0.05)
    assert record["sigma"] < 0.2  # the stdev shrinks near the optimum
    assert trainer.env_steps == 301 * 16 * 2


def test_ask_samples_mirrored_pairs_with_the_initial_stdev() -> None:
    start = np.linspace(-1.0, 1.0, 40)
    opt = PGPE(40, PGPEConfig(population=400, sigma0=0.1, x0=start, seed=3))
    x = opt.ask()
    assert x.shape == (400, 40)
    np.testing.assert_allclose((x[0::2] + x[1::2]) / 2, np.broadcast_to(start, (200, 40)))
    assert (x - start).std() == pytest.approx(0.1, rel=0.05)
    np.testing.assert_array_equal(opt.favourite, start)
    assert opt.sigma == pytest.approx(0.1)


def test_centred_ranks() -> None:
    np.testing.assert_allclose(centred_ranks(np.array([3.0, -1.0, 10.0])), [0.0, -0.5, 0.5])
    np.testing.assert_allclose(centred_ranks(np.array([2.0, 2.0])), [-0.5, 0.5])  # ties by order


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), scale=st.floats(0.01, 100.0), shift=st.floats(-1e3, 1e3))
def test_update_depends_on_the_fitness_order_only(seed: int, scale: float, shift: float) -> None:
    def run(transform: bool) -> PGPE:
        opt = PGPE(5, PGPEConfig(population=10, sigma0=0.3, seed=seed))
        for _ in range(3):
            x = opt.ask()
            f = -np.abs(x).sum(axis=1)
            opt.tell(x, np.exp(f) * scale + shift if transform else f)
        return opt

    a, b = run(False), run(True)
    np.testing.assert_array_equal(a.center, b.center)
    np.testing.assert_array_equal(a.stdev, b.stdev)


def test_center_moves_toward_the_better_side_and_stdev_change_is_capped() -> None:
    config = PGPEConfig(population=2000, sigma0=1.0, stdev_learning_rate=100.0, optimizer="clipup")
    opt = PGPE(2, config)  # ClipUp's first step follows the gradient's direction (Adam's: signs)
    x = opt.ask()
    opt.tell(x, x[:, 0])  # fitness grows with the first coordinate
    assert opt.center[0] > 0 and abs(opt.center[0]) > 10 * abs(opt.center[1])
    wide = PGPE(2, config)
    x = wide.ask()
    wide.tell(x, x[:, 1] ** 2)  # large offsets of the second coordinate pay: its stdev grows
    assert wide.stdev[1] == pytest.approx(1.2)  # by the cap, 20%, not the huge step
    assert abs(wide.stdev[0] - 1.0) <= 0.2 + 1e-12


def test_clipup_velocity_is_capped() -> None:
    config = PGPEConfig(population=8, optimizer="clipup", center_learning_rate=0.5, max_speed=0.3)
    opt = PGPE(4, config)
    for _ in range(10):
        before = opt.favourite
        x = opt.ask()
        opt.tell(x, x.sum(axis=1))
        assert np.linalg.norm(opt.favourite - before) <= 0.3 + 1e-12


def test_tell_refuses_solutions_that_ask_did_not_give() -> None:
    opt = PGPE(3, PGPEConfig(population=4))
    x = opt.ask()
    with pytest.raises(ValueError, match="needs 4 solutions of 3 values"):
        opt.tell(x[:2], np.zeros(2))
    with pytest.raises(ValueError, match="mirrored pairs"):
        opt.tell(x[[1, 2, 0, 3]] + 1.0, np.arange(4.0))


def test_state_round_trip_continues_bit_for_bit() -> None:
    config = PGPEConfig(population=6, sigma0=0.2, seed=5)
    straight = PGPE(4, config)
    for _ in range(2):
        x = straight.ask()
        straight.tell(x, -np.square(x).sum(axis=1))
    copy = PGPE.loads(straight.dumps(), PGPEConfig(population=6, sigma0=0.2, seed=99))
    for opt in (straight, copy):
        x = opt.ask()
        opt.tell(x, -np.square(x).sum(axis=1))
    np.testing.assert_array_equal(straight.center, copy.center)
    np.testing.assert_array_equal(straight.stdev, copy.stdev)
    np.testing.assert_array_equal(straight.ask(), copy.ask())


def test_trainer_checkpoint_restores_pgpe(tmp_path: Path) -> None:
    def trainer() -> CMAESTrainer:
        return CMAESTrainer(Quadratic(), PGPEConfig(population=8, repeats=2, seed=1))

    straight = trainer()
    records = [straight.step() for _ in range(4)]
    first = trainer()
    first.step(), first.step()
    first.save(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {
        "pgpe_state-2.npz",
        "solutions-2.pt",
        "trainer.json",
    }
    resumed = trainer()
    resumed.restore(tmp_path)
    again = [resumed.step() for _ in range(2)]
    for a, b in zip(records[2:], again, strict=True):
        for key in ("generation", "env_steps", "fitness_best", "fitness_mean", "sigma"):
            assert a[key] == b[key], key
    np.testing.assert_array_equal(straight.favourite, resumed.favourite)
    # a CMA-ES trainer does not read a PGPE checkpoint as its own
    with pytest.raises(StateFormatError, match="unknown CMA-ES state format"):
        CMAESTrainer(Quadratic(), CMAESConfig(population=8, repeats=2)).restore(tmp_path)


def test_loads_refuses_pickles_damage_and_other_formats(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self) -> tuple:
            return (Path.touch, (marker,))

    config = PGPEConfig(population=4)
    with pytest.raises(StateFormatError, match="not a readable PGPE state"):
        PGPE.loads(pickle.dumps(Payload()), config)
    assert not marker.exists()
    good = PGPE(3, config).dumps()
    with pytest.raises(StateFormatError, match="not a readable PGPE state"):
        PGPE.loads(good[:50], config, where="x.npz")
    cma_trainer = CMAESTrainer(Quadratic(3), CMAESConfig(population=4, repeats=1))
    with pytest.raises(StateFormatError, match="not a PGPE state"):
        PGPE.loads(cma_trainer.optimizer.dumps(), config)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"population": 7}, "population must be even"),
        ({"population": 1}, "population must be an integer >= 2"),
        ({"sigma0": 0.0}, "sigma0 > 0"),
        ({"center_learning_rate": -1.0}, "center_learning_rate > 0"),
        ({"stdev_learning_rate": -0.1}, "stdev_learning_rate and max_speed"),
        ({"momentum": 1.0}, "momentum must lie in"),
        ({"optimizer": "sgd"}, "optimizer must be 'adam' or 'clipup'"),
        ({"x0": np.array([0.0, np.inf])}, "finite 1-D"),
    ],
)
def test_config_validation(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PGPEConfig(**kwargs)
    with pytest.raises(ValueError, match="x0 has 2 values, the policy 3 parameters"):
        PGPE(3, PGPEConfig(x0=np.zeros(2)))
