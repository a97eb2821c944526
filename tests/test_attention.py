"""Tests for attn_policies.attention (self-attention, position codes, attention capture)."""

from __future__ import annotations

import math

import pytest
import torch
from _sb3 import perturb_
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from attn_policies.attention import (
    AttentionCapture,
    MultiHeadSelfAttention,
    append_coordinates,
    attend,
    capture_attention,
    sinusoidal_table,
)


def reference_attention(attn: MultiHeadSelfAttention, x: torch.Tensor, mask=None):
    """The book's listing written out with einsum, from the module's own weights."""
    h, d = attn.n_heads, attn.head_dim
    q, k, v = attn.qkv(x).split(h * d, dim=-1)
    q, k, v = (t.reshape(x.shape[0], -1, h, d).transpose(1, 2) for t in (q, k, v))
    if attn.norms is not None:
        q, k, v = attn.norms[0](q), attn.norms[1](k), attn.norms[2](v)
    if attn.compatibility == "dot":
        a = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(d)
    else:
        a = attn.a_lin(torch.nn.functional.elu(attn.q_lin(q) + attn.k_lin(k)))
    if mask is not None:
        a = a.masked_fill(~mask, float("-inf"))
    a = a.softmax(-1)
    out = torch.einsum("bhqk,bhkd->bhqd", a, v)
    return out.transpose(1, 2).reshape(x.shape[0], -1, h * d), a


@pytest.mark.parametrize(
    ("compatibility", "qkv_norm"),
    [("dot", None), ("dot", "features"), ("dot", "tokens"), ("additive", "tokens")],
)
def test_forward_matches_reference_and_capture(compatibility, qkv_norm) -> None:
    torch.manual_seed(0)
    attn = perturb_(
        MultiHeadSelfAttention(
            10, n_heads=3, head_dim=8, compatibility=compatibility, n_tokens=7, qkv_norm=qkv_norm
        )
    )
    x = torch.randn(4, 7, 10)
    expected, weights = reference_attention(attn, x)
    fast = attn(x)
    with capture_attention(attn) as maps:
        captured = attn(x)
    torch.testing.assert_close(fast, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(captured, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(maps["self"], weights, atol=1e-6, rtol=1e-5)
    assert maps["self"].shape == (4, 3, 7, 7)
    torch.testing.assert_close(maps["self"].sum(-1), torch.ones(4, 3, 7))


@pytest.mark.parametrize("qkv_norm", [None, "features", "tokens"])
def test_project_gives_contiguous_heads_with_the_reference_values_and_gradients(qkv_norm) -> None:
    # project() copies Q, K, V once into (B, heads, N, d) order instead of handing out strided
    # views (a LayerNorm copy each and a 5-D gather backward: the DoorKey net's speed); the
    # values and the gradients must stay bit for bit those of the strided split.
    torch.manual_seed(0)
    attn = perturb_(
        MultiHeadSelfAttention(10, n_heads=3, head_dim=8, n_tokens=7, qkv_norm=qkv_norm)
    )
    x = torch.randn(4, 7, 10)
    h, d = attn.n_heads, attn.head_dim
    split = (t.reshape(4, 7, h, d).transpose(1, 2) for t in attn.qkv(x).split(h * d, dim=-1))
    norms = attn.norms if attn.norms is not None else [nn.Identity()] * 3
    expected = [norm(t) for norm, t in zip(norms, split, strict=True)]
    ref_grads = torch.autograd.grad(sum((t * t.cos()).sum() for t in expected), [attn.qkv.weight])
    got = attn.project(x)
    grads = torch.autograd.grad(sum((t * t.cos()).sum() for t in got), [attn.qkv.weight])
    for t, e in zip(got, expected, strict=True):
        assert t.shape == (4, h, 7, d) and t.is_contiguous()
        assert torch.equal(t, e)
    assert torch.equal(grads[0], ref_grads[0])


def test_diagonal_mask_returns_the_values() -> None:
    torch.manual_seed(0)
    attn = MultiHeadSelfAttention(6, n_heads=2, head_dim=4)
    x = torch.randn(3, 5, 6)
    eye = torch.eye(5, dtype=torch.bool)
    _, _, v = attn.project(x)
    torch.testing.assert_close(attn(x, eye), v.transpose(1, 2).reshape(3, 5, 8))
    with capture_attention(attn) as maps:
        attn(x, eye)
    torch.testing.assert_close(maps["self"], eye.float().expand(3, 2, 5, 5))


def test_causal_mask_matches_reference_on_both_paths() -> None:
    torch.manual_seed(0)
    attn = MultiHeadSelfAttention(6, n_heads=2, head_dim=4)
    x = torch.randn(2, 5, 6)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    expected, _ = reference_attention(attn, x, mask)
    torch.testing.assert_close(attn(x, mask), expected, atol=1e-6, rtol=1e-5)
    with capture_attention(attn):
        torch.testing.assert_close(attn(x, mask), expected, atol=1e-6, rtol=1e-5)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_dot_attention_with_feature_norm_is_permutation_equivariant(n: int, seed: int) -> None:
    torch.manual_seed(seed)
    attn = perturb_(MultiHeadSelfAttention(5, n_heads=2, head_dim=4, qkv_norm="features"))
    x = torch.randn(2, n, 5, dtype=torch.float64)
    attn = attn.double()
    perm = torch.randperm(n)
    torch.testing.assert_close(attn(x[:, perm]), attn(x)[:, perm], atol=1e-10, rtol=1e-10)


def test_token_norm_has_the_books_parameter_count() -> None:
    # Book listing 10.2: 3 LayerNorms over (N, d) = (256, 36), each with weight and bias.
    attn = MultiHeadSelfAttention(32, 1, 36, n_tokens=256, qkv_norm="tokens")
    assert sum(p.numel() for p in attn.norms.parameters()) == 3 * 2 * 256 * 36
    assert attn.out_features == 36


def test_invalid_arguments_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="compatibility must be"):
        MultiHeadSelfAttention(4, compatibility="cosine")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="qkv_norm must be"):
        MultiHeadSelfAttention(4, qkv_norm="batch")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs n_tokens"):
        MultiHeadSelfAttention(4, compatibility="additive")
    with pytest.raises(ValueError, match="needs n_tokens"):
        MultiHeadSelfAttention(4, qkv_norm="tokens")


def test_capture_names_repeated_calls_and_restores_fast_path() -> None:
    torch.manual_seed(0)
    model = nn.ModuleDict({"a": MultiHeadSelfAttention(4, 1, 4), "b": nn.Linear(4, 4)})
    x = torch.randn(1, 3, 4)
    with capture_attention(model) as maps:
        model["a"](x)
        model["a"](x)
    assert sorted(maps) == ["a[0]", "a[1]"]
    assert not model["a"].capturing
    with capture_attention(model) as maps:
        pass
    assert maps == {}


def test_record_refuses_wrong_rank() -> None:
    class Bad(AttentionCapture, nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.record(x)
            return x

    bad = Bad()
    bad(torch.zeros(2, 3))  # not capturing: nothing recorded, no check
    expected = r"expected \(batch, head, query, key\)"
    with pytest.raises(ValueError, match=expected), capture_attention(bad):
        bad(torch.zeros(2, 3))


def test_sinusoidal_table_values() -> None:
    table = sinusoidal_table(50, 8)
    p = torch.arange(50.0)
    for i in range(4):
        freq = 10_000 ** (-2 * i / 8)
        torch.testing.assert_close(table[:, 2 * i], torch.sin(p * freq))
        torch.testing.assert_close(table[:, 2 * i + 1], torch.cos(p * freq))
    assert sinusoidal_table(3, 5).shape == (3, 5)
    assert len({tuple(r.tolist()) for r in sinusoidal_table(400, 8)}) == 400  # rows distinct
    with pytest.raises(ValueError, match="n_positions >= 1"):
        sinusoidal_table(0, 4)


def test_append_coordinates_matches_the_book() -> None:
    x = torch.randn(2, 3, 4, 5)
    out = append_coordinates(x)
    torch.testing.assert_close(out[:, :3], x)
    xs = torch.arange(5.0).repeat(4, 1) / 5  # book: xcoords = arange(cW).repeat(cH, 1) / cW
    ys = torch.arange(4.0).repeat(5, 1).T / 4
    torch.testing.assert_close(out[0, 3], xs)
    torch.testing.assert_close(out[1, 4], ys)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_heads": 0}, "n_heads must be a positive integer, got 0"),
        ({"head_dim": -4}, "head_dim must be a positive integer, got -4"),
        ({"in_features": 0}, "in_features must be a positive integer"),
        ({"n_heads": 2.0}, "n_heads must be a positive integer"),
    ],
)
def test_non_positive_sizes_are_refused_at_construction(kwargs: dict, message: str) -> None:
    from attn_policies.attention import MultiHeadSelfAttention

    with pytest.raises(ValueError, match=message):
        MultiHeadSelfAttention(**{"in_features": 8, **kwargs})


# --------------------------------------------------------------------- attend: the one helper


class Probe(AttentionCapture, nn.Module):
    """A bare attention layer: :func:`attend` with a scoring function we can count."""

    def __init__(self, max_capture_bytes: int | None = None) -> None:
        super().__init__()
        self.max_capture_bytes = max_capture_bytes
        self.scored = 0

    def softmax(self, q: torch.Tensor, k: torch.Tensor, mask=None) -> torch.Tensor:
        self.scored += 1
        scores = q @ k.transpose(-2, -1) * 0.5
        if mask is not None:
            scores = (
                scores.masked_fill(~mask, float("-inf"))
                if mask.dtype == torch.bool
                else scores + mask
            )
        return scores.softmax(-1)


@pytest.mark.parametrize("mask_kind", [None, "bool", "float"])
def test_attend_fused_and_explicit_branches_agree(mask_kind: str | None) -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 5, 4), torch.randn(3, 2, 6, 4), torch.randn(3, 2, 6, 7)
    mask = {
        None: None,
        "bool": (torch.rand(5, 6) > 0.3) | torch.eye(5, 6, dtype=torch.bool),
        "float": torch.randn(5, 1),
    }[mask_kind]
    layer = Probe()
    scoring = lambda q, k: layer.softmax(q, k, mask)  # noqa: E731
    fused = attend(layer, q, k, v, scoring, scale=0.5, mask=mask)
    assert layer.scored == 0  # the fused kernel never calls the scoring function
    with capture_attention(layer) as maps:
        explicit = attend(layer, q, k, v, scoring, scale=0.5, mask=mask)
    assert layer.scored == 1
    torch.testing.assert_close(fused, explicit, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(maps["self"], layer.softmax(q, k, mask))
    # fused=False: always explicit, recorded only while capturing
    torch.testing.assert_close(attend(layer, q, k, v, scoring, fused=False), explicit)


def test_attend_uses_the_layers_own_kernel_and_apply() -> None:
    torch.manual_seed(0)
    layer = Probe()
    q, k = torch.randn(2, 4, 3), torch.randn(2, 4, 3)
    sums = lambda q, k, v: layer.softmax(q, k).sum(-2) + 0.0  # noqa: E731
    out = attend(layer, q, k, None, layer.softmax, fused=sums, apply=lambda w: w.sum(-2))
    with capture_attention(layer) as maps:
        captured = attend(layer, q, k, None, layer.softmax, fused=sums, apply=lambda w: w.sum(-2))
    torch.testing.assert_close(out, captured)
    assert maps["self"].shape == (2, 1, 4, 4)  # 3-D weights are recorded as one head


def test_attend_over_max_capture_bytes_warns_and_takes_the_fused_path() -> None:
    layer = Probe(max_capture_bytes=4 * 5 * 5 - 1)  # one float32 5x5 map is 100 bytes
    q = k = v = torch.randn(1, 1, 5, 2)
    with pytest.warns(UserWarning, match="not recording"), capture_attention(layer) as maps:
        attend(layer, q, k, v, layer.softmax, scale=0.5)
    assert maps == {} and layer.scored == 0
    layer.max_capture_bytes = 100
    with capture_attention(layer) as maps:
        attend(layer, q, k, v, layer.softmax, scale=0.5)
    assert maps["self"].shape == (1, 1, 5, 5)
