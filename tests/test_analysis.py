"""Tests for zoo.analysis (R² of the observations from the AttentionNeuron output, E3)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import zoo
from zoo.analysis import CARTPOLE_INPUTS, input_regression, r_squared


def test_r_squared_recovers_linear_targets_and_ignores_noise() -> None:
    rng = np.random.default_rng(1)
    features = rng.normal(size=(500, 4))
    targets = np.stack(
        [
            features @ [0.5, -1.0, 2.0, 0.0] + 3.0,
            features[:, 0] + rng.normal(size=500),
            rng.normal(size=500),
        ],
        axis=1,
    )
    r2 = r_squared(features, targets)
    assert r2[0] == pytest.approx(1.0)
    assert 0.35 < r2[1] < 0.65  # half the variance is explained
    assert r2[2] < 0.03


def test_input_regression_on_a_trained_pi_agent(tmp_path: Path) -> None:
    run = zoo.train("cartpole_pi_x0", budget="smoke", root=tmp_path)
    shuffled = input_regression(run, n_episodes=6, seed=3)
    plain = input_regression(run, n_episodes=6, seed=3, shuffle=False)
    assert list(shuffled["inputs"]) == list(CARTPOLE_INPUTS)
    assert shuffled["n_samples"] == plain["n_samples"] <= 6 * run.config.body["max_episode_steps"]
    assert all(0.0 <= r <= 1.0 for r in shuffled["inputs"].values())
    # Permutation invariance: shuffling the inputs leaves m_t, hence the fit, unchanged.
    np.testing.assert_allclose(
        list(shuffled["inputs"].values()), list(plain["inputs"].values()), atol=1e-4
    )


def test_input_regression_needs_an_attention_neuron(tmp_path: Path) -> None:
    run = zoo.train("cartpole_fnn", budget="smoke", root=tmp_path)
    with pytest.raises(ValueError, match="no AttentionNeuron"):
        input_regression(run, n_episodes=2)
