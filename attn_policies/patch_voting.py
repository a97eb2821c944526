"""AttentionAgent's self-attention patch voting and the CarRacing agents built on it (seed 001).

Tang et al. 2020 ("Neuroevolution of self-interpretable agents") cut the screen into patches,
let every patch vote for every other through a single-head self-attention matrix, keep only
the ``K`` patches with the most votes and drive an LSTM controller with nothing but their
centre coordinates. Tang & Ha 2021 (seed 001, experiment E6) put their AttentionNeuron in
front of it: the neuron turns 256 shuffled 6x6x4 patches into a 32x32 grid of 16-channel
codes, and the same voting, with patch size 1, picks the top ``K`` codes.

Top-K selection is a sort: the selected coordinates carry no gradient back to the voting
weights (they are constants indexed by the winners), so these agents are meant for
gradient-free training such as CMA-ES, as in both papers. The agents therefore expose
:attr:`~FlatParameters.num_parameters` and a flat parameter vector
(:meth:`~FlatParameters.get_flat_parameters` / :meth:`~FlatParameters.set_flat_parameters`)
whose layout is module registration order, which is also the layout of the authors'
``get_params`` (``google/brain-tokyo-workshop``, ``AttentionNeuron/solutions``).

Where the seeds are silent the choices follow the authors' public code and are stated in
the class docstrings.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Protocol, TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from attn_policies._es_support import FlatParameters, lstm_cell
from attn_policies.attention import AttentionCapture
from attn_policies.neuron import VisionAttentionNeuron

__all__ = [
    "AttentionAgent",
    "AttentionNeuronVotingAgent",
    "FlatParameters",
    "LSTMState",
    "PatchNeuron",
    "PatchVoting",
    "Votes",
    "VotingAgentState",
    "carracing_action",
    "grid_centres",
    "image_patches",
]

ArrayT = TypeVar("ArrayT", Tensor, np.ndarray)


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
        if not 1 <= top_k <= len(centres):
            raise ValueError(f"top_k must be in [1, N={len(centres)}], got {top_k}")
        if patch_dim < 1 or query_dim < 1 or block_elements < 1:
            raise ValueError(
                f"patch_dim, query_dim and block_elements must be >= 1, got "
                f"{patch_dim}, {query_dim}, {block_elements}"
            )
        self.patch_dim, self.query_dim, self.top_k = patch_dim, query_dim, top_k
        self.scale = 1.0 / math.sqrt(query_dim) if scale is None else float(scale)
        self.block_elements = block_elements
        self.query = nn.Linear(patch_dim, query_dim, bias=bias)
        self.key = nn.Linear(patch_dim, query_dim, bias=bias)
        self.register_buffer("centres", centres, persistent=False)

    @property
    def n_patches(self) -> int:
        return len(self.centres)

    def attention(self, tokens: Tensor) -> Tensor:
        """The full voting matrix ``A`` of shape ``(B, N, N)``; row ``i`` is patch ``i``'s votes."""
        scores = self.query(tokens) @ self.key(tokens).transpose(-2, -1)
        return (scores * self.scale).softmax(dim=-1)

    def vote(self, tokens: Tensor) -> Tensor:
        """Votes ``(B, N)``: the column sums of :meth:`attention`."""
        if self.capturing:
            weights = self.attention(tokens)
            self.record(weights.unsqueeze(1))
            return weights.sum(dim=-2)
        q, k = self.query(tokens) * self.scale, self.key(tokens).transpose(-2, -1)
        b, n = tokens.shape[:2]
        block = max(1, self.block_elements // max(1, b * n))
        return sum(
            ((q[:, i : i + block] @ k).softmax(dim=-1).sum(dim=-2) for i in range(0, n, block)),
            start=tokens.new_zeros(b, n),
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


class LSTMState(NamedTuple):
    """Recurrent state of :class:`AttentionAgent`: LSTM hidden and cell, each ``(B, H)``."""

    h: Tensor
    c: Tensor


class AttentionAgent(FlatParameters, nn.Module):
    """AttentionAgent for CarRacing (Tang et al. 2020): patch voting, top-K centres, LSTM.

    A 96x96 RGB frame is cut into 7x7 patches at stride 4 (23x23 = 529 patches of 147
    values, layout of :class:`attn_envs.PatchObservation`), :class:`PatchVoting` (``d = 4``)
    keeps the ``K = 10`` most voted patches, their (row, col) centres divided by 96 (20
    values, most votes first, as ``(r1, c1, r2, c2, ...)``) drive ``LSTMCell(20 -> 16)``, and
    ``Linear(16 -> 3) + tanh`` gives the action in ``[-1, 1]^3`` (map it with
    :func:`carracing_action`).

    Parameters: 3,667, the paper's count: Q and K ``2 x (147 x 4 + 4) = 1,184``; the LSTM
    ``4 x 16 x (20 + 16) = 2,304`` weights plus PyTorch's two bias vectors ``b_ih`` and
    ``b_hh`` (``2 x 64 = 128``), 2,432 (with a single LSTM bias it would be 3,603);
    the output layer ``16 x 3 + 3 = 51``. The authors' code uses the same PyTorch cell.

    Inputs may be frames ``(B, 96, 96, 3)`` or ``(B, 3, 96, 96)``, or pre-patched tokens
    ``(B, 529, 147)`` from ``PatchObservation(patch_size=7, stride=4, crop=True)``. Integer
    inputs (raw ``uint8`` screens) are divided by 255 (the authors' ``ToTensor``); float
    inputs are taken as already in ``[0, 1]``, as SB3 preprocesses them.

    ``state=None`` starts from zeros (:meth:`initial_state`). After every call
    :attr:`last_votes` holds the detached :class:`Votes` (winning indices, centres and votes)
    for plotting (not under ``torch.func.vmap``, where it would hold batched tensors).

    Args:
        image_size: side of the square screen.
        patch_size: side of each patch.
        stride: step between patch origins.
        in_channels: channels per pixel.
        query_dim: voting query/key size ``d``.
        top_k: number of attended patches ``K``.
        hidden_size: LSTM size.
        action_dim: number of action outputs.
        scale: voting score factor (see :class:`PatchVoting`); ``None`` is ``1/sqrt(d)``.

    Shapes:
        ``forward(x, state: LSTMState | None) -> (action (B, action_dim), LSTMState)``.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> agent = AttentionAgent()
        >>> agent.num_parameters
        3667
        >>> state = agent.initial_state(4)
        >>> action, state = agent(torch.randint(0, 256, (4, 96, 96, 3), dtype=torch.uint8), state)
        >>> action.shape, state.h.shape, agent.last_votes.indices.shape
        (torch.Size([4, 3]), torch.Size([4, 16]), torch.Size([4, 10]))
    """

    def __init__(
        self,
        image_size: int = 96,
        patch_size: int = 7,
        stride: int = 4,
        in_channels: int = 3,
        query_dim: int = 4,
        top_k: int = 10,
        hidden_size: int = 16,
        action_dim: int = 3,
        scale: float | None = None,
    ) -> None:
        super().__init__()
        if patch_size > image_size or stride < 1:
            raise ValueError(
                f"need 1 <= stride and patch_size <= image_size, got patch_size={patch_size}, "
                f"stride={stride}, image_size={image_size}"
            )
        self.image_size, self.patch_size, self.stride = image_size, patch_size, stride
        self.in_channels, self.hidden_size = in_channels, hidden_size
        side = (image_size - patch_size) // stride + 1
        self.grid_shape = (side, side)
        self.voting = PatchVoting(
            in_channels * patch_size**2,
            grid_centres(self.grid_shape, (image_size, image_size), patch_size, stride),
            query_dim=query_dim,
            top_k=top_k,
            scale=scale,
        )
        self.lstm = nn.LSTMCell(2 * top_k, hidden_size)
        self.head = nn.Linear(hidden_size, action_dim)
        self.last_votes: Votes | None = None

    def initial_state(self, batch: int, device: torch.device | str | None = None) -> LSTMState:
        """Zero LSTM state for ``batch`` agents."""
        dtype = self.head.weight.dtype
        device = self.head.weight.device if device is None else device
        zeros = torch.zeros(batch, self.hidden_size, dtype=dtype, device=device)
        return LSTMState(zeros, zeros.clone())

    def tokens(self, x: Tensor) -> Tensor:
        """Patch tokens ``(B, N, P * P * C)`` from frames (either layout) or tokens."""
        n, dim = self.voting.n_patches, self.voting.patch_dim
        s, c = self.image_size, self.in_channels
        values = x.to(self.head.weight.dtype)
        if not x.is_floating_point():
            values = values / 255.0
        if x.dim() == 3 and x.shape[1:] == (n, dim):
            return values
        if x.dim() == 4 and x.shape[1:] == (s, s, c):
            values = rearrange(values, "b h w c -> b c h w")
        elif not (x.dim() == 4 and x.shape[1:] == (c, s, s)):
            raise ValueError(
                f"AttentionAgent expects frames (B, {s}, {s}, {c}) or (B, {c}, {s}, {s}) or "
                f"tokens (B, {n}, {dim}), got {tuple(x.shape)}"
            )
        return image_patches(values, self.patch_size, self.stride)

    def forward(self, x: Tensor, state: LSTMState | None = None) -> tuple[Tensor, LSTMState]:
        if state is None:
            state = self.initial_state(len(x), x.device)
        votes = self.voting(self.tokens(x))
        self.last_votes = Votes(*(t.detach() for t in votes))
        h, c = lstm_cell(self.lstm, votes.centres.flatten(1), *state)
        return torch.tanh(self.head(h)), LSTMState(h, c)


class PatchNeuron(Protocol):
    """What :class:`AttentionNeuronVotingAgent` needs from its AttentionNeuron layer.

    ``neuron(tokens (B, N, patch_dim), prev_action (B, A)) -> m_t (B, M, d_v)``, invariant to
    the order of the ``N`` tokens, with ``M`` and ``d_v`` fixed by the layer.
    """

    def __call__(self, tokens: Tensor, prev_action: Tensor) -> Tensor: ...


class VotingAgentState(NamedTuple):
    """Recurrent state of :class:`AttentionNeuronVotingAgent`.

    Attributes:
        h: LSTM hidden ``(B, H)``.
        c: LSTM cell ``(B, H)``.
        m_prev: the previous (smoothed) latent code ``(B, M, d_v)``.
        a_prev: the previous raw action in ``[-1, 1]^A``, ``(B, A)``.
        alpha: the smoothing weight for the coming step, ``(B, 1)``; computed at the end of
            each step from ``[h_t, a_t]`` and 0 at the start of an episode (the authors' code).
    """

    h: Tensor
    c: Tensor
    m_prev: Tensor
    a_prev: Tensor
    alpha: Tensor


class AttentionNeuronVotingAgent(FlatParameters, nn.Module):
    """E6: AttentionNeuron on shuffled CarRacing patches + AttentionAgent voting and LSTM.

    Per step, with batched recurrent state ``(h, c, m_prev, a_prev, alpha)``:

    1. ``m_t = neuron(tokens, a_prev)``: 256 shuffled 6x6x4 patches (tokens of 144 values,
       from ``PatchObservation(patch_size=6, blank_bottom=12)`` on a 4-frame grey stack)
       become ``M = 1024`` codes of ``d_v = 16``, a 32x32x16 "image" in row-major order.
    2. Smoothing against jitter: ``m_t = (1 - alpha) m_t + alpha m_prev``, where
       ``alpha = g([h_{t-1}, a_{t-1}])`` and ``g`` is ``Linear(16 + 3 -> 16) + tanh,
       Linear(16 -> 1) + sigmoid`` (the seed says a 2-layer FNN with 16 hidden units and a
       sigmoid output; tanh hidden units are the authors' code). As in that code, ``alpha``
       is computed at the end of a step and is 0 on the first step of an episode.
    3. :class:`PatchVoting` with patch size 1: each of the 1024 cells is a patch of 16 values,
       ``d = 4``, top ``K = 10`` cells; their (row, col) / 32 (20 values) feed
       ``LSTMCell(20 -> 16)`` and ``Linear(16 -> 3) + tanh``. Following the authors' code the
       voting scores are not scaled (``scale=1.0``) and cell ``(i, j)`` sits at
       ``(i / 32, j / 32)``.

    Actions are raw ``[-1, 1]^3`` (also what the neuron sees as ``a_prev``); map them to
    CarRacing's steer/gas/brake with :func:`carracing_action`. The top-K step is not
    differentiable, so train with CMA-ES (``num_parameters``, flat parameter vector).

    Parameters: the default neuron 4,256 (``W_q`` 8x16, ``W_k`` 111x16, ``W_v`` 144x16, with
    biases), voting ``2 x (16 x 4 + 4) = 136``, LSTM 2,432, head 51, gate
    ``19 x 16 + 16 + 16 + 1 = 337``: 7,212, the size of the authors' ``PIAttentionAgent``
    (the seed gives no count). Registration order (neuron, voting, LSTM, head, gate) is the
    authors' flat layout for the last four; the neuron's own layout is its business.

    After every call :attr:`last_votes` holds the detached :class:`Votes` for plotting (not
    under ``torch.func.vmap``, where it would hold batched tensors).

    Args:
        neuron: the AttentionNeuron layer, any module following :class:`PatchNeuron` whose
            output is ``(B, grid_size**2, code_dim)``; ``None`` builds
            ``VisionAttentionNeuron.car_racing(action_dim=action_dim,
            n_queries=grid_size**2, value_dim=code_dim)`` (6x6 patches of 4 frames,
            ``W_q`` 8x16, ``W_k`` 111x16, ``W_v`` 144x16, LayerNorms without parameters).
        grid_size: side of the square code grid (``M = grid_size**2``).
        code_dim: ``d_v``, size of each code.
        action_dim: number of actions ``A``.
        query_dim: voting query/key size ``d``.
        top_k: number of attended cells ``K``.
        hidden_size: LSTM size (also the gate's hidden size).
        scale: voting score factor (see :class:`PatchVoting`).

    Shapes:
        ``forward(tokens (B, N, patch_dim), state) -> (action (B, A), VotingAgentState)``;
        ``N`` may change from call to call (occlusion), the order of the tokens is irrelevant.
        Integer (raw ``uint8``) tokens are divided by 255; float tokens are taken as in
        ``[0, 1]``.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> agent = AttentionNeuronVotingAgent()
        >>> agent.num_parameters
        7212
        >>> state = agent.initial_state(2)
        >>> tokens = torch.rand(2, 256, 144)  # 16x16 patches of 6x6 pixels x 4 frames
        >>> action, state = agent(tokens, state)
        >>> action.shape, state.m_prev.shape, agent.last_votes.indices.shape
        (torch.Size([2, 3]), torch.Size([2, 1024, 16]), torch.Size([2, 10]))
        >>> shuffled, _ = agent(tokens[:, torch.randperm(256)], agent.initial_state(2))
        >>> bool(torch.allclose(agent(tokens)[0], shuffled, atol=1e-6))
        True
        >>> carracing_action(action).shape
        torch.Size([2, 3])
    """

    def __init__(
        self,
        neuron: nn.Module | None = None,
        grid_size: int = 32,
        code_dim: int = 16,
        action_dim: int = 3,
        query_dim: int = 4,
        top_k: int = 10,
        hidden_size: int = 16,
        scale: float | None = 1.0,
    ) -> None:
        super().__init__()
        if neuron is None:
            neuron = VisionAttentionNeuron.car_racing(
                action_dim=action_dim, n_queries=grid_size**2, value_dim=code_dim
            )
        if not isinstance(neuron, nn.Module):
            raise TypeError(
                f"neuron must be an nn.Module mapping (tokens, prev_action) to (B, M, d_v), "
                f"got {type(neuron).__name__}"
            )
        self.grid_size, self.code_dim = grid_size, code_dim
        self.action_dim, self.hidden_size = action_dim, hidden_size
        self.neuron = neuron
        self.voting = PatchVoting(
            code_dim,
            grid_centres((grid_size, grid_size), (grid_size, grid_size)),
            query_dim=query_dim,
            top_k=top_k,
            scale=scale,
        )
        self.lstm = nn.LSTMCell(2 * top_k, hidden_size)
        self.head = nn.Linear(hidden_size, action_dim)
        self.gate = nn.Sequential(
            nn.Linear(hidden_size + action_dim, hidden_size),
            nn.Tanh(),
            nn.Linear(hidden_size, 1),
            nn.Sigmoid(),
        )
        self.last_votes: Votes | None = None

    def initial_state(
        self, batch: int, device: torch.device | str | None = None
    ) -> VotingAgentState:
        """Zero state for ``batch`` agents (``alpha = 0``: no smoothing on the first step)."""
        like = self.head.weight
        kw = {"dtype": like.dtype, "device": like.device if device is None else device}
        return VotingAgentState(
            h=torch.zeros(batch, self.hidden_size, **kw),
            c=torch.zeros(batch, self.hidden_size, **kw),
            m_prev=torch.zeros(batch, self.grid_size**2, self.code_dim, **kw),
            a_prev=torch.zeros(batch, self.action_dim, **kw),
            alpha=torch.zeros(batch, 1, **kw),
        )

    def forward(
        self, tokens: Tensor, state: VotingAgentState | None = None
    ) -> tuple[Tensor, VotingAgentState]:
        if state is None:
            state = self.initial_state(len(tokens), tokens.device)
        if not tokens.is_floating_point():  # raw uint8 patches, as AttentionAgent takes them
            tokens = tokens.to(self.head.weight.dtype) / 255.0
        m = self.neuron(tokens, state.a_prev)
        expected = (len(tokens), self.grid_size**2, self.code_dim)
        if m.shape != expected:
            raise ValueError(f"the neuron returned {tuple(m.shape)}, expected {expected}")
        alpha = state.alpha.unsqueeze(-1)
        m = (1 - alpha) * m + alpha * state.m_prev
        votes = self.voting(m)
        self.last_votes = Votes(*(t.detach() for t in votes))
        h, c = lstm_cell(self.lstm, votes.centres.flatten(1), state.h, state.c)
        action = torch.tanh(self.head(h))
        alpha_next = self.gate(torch.cat([h, action], dim=-1))
        return action, VotingAgentState(h, c, m, action, alpha_next)


def carracing_action(action: ArrayT) -> ArrayT:
    """Map raw actions in ``[-1, 1]^3`` to CarRacing's steer ``[-1, 1]``, gas and brake ``[0, 1]``.

    ``steer = a0``, ``gas = (a1 + 1) / 2``, ``brake = (a2 + 1) / 2`` (the authors'
    ``act * (high - low) / 2 + (high + low) / 2``); inputs are clipped to ``[-1, 1]`` first.
    Works on tensors and arrays of shape ``(..., 3)`` and returns the same type.

    Example:
        >>> carracing_action(np.array([-1.0, 0.0, 1.0]))
        array([-1. ,  0.5,  1. ])
        >>> carracing_action(torch.tensor([[0.5, -1.0, -1.0]]))
        tensor([[0.5000, 0.0000, 0.0000]])
    """
    if action.shape[-1] != 3:
        raise ValueError(f"CarRacing actions have 3 values, got shape {tuple(action.shape)}")
    half_range, mid = [1.0, 0.5, 0.5], [0.0, 0.5, 0.5]
    if isinstance(action, Tensor):
        return action.clamp(-1, 1) * action.new_tensor(half_range) + action.new_tensor(mid)
    a = np.clip(np.asarray(action, dtype=np.result_type(action.dtype, np.float32)), -1, 1)
    return a * np.asarray(half_range, a.dtype) + np.asarray(mid, a.dtype)
