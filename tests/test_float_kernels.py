"""Tests for zoo.float_kernels: a test replayed in a child interpreter under other kernels."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import zoo
from zoo.float_kernels import KERNELS, kernel_spread, replay_means

# a committed E3 agent (the FNN): 1,000-step swing-up episodes, where last bits show
FOLDER = Path(__file__).resolve().parents[1] / "results" / "cartpole_pi" / "fnn"
N, SEED = 16, 2_000_000


def test_kernel_spread_replays_each_kernel_set_and_native_equals_the_in_process_test() -> None:
    kernels = {"native": KERNELS["native"], "avx2": KERNELS["avx2"]}
    spread = kernel_spread(FOLDER, N, SEED, kernels)
    assert set(spread) == {"deterministic"}
    assert set(spread["deterministic"]) == {"native", "avx2"}
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # the child's thread count
    try:
        here = zoo.evaluate(FOLDER, n_episodes=N, seed=SEED)["policies"]["deterministic"]
    finally:
        torch.set_num_threads(before)
    assert spread["deterministic"]["native"] == here["mean_reward"]  # to the last bit
    # other kernels may move a few episodes, never the scale of the score
    assert spread["deterministic"]["avx2"] == pytest.approx(here["mean_reward"], rel=0.05)


def test_a_replay_that_fails_says_which_folder(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=str(tmp_path)):
        replay_means(tmp_path, N, SEED, {})
