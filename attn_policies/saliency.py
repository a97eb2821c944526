"""Tensor reductions of attention maps: what each position or patch receives.

Pure functions of ``(..., head, query, key)`` weights (from
:func:`~attn_policies.capture.attention_maps`) that the figures of
:mod:`attn_policies.attention_plots` and the zoo's videos draw: the attention each key
receives (:func:`attention_saliency`), patch importance by voting or argmax
(:func:`patch_scores`), time blocks of stacked-step tokens (:func:`split_time_blocks`), a
saliency upsampled to the frame (:func:`upsample_saliency`) and the patch geometry
(:func:`patch_grid_origins`).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor

from attn_policies.capture import ArrayData, as_numpy

__all__ = [
    "attention_saliency",
    "patch_grid_origins",
    "patch_scores",
    "split_time_blocks",
    "upsample_saliency",
]


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
    saliency: ArrayData, size: tuple[int, int], grid_shape: tuple[int, int] | None = None
) -> np.ndarray:
    """Bilinearly upsample a saliency over ``(h', w')`` positions to an ``(H, W)`` image.

    ``saliency`` is ``(h', w')``, or ``(N,)`` with ``grid_shape`` (a square ``N`` needs none).

    Example:
        >>> upsample_saliency(np.arange(49.0), (84, 84)).shape
        (84, 84)
    """
    s = torch.as_tensor(as_numpy(saliency), dtype=torch.float32)
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
