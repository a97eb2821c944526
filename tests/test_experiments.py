"""The experiments E1-E8 as attn-zoo report tabulates them (zoo.experiments)."""

from __future__ import annotations

import pytest

from zoo.config_checks import ConfigError
from zoo.experiments import EXPERIMENTS, find_experiment


def test_find_experiment_by_key_or_name_and_error_lists_them() -> None:
    assert find_experiment("e3") is find_experiment("cartpole_pi")
    assert [e.key for e in EXPERIMENTS] == [f"E{i}" for i in range(1, 9)]
    with pytest.raises(ConfigError, match=r"choose one of E1 \(mnist\)"):
        find_experiment("E9")
