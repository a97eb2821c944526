"""The seeds' attention figures, drawn from arrays.

Each function takes attention weights (tensors or arrays, e.g. from
:func:`~attn_policies.capture.attention_maps`) and returns a
:class:`~matplotlib.figure.Figure` on the off-screen canvas of :mod:`attn_policies.canvas`,
writing a PNG when given a ``path``; :mod:`attn_policies.attention_rollouts` makes each one
from a model and an env in one call:

* :func:`plot_grid_attention` -- per-head maps of chosen nodes on a grid (book fig. 10.24,
  DoorKey's agent/key/door: :func:`doorkey_nodes` and :func:`doorkey_frame` read them from
  the raw grid ``EgocentricGridObservation`` reports in ``info``).
* :func:`plot_feature_attention` -- feature-by-feature maps labelled with RAM feature names
  over time steps (thesis fig. 4.4.2).
* :func:`plot_top_patches` -- the top-K attended patches boxed on the frame (seed 001,
  AttentionAgent CarRacing).
* :func:`plot_saliency` -- attention received per position, upsampled over an Atari frame
  (book fig. 10.25).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from minigrid.core.constants import OBJECT_TO_IDX
from torch import Tensor

from attn_policies.canvas import new_figure, save_figure
from attn_policies.capture import ArrayData, as_numpy
from attn_policies.saliency import patch_grid_origins, upsample_saliency

__all__ = [
    "RAW_GRID_KEY",
    "doorkey_frame",
    "doorkey_grid",
    "doorkey_nodes",
    "plot_feature_attention",
    "plot_grid_attention",
    "plot_saliency",
    "plot_top_patches",
]

PathLike = str | Path
Head = int | Literal["mean"]

RAW_GRID_KEY = "raw_grid"
"""The ``info`` key of ``attn_envs.grid.EgocentricGridObservation``'s raw grid (repeated
here so plotting does not import the env package; a test keeps the two equal)."""
# Largest raw value of MiniGrid's (object, colour, state) cell channels (attn_envs.grid's
# GRID_CHANNEL_MAX).
_GRID_CHANNEL_MAX = np.array([10, 5, 3], dtype=np.int64)


# --------------------------------------------------------------------------------------------
# DoorKey views
# --------------------------------------------------------------------------------------------


def doorkey_grid(grid: Any) -> np.ndarray:
    """Raw integer MiniGrid cells ``(3, X, Y)`` of an egocentric view, as ``int64``.

    ``grid`` is the ``info`` of an env wrapped in ``attn_envs.grid.EgocentricGridObservation``
    (its ``"raw_grid"`` entry is read) or that raw array itself: channels first (object,
    colour, state), MiniGrid's ``[x, y]`` indexing, unscaled integer values (an observation
    of ``EgocentricGridObservation(scale=None)`` is one).

    Raises:
        ValueError: if ``grid`` is a mapping without ``"raw_grid"``, or not such an array
            (e.g. a scaled observation).

    Example:
        >>> import gymnasium as gym, attn_envs
        >>> _, info = gym.make("attn_envs/EgocentricDoorKey-5x5-v0").reset(seed=2)
        >>> doorkey_grid(info).shape
        (3, 7, 7)
    """
    if isinstance(grid, Mapping):
        if RAW_GRID_KEY not in grid:
            raise ValueError(
                f"info has no {RAW_GRID_KEY!r} entry: wrap the MiniGrid env in "
                "attn_envs.grid.EgocentricGridObservation, or pass the raw grid array"
            )
        grid = grid[RAW_GRID_KEY]
    x = np.asarray(as_numpy(grid))
    if x.ndim != 3 or x.shape[0] != 3:
        raise ValueError(
            f"need one raw egocentric grid of shape (3, view, view), got shape {x.shape}"
        )
    cells = np.rint(x).astype(np.int64) if x.dtype.kind == "f" else x.astype(np.int64)
    if (
        (x.dtype.kind == "f" and not np.array_equal(cells, x))
        or (cells < 0).any()
        or (cells > _GRID_CHANNEL_MAX[:, None, None]).any()
    ):
        raise ValueError(
            "need the raw (unscaled, integer) MiniGrid cells, got values that are not: pass "
            f"the env's info (its {RAW_GRID_KEY!r} entry) instead of a scaled observation"
        )
    return cells


def _agent_cell(shape: tuple[int, ...]) -> tuple[int, int]:
    # MiniGrid's view is indexed [x, y]; the agent sits at the bottom centre, facing up.
    return shape[-2] // 2, shape[-1] - 1


def doorkey_nodes(grid: Any) -> dict[str, int]:
    """Node indices of the agent, key and door in an ``attn_envs/EgocentricDoorKey-*`` view.

    ``grid`` is the env's ``info`` or its raw grid (see :func:`doorkey_grid`): ``(3, X, Y)``
    with MiniGrid's ``[x, y]`` indexing, channel 0 the object index. Node ``i`` is the
    row-major flattening of the spatial axes, ``i = x * Y + y`` (a relational extractor's
    ``rearrange("b c h w -> b (h w) c")`` of the observation). The agent always sits at
    ``x = X // 2, y = Y - 1`` (bottom centre of the egocentric view, facing up); that cell is
    "empty" or shows the carried object. ``"key"`` and ``"door"`` appear only when visible on
    the floor (a carried key is with the agent); the first in row-major order is taken.

    Raises:
        ValueError: if ``grid`` is not such a view.

    Example:
        >>> import gymnasium as gym, attn_envs
        >>> _, info = gym.make("attn_envs/EgocentricDoorKey-5x5-v0").reset(seed=2)
        >>> doorkey_nodes(info)
        {'agent': 27, 'key': 41, 'door': 26}
    """
    cells = doorkey_grid(grid)
    ax, ay = _agent_cell(cells.shape)
    width = cells.shape[-1]
    found = {"agent": ax * width + ay}
    obj = cells[0].copy()
    obj[ax, ay] = OBJECT_TO_IDX["empty"]
    for name in ("key", "door"):
        hits = np.flatnonzero(obj.ravel() == OBJECT_TO_IDX[name])
        if hits.size:
            found[name] = int(hits[0])
    return found


def doorkey_frame(grid: Any, tile_size: int = 16) -> np.ndarray:
    """MiniGrid's rendering of an egocentric DoorKey view, upright: ``(Y*t, X*t, 3)`` uint8.

    ``grid`` is the env's ``info`` or its raw grid (see :func:`doorkey_grid`). Pixel row
    ``y``, column ``x`` shows cell ``[x, y]``: the agent at the bottom centre facing up,
    unseen cells black. Panels of :func:`plot_grid_attention` with ``transpose=True`` use the
    same layout.

    Example:
        >>> import gymnasium as gym, attn_envs
        >>> _, info = gym.make("attn_envs/EgocentricDoorKey-5x5-v0").reset(seed=2)
        >>> doorkey_frame(info, tile_size=8).shape
        (56, 56, 3)
    """
    from minigrid.core.grid import Grid

    cells = doorkey_grid(grid)
    grid_, _ = Grid.decode(np.ascontiguousarray(cells.transpose(1, 2, 0), dtype=np.uint8))
    return grid_.render(tile_size, agent_pos=_agent_cell(cells.shape), agent_dir=3)


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------


def _finish(fig: Figure, path: PathLike | None) -> Figure:
    if path is not None:
        save_figure(fig, path)
    return fig


def _image(frame: ArrayData) -> np.ndarray:
    """A frame as something ``imshow`` draws: (H, W) or (H, W, 3|4), floats in [0, 1]."""
    img = np.asarray(as_numpy(frame))
    if img.ndim == 3 and img.shape[0] in (1, 3, 4) and img.shape[-1] not in (1, 3, 4):
        img = np.moveaxis(img, 0, -1)  # channels-first
    if img.ndim == 3 and img.shape[-1] == 1:
        img = img[..., 0]
    if img.ndim not in (2, 3) or (img.ndim == 3 and img.shape[-1] not in (3, 4)):
        raise ValueError(f"frame must be (H, W), (H, W, 1|3|4) or (1|3|4, H, W), got {img.shape}")
    if img.dtype == np.uint8:
        return img
    img = img.astype(np.float64)
    return img / 255.0 if img.max(initial=0.0) > 1.0 else img


def _colour_range(w: np.ndarray) -> tuple[float, float]:
    """From 0 (or a negative minimum: unnormalised or tanh weights) to the largest weight."""
    vmin, vmax = min(0.0, float(w.min())), max(0.0, float(w.max()))
    return vmin, vmax if vmax > vmin else vmin + 1.0


def _head_select(w: np.ndarray, head: Head) -> np.ndarray:
    """``(T, heads, Q, K) -> (T, Q, K)`` by index or mean."""
    if head == "mean":
        return w.mean(axis=1)
    if isinstance(head, int) and not isinstance(head, bool) and -w.shape[1] <= head < w.shape[1]:
        return w[:, head]
    raise ValueError(f"head must be 'mean' or an index below {w.shape[1]}, got {head!r}")


def plot_grid_attention(
    weights: ArrayData,
    nodes: Mapping[str, int | tuple[int, int]],
    grid_shape: tuple[int, int] = (7, 7),
    *,
    batch_index: int = 0,
    frame: ArrayData | None = None,
    transpose: bool = False,
    cmap: str = "viridis",
    alpha: float | None = None,
    path: PathLike | None = None,
) -> Figure:
    """Per-head attention of chosen nodes over a grid of nodes (book fig. 10.24).

    One row per node in ``nodes`` (labelled on the left), one column per head (titled
    ``"head 1"`` ... as in the book); each panel is that node's row of the attention matrix
    reshaped to ``grid_shape`` (row-major), the node's own cell outlined in red. All panels
    share one colour scale (from 0, or a negative minimum, to the largest weight shown) and
    a colour bar.

    Args:
        weights: ``(heads, N, N)``, ``(B, heads, N, N)`` (``batch_index`` picks one) or a
            single-head ``(N, N)``; ``N = grid_shape[0] * grid_shape[1]`` keys.
        nodes: label -> node index, or ``(row, col)`` in ``grid_shape``.
        grid_shape: ``(rows, cols)`` of the node grid.
        batch_index: which sample of a batched map.
        frame: image drawn under the maps, stretched over the grid (its layout must be the
            displayed one: transposed if ``transpose``).
        transpose: show each panel transposed, e.g. MiniGrid views stored ``[x, y]`` shown
            upright.
        cmap: colour map.
        alpha: opacity of the maps; default 1, or 0.6 over a ``frame``.
        path: where to write the PNG.

    Example:
        >>> import torch
        >>> w = torch.softmax(torch.randn(1, 3, 49, 49), dim=-1)
        >>> fig = plot_grid_attention(w, {"agent": 27, "key": (4, 6)})
        >>> len(fig.axes), fig.axes[0].get_title()
        (7, 'head 1')
    """
    w = np.asarray(as_numpy(weights), dtype=np.float64)
    if w.ndim == 4:
        w = w[batch_index]
    elif w.ndim == 2:
        w = w[None]
    gh, gw = grid_shape
    if w.ndim != 3 or w.shape[-1] != gh * gw:
        raise ValueError(
            f"weights must be (heads, N, {gh * gw}), (B, heads, N, {gh * gw}) or "
            f"(N, {gh * gw}) for grid_shape {grid_shape}, got {np.shape(as_numpy(weights))}"
        )
    if not nodes:
        raise ValueError("nodes is empty: name at least one node to plot")
    index: dict[str, int] = {}
    for label, node in nodes.items():
        i = node[0] * gw + node[1] if isinstance(node, tuple) else int(node)
        if isinstance(node, tuple) and not (0 <= node[0] < gh and 0 <= node[1] < gw):
            raise ValueError(f"node {label!r} at {node} is outside grid_shape {grid_shape}")
        if not 0 <= i < w.shape[1]:
            raise ValueError(f"node {label!r} index {i} is outside the {w.shape[1]} query nodes")
        index[label] = i
    n_heads = w.shape[0]
    shown = w[:, list(index.values())]  # (heads, nodes, N)
    vmin, vmax = _colour_range(shown)
    shape = (gw, gh) if transpose else (gh, gw)
    extent = (-0.5, shape[1] - 0.5, shape[0] - 0.5, -0.5)
    image = None if frame is None else _image(frame)
    alpha = (1.0 if image is None else 0.6) if alpha is None else alpha

    fig = new_figure(2.0 * n_heads + 1.0, 2.0 * len(index))
    axes = fig.subplots(len(index), n_heads, squeeze=False)
    im = None
    for r, (label, i) in enumerate(index.items()):
        row, col = divmod(i, gw)
        if transpose:
            row, col = col, row
        for h in range(n_heads):
            ax = axes[r, h]
            panel = w[h, i].reshape(gh, gw)
            if image is not None:
                ax.imshow(image, extent=extent, cmap="gray" if image.ndim == 2 else None)
            im = ax.imshow(
                panel.T if transpose else panel,
                cmap=cmap,
                vmin=vmin,
                vmax=vmax,
                alpha=alpha,
                extent=extent,
                interpolation="nearest",
            )
            ax.add_patch(
                Rectangle((col - 0.5, row - 0.5), 1, 1, fill=False, edgecolor="red", lw=1.5)
            )
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(f"head {h + 1}")
            if h == 0:
                ax.set_ylabel(label)
    assert im is not None  # there is at least one panel
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.8, label="attention")
    return _finish(fig, path)


def plot_feature_attention(
    weights: ArrayData,
    feature_names: Sequence[str],
    *,
    head: Head = "mean",
    query_names: Sequence[str] | None = None,
    time_labels: Sequence[str] | None = None,
    cmap: str = "viridis",
    path: PathLike | None = None,
) -> Figure:
    """Feature-by-feature attention maps over time steps, labelled by feature (fig. 4.4.2).

    One panel per time step, oldest left, newest right (titled ``t-3`` ... ``t``): rows are
    the query features, each a softmax distribution over the key features (columns). Keys
    are labelled on every panel, queries on the first; one colour scale and colour bar.

    Args:
        weights: ``T`` maps, as a sequence of ``(Lq, L)`` (or ``(heads, Lq, L)``) arrays or
            tensors, a ``(T, Lq, L)`` or ``(T, heads, Lq, L)`` array, or one ``(Lq, L)`` map.
        feature_names: the ``L`` key names, e.g. a ``DistractorFeatureObservation``'s
            ``feature_names``.
        head: head index, or ``"mean"`` over heads, when the maps have a head axis.
        query_names: the ``Lq`` query names; default ``feature_names``.
        time_labels: panel titles; default ``t-(T-1)``, ..., ``t-1``, ``t``.
        cmap: colour map.
        path: where to write the PNG.

    Example:
        >>> import torch
        >>> names = ["player_y", "ball_x", "ball_y"]
        >>> fig = plot_feature_attention(torch.softmax(torch.randn(4, 2, 3, 3), -1), names)
        >>> len(fig.axes), [ax.get_title() for ax in fig.axes[:4]]
        (5, ['t-3', 't-2', 't-1', 't'])
    """
    if isinstance(weights, Sequence) and not isinstance(weights, np.ndarray | Tensor):
        w = np.stack([np.asarray(as_numpy(x), dtype=np.float64) for x in weights])
    else:
        w = np.asarray(as_numpy(weights), dtype=np.float64)
    if w.ndim == 2:
        w = w[None]
    if w.ndim == 4:
        w = _head_select(w, head)
    keys = list(feature_names)
    queries = keys if query_names is None else list(query_names)
    if w.ndim != 3 or w.shape[1:] != (len(queries), len(keys)):
        raise ValueError(
            f"weights must be T maps of shape ({len(queries)}, {len(keys)}) (queries x "
            f"feature_names), optionally with a head axis; got {w.shape}"
        )
    n_steps = w.shape[0]
    labels = (
        list(time_labels)
        if time_labels is not None
        else [f"t-{n_steps - 1 - i}" if i < n_steps - 1 else "t" for i in range(n_steps)]
    )
    if len(labels) != n_steps:
        raise ValueError(f"{len(labels)} time_labels for {n_steps} maps")
    size = max(len(keys), len(queries))
    font = max(5.0, min(9.0, 220.0 / size))
    side = max(2.5, size * font * 1.5 / 72.0)  # inches: ~1.5 font heights per tick label
    label = max(map(len, [*keys, *queries])) * font * 0.6 / 72.0
    fig = new_figure(side * n_steps + label + 1.5, side + label + 0.5)
    axes = fig.subplots(1, n_steps, squeeze=False)[0]
    vmin, vmax = _colour_range(w)
    im = None
    for t, ax in enumerate(axes):
        im = ax.imshow(w[t], cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest")
        ax.set_title(labels[t])
        ax.set_xticks(range(len(keys)), keys, rotation=90, fontsize=font)
        if t == 0:
            ax.set_yticks(range(len(queries)), queries, fontsize=font)
        else:
            ax.set_yticks([])
    assert im is not None  # there is at least one panel
    fig.colorbar(im, ax=list(axes), shrink=0.8, label="attention")
    return _finish(fig, path)


def plot_top_patches(
    frame: ArrayData,
    scores: ArrayData | None = None,
    *,
    indices: ArrayData | None = None,
    patch_size: int,
    stride: int | None = None,
    origins: npt.ArrayLike | None = None,
    k: int = 10,
    color: str = "red",
    path: PathLike | None = None,
) -> Figure:
    """Box the top-``k`` attended patches on the frame (seed 001 / AttentionAgent CarRacing).

    Give ``scores`` (one per patch; the ``k`` highest are boxed, ties by lower index) or the
    patch ``indices`` themselves. Patch ``i`` covers ``patch_size`` pixels from
    ``origins[i]`` (pixel row, col of its top-left corner, e.g.
    ``PatchObservation.patch_origins``); without ``origins`` they are the row-major grid of
    :func:`patch_grid_origins` over the frame. Rectangles are in pixel coordinates (pixel
    ``(r, c)`` spans ``c - 0.5 .. c + 0.5``), drawn best first.

    Example:
        >>> frame = np.zeros((96, 96, 3), np.uint8)
        >>> fig = plot_top_patches(frame, np.arange(529.0), patch_size=7, stride=4, k=3)
        >>> [p.get_xy() for p in fig.axes[0].patches]
        [(87.5, 87.5), (83.5, 87.5), (79.5, 87.5)]
    """
    image = _image(frame)
    if origins is None:
        orig = patch_grid_origins(image.shape, patch_size, stride)
    else:
        orig = np.asarray(origins).reshape(-1, 2)
    if (scores is None) == (indices is None):
        raise ValueError("give exactly one of scores (one per patch) or indices")
    if scores is not None:
        s = np.asarray(as_numpy(scores), dtype=np.float64).ravel()
        if s.size != len(orig):
            raise ValueError(f"{s.size} scores for {len(orig)} patches")
        chosen = np.argsort(-s, kind="stable")[:k]
    else:
        chosen = np.asarray(as_numpy(indices), dtype=np.int64).ravel()
        if chosen.size and not (chosen.min() >= 0 and chosen.max() < len(orig)):
            raise ValueError(f"patch indices must lie in [0, {len(orig)}), got {chosen}")
    fig = new_figure(4.5, 4.5 * image.shape[0] / image.shape[1] + 0.4)
    ax = fig.subplots()
    ax.imshow(image, cmap="gray" if image.ndim == 2 else None)
    for i in chosen:
        r, c = orig[i]
        ax.add_patch(
            Rectangle(
                (float(c) - 0.5, float(r) - 0.5),
                patch_size,
                patch_size,
                facecolor=(1.0, 1.0, 0.0, 0.15),
                edgecolor=color,
                lw=1.2,
            )
        )
    ax.set_title(f"top {len(chosen)} patches")
    ax.set_axis_off()
    return _finish(fig, path)


def plot_saliency(
    frame: ArrayData,
    attention: ArrayData,
    grid_shape: tuple[int, int] | None = None,
    *,
    alpha: float = 0.5,
    cmap: str = "jet",
    show_frame: bool = True,
    path: PathLike | None = None,
) -> Figure:
    """Attention over spatial positions as a heat map over the frame (book fig. 10.25).

    ``attention`` (``(h', w')``, or ``(N,)`` with ``grid_shape``; see
    :func:`attention_saliency`) is upsampled bilinearly to the frame, min-max normalised and
    drawn over it with ``alpha``. With ``show_frame`` the plain frame is drawn on the left.

    Example:
        >>> import torch
        >>> fig = plot_saliency(np.zeros((210, 160, 3), np.uint8), torch.rand(7, 7))
        >>> len(fig.axes), fig.axes[1].images[1].get_array().shape
        (2, (210, 160))
    """
    image = _image(frame)
    heat = upsample_saliency(attention, image.shape[:2], grid_shape)
    span = heat.max() - heat.min()
    heat = (heat - heat.min()) / span if span > 0 else np.zeros_like(heat)
    fig = new_figure(3.2 * (1 + show_frame), 3.2 * image.shape[0] / image.shape[1] + 0.4)
    axes = fig.subplots(1, 1 + show_frame, squeeze=False)[0]
    gray = "gray" if image.ndim == 2 else None
    if show_frame:
        axes[0].imshow(image, cmap=gray)
        axes[0].set_title("frame")
    ax = axes[-1]
    ax.imshow(image, cmap=gray)
    ax.imshow(heat, cmap=cmap, alpha=alpha, vmin=0.0, vmax=1.0)
    ax.set_title("attention")
    for a in axes:
        a.set_axis_off()
    return _finish(fig, path)
