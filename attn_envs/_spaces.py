"""Small helpers for validating input spaces and constructor arguments with clear errors."""

from __future__ import annotations

from typing import Any

from gymnasium import spaces


def require_box(
    space: spaces.Space, wrapper: str, *, ndim: tuple[int, ...] | None = None
) -> spaces.Box:
    """Return ``space`` if it is a fitting Box, else raise an error naming what ``wrapper`` got."""
    if not isinstance(space, spaces.Box):
        raise TypeError(
            f"{wrapper} needs a Box observation space, got {type(space).__name__}: {space}"
        )
    if ndim is not None and len(space.shape) not in ndim:
        want = " or ".join(f"{n}-D" for n in ndim)
        raise ValueError(f"{wrapper} needs a {want} Box observation, got shape {space.shape}")
    return space


def require_integral(value: Any, name: str, minimum: int = 1) -> int:
    """Return ``value`` as an int if it is an integral number >= ``minimum`` (0 or 1), else raise.

    Bools are refused: ``copies=True`` is a slip, not a count.
    """
    try:
        ok = not isinstance(value, bool) and int(value) == value and value >= minimum
    except (TypeError, ValueError):
        ok = False
    if not ok:
        kind = "positive" if minimum == 1 else "non-negative"
        raise ValueError(f"{name} must be a {kind} integer, got {value!r}")
    return int(value)
