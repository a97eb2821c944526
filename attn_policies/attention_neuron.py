"""The AttentionNeuron layers of seed 001 (Tang & Ha), vector and vision.

Tang & Ha's AttentionNeuron feeds every element of the observation ("sensory neuron") through
the same small key network together with the previous action ``a_{t-1}``, and lets a fixed bank
of ``M`` sinusoidal queries attend over the ``N`` neurons. Permuting the inputs only permutes
the rows of K and V, so the ``M``-row output is exactly permutation invariant, and ``N`` can be
anything at call time.

* :class:`AttentionNeuron` -- vector observations (E3 CartPoleSwingUp, E4 Ant). ``f_k`` is an
  ``LSTMCell`` on ``[o_i, a_{t-1}]``, ``f_v(o_i) = o_i`` (``W_v = I``) and the output is
  ``m_t = tanh(sigma(Q W_q (K W_k)^T) o_t)``. As in the authors' code, ``sigma`` is ``tanh``
  applied to each score (not a softmax; the article's 0.5 output scaling for 10 inputs only
  makes sense for these unnormalised weights); ``"softmax"`` is available as an option.
* :class:`VisionAttentionNeuron` -- patch tokens (E5 Puzzle Pong, E6 CarRacing). Stateless:
  ``f_k`` is the flattened frame differences of a patch plus ``a_{t-1}``, ``f_v`` the
  layer-normalised patch, softmax attention, output ``LayerNorm(relu(A V))`` of shape
  ``(M, d_v)``.

The ES agents built on them are in :mod:`attn_policies.es_policies`, the SB3 extractors (and
how ``a_{t-1}`` and the key state reach them) in :mod:`attn_policies.neuron_extractors`.
The ES agents keep the true per-neuron LSTM state explicitly:
``state = policy.initial_state(batch, n_inputs)``; ``action, state = policy(obs, state)``.
The vision layer is stateless: the frame stack in each token carries the temporal signal.

Example:
    >>> _ = torch.manual_seed(0)
    >>> layer = AttentionNeuron(action_dim=1, n_queries=16)
    >>> obs, prev_action = torch.randn(4, 5), torch.zeros(4, 1)
    >>> m, state = layer(obs, prev_action)
    >>> m.shape, state.h.shape
    (torch.Size([4, 16]), torch.Size([4, 5, 8]))
    >>> perm = torch.randperm(5)
    >>> m_perm, _ = layer(obs[:, perm], prev_action)
    >>> bool(torch.allclose(m, m_perm, atol=1e-6))
    True
"""

from __future__ import annotations

import functools
import math
from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from attn_policies._es_support import lstm_cell
from attn_policies.attention import AttentionCapture, attend, sinusoidal_table
from attn_policies.checks import require_int, require_sizes

__all__ = [
    "AttentionActivation",
    "AttentionNeuron",
    "NeuronState",
    "VisionAttentionNeuron",
    "zero_rows",
]

AttentionActivation = Literal["tanh", "softmax"]


class NeuronState(NamedTuple):
    """LSTM state of the key network, one row per (batch, input element): ``(B, N, hidden)``."""

    h: Tensor
    c: Tensor


def zero_rows(x: Tensor, done: Tensor) -> Tensor:
    """``x`` with the batch rows where ``done`` is True set to zero (not in place)."""
    mask = done.to(device=x.device, dtype=torch.bool).reshape(-1, *([1] * (x.dim() - 1)))
    return torch.where(mask, torch.zeros((), dtype=x.dtype, device=x.device), x)


class AttentionNeuron(AttentionCapture, nn.Module):
    """Permutation-invariant layer for vector observations (seed 001, E3 / E4).

    Each input element ``o_i`` and the previous action go through a shared
    ``LSTMCell(1 + action_dim -> key_hidden)`` (one call over all ``B * N`` rows), giving keys
    ``K = h W_k``. The queries are a fixed sinusoidal table ``Q`` (``n_queries x query_dim``, a
    buffer) times ``W_q``. With ``W_v = I``:
    ``m_t = tanh(output_scale * sigma(scale * Q W_q (h W_k)^T) o_t)``, shape ``(B, M)``.

    Defaults follow the authors' ``AttentionNeuronLayer`` (bias and ``1/sqrt(msg_dim)``
    scaling on, as in their Ant agent); their CartPole agent turns both off (see
    :meth:`AttentionNeuronPolicy.cartpole`). ``sigma = tanh`` materialises the small
    ``(B, M, N)`` weight tensor on every call (there is no fused kernel for it);
    ``sigma = softmax`` takes ``scaled_dot_product_attention`` unless capturing.

    Args:
        action_dim: size ``|A|`` of the previous-action feature (0 for none).
        n_queries: number of output codes ``M``.
        query_dim: width of the sinusoidal query table.
        key_hidden: hidden size of the key LSTM.
        msg_dim: width ``d_q`` of the projected queries and keys.
        bias: bias in ``W_q`` and ``W_k``.
        scale: divide the scores by ``sqrt(msg_dim)``.
        attention: ``"tanh"`` (the article's ``sigma``) or ``"softmax"`` over the N inputs.
        output_scale: multiplies ``sigma(.) o_t`` before the final tanh. The article ran its
            5-input CartPole agent on 10 inputs with the output scaled by 0.5; applied before
            the tanh, 0.5 makes duplicated inputs reproduce the 5-input output exactly.

    Shapes:
        ``forward(obs: (B, N), prev_action: (B, A) | None, state: NeuronState | None) ->
        (m: (B, M), NeuronState of (B, N, key_hidden))``; a ``None`` state is the zero state,
        a ``None`` action is zeros. Captured weights: ``(B, 1, M, N)``.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> layer = AttentionNeuron(action_dim=8, n_queries=32)
        >>> state = layer.initial_state(batch=3, n_inputs=28)
        >>> m, state = layer(torch.randn(3, 28), torch.zeros(3, 8), state)
        >>> m.shape, sum(p.numel() for p in layer.parameters())
        (torch.Size([3, 32]), 1184)
    """

    queries: Tensor  # a buffer (register_buffer below): typed for attribute access

    def __init__(
        self,
        action_dim: int,
        n_queries: int = 16,
        query_dim: int = 8,
        key_hidden: int = 8,
        msg_dim: int = 32,
        bias: bool = True,
        scale: bool = True,
        attention: AttentionActivation = "tanh",
        output_scale: float = 1.0,
    ) -> None:
        super().__init__()
        require_sizes(
            n_queries=n_queries, query_dim=query_dim, key_hidden=key_hidden, msg_dim=msg_dim
        )
        require_int(action_dim, "action_dim", minimum=0)
        if attention not in ("tanh", "softmax"):
            raise ValueError(f"attention must be 'tanh' or 'softmax', got {attention!r}")
        self.action_dim, self.n_queries, self.key_hidden = action_dim, n_queries, key_hidden
        self.attention = attention
        self.score_scale = 1.0 / math.sqrt(msg_dim) if scale else 1.0
        self.output_scale = output_scale
        self.register_buffer("queries", sinusoidal_table(n_queries, query_dim), persistent=False)
        self.key_net = nn.LSTMCell(1 + action_dim, key_hidden)
        self.query_proj = nn.Linear(query_dim, msg_dim, bias=bias)
        self.key_proj = nn.Linear(key_hidden, msg_dim, bias=bias)

    def initial_state(self, batch: int, n_inputs: int) -> NeuronState:
        """The zero key state for ``batch`` rows of ``n_inputs`` neurons."""
        ref = self.query_proj.weight
        zeros = torch.zeros(batch, n_inputs, self.key_hidden, dtype=ref.dtype, device=ref.device)
        return NeuronState(zeros, zeros.clone())

    @staticmethod
    def reset_state(state: NeuronState, done: Tensor) -> NeuronState:
        """Zero the state of the batch rows where ``done`` (shape ``(B,)``) is True."""
        return NeuronState(zero_rows(state.h, done), zero_rows(state.c, done))

    def _check(self, obs: Tensor, prev_action: Tensor | None) -> Tensor:
        if obs.dim() != 2 or obs.shape[1] < 1:
            raise ValueError(f"obs must be (batch, n_inputs) with n_inputs >= 1, got {obs.shape}")
        if prev_action is None:
            return obs.new_zeros(obs.shape[0], self.action_dim)
        if prev_action.shape != (obs.shape[0], self.action_dim):
            raise ValueError(
                f"prev_action must be (batch, {self.action_dim}) = "
                f"{(obs.shape[0], self.action_dim)}, got {tuple(prev_action.shape)}"
            )
        return prev_action

    def step_keys(
        self, obs: Tensor, prev_action: Tensor | None = None, state: NeuronState | None = None
    ) -> NeuronState:
        """Advance the key LSTM of every (batch, input) pair by one step."""
        prev_action = self._check(obs, prev_action)
        b, n = obs.shape
        if state is None:
            state = self.initial_state(b, n)
        elif state.h.shape != (b, n, self.key_hidden):
            raise ValueError(
                f"state must be (batch, n_inputs, {self.key_hidden}) = "
                f"{(b, n, self.key_hidden)}, got {tuple(state.h.shape)}"
            )
        inputs = torch.cat([obs.unsqueeze(-1), prev_action.unsqueeze(1).expand(b, n, -1)], -1)
        h, c = lstm_cell(
            self.key_net,
            inputs.reshape(b * n, -1),
            state.h.reshape(b * n, -1),
            state.c.reshape(b * n, -1),
        )
        return NeuronState(h.view(b, n, -1), c.view(b, n, -1))

    def folded_queries(self) -> tuple[Tensor, Tensor | None]:
        """Queries folded into the key projection: ``(M, H)`` and the score bias ``(M, 1)``.

        ``q (h W_k^T + b_k)^T = (q W_k) h^T + q b_k``: scores from ``H``-wide key states, not
        ``msg_dim``-wide keys; both are already multiplied by ``score_scale``.
        """
        q = self.query_proj(self.queries)  # (M, D)
        folded = (q @ self.key_proj.weight) * self.score_scale
        if self.key_proj.bias is None:
            return folded, None
        return folded, (q @ self.key_proj.bias).unsqueeze(-1) * self.score_scale

    def weights(self, q: Tensor, h: Tensor, bias: Tensor | None = None) -> Tensor:
        """The scoring function: ``sigma(q h^T + bias)`` ``(B, M, N)`` from folded queries
        (:meth:`folded_queries`; ``(M, H)`` shared by the batch or ``(B, M, H)`` per row),
        key-LSTM outputs ``(B, N, H)`` and a score bias broadcastable to ``(B, M, 1)``;
        ``sigma`` is ``tanh`` or a softmax over N."""
        if q.dim() == 2:  # shared queries: one GEMM over all B * N key states
            scores = torch.einsum("mh,bnh->bmn", q, h)
            scores = scores if bias is None else scores + bias
        else:
            ht = h.transpose(1, 2)
            scores = torch.bmm(q, ht) if bias is None else torch.baddbmm(bias, q, ht)
        return scores.tanh() if self.attention == "tanh" else scores.softmax(dim=-1)

    def attend(self, obs: Tensor, h: Tensor) -> Tensor:
        """``m_t`` ``(B, M)`` from observations ``(B, N)`` and key-LSTM outputs ``(B, N, H)``."""
        q, bias = self.folded_queries()

        def sdpa(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            q = q.expand(k.shape[0], *q.shape)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=1.0)

        out = attend(
            self,
            q,
            h,
            obs.unsqueeze(-1),
            functools.partial(self.weights, bias=bias),
            fused=sdpa if self.attention == "softmax" else False,  # tanh: no fused kernel
        )
        return torch.tanh(self.output_scale * out.squeeze(-1))

    def forward(
        self, obs: Tensor, prev_action: Tensor | None = None, state: NeuronState | None = None
    ) -> tuple[Tensor, NeuronState]:
        state = self.step_keys(obs, prev_action, state)
        return self.attend(obs, state.h), state

    def forward_sequence(self, obs: Tensor, prev_actions: Tensor | None = None) -> Tensor:
        """``m_T`` after unrolling the key LSTM over a window from the zero state.

        Equals the last output of ``T`` :meth:`forward` calls but attends only once (at the
        last step), so a capture records one ``(B, 1, M, N)`` map.

        Args:
            obs: ``(B, T, N)``, oldest step first.
            prev_actions: ``(B, T, A)``: the action taken before each step, or ``None``.
        """
        if obs.dim() != 3:
            raise ValueError(f"obs must be (batch, time, n_inputs), got {tuple(obs.shape)}")
        b, t, _ = obs.shape
        if prev_actions is not None and prev_actions.shape[:2] != (b, t):
            raise ValueError(
                f"prev_actions must be (batch, time, action_dim) with (batch, time) = {(b, t)}, "
                f"got {tuple(prev_actions.shape)}"
            )
        state = None
        for i in range(t):
            action = None if prev_actions is None else prev_actions[:, i]
            state = self.step_keys(obs[:, i], action, state)
        assert state is not None
        return self.attend(obs[:, -1], state.h)


class VisionAttentionNeuron(AttentionCapture, nn.Module):
    """Permutation-invariant layer for patch tokens (seed 001, E5 Puzzle Pong / E6 CarRacing).

    A token is a ``P x P`` patch of ``C`` stacked frames, flattened ``(P, P, C)`` with the frame
    axis last (``attn_envs.PatchObservation``'s layout), values already in ``[0, 1]``. As in
    the authors' ``VisionAttentionNeuronLayer``:

    * key input ``f_k``: the ``C - 1`` frame differences, flattened frame-major, then
      ``a_{t-1}`` -> ``P*P*(C-1) + |A|`` (114 for Pong) -> ``W_k``;
    * value input ``f_v``: each frame of the patch layer-normalised over its ``P*P`` pixels,
      flattened frame-major (``P*P*C`` = 144) -> ``W_v``;
    * queries: fixed sinusoidal table ``(M, query_dim)`` -> ``W_q``; softmax over the patches
      with scores scaled by ``1/sqrt(qk_dim)``;
    * output ``LayerNorm(relu(A V))`` of shape ``(M, value_dim)``.

    Frame-major flattening only fixes the row order of ``W_k``/``W_v`` (the authors' CarRacing
    keys were pixel-major); it changes nothing when training from scratch. Stateless, exactly
    permutation invariant in the token order, any ``N`` >= 1 with the same weights.

    Note: ``a_{t-1}`` (like the bias of ``W_k``) reaches every patch's key through the same
    linear map, so it adds one constant per query to all ``N`` scores, and the softmax over
    patches cancels it. With the article's linear ``W_k`` the previous action therefore cannot
    change ``m_t`` (its weights get zero gradient). It is kept so that ``W_k`` has the article's
    shape (114 x 32); unlike the vector layer, where it enters the LSTM, it is inert here.

    Args:
        action_dim: size of the previous-action feature (6 for Pong's one-hot, 3 for
            CarRacing's continuous action, 0 for none).
        n_queries: ``M`` (400 for Pong, 1024 for CarRacing).
        query_dim: width of the sinusoidal query table (8).
        qk_dim: width of projected queries and keys (32 Pong, 16 CarRacing).
        value_dim: width ``d_v`` of each output code (32 Pong, 16 CarRacing).
        patch_size: ``P``.
        n_frames: ``C``, at least 2 (the keys are frame differences).
        layer_norm_affine: learnable LayerNorm scale/shift (authors: Pong yes, CarRacing no).

    Shapes:
        ``forward(tokens: (B, N, P*P*C), prev_action: (B, A) | None) -> (B, M, value_dim)``.
        Captured weights: ``(B, 1, M, N)``.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> layer = VisionAttentionNeuron.puzzle_pong()
        >>> layer(torch.rand(2, 196, 144), torch.zeros(2, 6)).shape
        torch.Size([2, 400, 32])
        >>> sum(p.numel() for p in layer.parameters())
        8744
    """

    queries: Tensor  # a buffer (register_buffer below): typed for attribute access

    def __init__(
        self,
        action_dim: int,
        n_queries: int = 400,
        query_dim: int = 8,
        qk_dim: int = 32,
        value_dim: int = 32,
        patch_size: int = 6,
        n_frames: int = 4,
        layer_norm_affine: bool = True,
    ) -> None:
        super().__init__()
        require_int(n_frames, "n_frames (the keys are frame differences)", minimum=2)
        require_int(action_dim, "action_dim", minimum=0)
        require_sizes(
            n_queries=n_queries,
            query_dim=query_dim,
            qk_dim=qk_dim,
            value_dim=value_dim,
            patch_size=patch_size,
        )
        self.action_dim, self.n_queries, self.value_dim = action_dim, n_queries, value_dim
        self.patch_size, self.n_frames = patch_size, n_frames
        self.token_dim = patch_size * patch_size * n_frames
        self.key_dim = patch_size * patch_size * (n_frames - 1) + action_dim
        self.score_scale = 1.0 / math.sqrt(qk_dim)
        self.register_buffer("queries", sinusoidal_table(n_queries, query_dim), persistent=False)
        self.query_proj = nn.Linear(query_dim, qk_dim)
        self.key_proj = nn.Linear(self.key_dim, qk_dim)
        self.value_proj = nn.Linear(self.token_dim, value_dim)
        self.input_norm = nn.LayerNorm(
            patch_size * patch_size, elementwise_affine=layer_norm_affine
        )
        self.output_norm = nn.LayerNorm(value_dim, elementwise_affine=layer_norm_affine)

    @classmethod
    def puzzle_pong(cls, **overrides: object) -> VisionAttentionNeuron:
        """E5: one-hot a_{t-1} (6), M=400, W_q 8x32, W_k 114x32, W_v 144x32, affine LNs."""
        return cls(**{"action_dim": 6, "n_queries": 400, **overrides})  # type: ignore[arg-type]

    @classmethod
    def car_racing(cls, **overrides: object) -> VisionAttentionNeuron:
        """E6: continuous a_{t-1} (3), M=1024, d_q = d_v = 16, LayerNorms without parameters."""
        kwargs = {"action_dim": 3, "n_queries": 1024, "qk_dim": 16, "value_dim": 16}
        return cls(**{**kwargs, "layer_norm_affine": False, **overrides})  # type: ignore[arg-type]

    def forward(
        self, tokens: Tensor, prev_action: Tensor | None = None, scale: float = 1.0
    ) -> Tensor:
        """``tokens`` times ``scale`` (e.g. ``1 / 255`` for ``uint8`` screens, which need not
        be converted first) -> ``(B, M, value_dim)``."""
        if tokens.dim() != 3 or tokens.shape[1] < 1 or tokens.shape[2] != self.token_dim:
            raise ValueError(
                f"tokens must be (batch, n_patches >= 1, {self.token_dim}) for {self.patch_size}x"
                f"{self.patch_size} patches of {self.n_frames} frames, got {tuple(tokens.shape)}"
            )
        b, n, _ = tokens.shape
        frames = self.frames(tokens, scale)
        if prev_action is None:
            prev_action = frames.new_zeros(b, self.action_dim)
        elif prev_action.shape != (b, self.action_dim):
            raise ValueError(
                f"prev_action must be (batch, {self.action_dim}), got {tuple(prev_action.shape)}"
            )
        diffs = (frames[:, :, 1:] - frames[:, :, :-1]).flatten(2)
        key_in = torch.cat([diffs, prev_action.unsqueeze(1).expand(b, n, -1)], dim=-1)
        k = self.key_proj(key_in).unsqueeze(1)  # (B, 1, N, D)
        v = self.value_proj(self.input_norm(frames).flatten(2)).unsqueeze(1)
        q = self.query_proj(self.queries).expand(b, 1, self.n_queries, -1)
        out = attend(self, q, k, v, self.weights, scale=self.score_scale)
        return self.output_norm(F.relu(out[:, 0]))

    def frames(self, tokens: Tensor, scale: float = 1.0) -> Tensor:
        """``(B, N, P*P*C)`` tokens -> ``(B, N, C, P*P)`` frames times ``scale``, contiguous, in
        the layer's dtype.

        The frames are reordered frame-major before any other work, and on the tokens' own
        dtype: a ``uint8`` batch is permuted as bytes, then converted and scaled in place.
        Contiguous frames give contiguous differences and let the LayerNorm read its input as
        it is (it would copy a strided view, in the forward and again in the backward pass).
        """
        frames = rearrange(tokens, "b n (p c) -> b n c p", c=self.n_frames).contiguous()
        dtype = self.value_proj.weight.dtype
        if frames.dtype != dtype:  # a new tensor: safe to scale in place
            frames = frames.to(dtype)
            return frames.mul_(scale) if scale != 1.0 else frames
        return frames * scale if scale != 1.0 else frames

    def weights(self, q: Tensor, k: Tensor) -> Tensor:
        """The scoring function: softmax over the patches of ``q k^T / sqrt(qk_dim)``."""
        return (q @ k.transpose(-2, -1) * self.score_scale).softmax(dim=-1)
