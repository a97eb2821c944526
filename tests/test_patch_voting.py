"""Tests for attn_policies.patch_voting (self-attention patch voting, seed 001 E6)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor

from attn_envs import patchify
from attn_policies.attention import capture_attention
from attn_policies.patch_voting import PatchVoting, grid_centres, image_patches


def reference_votes(voting: PatchVoting, tokens: Tensor) -> tuple[Tensor, Tensor]:
    """The authors' loop, one sample at a time: softmax(Q K^T * s).sum(0), argsort desc."""
    votes, indices = [], []
    for x in tokens:
        a = torch.softmax(voting.query(x) @ voting.key(x).T * voting.scale, dim=-1)
        v = a.sum(dim=0)
        votes.append(v)
        indices.append(torch.argsort(v, descending=True)[: voting.top_k])
    return torch.stack(votes), torch.stack(indices)


# ---------------------------------------------------------------------------------- helpers


def test_grid_centres_match_the_authors_convention() -> None:
    c = grid_centres((23, 23), (96, 96), patch_size=7, stride=4)
    rows = torch.tensor([3 + 4 * i for i in range(23)], dtype=torch.float32) / 96
    torch.testing.assert_close(c[:, 0], rows.repeat_interleave(23))
    torch.testing.assert_close(c[:, 1], rows.repeat(23))
    c32 = grid_centres((32, 32), (32, 32))
    assert c32[32 * 5 + 7].tolist() == [5 / 32, 7 / 32]
    # non-square grid: row-major, rows then cols
    assert grid_centres((2, 3), (2, 4))[4].tolist() == [1 / 2, 1 / 4]


@pytest.mark.parametrize(("p", "s", "hw"), [(7, 4, 96), (6, 6, 96), (3, 2, 9)])
def test_image_patches_match_attn_envs_layout(p: int, s: int, hw: int) -> None:
    rng = np.random.default_rng(0)
    image = rng.random((hw, hw, 4)).astype(np.float32)
    n = (hw - p) // s + 1
    expected = patchify(image[: (n - 1) * s + p, : (n - 1) * s + p], p, s).reshape(n * n, -1)
    got = image_patches(torch.from_numpy(image).permute(2, 0, 1)[None], p, s)
    np.testing.assert_array_equal(got[0].numpy(), expected)


# ---------------------------------------------------------------------------------- voting


@settings(max_examples=12, deadline=None)
@given(
    n=st.integers(1, 40),
    dim=st.integers(1, 9),
    batch=st.integers(1, 3),
    k_frac=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**16),
)
def test_votes_sum_to_n_and_match_the_reference(n, dim, batch, k_frac, seed) -> None:
    torch.manual_seed(seed)
    k = max(1, round(k_frac * n))
    voting = PatchVoting(dim, torch.rand(n, 2), query_dim=4, top_k=k, block_elements=7)
    tokens = torch.randn(batch, n, dim)
    out = voting(tokens)
    assert out.centres.shape == (batch, k, 2)
    assert out.indices.shape == (batch, k)
    assert out.indices.dtype == torch.int64
    assert out.votes.shape == (batch, n)
    torch.testing.assert_close(out.votes.sum(-1), torch.full((batch,), float(n)))
    ref_votes, _ = reference_votes(voting, tokens)
    torch.testing.assert_close(out.votes, ref_votes)
    # winners hold the K largest votes, in decreasing order
    torch.testing.assert_close(out.votes.gather(1, out.indices), out.votes.topk(k).values)
    torch.testing.assert_close(out.centres, voting.centres[out.indices])


def test_top_k_picks_the_known_winners() -> None:
    # Every query is the same unit vector and key_j = (x_j, 0, 0, 0), so every row of A is
    # softmax(s * x) and patch j's votes are N * softmax(s * x)_j: ranked by x.
    n, k = 30, 10
    voting = PatchVoting(1, grid_centres((5, 6), (5, 6)), top_k=k)
    with torch.no_grad():
        voting.query.weight.zero_()
        voting.query.bias.copy_(torch.tensor([1.0, 0, 0, 0]))
        voting.key.weight.copy_(torch.tensor([[1.0], [0], [0], [0]]))
        voting.key.bias.zero_()
    x = torch.stack([torch.randperm(n, generator=torch.Generator().manual_seed(i)) for i in (0, 1)])
    out = voting(x.float().unsqueeze(-1))
    expected = torch.argsort(x, dim=1, descending=True)[:, :k]
    assert torch.equal(out.indices, expected)
    assert torch.equal(out.centres, voting.centres[expected])
    torch.testing.assert_close(out.votes, n * torch.softmax(x.float() / 2, dim=1))


def test_votes_are_what_a_patch_receives_not_what_it_gives() -> None:
    # One-hot tokens, so W_q / W_k columns are the patches' queries / keys. Patches 1 and 2
    # attend to patch 0; patch 0 attends to patch 1; nobody attends to patch 2.
    voting = PatchVoting(3, torch.rand(3, 2), query_dim=2, top_k=2, scale=1.0, bias=False)
    with torch.no_grad():
        voting.query.weight.copy_(torch.tensor([[0.0, 1, 1], [1, 0, 0]]))
        voting.key.weight.copy_(torch.tensor([[10.0, 0, 0], [0, 10, 0]]))
    out = voting(torch.eye(3)[None])
    assert out.indices.tolist() == [[0, 1]]
    torch.testing.assert_close(out.votes, torch.tensor([[2.0, 1.0, 0.0]]), atol=1e-3, rtol=0)


def test_capture_matches_fast_path_and_records_b_1_n_n() -> None:
    torch.manual_seed(0)
    voting = PatchVoting(5, torch.rand(50, 2), top_k=7, block_elements=300)  # 2 rows per block
    tokens = torch.randn(3, 50, 5)
    fast = voting(tokens)
    with capture_attention(voting) as maps:
        slow = voting(tokens)
    weights = maps["self"]
    assert weights.shape == (3, 1, 50, 50)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 1, 50))
    torch.testing.assert_close(weights.sum(-2)[:, 0], slow.votes)
    torch.testing.assert_close(fast.votes, slow.votes)
    assert torch.equal(fast.indices, slow.indices)
    assert not voting.capturing


def test_votes_are_differentiable_but_centres_are_not() -> None:
    torch.manual_seed(0)
    voting = PatchVoting(4, torch.rand(9, 2), top_k=3)
    out = voting(torch.randn(2, 9, 4))
    assert not out.centres.requires_grad
    (out.votes * torch.arange(9.0)).sum().backward()
    assert voting.query.weight.grad is not None and voting.key.weight.grad.abs().sum() > 0


def test_voting_validation() -> None:
    with pytest.raises(ValueError, match=r"centres must be \(N, 2\)"):
        PatchVoting(4, torch.rand(9, 3))
    with pytest.raises(ValueError, match="top_k"):
        PatchVoting(4, torch.rand(9, 2), top_k=10)
    voting = PatchVoting(4, torch.rand(9, 2), top_k=3)
    with pytest.raises(ValueError, match=r"tokens \(B, 9, 4\)"):
        voting(torch.rand(2, 8, 4))
