"""Argument checks shared by the layers and algorithms: a size or count is an ``int``.

Bools are refused everywhere (``n_heads=True`` is a slip, not a size). The zoo's
:func:`zoo.config_checks.require_int` applies the same rule to config values and reports a
:class:`~zoo.config_checks.ConfigError`; env wrappers, whose arguments may come as numpy
integers or ``3.0`` from YAML, use :func:`attn_envs._spaces.require_integral`.
"""

from __future__ import annotations

__all__ = ["require_int", "require_sizes"]


def require_int(value: object, name: str, minimum: int = 1) -> int:
    """``value`` if it is an ``int`` >= ``minimum`` (1: a size, 0: a count that may be zero),
    else a ``ValueError`` naming it. Bools are refused (``n_heads=True`` is a slip).

    Example:
        >>> require_int(3, "top_k")
        3
        >>> require_int(-1, "action_dim", minimum=0)
        Traceback (most recent call last):
        ...
        ValueError: action_dim must be a non-negative integer, got -1
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = {1: "a positive integer", 0: "a non-negative integer"}.get(
            minimum, f"an integer >= {minimum}"
        )
        raise ValueError(f"{name} must be {kind}, got {value!r}")
    return value


def require_sizes(**sizes: object) -> None:
    """Raise ``ValueError`` unless every size is a positive integer (``n_heads=0`` and
    negative widths would otherwise build empty layers that fail far from the cause).

    Example:
        >>> require_sizes(n_heads=0)
        Traceback (most recent call last):
        ...
        ValueError: n_heads must be a positive integer, got 0
    """
    for name, value in sizes.items():
        require_int(value, name)
