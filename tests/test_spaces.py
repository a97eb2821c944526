from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from attn_envs._spaces import require_box, require_integral


def test_require_integral_accepts_integral_values() -> None:
    assert require_integral(3, "k") == 3
    assert require_integral(np.int64(2), "k") == 2
    assert require_integral(4.0, "k") == 4 and isinstance(require_integral(4.0, "k"), int)
    assert require_integral(0, "k", minimum=0) == 0


@pytest.mark.parametrize(
    ("value", "minimum", "message"),
    [
        (0, 1, "k must be a positive integer, got 0"),
        (-1, 0, "k must be a non-negative integer, got -1"),
        (2.5, 1, "k must be a positive integer, got 2.5"),
        (True, 1, "k must be a positive integer, got True"),
        ("3", 1, "k must be a positive integer, got '3'"),
        (None, 1, "k must be a positive integer, got None"),
    ],
)
def test_require_integral_rejects(value, minimum: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        require_integral(value, "k", minimum=minimum)


def test_require_box() -> None:
    space = gym.spaces.Box(0, 1, (3,))
    assert require_box(space, "W", ndim=(1,)) is space
    with pytest.raises(TypeError, match="W needs a Box observation space, got Discrete"):
        require_box(gym.spaces.Discrete(2), "W")
    with pytest.raises(ValueError, match="W needs a 2-D or 3-D Box observation, got shape"):
        require_box(space, "W", ndim=(2, 3))
