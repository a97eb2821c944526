"""Tests for attn_policies.saliency (reductions of attention maps)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attn_envs  # noqa: F401  (registers attn_envs/...)
from attn_policies.saliency import (
    attention_saliency,
    patch_scores,
    split_time_blocks,
    upsample_saliency,
)


def test_split_time_blocks_picks_query_and_key_blocks() -> None:
    n_feat, n_steps = 3, 4
    w = torch.arange(144.0).reshape(12, 12)  # w[q, k] = 12 q + k
    blocks = split_time_blocks(w[None], n_steps)
    assert blocks.shape == (4, 1, 3, 3)
    for t in range(n_steps):
        newest = w[(n_steps - 1) * n_feat :, t * n_feat : (t + 1) * n_feat]
        torch.testing.assert_close(blocks[t, 0], newest)
    torch.testing.assert_close(split_time_blocks(w, n_steps, query_step=0)[2], w[:3, 6:9])
    with pytest.raises(ValueError, match="time blocks"):
        split_time_blocks(w, 5)


def test_patch_scores() -> None:
    w = torch.tensor([[0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [0.1, 0.1, 0.8]])
    heads = torch.stack([w, w.flip(-1)])[None]  # (1, 2, 3, 3)
    torch.testing.assert_close(patch_scores(heads), ((w.sum(0) + w.flip(-1).sum(0)) / 2)[None])
    torch.testing.assert_close(patch_scores(heads, "argmax"), torch.tensor([[3.0, 0.0, 3.0]]))
    with pytest.raises(ValueError, match="method"):
        patch_scores(heads, "max")  # type: ignore[arg-type]


def test_attention_saliency_is_mean_attention_received() -> None:
    w = torch.rand(2, 3, 4, 5)
    torch.testing.assert_close(attention_saliency(w), w.mean(dim=(1, 2)))
    torch.testing.assert_close(attention_saliency(w[0]), w[0].mean(dim=(0, 1)))
    torch.testing.assert_close(attention_saliency(w[0, 0]), w[0, 0].mean(dim=0))


def test_attention_saliency_of_row_attention() -> None:
    channels, rows, width = 3, 4, 5
    w = torch.rand(2, channels * rows, width, width)
    sal = attention_saliency(w, rows=rows)
    assert sal.shape == (2, rows, width)
    per_row = w.view(2, channels, rows, width, width)  # head c * rows + h
    torch.testing.assert_close(sal[1, 2], per_row[1, :, 2].mean(dim=(0, 1)))
    with pytest.raises(ValueError, match="rows"):
        attention_saliency(w, rows=5)


def test_upsample_saliency() -> None:
    s = torch.tensor([[0.0, 1.0], [2.0, 3.0]])
    up = upsample_saliency(s, (4, 6))
    assert up.shape == (4, 6)
    expected = F.interpolate(s[None, None], size=(4, 6), mode="bilinear", align_corners=False)
    np.testing.assert_allclose(up, expected[0, 0].numpy())
    assert up[0, 0] == 0.0 and up[-1, -1] == 3.0
    flat = upsample_saliency(np.arange(12.0), (30, 40), grid_shape=(3, 4))
    assert flat.shape == (30, 40)
    np.testing.assert_allclose(upsample_saliency(np.ones(9), (7, 5)), np.ones((7, 5)), rtol=1e-6)
    with pytest.raises(ValueError, match="square"):
        upsample_saliency(np.ones(12), (30, 40))
