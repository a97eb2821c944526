"""Small helpers for validating input spaces with clear errors."""

from __future__ import annotations

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
