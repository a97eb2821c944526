"""AttentionAgent's self-attention patch voting (seed 001 E6, Tang et al. 2020).

Tang et al. 2020 ("Neuroevolution of self-interpretable agents") cut the screen into patches,
let every patch vote for every other through a single-head self-attention matrix, keep only
the ``K`` patches with the most votes and drive an LSTM controller with nothing but their
centre coordinates. Tang & Ha 2021 (seed 001, experiment E6) put their AttentionNeuron in
front of it: the neuron turns 256 shuffled 6x6x4 patches into a 32x32 grid of 16-channel
codes, and the same voting, with patch size 1, picks the top ``K`` codes.

Top-K selection is a sort: the selected coordinates carry no gradient back to the voting
weights (they are constants indexed by the winners), so these agents are meant for
gradient-free training such as CMA-ES, as in both papers. The agents therefore expose
:class:`~attn_policies._es_support.FlatParameters`' ``num_parameters`` and a flat parameter
vector (``get_flat_parameters`` / ``set_flat_parameters``)
whose layout is module registration order, which is also the layout of the authors'
``get_params`` (``google/brain-tokyo-workshop``, ``AttentionNeuron/solutions``).

Where the seeds are silent the choices follow the authors' public code and are stated in
the class docstrings. The agents (:class:`AttentionAgent`, :class:`AttentionNeuronVotingAgent`,
:func:`carracing_action`) live in :mod:`attn_policies.patch_agents`.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from attn_policies.attention import AttentionCapture, attend
from attn_policies.checks import require_sizes

__all__ = ["PatchVoting", "Votes", "grid_centres", "image_patches"]


def grid_centres(
    grid_shape: tuple[int, int],
    image_shape: tuple[int, int],
    patch_size: int = 1,
    stride: int | None = None,
) -> Tensor:
    """Normalised (row, col) centres of a row-major patch grid, shape ``(rows * cols, 2)``.

    Patch ``(i, j)`` has its top-left pixel at ``(i * stride, j * stride)`` and its centre at
    ``+ patch_size // 2`` (the authors' convention); both coordinates are divided by the image
    height and width. AttentionAgent's 23x23 grid of 7x7 patches at stride 4 on a 96x96 screen
    gives ``(3 + 4 i) / 96``; a 32x32 grid of 1x1 "patches" gives ``i / 32``.

    Example:
        >>> c = grid_centres((23, 23), (96, 96), patch_size=7, stride=4)
        >>> c.shape, (c[0] * 96).tolist(), (c[24] * 96).tolist()
        (torch.Size([529, 2]), [3.0, 3.0], [7.0, 7.0])
        >>> (grid_centres((32, 32), (32, 32))[33] * 32).tolist()
        [1.0, 1.0]
    """
    stride = patch_size if stride is None else stride
    (rows, cols), (height, width) = grid_shape, image_shape
    offset = patch_size // 2
    r = (offset + stride * torch.arange(rows, dtype=torch.float32)) / height
    c = (offset + stride * torch.arange(cols, dtype=torch.float32)) / width
    return torch.stack(torch.meshgrid(r, c, indexing="ij"), dim=-1).reshape(-1, 2)


def image_patches(frames: Tensor, patch_size: int, stride: int | None = None) -> Tensor:
    """Cut ``(B, C, H, W)`` frames into row-major tokens ``(B, N, P * P * C)``.

    Each token is laid out ``(P, P, C)`` (channel last), the layout of
    :class:`attn_envs.PatchObservation` and of the authors' code, so pre-patched observations
    and frames cut here are interchangeable. The bottom/right remainder that does not fill a
    whole stride is dropped.

    Example:
        >>> image_patches(torch.zeros(2, 3, 96, 96), patch_size=7, stride=4).shape
        torch.Size([2, 529, 147])
    """
    channels = frames.shape[1]
    cols = F.unfold(frames, kernel_size=patch_size, stride=stride or patch_size)
    return rearrange(cols, "b (c p q) n -> b n (p q c)", c=channels, p=patch_size)


class Votes(NamedTuple):
    """Output of :class:`PatchVoting`.

    Attributes:
        centres: ``(B, K, 2)`` normalised (row, col) centres of the winners, most votes first.
        indices: ``(B, K)`` int64 indices of the winning patches (row-major), most votes first.
        votes: ``(B, N)`` column sums of the attention matrix; each row sums to ``N``.
    """

    centres: Tensor
    indices: Tensor
    votes: Tensor


class PatchVoting(AttentionCapture, nn.Module):
    """AttentionAgent's patch voting: self-attention column sums, then hard top-K.

    ``Q = X W_q + b_q`` and ``K = X W_k + b_k`` project every patch to ``query_dim`` values;
    ``A = softmax(scale * Q K^T)`` over keys is an ``N x N`` matrix whose row ``i`` is how
    patch ``i`` spreads one vote over all patches, so ``votes = A.sum(query axis)`` (the
    column sums) add up to ``N`` and rate each patch's importance. The ``top_k`` patches with
    the most votes win and are returned as indices and as their centre coordinates.

    Equal votes go to the lower patch index (a stable sort), so exactly tied patches, e.g.
    identical codes on the first CarRacing step when all frame differences are zero, give
    reproducible winners. Votes that differ by float noise only (~1e-7 relative) can still
    swap places when the input order changes.

    The top-K step is not differentiable: :attr:`Votes.centres` is a constant buffer indexed
    by the winners and carries no gradient to ``W_q``/``W_k`` (only :attr:`Votes.votes`
    does). Both papers train this with CMA-ES, which needs none.

    Q and K are two separate ``nn.Linear`` layers (query first), so the flat parameter layout
    matches the authors' ``SelfAttentionMatrix``. ``scale`` defaults to ``1/sqrt(query_dim)``
    (the AttentionNeuron repository's AttentionAgent); the original AttentionAgent repository
    divided by ``sqrt(patch_dim)`` and the E6 combination by nothing (``scale=1.0``). Under
    ES the choice only rescales the weights, but it matters for loading their checkpoints.

    Without :func:`~attn_policies.attention.capture_attention` the matrix is never held
    whole: it is built in blocks of query rows (at most ``block_elements`` scores each) whose
    column sums are accumulated, so memory stays bounded for large ``B x N x N`` (E6:
    ``N = 1024``). When capturing, the full matrix is materialised and recorded as
    ``(B, 1, N, N)``.

    Args:
        patch_dim: size of each patch token.
        centres: ``(N, 2)`` normalised (row, col) centre of every patch, row-major, e.g. from
            :func:`grid_centres`; stored as a (non-persistent) buffer.
        query_dim: size ``d`` of queries and keys (4 in both papers).
        top_k: number of winning patches ``K`` (10 in both papers).
        scale: factor on ``Q K^T``; ``None`` means ``1 / sqrt(query_dim)``.
        bias: whether the Q/K projections have biases (the authors' code: yes).
        block_elements: score elements per block on the fast path.

    Shapes:
        ``forward(tokens: (B, N, patch_dim)) -> Votes(centres (B, K, 2), indices (B, K),
        votes (B, N))``.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> voting = PatchVoting(147, grid_centres((23, 23), (96, 96), 7, 4))
        >>> out = voting(torch.rand(2, 529, 147))
        >>> out.centres.shape, out.indices.shape, round(out.votes.sum(-1)[0].item())
        (torch.Size([2, 10, 2]), torch.Size([2, 10]), 529)
    """

    centres: Tensor

    def __init__(
        self,
        patch_dim: int,
        centres: Tensor,
        query_dim: int = 4,
        top_k: int = 10,
        scale: float | None = None,
        bias: bool = True,
        block_elements: int = 1 << 22,
    ) -> None:
        super().__init__()
        centres = torch.as_tensor(centres, dtype=torch.float32)
        if centres.dim() != 2 or centres.shape[1] != 2:
            raise ValueError(f"centres must be (N, 2), got {tuple(centres.shape)}")
        require_sizes(
            top_k=top_k, patch_dim=patch_dim, query_dim=query_dim, block_elements=block_elements
        )
        if top_k > len(centres):
            raise ValueError(f"top_k must be in [1, N={len(centres)}], got {top_k}")
        self.patch_dim, self.query_dim, self.top_k = patch_dim, query_dim, top_k
        self.scale = 1.0 / math.sqrt(query_dim) if scale is None else float(scale)
        self.block_elements = block_elements
        self.query = nn.Linear(patch_dim, query_dim, bias=bias)
        self.key = nn.Linear(patch_dim, query_dim, bias=bias)
        self.register_buffer("centres", centres, persistent=False)

    @property
    def n_patches(self) -> int:
        return len(self.centres)

    def weights(self, q: Tensor, k: Tensor) -> Tensor:
        """The scoring function: ``softmax(scale * q k^T)`` over keys, ``(B, N, N)``.

        ``scale`` multiplies the ``(B, N, d)`` queries, not the ``N x N`` scores (cheaper).
        """
        return ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)

    def attention(self, tokens: Tensor) -> Tensor:
        """The full voting matrix ``A`` of shape ``(B, N, N)``; row ``i`` is patch ``i``'s votes."""
        return self.weights(self.query(tokens), self.key(tokens))

    def _blockwise_votes(self, q: Tensor, k: Tensor, v: object = None) -> Tensor:
        """Column sums of :meth:`weights` over blocks of query rows (never the whole matrix)."""
        b, n = q.shape[:2]
        block = max(1, self.block_elements // max(1, b * n))
        return sum(
            (self.weights(q[:, i : i + block], k).sum(dim=-2) for i in range(0, n, block)),
            start=q.new_zeros(b, n),
        )

    def vote(self, tokens: Tensor) -> Tensor:
        """Votes ``(B, N)``: the column sums of :meth:`attention`."""
        q, k = self.query(tokens), self.key(tokens)
        column_sums = functools.partial(torch.sum, dim=-2)
        return attend(
            self, q, k, None, self.weights, fused=self._blockwise_votes, apply=column_sums
        )

    def forward(self, tokens: Tensor) -> Votes:
        if tokens.dim() != 3 or tokens.shape[1:] != (self.n_patches, self.patch_dim):
            raise ValueError(
                f"PatchVoting expects tokens (B, {self.n_patches}, {self.patch_dim}), "
                f"got {tuple(tokens.shape)}"
            )
        votes = self.vote(tokens)
        indices = votes.sort(dim=-1, descending=True, stable=True).indices[:, : self.top_k]
        return Votes(self.centres[indices], indices, votes)
