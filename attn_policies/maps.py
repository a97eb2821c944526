"""Attention maps of any model in one call, and the seeds' attention figures.

:func:`attention_maps` runs one forward pass of a plain ``nn.Module``, an SB3 algorithm or an
SB3 policy under :func:`~attn_policies.attention.capture_attention` and returns every recorded
``(batch, head, query, key)`` map by qualified module name. Normal forward passes stay on the
fast path: nothing is materialised unless this function (or ``capture_attention``) asks.

The plot helpers draw the figures of the seeds with matplotlib's Agg canvas (no display, no
pyplot state); each returns the :class:`~matplotlib.figure.Figure` and writes a PNG when given
a ``path``:

* :func:`plot_grid_attention` -- per-head maps of chosen nodes on a grid (book fig. 10.24,
  DoorKey's agent/key/door); one call from a model: :func:`doorkey_attention_figure`.
* :func:`plot_feature_attention` -- feature-by-feature maps labelled with RAM feature names
  over time steps (thesis fig. 4.4.2); one call: :func:`feature_attention_figure`.
* :func:`plot_top_patches` -- the top-K attended patches boxed on the frame (seed 001,
  AttentionAgent CarRacing); one call: :func:`top_patches_figure`.
* :func:`plot_saliency` -- attention received per position, upsampled over an Atari frame
  (book fig. 10.25); one call: :func:`saliency_figure`.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from minigrid.core.constants import OBJECT_TO_IDX
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.policies import BasePolicy
from torch import Tensor, nn

from attn_policies.attention import AttentionCapture, capture_attention

__all__ = [
    "attention_maps",
    "attention_saliency",
    "doorkey_attention_figure",
    "doorkey_frame",
    "doorkey_nodes",
    "feature_attention_figure",
    "patch_grid_origins",
    "patch_scores",
    "plot_feature_attention",
    "plot_grid_attention",
    "plot_saliency",
    "plot_top_patches",
    "saliency_figure",
    "split_time_blocks",
    "top_patches_figure",
    "upsample_saliency",
]

Model = nn.Module | BaseAlgorithm
PathLike = str | Path
Head = int | Literal["mean"]

# Largest raw value of MiniGrid's (object, colour, state) cell channels; attn_envs.grid's
# GRID_CHANNEL_MAX, repeated here so plotting does not import the env package.
_GRID_CHANNEL_MAX = np.array([10, 5, 3], dtype=np.float64)
_CARRIABLE = {OBJECT_TO_IDX[name] for name in ("key", "ball", "box")}


# --------------------------------------------------------------------------------------------
# Capturing
# --------------------------------------------------------------------------------------------


def _as_numpy(x: Any) -> Any:
    if isinstance(x, Tensor):
        return x.detach().cpu().numpy()
    if isinstance(x, Mapping):
        return {k: _as_numpy(v) for k, v in x.items()}
    return x


def _as_float_tensor(x: Any, device: torch.device) -> Any:
    if isinstance(x, Mapping):
        return {k: _as_float_tensor(v, device) for k, v in x.items()}
    if isinstance(x, Tensor):
        t = x if x.is_floating_point() else x.to(torch.get_default_dtype())
    else:
        t = torch.as_tensor(np.asarray(x), dtype=torch.get_default_dtype())
    return t.to(device)


def _module_device(module: nn.Module) -> torch.device:
    for t in (*module.parameters(), *module.buffers()):
        return t.device
    return torch.device("cpu")


def attention_maps(model: Model, obs: Any, *args: Any, **kwargs: Any) -> dict[str, Tensor]:
    """Attention weights of one forward pass, by layer name, each ``(batch, head, query, key)``.

    The model runs in eval mode under ``torch.no_grad()`` inside
    :func:`~attn_policies.attention.capture_attention`; afterwards every submodule's training
    flag is restored, so the call leaves no trace on later forward passes.

    * A plain ``nn.Module`` is called as ``model(obs, *args, **kwargs)``. ``obs`` (a tensor,
      array or dict of them) becomes float tensors on the model's device, values unchanged
      (a ``uint8`` screen stays 0..255: scale it yourself if the module expects [0, 1]); it
      is passed as given, so include the batch dimension the module expects.
    * An SB3 ``BaseAlgorithm`` stands for its ``.policy``. ``obs`` is the raw env
      observation (apply ``VecNormalize`` yourself if training used it); ``policy.obs_to_tensor``
      converts it (a single unbatched observation gets a batch dimension of 1, channels-last
      images are transposed as in training) and ``policy(obs, deterministic=True)`` runs the
      policy's own preprocessing (images / 255, one-hot) and forward pass: actor and critic
      for ``ActorCriticPolicy``, the Q-network for DQN, the actor for SAC/TD3. Policies whose
      forward needs more (recurrent ones), or calls with ``args``/``kwargs``, go through
      ``policy.predict(obs, *args, deterministic=True, **kwargs)`` instead (e.g.
      ``state=``, ``episode_start=``), which runs the actor only.

    Names are qualified module names relative to the module that runs: for SB3 the policy,
    with nothing stripped, e.g. ``"features_extractor.attention"`` (shared extractor of
    on-policy algorithms), ``"features_extractor..."`` and ``"vf_features_extractor..."``
    (separate ones: SB3's ``pi_features_extractor`` is the ``features_extractor`` module and
    ``named_modules`` keeps its first name) or ``"q_net.features_extractor..."`` (DQN; the
    target network does not run). A module that is itself an attention layer is ``"self"``;
    one called ``n`` times gives ``name[0]`` ... ``name[n-1]``.
    Layers the forward pass does not reach are absent.

    Raises:
        TypeError: if ``model`` is neither an ``nn.Module`` nor an SB3 algorithm.
        ValueError: if the model contains no :class:`AttentionCapture` module.

    Example:
        >>> from attn_policies.attention import MultiHeadSelfAttention
        >>> _ = torch.manual_seed(0)
        >>> net = nn.Sequential(MultiHeadSelfAttention(8, n_heads=2, head_dim=4))
        >>> {k: tuple(v.shape) for k, v in attention_maps(net, torch.randn(3, 5, 8)).items()}
        {'0': (3, 2, 5, 5)}
    """
    module = model.policy if isinstance(model, BaseAlgorithm) else model
    if not isinstance(module, nn.Module):
        raise TypeError(
            "attention_maps needs an nn.Module, an SB3 policy or an SB3 algorithm, "
            f"got {type(model).__name__}"
        )
    if not any(isinstance(m, AttentionCapture) for m in module.modules()):
        raise ValueError(
            f"{type(module).__name__} has no attention layer: no submodule inherits "
            "attn_policies.attention.AttentionCapture, so there are no weights to record"
        )
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        with torch.no_grad(), capture_attention(module) as maps:
            if (
                isinstance(module, BasePolicy)
                and not args
                and not kwargs
                and _forward_obs_only(module)
            ):
                module(module.obs_to_tensor(_as_numpy(obs))[0], deterministic=True)
            elif isinstance(module, BasePolicy):
                module.predict(_as_numpy(obs), *args, **{"deterministic": True, **kwargs})
            else:
                module(_as_float_tensor(obs, _module_device(module)), *args, **kwargs)
    finally:
        for m, training in modes:
            m.training = training
    return maps


def _forward_obs_only(policy: BasePolicy) -> bool:
    """Whether ``policy(obs, deterministic=True)`` runs (recurrent policies need states)."""
    params = list(inspect.signature(policy.forward).parameters.values())
    required = [
        p
        for p in params[1:]
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    return bool(params) and not required and any(p.name == "deterministic" for p in params)


def _select_layer(maps: Mapping[str, Tensor], layer: str | int | None) -> str:
    names = list(maps)
    if not names:
        raise ValueError(
            "the forward pass recorded no attention: no AttentionCapture layer was called"
        )
    if layer is None:
        return names[0]
    if isinstance(layer, int) and not isinstance(layer, bool):
        if not -len(names) <= layer < len(names):
            raise ValueError(f"layer index {layer} out of range for recorded layers {names}")
        return names[layer]
    if layer in maps:
        return str(layer)
    raise ValueError(f"no recorded attention layer {layer!r}; recorded layers: {names}")


def _is_sb3(model: Any) -> bool:
    return isinstance(model, BaseAlgorithm | BasePolicy)


# --------------------------------------------------------------------------------------------
# Reductions of attention maps
# --------------------------------------------------------------------------------------------


def attention_saliency(weights: Tensor, rows: int | None = None) -> Tensor:
    """Attention each key position receives: the mean over heads and queries.

    ``(B, head, Q, K) -> (B, K)``, ``(head, Q, K) -> (K,)``; a single-head ``(Q, K)`` map
    gives ``(K,)``. For a spatial self-attention (non-local) layer the keys are the
    positions of the feature map, so the result reshapes to that map (book fig. 10.25).

    ``rows``: for row-restricted attention whose heads are (channel, image row) pairs,
    channel-major, each attending within its row of ``K`` pixels (``NonLocalBlock``'s
    ``"row"`` form: heads ``c * H + h``): the mean runs over channels and queries and keeps
    the rows, ``(B, C * rows, Q, K) -> (B, rows, K)``.

    Example:
        >>> attention_saliency(torch.full((2, 4, 9, 9), 1 / 9)).shape
        torch.Size([2, 9])
        >>> attention_saliency(torch.full((2, 32 * 7, 7, 7), 1 / 7), rows=7).shape
        torch.Size([2, 7, 7])
    """
    w = torch.as_tensor(weights)
    if w.dim() == 2 and rows is None:
        return w.mean(dim=0)
    if w.dim() not in (3, 4):
        raise ValueError(
            f"attention_saliency needs (B, head, Q, K), (head, Q, K) or (Q, K) weights, got "
            f"shape {tuple(w.shape)}"
        )
    if rows is None:
        return w.mean(dim=(-3, -2))
    if rows < 1 or w.shape[-3] % rows:
        raise ValueError(f"{w.shape[-3]} heads are not (channel, row) pairs of {rows} rows")
    return rearrange(w, "... (c h) q k -> ... c h q k", h=rows).mean(dim=(-4, -2))


def patch_scores(weights: Tensor, method: Literal["votes", "argmax"] = "votes") -> Tensor:
    """Importance of each key patch from ``(..., head, Q, K)`` attention weights.

    ``"votes"``: AttentionAgent's patch voting, the attention each patch receives summed over
    queries (mean over heads). ``"argmax"``: the seed-001 appendix's reading of the
    AttentionNeuron map, how many (head, query) rows put their largest weight on the patch.

    Example:
        >>> w = torch.eye(4).expand(1, 2, 4, 4)
        >>> patch_scores(w).tolist(), patch_scores(w, "argmax").tolist()
        ([[1.0, 1.0, 1.0, 1.0]], [[2.0, 2.0, 2.0, 2.0]])
    """
    w = torch.as_tensor(weights)
    if w.dim() < 3:
        raise ValueError(f"patch_scores needs (..., head, Q, K) weights, got {tuple(w.shape)}")
    if method == "votes":
        return w.sum(dim=-2).mean(dim=-2)
    if method == "argmax":
        winners = F.one_hot(w.argmax(dim=-1), w.shape[-1]).to(w.dtype)  # (..., head, Q, K)
        return winners.sum(dim=(-3, -2))
    raise ValueError(f"method must be 'votes' or 'argmax', got {method!r}")


def split_time_blocks(weights: Tensor, n_steps: int, query_step: int = -1) -> Tensor:
    """Split a map over time-major ``(step, feature)`` tokens into per-step key blocks.

    Thesis fig. 4.4.2 reads one attention map of ``T * L`` tokens (``L`` features at each of
    ``T`` stacked steps, token ``t * L + f``) as ``T`` panels: the queries of step
    ``query_step`` (the newest by default) against the keys of each step, oldest first.
    ``(..., T*L, T*L) -> (T, ..., L, L)``.

    Example:
        >>> split_time_blocks(torch.rand(3, 32, 32), n_steps=4).shape
        torch.Size([4, 3, 8, 8])
    """
    w = torch.as_tensor(weights)
    n_q, n_k = w.shape[-2:]
    if n_steps < 1 or n_k % n_steps or n_q != n_k:
        raise ValueError(
            f"cannot split a {n_q}x{n_k} map into {n_steps} equal time blocks of a square map"
        )
    n_feat = n_k // n_steps
    step = range(n_steps)[query_step]
    rows = w[..., step * n_feat : (step + 1) * n_feat, :]
    return rearrange(rows, "... q (t k) -> t ... q k", t=n_steps)


def upsample_saliency(
    saliency: Any, size: tuple[int, int], grid_shape: tuple[int, int] | None = None
) -> np.ndarray:
    """Bilinearly upsample a saliency over ``(h', w')`` positions to an ``(H, W)`` image.

    ``saliency`` is ``(h', w')``, or ``(N,)`` with ``grid_shape`` (a square ``N`` needs none).

    Example:
        >>> upsample_saliency(np.arange(49.0), (84, 84)).shape
        (84, 84)
    """
    s = torch.as_tensor(_as_numpy(saliency), dtype=torch.float32)
    if s.dim() == 1:
        if grid_shape is None:
            side = math.isqrt(s.numel())
            if side * side != s.numel():
                raise ValueError(
                    f"{s.numel()} positions are not a square grid; pass grid_shape=(h, w)"
                )
            grid_shape = (side, side)
        if grid_shape[0] * grid_shape[1] != s.numel():
            raise ValueError(f"grid_shape {grid_shape} does not hold {s.numel()} positions")
        s = s.reshape(grid_shape)
    if s.dim() != 2:
        raise ValueError(f"saliency must be (h, w) or (N,), got shape {tuple(s.shape)}")
    up = F.interpolate(s[None, None], size=tuple(size), mode="bilinear", align_corners=False)
    return up[0, 0].numpy()


def patch_grid_origins(
    image_shape: tuple[int, ...], patch_size: int, stride: int | None = None
) -> np.ndarray:
    """Row-major ``(N, 2)`` pixel (row, col) of each patch's top-left corner.

    The same geometry as ``attn_envs.patches.PatchObservation.patch_origins``: a grid of
    ``patch_size`` patches every ``stride`` pixels from the top-left, remainder dropped.

    Example:
        >>> patch_grid_origins((96, 96), 7, 4).shape
        (529, 2)
    """
    stride = patch_size if stride is None else stride
    h, w = image_shape[:2]
    if patch_size < 1 or stride < 1 or patch_size > min(h, w):
        raise ValueError(
            f"need 1 <= patch_size <= image size and stride >= 1, got patch_size={patch_size}, "
            f"stride={stride}, image {h}x{w}"
        )
    rows = np.arange((h - patch_size) // stride + 1) * stride
    cols = np.arange((w - patch_size) // stride + 1) * stride
    r, c = np.meshgrid(rows, cols, indexing="ij")
    return np.stack([r.ravel(), c.ravel()], axis=1)


# --------------------------------------------------------------------------------------------
# DoorKey helpers
# --------------------------------------------------------------------------------------------


def _decode_grid(obs: Any, scale: Literal["max", "fixed"] | None) -> np.ndarray:
    """Raw integer MiniGrid cells ``(3, X, Y)`` of an EgocentricGridObservation."""
    x = np.asarray(_as_numpy(obs), dtype=np.float64)
    if x.ndim != 3 or x.shape[0] != 3:
        raise ValueError(
            "need one EgocentricGridObservation observation of shape (3, view, view), got "
            f"shape {x.shape}"
        )
    if scale == "fixed":
        return np.rint(x * _GRID_CHANNEL_MAX[:, None, None]).astype(np.int64)
    if scale is None:
        return np.rint(x).astype(np.int64)
    if scale != "max":
        raise ValueError(f"scale must be 'max', 'fixed' or None, got {scale!r}")
    # The divisor is the view's own largest raw value (1..10). The agent's cell is always
    # visible and holds "empty" (1, 0, 0) or the carried object, which pins it down.
    ax, ay = _agent_cell(x.shape)
    for m in range(1, int(_GRID_CHANNEL_MAX.max()) + 1):
        raw = x * m
        cells = np.rint(raw)
        if np.abs(raw - cells).max() > 1e-3 or (cells > _GRID_CHANNEL_MAX[:, None, None]).any():
            continue
        obj, colour = int(cells[0, ax, ay]), int(cells[1, ax, ay])
        if (colour == 0 and obj == OBJECT_TO_IDX["empty"]) or (colour > 0 and obj in _CARRIABLE):
            return cells.astype(np.int64)
    raise ValueError(
        "observation is not a max-scaled MiniGrid egocentric view (no divisor 1..10 decodes "
        "it to integer cells with the agent's cell empty or holding a carried object)"
    )


def _agent_cell(shape: tuple[int, ...]) -> tuple[int, int]:
    # MiniGrid's view is indexed [x, y]; the agent sits at the bottom centre, facing up.
    return shape[-2] // 2, shape[-1] - 1


def doorkey_nodes(obs: Any, scale: Literal["max", "fixed"] | None = "max") -> dict[str, int]:
    """Node indices of the agent, key and door in an ``attn_envs/EgocentricDoorKey-*`` view.

    The observation is ``(3, X, Y)`` with MiniGrid's ``[x, y]`` indexing, channel 0 the
    object index, scaled as ``EgocentricGridObservation(scale=...)`` does. Node ``i`` is the
    row-major flattening of the spatial axes, ``i = x * Y + y`` (a relational extractor's
    ``rearrange("b c h w -> b (h w) c")``). The agent always sits at ``x = X // 2, y = Y - 1``
    (bottom centre of the egocentric view, facing up); that cell is "empty" or shows the
    carried object. ``"key"`` and ``"door"`` appear only when visible on the floor (a carried
    key is with the agent); the first in row-major order is taken.

    Raises:
        ValueError: if the array is not such an observation.

    Example:
        >>> import gymnasium as gym, attn_envs
        >>> obs, _ = gym.make("attn_envs/EgocentricDoorKey-5x5-v0").reset(seed=2)
        >>> doorkey_nodes(obs)
        {'agent': 27, 'key': 41, 'door': 26}
    """
    cells = _decode_grid(obs, scale)
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


def doorkey_frame(
    obs: Any, scale: Literal["max", "fixed"] | None = "max", tile_size: int = 16
) -> np.ndarray:
    """MiniGrid's rendering of an egocentric DoorKey view, upright: ``(Y*t, X*t, 3)`` uint8.

    Pixel row ``y``, column ``x`` shows cell ``[x, y]``: the agent at the bottom centre facing
    up, unseen cells black. Panels of :func:`plot_grid_attention` with ``transpose=True`` use
    the same layout.

    Example:
        >>> import gymnasium as gym, attn_envs
        >>> obs, _ = gym.make("attn_envs/EgocentricDoorKey-5x5-v0").reset(seed=2)
        >>> doorkey_frame(obs, tile_size=8).shape
        (56, 56, 3)
    """
    from minigrid.core.grid import Grid

    cells = _decode_grid(obs, scale)
    grid, _ = Grid.decode(np.ascontiguousarray(cells.transpose(1, 2, 0), dtype=np.uint8))
    return grid.render(tile_size, agent_pos=_agent_cell(cells.shape), agent_dir=3)


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)  # Agg canvas: renders off-screen, never touches pyplot or a display
    return fig


def _finish(fig: Figure, path: PathLike | None, dpi: int = 120) -> Figure:
    if path is not None:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(p, dpi=dpi, format="png" if not p.suffix else None)
    return fig


def _image(frame: Any) -> np.ndarray:
    """A frame as something ``imshow`` draws: (H, W) or (H, W, 3|4), floats in [0, 1]."""
    img = np.asarray(_as_numpy(frame))
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
    weights: Any,
    nodes: Mapping[str, int | tuple[int, int]],
    grid_shape: tuple[int, int] = (7, 7),
    *,
    batch_index: int = 0,
    frame: Any | None = None,
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
        >>> w = torch.softmax(torch.randn(1, 3, 49, 49), dim=-1)
        >>> fig = plot_grid_attention(w, {"agent": 27, "key": (4, 6)})
        >>> len(fig.axes), fig.axes[0].get_title()
        (7, 'head 1')
    """
    w = np.asarray(_as_numpy(weights), dtype=np.float64)
    if w.ndim == 4:
        w = w[batch_index]
    elif w.ndim == 2:
        w = w[None]
    gh, gw = grid_shape
    if w.ndim != 3 or w.shape[-1] != gh * gw:
        raise ValueError(
            f"weights must be (heads, N, {gh * gw}), (B, heads, N, {gh * gw}) or "
            f"(N, {gh * gw}) for grid_shape {grid_shape}, got {np.shape(_as_numpy(weights))}"
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

    fig = _figure(2.0 * n_heads + 1.0, 2.0 * len(index))
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
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.8, label="attention")
    return _finish(fig, path)


def plot_feature_attention(
    weights: Any,
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
        >>> names = ["player_y", "ball_x", "ball_y"]
        >>> fig = plot_feature_attention(torch.softmax(torch.randn(4, 2, 3, 3), -1), names)
        >>> len(fig.axes), [ax.get_title() for ax in fig.axes[:4]]
        (5, ['t-3', 't-2', 't-1', 't'])
    """
    if isinstance(weights, Sequence) and not isinstance(weights, np.ndarray | Tensor):
        w = np.stack([np.asarray(_as_numpy(x), dtype=np.float64) for x in weights])
    else:
        w = np.asarray(_as_numpy(weights), dtype=np.float64)
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
    fig = _figure(side * n_steps + label + 1.5, side + label + 0.5)
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
    fig.colorbar(im, ax=list(axes), shrink=0.8, label="attention")
    return _finish(fig, path)


def plot_top_patches(
    frame: Any,
    scores: Any | None = None,
    *,
    indices: Any | None = None,
    patch_size: int,
    stride: int | None = None,
    origins: Any | None = None,
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
        s = np.asarray(_as_numpy(scores), dtype=np.float64).ravel()
        if s.size != len(orig):
            raise ValueError(f"{s.size} scores for {len(orig)} patches")
        chosen = np.argsort(-s, kind="stable")[:k]
    else:
        chosen = np.asarray(_as_numpy(indices), dtype=np.int64).ravel()
        if chosen.size and not (chosen.min() >= 0 and chosen.max() < len(orig)):
            raise ValueError(f"patch indices must lie in [0, {len(orig)}), got {chosen}")
    fig = _figure(4.5, 4.5 * image.shape[0] / image.shape[1] + 0.4)
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
    frame: Any,
    attention: Any,
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
        >>> fig = plot_saliency(np.zeros((210, 160, 3), np.uint8), torch.rand(7, 7))
        >>> len(fig.axes), fig.axes[1].images[1].get_array().shape
        (2, (210, 160))
    """
    image = _image(frame)
    heat = upsample_saliency(attention, image.shape[:2], grid_shape)
    span = heat.max() - heat.min()
    heat = (heat - heat.min()) / span if span > 0 else np.zeros_like(heat)
    fig = _figure(3.2 * (1 + show_frame), 3.2 * image.shape[0] / image.shape[1] + 0.4)
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


# --------------------------------------------------------------------------------------------
# One-call figures
# --------------------------------------------------------------------------------------------


def _batched(model: Model, obs: Any, unbatched_ndim: int) -> Any:
    """``obs`` with a batch axis for plain modules (SB3 policies add it themselves)."""
    if _is_sb3(model):
        return obs
    x = _as_numpy(obs)
    return np.asarray(x)[None] if np.ndim(x) == unbatched_ndim else x


def doorkey_attention_figure(
    model: Model,
    obs: Any,
    *,
    layer: str | int | None = None,
    scale: Literal["max", "fixed"] | None = "max",
    path: PathLike | None = None,
) -> Figure:
    """Book fig. 10.24 in one call: agent/key/door rows x heads over the DoorKey view.

    Runs :func:`attention_maps` on one ``attn_envs/EgocentricDoorKey-*`` observation
    ``(3, 7, 7)`` (a plain module gets a batch axis), finds the nodes with
    :func:`doorkey_nodes` and draws :func:`plot_grid_attention` upright (agent at the bottom
    centre) over :func:`doorkey_frame`. ``layer`` picks a recorded layer by name or position
    (default the first); its keys must be the view's cells.

    Example:
        >>> import gymnasium as gym, attn_envs
        >>> from attn_policies.attention import MultiHeadSelfAttention
        >>> class Nodes(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.attention = MultiHeadSelfAttention(3, n_heads=3, head_dim=4)
        ...     def forward(self, x):
        ...         return self.attention(rearrange(x, "b c h w -> b (h w) c"))
        >>> obs, _ = gym.make("attn_envs/EgocentricDoorKey-5x5-v0").reset(seed=2)
        >>> fig = doorkey_attention_figure(Nodes(), obs)
        >>> len(fig.axes), [ax.get_ylabel() for ax in fig.axes[::3]]
        (10, ['agent', 'key', 'door', 'attention'])
    """
    single = np.asarray(_as_numpy(obs))
    if single.ndim != 3:
        raise ValueError(f"need one DoorKey observation of shape (3, H, W), got {single.shape}")
    maps = attention_maps(model, _batched(model, single, 3))
    weights = maps[_select_layer(maps, layer)][0]
    return plot_grid_attention(
        weights,
        doorkey_nodes(single, scale),
        grid_shape=single.shape[1:],
        frame=doorkey_frame(single, scale),
        transpose=True,
        path=path,
    )


def _model_action(model: Model, obs: Any, env: gym.Env) -> Any:
    if _is_sb3(model):
        policy = model.policy if isinstance(model, BaseAlgorithm) else model
        return policy.predict(obs, deterministic=True)[0]
    return env.action_space.sample()


def feature_attention_figure(
    model: Model,
    env: gym.Env | str,
    n_steps: int = 4,
    layer: str | int | None = None,
    head: Head = "mean",
    seed: int = 0,
    *,
    layout: Literal["rollout", "blocks"] = "rollout",
    path: PathLike | None = None,
) -> Figure:
    """Thesis fig. 4.4.2 in one call: feature attention maps of a rollout, named by feature.

    Resets ``env`` (an env with a ``DistractorFeatureObservation`` or
    ``RamFeatureObservation`` in its wrapper chain, or an id to ``gym.make``; an id is closed
    afterwards) with ``seed`` and steps it ``n_steps - 1`` times, acting with the SB3
    model's deterministic policy (a plain module gets seeded random actions and a batch
    axis), and records the ``layer`` map of every observation (default the first recorded
    layer). Keys are labelled with the wrapper's ``feature_names``, read after the seeded
    reset (their order is the episode's shuffle). Models with one token per feature give
    ``(L, L)`` maps; models with one token per (stacked step, feature), time-major, get the
    names suffixed ``@t-k``.

    ``layout="rollout"`` draws one panel per step of the rollout. ``layout="blocks"`` draws
    the thesis's reading of a single map of stacked-step tokens: the last observation's map
    split by :func:`split_time_blocks` into one panel per stacked step (queries of the
    newest step); it needs a model with one token per (step, feature).

    Raises:
        ValueError: if no wrapper has ``feature_names``, or the map size fits neither
            ``L`` nor ``stack * L`` tokens.

    Example:
        >>> from attn_policies.attention import MultiHeadSelfAttention
        >>> from attn_envs.atari_ram import make_distractor_env
        >>> class Tokens(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.attention = MultiHeadSelfAttention(4, n_heads=2, head_dim=4)
        ...     def forward(self, x):  # (B, stack, L): one token per feature
        ...         return self.attention(rearrange(x, "b t l -> b l t") / 255)
        >>> env = make_distractor_env("Pong", n_distractors=0, stack=4)
        >>> fig = feature_attention_figure(Tokens(), env, n_steps=4)
        >>> len(fig.axes), fig.axes[0].get_xticklabels()[0].get_text()
        (5, 'player/enemy_x')
        >>> env.close()
    """
    if n_steps < 1:
        raise ValueError(f"n_steps must be >= 1, got {n_steps}")
    if layout not in ("rollout", "blocks"):
        raise ValueError(f"layout must be 'rollout' or 'blocks', got {layout!r}")
    own = isinstance(env, str)
    env = gym.make(env) if isinstance(env, str) else env
    try:
        obs, _ = env.reset(seed=seed)
        env.action_space.seed(seed)
        try:
            names = list(env.get_wrapper_attr("feature_names"))
        except AttributeError:
            raise ValueError(
                f"{env} has no wrapper with feature_names (DistractorFeatureObservation or "
                "RamFeatureObservation)"
            ) from None
        try:
            stack = int(env.get_wrapper_attr("stack"))
        except AttributeError:
            stack = 1
        panels: list[Tensor] = []
        for t in range(n_steps):
            maps = attention_maps(model, _batched(model, obs, len(env.observation_space.shape)))
            panels.append(maps[_select_layer(maps, layer)][0])  # (heads, K, K)
            if t < n_steps - 1:
                obs, _, terminated, truncated, _ = env.step(_model_action(model, obs, env))
                if terminated or truncated:
                    obs, _ = env.reset()
    finally:
        if own:
            env.close()
    n_tokens, n_feat = panels[0].shape[-1], len(names)
    stacked = stack > 1 and n_tokens == stack * n_feat
    if n_tokens != n_feat and not stacked:
        raise ValueError(
            f"layer maps have {n_tokens} tokens; expected {n_feat} (one per feature) or "
            f"{stack} * {n_feat} (one per stacked step and feature)"
        )
    if layout == "blocks":
        if not stacked:
            raise ValueError(
                f'layout="blocks" needs one token per (step, feature): {stack} * {n_feat} '
                f"tokens, got {n_tokens}"
            )
        blocks = split_time_blocks(panels[-1], n_steps=stack)  # (stack, heads, L, L)
        return plot_feature_attention(blocks, names, head=head, path=path)
    labels = names
    if stacked:
        labels = [f"{n}@t-{stack - 1 - s}" if s < stack - 1 else f"{n}@t" for s in range(stack)
                  for n in names]  # fmt: skip
    return plot_feature_attention(torch.stack(panels), labels, head=head, path=path)


def top_patches_figure(
    model: Model,
    obs: Any,
    frame: Any,
    *,
    patch_size: int,
    stride: int | None = None,
    origins: Any | None = None,
    k: int = 10,
    layer: str | int | None = None,
    method: Literal["votes", "argmax"] = "votes",
    path: PathLike | None = None,
) -> Figure:
    """Seed 001's CarRacing figure in one call: the top-``k`` attended patches on ``frame``.

    Runs :func:`attention_maps` on ``obs`` (passed as given: batch it for a plain module; the
    first sample is drawn), scores the key patches of ``layer`` with :func:`patch_scores`
    (``"votes"``: AttentionAgent's voting; ``"argmax"``: the AttentionNeuron appendix, only
    patches some query picks count) and boxes the best ``k`` with :func:`plot_top_patches`.

    Example:
        >>> from attn_policies.attention import MultiHeadSelfAttention
        >>> attn = MultiHeadSelfAttention(147, n_heads=1, head_dim=4)
        >>> frame = np.zeros((96, 96, 3), np.uint8)
        >>> fig = top_patches_figure(attn, torch.rand(1, 529, 147), frame, patch_size=7, stride=4)
        >>> len(fig.axes[0].patches)
        10
    """
    maps = attention_maps(model, obs)
    weights = maps[_select_layer(maps, layer)]
    scores = patch_scores(weights, method)[0]
    if method == "argmax":
        picked = torch.nonzero(scores).ravel()
        order = torch.argsort(-scores[picked], stable=True)
        chosen = picked[order][:k]
        return plot_top_patches(
            frame, indices=chosen, patch_size=patch_size, stride=stride, origins=origins, path=path
        )
    return plot_top_patches(
        frame, scores, patch_size=patch_size, stride=stride, origins=origins, k=k, path=path
    )


def saliency_figure(
    model: Model,
    obs: Any,
    frame: Any,
    *,
    layer: str | int | None = None,
    grid_shape: tuple[int, int] | None = None,
    rows: int | None = None,
    alpha: float = 0.5,
    path: PathLike | None = None,
) -> Figure:
    """Book fig. 10.25 in one call: a spatial attention layer's saliency over ``frame``.

    Runs :func:`attention_maps` on ``obs`` (passed as given: batch it for a plain module; the
    first sample is drawn), reduces ``layer``'s ``(B, head, Q, K)`` map with
    :func:`attention_saliency` and overlays it with :func:`plot_saliency`. The keys must be
    the positions of a feature map: ``grid_shape`` or a square number of them; for
    row-restricted attention (``NonLocalBlock(form="row")``) pass the map's ``rows``.

    Example:
        >>> from attn_policies.attention import MultiHeadSelfAttention
        >>> attn = MultiHeadSelfAttention(8, n_heads=2, head_dim=4)
        >>> frame = np.zeros((84, 84), np.uint8)
        >>> fig = saliency_figure(attn, torch.rand(1, 49, 8), frame)
        >>> fig.axes[1].images[1].get_array().shape
        (84, 84)
    """
    maps = attention_maps(model, obs)
    saliency = attention_saliency(maps[_select_layer(maps, layer)], rows=rows)[0]
    return plot_saliency(frame, saliency, grid_shape, alpha=alpha, path=path)
