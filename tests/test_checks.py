"""Tests for attn_policies.checks (the shared size/count checks) and the zoo's and the env
wrappers' variants of the rule."""

from __future__ import annotations

import numpy as np
import pytest

from attn_envs._spaces import require_integral
from attn_policies.checks import require_int, require_sizes
from zoo.config_checks import ConfigError
from zoo.config_checks import require_int as require_config_int


def test_require_int() -> None:
    assert require_int(0, "action_dim", minimum=0) == 0
    for bad in (0, -1, 2.0, True, "3", None):
        with pytest.raises(ValueError, match=r"^top_k must be a positive integer, got"):
            require_int(bad, "top_k")
    with pytest.raises(ValueError, match="n_frames must be an integer >= 2, got 1"):
        require_int(1, "n_frames", minimum=2)


def test_require_sizes_names_the_first_bad_size() -> None:
    require_sizes(a=1, b=2)
    with pytest.raises(ValueError, match=r"^b must be a positive integer, got 0$"):
        require_sizes(a=1, b=0)


@pytest.mark.parametrize(("value", "minimum"), [(0, 1), (-1, 0), (True, 0), (2.0, 0), (1, 2)])
def test_the_zoo_rule_is_the_same_rule_as_a_config_error(value: object, minimum: int) -> None:
    with pytest.raises(ValueError) as plain:
        require_int(value, "n", minimum=minimum)
    with pytest.raises(ConfigError) as config:
        require_config_int(value, "n", minimum=minimum)
    assert str(config.value) == str(plain.value)


def test_env_wrappers_take_integral_numbers() -> None:
    assert require_integral(np.int64(3), "copies") == 3 and require_integral(2.0, "n") == 2
    with pytest.raises(ValueError, match="copies must be a positive integer, got True"):
        require_integral(True, "copies")
