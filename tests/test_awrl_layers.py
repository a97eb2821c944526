"""Tests for attn_policies.awrl_layers (g-/d-AWRL self-attention and block, E7)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _sb3 import sample_batch
from gymnasium import spaces
from torch import Tensor

from attn_policies.attention import MultiHeadSelfAttention, capture_attention
from attn_policies.awrl import AWRLExtractor
from attn_policies.awrl_layers import AWRLBlock, AWRLSelfAttention


def feature_space(n_features: int, stack: int = 4) -> spaces.Box:
    return spaces.Box(0.0, 255.0, (stack, n_features), np.float32)


def qkv(attn: AWRLSelfAttention, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Q, K, V ``(B, heads, N, head_dim)`` recomputed from the fused weight."""
    heads = (attn.n_heads, attn.head_dim)
    q, k, v = (x @ attn.qkv.weight.T).split(attn.out_features, dim=-1)
    return tuple(t.unflatten(-1, heads).transpose(1, 2) for t in (q, k, v))  # type: ignore[return-value]


@pytest.mark.parametrize("diagonal", ["dot", "softmax"])
def test_diagonal_attention_scales_each_value_by_its_own_score(diagonal: str) -> None:
    """Eq. 4.9: token i outputs φ_i v_i; nothing of another token enters."""
    torch.manual_seed(0)
    attn = AWRLSelfAttention(16, n_heads=2, head_dim=8, diagonal=diagonal)  # type: ignore[arg-type]
    x = torch.randn(3, 5, 16)
    q, k, v = qkv(attn, x)
    phi = (q * k).sum(-1) / math.sqrt(8)
    if diagonal == "softmax":
        phi = phi.softmax(-1)
    expected = (phi.unsqueeze(-1) * v).transpose(1, 2).flatten(2)
    torch.testing.assert_close(attn(x), expected)
    with capture_attention(attn) as maps:
        torch.testing.assert_close(attn(x), expected)
    torch.testing.assert_close(maps["self"], torch.diag_embed(phi))


def test_full_attention_is_softmax_attention() -> None:
    torch.manual_seed(0)
    attn = AWRLSelfAttention(16, n_heads=2, head_dim=8)
    x = torch.randn(3, 5, 16)
    q, k, v = qkv(attn, x)
    weights = (q @ k.transpose(-2, -1) / math.sqrt(8)).softmax(-1)
    torch.testing.assert_close(attn(x), (weights @ v).transpose(1, 2).flatten(2))


def test_split_projection_takes_queries_and_keys_from_the_shared_code() -> None:
    """``qk_input`` of shape (1, N, F) is every sample's Q/K source; V stays per sample."""
    torch.manual_seed(0)
    attn = AWRLSelfAttention(16, n_heads=2, head_dim=8)
    code, x = torch.randn(1, 5, 16), torch.randn(3, 5, 16)
    with capture_attention(attn) as maps:
        out = attn(x, qk_input=code)
    assert torch.equal(maps["self"][0], maps["self"][2])  # maps ignore the content
    q, k, _ = qkv(attn, code)
    _, _, v = qkv(attn, x)
    weights = (q @ k.transpose(-2, -1) / math.sqrt(8)).softmax(-1)
    torch.testing.assert_close(out, (weights @ v).transpose(1, 2).flatten(2))


def test_block_norm_is_per_channel_over_batch_and_tokens() -> None:
    """Batch-norm statistics per channel over batch and tokens, in training and eval mode."""
    torch.manual_seed(0)
    block = AWRLBlock(16, n_heads=2, head_dim=8)
    x = torch.randn(5, 7, 16)
    y = block.up(block.attention(x))
    mean, var = y.mean(dim=(0, 1)), y.var(dim=(0, 1), unbiased=False)
    expected = torch.relu((y - mean) / torch.sqrt(var + block.norm.eps))
    torch.testing.assert_close(block(x), expected, atol=1e-5, rtol=1e-5)
    n = 5 * 7
    running = 0.9 * torch.ones(16) + 0.1 * var * n / (n - 1)
    torch.testing.assert_close(block.norm.running_var, running)
    block.eval()
    frozen = torch.relu((y - block.norm.running_mean) / torch.sqrt(running + block.norm.eps))
    torch.testing.assert_close(block(x), frozen, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("variant", ["g", "d"])
@pytest.mark.parametrize(("n_features", "batch", "train"), [(8, 8, False), (32, 256, True)])
def test_strided_projection_is_the_contiguous_one_to_the_last_bit(
    variant: str, n_features: int, batch: int, train: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AWRLSelfAttention hands SDPA strided Q/K/V views; the base class's contiguous copies
    give the same outputs and gradients bit for bit (acting batch in eval mode, E7's 4L PPO
    minibatch in train mode), so runs trained before the change replay."""

    def run() -> list[Tensor]:
        torch.manual_seed(0)
        ext = AWRLExtractor(feature_space(n_features), variant=variant).train(train)
        out = ext(sample_batch(feature_space(n_features), batch, seed=1))
        out.square().sum().backward()
        return [out.detach(), *(p.grad for p in ext.parameters() if p.grad is not None)]

    strided = run()
    q = AWRLSelfAttention(16, 2, 8).project(torch.randn(3, 5, 16))[0]
    assert not q.is_contiguous()  # the views this test is about
    monkeypatch.setattr(AWRLSelfAttention, "project", MultiHeadSelfAttention.project)
    contiguous = run()
    assert len(strided) == len(contiguous) > 1
    for a, b in zip(strided, contiguous, strict=True):
        assert torch.equal(a, b)


def test_rejects_bad_options() -> None:
    with pytest.raises(ValueError, match="diagonal"):
        AWRLSelfAttention(8, diagonal="rows")  # type: ignore[arg-type]
    attn = AWRLSelfAttention(8, n_heads=2, head_dim=4, diagonal="dot")
    with pytest.raises(ValueError, match="its own mask"):
        attn(torch.randn(2, 3, 8), mask=torch.ones(3, 3, dtype=torch.bool))
