"""Tests for zoo.robustness_conditions: the sweeps' test conditions and how each perturbs
what a run's agent sees. (The sweeps played: test_robustness.py.)"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from _zoo import TINY_DOORKEY

import zoo
from zoo import factory
from zoo.config import ConfigError
from zoo.robustness_conditions import parse_sweep, prepare_condition, train_ratio


def test_parse_sweep() -> None:
    assert [c.value for c in parse_sweep("reshuffle=25,50,100").conditions] == [25, 50, 100]
    assert [c.label for c in parse_sweep("channels").conditions][:2] == ["as is", "shuffled"]
    assert [c.value for c in parse_sweep("occlusion=0,0.5").conditions] == [0.0, 0.5]
    names = [c.value for c in parse_sweep("background").conditions]
    assert names == [None, "ds", "kof", "mt_fuji", "ukiyoe"]  # every shipped picture
    with pytest.raises(ConfigError, match="Did you mean 'reshuffle'"):
        parse_sweep("reshufle=5")
    with pytest.raises(ConfigError, match="needs values"):
        parse_sweep("occlusion")
    with pytest.raises(ConfigError, match=r"\[0, 1\)"):
        parse_sweep("occlusion=1.5")
    with pytest.raises(ConfigError, match="cannot read"):
        parse_sweep("reshuffle=a")
    with pytest.raises(ConfigError, match="every t must be a positive integer, got 0"):
        parse_sweep("reshuffle=25,0")
    assert [c.value for c in parse_sweep("sticky=0,0.25").conditions] == [0.0, 0.25]
    with pytest.raises(ConfigError, match=r"sticky.*\[0, 1\]"):
        parse_sweep("sticky=1.5")


def test_sticky_actions_reach_the_emulator() -> None:
    (config,) = zoo.load_runs("puzzle_pong_bc", budget="smoke")
    changed, extra, _ = prepare_condition(config, parse_sweep("sticky=0.25").conditions[0], True)
    assert changed.body["env_kwargs"]["repeat_action_probability"] == 0.25
    env = factory.make_env_fn(changed, extra_wrappers=extra)()
    try:
        ale = env.unwrapped.ale if hasattr(env.unwrapped, "ale") else None
        probability = ale.getFloat("repeat_action_probability") if ale else None
        assert probability == pytest.approx(0.25)
    finally:
        env.close()
    (cartpole,) = zoo.load_runs("cartpole_pi_x0", budget="smoke")
    changed, extra, _ = prepare_condition(cartpole, parse_sweep("sticky=0.25").conditions[0], True)
    with pytest.raises(ConfigError, match="repeat_action_probability"):  # an n/a cell, its reason
        factory.make_env_fn(changed, extra_wrappers=extra)()


def test_grid_runs_shuffle_and_mask_whole_cells() -> None:
    # DoorKey's (3, 7, 7) view: a relational model's tokens are the 49 cells, so those move
    # (or are masked), each with its object, colour and state, never the 3 channels.
    (config,) = zoo.load_runs("doorkey", budget="smoke", overrides=TINY_DOORKEY)
    raw_env = factory.make_env_fn(config)()
    raw, _ = raw_env.reset(seed=4)
    raw_env.close()
    cells = raw.transpose(1, 2, 0).reshape(49, 3)
    shuffle, occlusion = (parse_sweep(s).conditions[-1] for s in ("shuffle", "occlusion=0.5"))
    changed, extra, _ = prepare_condition(config, shuffle, True)
    env = factory.make_env_fn(changed, extra_wrappers=extra)()
    obs, info = env.reset(seed=4)
    env.close()
    assert obs.shape == (3, 7, 7) and info["permutation"].shape == (49,)
    np.testing.assert_array_equal(obs.transpose(1, 2, 0).reshape(49, 3), cells[info["permutation"]])
    changed, extra, _ = prepare_condition(config, occlusion, True)
    env = factory.make_env_fn(changed, extra_wrappers=extra)()
    obs, info = env.reset(seed=4)
    env.close()
    masked = np.setdiff1d(np.arange(49), info["kept"])
    assert obs.shape == (3, 7, 7) and len(masked) == 25
    tokens = obs.transpose(1, 2, 0).reshape(49, 3)
    assert not tokens[masked].any()
    np.testing.assert_array_equal(tokens[info["kept"]], cells[info["kept"]])


def test_train_ratio_of_every_kind_of_run() -> None:
    (config,) = zoo.load_runs("cartpole_pi_x0", budget="smoke")

    def with_body(**body: object) -> zoo.RunConfig:
        return dataclasses.replace(config, body={**config.body, **body})

    assert train_ratio(config) == 0.0
    assert train_ratio(with_body(env_kwargs={"occlusion": 0.3})) == 0.3  # screen presets
    wrapped = with_body(env_wrapper=["StepPenalty", {"OcclusionObservation": {"ratio": 0.2}}])
    assert train_ratio(wrapped) == 0.2
    assert train_ratio(with_body(algo="bc", occlusion=0.5)) == 0.5  # BC's per-batch drop
    assert train_ratio(with_body(algo="bc", occlusion=[0.2, 0.4])) == pytest.approx(0.3)
