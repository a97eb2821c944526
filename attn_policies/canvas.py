"""The one off-screen figure canvas of attn_policies, attn_envs and zoo.

Every figure of the toolkit is a :class:`~matplotlib.figure.Figure` on matplotlib's Agg
canvas: it renders to memory, never touches pyplot's global state or a display, so figures
are drawn the same way in tests, on headless machines and inside notebooks, and none leaks
between calls.

Example:
    >>> fig = new_figure(2.0, 1.5)
    >>> ax = fig.subplots()
    >>> type(fig.canvas).__name__, fig.get_size_inches().tolist()
    ('FigureCanvasAgg', [2.0, 1.5])
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from attn_policies.atomic import atomic_path

__all__ = ["new_figure", "save_figure"]


def new_figure(
    width: float,
    height: float,
    layout: Literal["constrained", "compressed", "tight"] | None = "constrained",
) -> Figure:
    """A ``width`` x ``height`` inch figure on an Agg canvas (no pyplot, no display).

    ``layout`` is matplotlib's layout engine (``"constrained"`` keeps colour bars and long
    tick labels inside the figure; None for none).
    """
    fig = Figure(figsize=(width, height), layout=layout)
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, path: str | Path, dpi: int = 120, **kwargs: Any) -> Path:
    """Write ``fig`` to ``path`` atomically (a symlink there is replaced, never written
    through), creating its folder; PNG when the path has no suffix.

    ``kwargs`` go to :meth:`~matplotlib.figure.Figure.savefig` (e.g. ``bbox_inches``).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     out = save_figure(new_figure(1.0, 1.0), Path(tmp) / "sub" / "figure")
        ...     out.name, out.read_bytes()[:4]
        ('figure', b'\\x89PNG')
    """
    p = Path(path)
    with atomic_path(p) as tmp:  # the temporary name keeps the suffix: the same format
        fig.savefig(tmp, dpi=dpi, format="png" if not p.suffix else None, **kwargs)
    return p
