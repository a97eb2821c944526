"""The CarRacing agents built on patch voting (seed 001 E6, and Tang et al. 2020).

* :class:`AttentionAgent` (Tang et al. 2020): :class:`~attn_policies.patch_voting.PatchVoting`
  on 7x7 patches, the top-``K`` centres drive an LSTM controller.
* :class:`AttentionNeuronVotingAgent` (Tang & Ha 2021, E6): the AttentionNeuron turns shuffled
  patches into a grid of codes, the same voting picks the top ``K`` codes.
* :func:`carracing_action` maps their ``[-1, 1]^3`` outputs to CarRacing's action box.

Top-K selection carries no gradient, so these agents are trained with CMA-ES and expose a
flat parameter vector (:class:`~attn_policies._es_support.FlatParameters`) whose layout is
module registration order, also the layout of the authors' ``get_params``
(``google/brain-tokyo-workshop``, ``AttentionNeuron/solutions``). Where the seeds are silent
the choices follow the authors' public code and are stated in the class docstrings.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol, TypeVar

import numpy as np
import torch
from einops import rearrange
from torch import Tensor, nn

from attn_policies._es_support import FlatParameters, lstm_cell
from attn_policies.attention_neuron import VisionAttentionNeuron
from attn_policies.checks import require_sizes
from attn_policies.patch_voting import PatchVoting, Votes, grid_centres, image_patches

__all__ = [
    "AttentionAgent",
    "AttentionNeuronVotingAgent",
    "LSTMState",
    "PatchNeuron",
    "VotingAgentState",
    "carracing_action",
]

ArrayT = TypeVar("ArrayT", Tensor, np.ndarray)


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
        require_sizes(
            image_size=image_size,
            patch_size=patch_size,
            stride=stride,
            in_channels=in_channels,
            hidden_size=hidden_size,
            action_dim=action_dim,
        )
        if patch_size > image_size:
            raise ValueError(
                f"need patch_size <= image_size, got patch_size={patch_size}, "
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
        dtype, at = like.dtype, like.device if device is None else device
        return VotingAgentState(
            h=torch.zeros(batch, self.hidden_size, dtype=dtype, device=at),
            c=torch.zeros(batch, self.hidden_size, dtype=dtype, device=at),
            m_prev=torch.zeros(batch, self.grid_size**2, self.code_dim, dtype=dtype, device=at),
            a_prev=torch.zeros(batch, self.action_dim, dtype=dtype, device=at),
            alpha=torch.zeros(batch, 1, dtype=dtype, device=at),
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
