"""AttentionNeuron layers, the E3/E4 agents and the SB3 extractors of seed 001.

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
* :class:`AttentionNeuronPolicy` (AttentionNeuron -> [hidden tanh layers] -> Linear -> tanh)
  and :class:`FNNPolicy` (the E3 baseline): small modules with explicit state and a flat
  parameter vector, for the CMA-ES trainer.
* :class:`AttentionNeuronExtractor` (Puzzle Pong student, E5) and
  :class:`AttentionNeuronVectorExtractor` (vector envs): SB3 ``BaseFeaturesExtractor``\\ s.

How ``a_{t-1}`` and the recurrent key state reach each consumer:

* ``a_{t-1}``: SB3 policies only see the observation, so the env must carry it:
  ``attn_envs.PreviousActionObservation`` adds it as a ``"prev_action"`` Dict entry (one-hot
  for Discrete, the clipped action for Box, zeros after reset), and the extractors read it
  from there. The ES agents feed their own last output back through their state instead.
* Recurrent keys (vector case): SB3's feed-forward policies cannot carry extractor state, so
  the env stacks the last ``T`` Dict observations
  (``FrameStackObservation(PreviousActionObservation(env), T)``) and
  :class:`AttentionNeuronVectorExtractor` unrolls the LSTM over that window from a zero state
  (:meth:`AttentionNeuron.forward_sequence`). The keys then remember ``T`` steps, not the whole
  episode; ``T = 1`` (no stacking) still works. ``sb3_contrib.RecurrentPPO`` can wrap the
  extractor too (its LSTM sits *after* the extractor, so it adds memory of ``m_t``, not of
  the keys). The ES agents keep the true per-neuron LSTM state explicitly:
  ``state = policy.initial_state(batch, n_inputs)``; ``action, state = policy(obs, state)``.
* The vision layer is stateless: the frame stack in each token carries the temporal signal.

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

import math
from typing import Literal, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange
from gymnasium import spaces
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import Tensor, nn

from attn_policies._es_support import FlatParameters, lstm_cell
from attn_policies.attention import AttentionCapture, require_sizes, sinusoidal_table

__all__ = [
    "AttentionNeuron",
    "AttentionNeuronExtractor",
    "AttentionNeuronPolicy",
    "AttentionNeuronVectorExtractor",
    "FNNPolicy",
    "FlatParameters",
    "NeuronState",
    "PolicyState",
    "VisionAttentionNeuron",
]

AttentionActivation = Literal["tanh", "softmax"]


class NeuronState(NamedTuple):
    """LSTM state of the key network, one row per (batch, input element): ``(B, N, hidden)``."""

    h: Tensor
    c: Tensor


class PolicyState(NamedTuple):
    """State of :class:`AttentionNeuronPolicy`: key-network state and the last action ``(B, A)``."""

    keys: NeuronState
    prev_action: Tensor


def _zero_rows(x: Tensor, done: Tensor) -> Tensor:
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
        if isinstance(action_dim, bool) or not isinstance(action_dim, int) or action_dim < 0:
            raise ValueError(f"action_dim must be a non-negative integer, got {action_dim!r}")
        if attention not in ("tanh", "softmax"):
            raise ValueError(f"attention must be 'tanh' or 'softmax', got {attention!r}")
        if action_dim < 0 or min(n_queries, query_dim, key_hidden, msg_dim) < 1:
            raise ValueError(
                "need action_dim >= 0 and positive n_queries, query_dim, key_hidden, msg_dim; "
                f"got {action_dim}, {n_queries}, {query_dim}, {key_hidden}, {msg_dim}"
            )
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
        return NeuronState(_zero_rows(state.h, done), _zero_rows(state.c, done))

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

    def attend(self, obs: Tensor, h: Tensor) -> Tensor:
        """``m_t`` ``(B, M)`` from observations ``(B, N)`` and key-LSTM outputs ``(B, N, H)``."""
        q = self.query_proj(self.queries)  # (M, D)
        if self.attention == "softmax" and not self.capturing:
            b = obs.shape[0]
            out = F.scaled_dot_product_attention(
                q.expand(b, 1, *q.shape),
                self.key_proj(h).unsqueeze(1),
                obs[:, None, :, None],
                scale=self.score_scale,
            )[:, 0, :, 0]
        else:
            # q (h W_k^T + b_k)^T = (q W_k) h^T + q b_k: scores from H-wide rows, not D-wide.
            scores = torch.einsum("mh,bnh->bmn", q @ self.key_proj.weight, h)
            if self.key_proj.bias is not None:
                scores = scores + (q @ self.key_proj.bias).unsqueeze(-1)
            scores = scores * self.score_scale
            weights = scores.tanh() if self.attention == "tanh" else scores.softmax(dim=-1)
            self.record(weights.unsqueeze(1))
            out = (weights @ obs.unsqueeze(-1)).squeeze(-1)
        return torch.tanh(self.output_scale * out)

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


class AttentionNeuronPolicy(FlatParameters, nn.Module):
    """The E3/E4 agent: AttentionNeuron -> [Linear + tanh]* -> Linear -> tanh.

    The agent feeds its own last (tanh) action back as ``a_{t-1}`` through its state, as the
    authors' ``PIFCSolution`` does; the zero action starts each episode.

    Args:
        action_dim: action size ``|A|``.
        n_queries: ``M``, also the width of the hidden layers.
        hidden_layers: number of ``Linear(M -> M) + tanh`` layers after the AttentionNeuron.
        **neuron_kwargs: passed to :class:`AttentionNeuron`.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> policy = AttentionNeuronPolicy.cartpole()
        >>> state = policy.initial_state(batch=2, n_inputs=5)
        >>> action, state = policy(torch.randn(2, 5), state)
        >>> action.shape, policy.num_parameters
        (torch.Size([2, 1]), 913)
    """

    def __init__(
        self,
        action_dim: int,
        n_queries: int = 16,
        hidden_layers: int = 0,
        **neuron_kwargs: object,
    ) -> None:
        super().__init__()
        self.action_dim = action_dim
        self.neuron = AttentionNeuron(action_dim, n_queries, **neuron_kwargs)  # type: ignore[arg-type]
        layers: list[nn.Module] = []
        for _ in range(hidden_layers):
            layers += [nn.Linear(n_queries, n_queries), nn.Tanh()]
        self.head = nn.Sequential(*layers, nn.Linear(n_queries, action_dim), nn.Tanh())

    @classmethod
    def cartpole(cls, **overrides: object) -> AttentionNeuronPolicy:
        """E3: M=16, no hidden layer, no bias and no score scaling (authors' cartpole_pi.gin)."""
        kwargs: dict = {"n_queries": 16, "hidden_layers": 0, "bias": False, "scale": False}
        return cls(1, **{**kwargs, **overrides})

    @classmethod
    def ant(cls, **overrides: object) -> AttentionNeuronPolicy:
        """E4: |A|=8, M=32, one hidden tanh layer of 32 (authors' ant_pi.gin)."""
        kwargs: dict = {"n_queries": 32, "hidden_layers": 1, "bias": True, "scale": True}
        return cls(8, **{**kwargs, **overrides})

    def initial_state(self, batch: int, n_inputs: int) -> PolicyState:
        keys = self.neuron.initial_state(batch, n_inputs)
        return PolicyState(keys, keys.h.new_zeros(batch, self.action_dim))

    @staticmethod
    def reset_state(state: PolicyState, done: Tensor) -> PolicyState:
        """Zero the state (keys and previous action) of the rows where ``done`` is True."""
        return PolicyState(
            AttentionNeuron.reset_state(state.keys, done), _zero_rows(state.prev_action, done)
        )

    def forward(self, obs: Tensor, state: PolicyState | None = None) -> tuple[Tensor, PolicyState]:
        if state is None:
            state = self.initial_state(obs.shape[0], obs.shape[1])
        m, keys = self.neuron(obs, state.prev_action, state.keys)
        action = self.head(m)
        return action, PolicyState(keys, action)

    # -- population fast path (ES evaluators) ----------------------------------------------

    def population_weights(self, params: dict[str, Tensor]) -> tuple[Tensor, ...]:
        """Per-individual weights for :meth:`population_step`, from ``{name: (P, *shape)}``.

        Everything constant within a generation is computed here once per individual rather
        than on every step: the fixed query table is folded into the key projection, so the
        scores need one ``(M, key_hidden)`` matrix (``score_scale * (Q W_q^T + b_q) W_k``)
        per individual, and the two LSTM biases are summed. Every tensor has the population
        as its first dim, so an evaluator may index rows of it (``w[owner]``).
        """
        neuron = self.neuron
        if neuron.capturing:
            raise RuntimeError("population_step does not record attention maps")

        def get(name: str) -> Tensor:
            return params[f"neuron.{name}"]

        w_ih = get("key_net.weight_ih").transpose(1, 2)  # (P, 1 + A, 4H)
        bias = get("key_net.bias_ih") + get("key_net.bias_hh")  # (P, 4H)
        w_hh = get("key_net.weight_hh").transpose(1, 2)  # (P, H, 4H)
        q = torch.matmul(neuron.queries.to(w_ih.dtype), get("query_proj.weight").transpose(1, 2))
        if neuron.query_proj.bias is not None:
            q = q + get("query_proj.bias").unsqueeze(1)
        scores = torch.matmul(q, get("key_proj.weight")) * neuron.score_scale  # (P, M, H)
        if neuron.key_proj.bias is not None:
            score_bias = (q @ get("key_proj.bias").unsqueeze(-1)) * neuron.score_scale
        else:
            score_bias = q.new_zeros(q.shape[0], q.shape[1], 1)
        head: list[Tensor] = []
        for i, layer in enumerate(self.head):
            if isinstance(layer, nn.Linear):
                head += [params[f"head.{i}.weight"].transpose(1, 2), params[f"head.{i}.bias"]]
        w_obs, w_act = w_ih[:, 0].contiguous(), w_ih[:, 1:].contiguous()
        return (w_obs, w_act, bias, w_hh.contiguous(), scores, score_bias, *head)

    def population_step(
        self, weights: tuple[Tensor, ...], obs: Tensor, state: tuple[Tensor, ...] | None
    ) -> tuple[Tensor, tuple[Tensor, Tensor, Tensor]]:
        """One step of ``L`` rows, each with its own weights (rows of :meth:`population_weights`).

        Equals :meth:`forward` row by row (up to float rounding): ``obs`` ``(L, N)``, state
        ``(h, c, prev_action)`` of shapes ``(L, N, H)``, ``(L, N, H)``, ``(L, A)`` (``None``:
        zeros); returns the actions ``(L, A)`` and the new state. ``a_{t-1}``'s gate input is
        computed once per row (it is the same for all ``N`` neurons) and ``o_i``'s is an outer
        product; only ``h W_hh`` and the scores are batched matmuls. The gate activations run
        over the whole contiguous gate tensor (a call on a strided gate slice was 2-4x slower).
        """
        w_obs, w_act, bias, w_hh, scores, score_bias, *head = weights
        rows, n = obs.shape
        hid = self.neuron.key_hidden
        if state is None:
            h = obs.new_zeros(rows, n, hid)
            c, prev = h, obs.new_zeros(rows, self.action_dim)
        else:
            h, c, prev = state
        if self.action_dim == 1:  # a_{t-1} W_a is an outer product: no matmul
            const = torch.addcmul(bias, prev, w_act[:, 0])  # (L, 4H)
        else:
            const = torch.baddbmm(bias.unsqueeze(1), prev.unsqueeze(1), w_act).squeeze(1)
        gates = torch.baddbmm(const.unsqueeze(1), h, w_hh)  # (L, N, 4H)
        gates.addcmul_(obs.unsqueeze(-1), w_obs.unsqueeze(1))
        i, f, _, o = gates.sigmoid().chunk(4, dim=-1)
        g = gates.tanh()[..., 2 * hid : 3 * hid]
        c = torch.addcmul(f * c, i, g)
        h = o * c.tanh()
        s = torch.baddbmm(score_bias, scores, h.transpose(1, 2))  # (L, M, N)
        attn = s.tanh() if self.neuron.attention == "tanh" else s.softmax(dim=-1)
        x = torch.tanh(self.neuron.output_scale * torch.bmm(attn, obs.unsqueeze(-1)).squeeze(-1))
        for w, b in zip(head[::2], head[1::2], strict=True):
            x = torch.tanh(torch.baddbmm(b.unsqueeze(1), x.unsqueeze(1), w).squeeze(1))
        return x, (h, c, x)


class FNNPolicy(FlatParameters, nn.Module):
    """The E3 baseline: Linear(obs -> hidden) + tanh, [Linear + tanh]*, Linear -> tanh.

    Stateless; :meth:`initial_state` returns ``None`` so it drops into the same rollout loop
    as :class:`AttentionNeuronPolicy`.

    Example:
        >>> policy = FNNPolicy(obs_dim=5, action_dim=1, hidden=16)
        >>> action, _ = policy(torch.zeros(3, 5), policy.initial_state(3, 5))
        >>> action.shape, policy.num_parameters
        (torch.Size([3, 1]), 113)
    """

    def __init__(
        self, obs_dim: int, action_dim: int, hidden: int = 16, hidden_layers: int = 0
    ) -> None:
        super().__init__()
        require_sizes(obs_dim=obs_dim, action_dim=action_dim, hidden=hidden)
        self.obs_dim = obs_dim
        layers: list[nn.Module] = [nn.Linear(obs_dim, hidden), nn.Tanh()]
        for _ in range(hidden_layers):
            layers += [nn.Linear(hidden, hidden), nn.Tanh()]
        self.net = nn.Sequential(*layers, nn.Linear(hidden, action_dim), nn.Tanh())

    def initial_state(self, batch: int, n_inputs: int) -> None:
        if n_inputs != self.obs_dim:
            raise ValueError(f"FNNPolicy takes exactly {self.obs_dim} inputs, got {n_inputs}")
        return None

    @staticmethod
    def reset_state(state: None, done: Tensor) -> None:
        return None

    def forward(self, obs: Tensor, state: None = None) -> tuple[Tensor, None]:
        return self.net(obs), None


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
        if n_frames < 2:
            raise ValueError(f"n_frames must be >= 2 (keys are frame differences), got {n_frames}")
        if action_dim < 0 or min(n_queries, query_dim, qk_dim, value_dim, patch_size) < 1:
            raise ValueError(
                "need action_dim >= 0 and positive n_queries, query_dim, qk_dim, value_dim, "
                f"patch_size; got {action_dim}, {n_queries}, {query_dim}, {qk_dim}, "
                f"{value_dim}, {patch_size}"
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

    def forward(self, tokens: Tensor, prev_action: Tensor | None = None) -> Tensor:
        if tokens.dim() != 3 or tokens.shape[1] < 1 or tokens.shape[2] != self.token_dim:
            raise ValueError(
                f"tokens must be (batch, n_patches >= 1, {self.token_dim}) for {self.patch_size}x"
                f"{self.patch_size} patches of {self.n_frames} frames, got {tuple(tokens.shape)}"
            )
        b, n, _ = tokens.shape
        if prev_action is None:
            prev_action = tokens.new_zeros(b, self.action_dim)
        elif prev_action.shape != (b, self.action_dim):
            raise ValueError(
                f"prev_action must be (batch, {self.action_dim}), got {tuple(prev_action.shape)}"
            )
        frames = rearrange(tokens, "b n (p c) -> b n c p", c=self.n_frames)
        diffs = (frames[:, :, 1:] - frames[:, :, :-1]).flatten(2)
        key_in = torch.cat([diffs, prev_action.unsqueeze(1).expand(b, n, -1)], dim=-1)
        k = self.key_proj(key_in).unsqueeze(1)  # (B, 1, N, D)
        v = self.value_proj(self.input_norm(frames).flatten(2)).unsqueeze(1)
        q = self.query_proj(self.queries).expand(b, 1, self.n_queries, -1)
        if self.capturing:
            weights = (q @ k.transpose(-2, -1) * self.score_scale).softmax(dim=-1)
            self.record(weights)
            out = weights @ v
        else:
            out = F.scaled_dot_product_attention(q, k, v, scale=self.score_scale)
        return self.output_norm(F.relu(out[:, 0]))


def _split_dict_space(
    space: spaces.Space, obs_key: str, action_key: str, name: str
) -> tuple[spaces.Box, spaces.Box | None]:
    """The (observation, previous action) Boxes of a Dict or plain Box observation space."""
    if isinstance(space, spaces.Box):
        return space, None
    if isinstance(space, spaces.Dict):
        missing = [k for k in (obs_key, action_key) if k not in space.spaces]
        if missing:
            raise ValueError(
                f"{name} needs Dict entries {obs_key!r} and {action_key!r} (as "
                f"attn_envs.PreviousActionObservation makes); {missing} missing from "
                f"{list(space.spaces)}"
            )
        extra = sorted(set(space.spaces) - {obs_key, action_key})
        if extra:
            raise ValueError(f"{name} would ignore the Dict entries {extra}; remove them")
        obs, act = space.spaces[obs_key], space.spaces[action_key]
        for key, sub in ((obs_key, obs), (action_key, act)):
            if not isinstance(sub, spaces.Box):
                raise TypeError(f"{name}: Dict entry {key!r} must be a Box, got {sub}")
        return obs, act  # type: ignore[return-value]
    raise TypeError(
        f"{name} needs a Box or a Dict({obs_key!r}, {action_key!r}) observation space, got "
        f"{type(space).__name__}: {space}"
    )


class AttentionNeuronExtractor(BaseFeaturesExtractor):
    """The Puzzle Pong student (E5): VisionAttentionNeuron -> 2-D grid -> CNN -> FC(512).

    ``m_t`` ``(M, d_v)`` = ``(400, 32)`` is read as a ``20 x 20`` grid of 32 channels, then (as
    in the authors' ``PuzzlePongSolution``) ReLU, Conv(32->64, k4, s2) + ReLU,
    Conv(64->64, k3, s1) + ReLU, flatten (3136), Linear(3136->512) + ReLU. The article's last
    layer FC(512->6) is SB3's ``action_net``; pass ``policy_kwargs=dict(net_arch=[])`` to get
    exactly the article's network (SB3's default adds 64-64 MLP heads).

    Observation: ``Dict({obs_key: Box (N, P*P*C), action_key: Box (|A|,)})`` as produced by
    ``attn_envs.PreviousActionObservation(gym.make("attn_envs/PuzzlePong-v0"))``. SB3 does not
    scale a 2-D ``uint8`` Box (it is not an image space), so a ``uint8`` token Box is divided by
    255 here; other dtypes are used as they come. (As in the article, the previous action
    cannot actually influence the features; see :class:`VisionAttentionNeuron`.) A plain
    token ``Box`` is accepted too: then
    there is no previous action -- the keys are the frame differences alone unless
    ``action_dim`` is given, in which case zeros are fed in its place (same weight shapes as a
    Dict-trained model).

    Args:
        observation_space: see above; ``N`` may differ at call time.
        n_queries: ``M``; ``sqrt(M)`` must be an integer (the grid side, >= 8 for the convs).
        conv_channels: output channels of the two convolutions.
        features_dim: width of the last FC layer.
        action_dim: only for a plain Box space (see above).
        obs_key, action_key: Dict entry names.
        **neuron_kwargs: ``query_dim``, ``qk_dim``, ``value_dim``, ``patch_size``,
            ``layer_norm_affine`` of :class:`VisionAttentionNeuron`; ``n_frames`` is inferred
            from the token size.

    Example:
        >>> import numpy as np
        >>> from gymnasium import spaces
        >>> space = spaces.Dict({"observation": spaces.Box(0, 255, (196, 144), np.uint8),
        ...                      "prev_action": spaces.Box(0.0, 1.0, (6,))})
        >>> _ = torch.manual_seed(0)
        >>> ext = AttentionNeuronExtractor(space)
        >>> obs = {"observation": torch.zeros(2, 196, 144), "prev_action": torch.zeros(2, 6)}
        >>> ext(obs).shape
        torch.Size([2, 512])
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        n_queries: int = 400,
        conv_channels: tuple[int, int] = (64, 64),
        features_dim: int = 512,
        action_dim: int | None = None,
        obs_key: str = "observation",
        action_key: str = "prev_action",
        **neuron_kwargs: object,
    ) -> None:
        channels = tuple(conv_channels)
        if len(channels) != 2:
            raise ValueError(f"conv_channels must be two sizes, got {conv_channels!r}")
        require_sizes(
            n_queries=n_queries,
            conv_channels_0=channels[0],
            conv_channels_1=channels[1],
            features_dim=features_dim,
        )
        super().__init__(observation_space, features_dim)
        name = type(self).__name__
        token_space, action_space = _split_dict_space(observation_space, obs_key, action_key, name)
        if len(token_space.shape) != 2:
            raise ValueError(
                f"{name} needs patch tokens of shape (n_patches, patch_size**2 * n_frames) "
                f"(PatchObservation with flatten=True), got {token_space.shape}"
            )
        if action_space is not None:
            if len(action_space.shape) != 1:
                raise ValueError(
                    f"{name}: {action_key!r} must be a 1-D Box, got {action_space.shape}"
                )
            if action_dim is not None and action_dim != action_space.shape[0]:
                raise ValueError(
                    f"{name}: action_dim={action_dim} contradicts the {action_key!r} Box "
                    f"{action_space.shape}"
                )
            action_dim = action_space.shape[0]
        side = math.isqrt(n_queries)
        if n_queries < 1 or side * side != n_queries:
            raise ValueError(
                f"{name}: n_queries must be a perfect square (the codes form a sqrt(M) x "
                f"sqrt(M) grid), got {n_queries}"
            )
        patch_size = int(neuron_kwargs.pop("patch_size", 6))  # type: ignore[call-overload]
        token_dim = token_space.shape[1]
        if token_dim % (patch_size * patch_size):
            raise ValueError(
                f"{name}: token size {token_dim} is not a multiple of patch_size**2 = "
                f"{patch_size**2}"
            )
        self.is_dict = action_space is not None
        self.obs_key, self.action_key = obs_key, action_key
        self.input_scale = 1.0 / 255.0 if token_space.dtype == np.uint8 else 1.0
        self.grid_side = side
        self.neuron = VisionAttentionNeuron(
            action_dim=action_dim or 0,
            n_queries=n_queries,
            patch_size=patch_size,
            n_frames=token_dim // (patch_size * patch_size),
            **neuron_kwargs,  # type: ignore[arg-type]
        )
        c1, c2 = conv_channels
        self.cnn = nn.Sequential(
            nn.Conv2d(self.neuron.value_dim, c1, kernel_size=4, stride=2),
            nn.ReLU(),
            nn.Conv2d(c1, c2, kernel_size=3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            grid = torch.zeros(1, self.neuron.value_dim, side, side)
            try:
                n_flatten = self.cnn(grid).shape[1]
            except RuntimeError as err:
                raise ValueError(
                    f"{name}: a {side}x{side} grid (n_queries={n_queries}) is too small for "
                    "Conv(k4, s2) then Conv(k3, s1); use n_queries >= 64"
                ) from err
        self.linear = nn.Sequential(nn.Linear(n_flatten, features_dim), nn.ReLU())

    def forward(self, observations: Tensor | dict[str, Tensor]) -> Tensor:
        if self.is_dict:
            assert isinstance(observations, dict)
            tokens, prev_action = observations[self.obs_key], observations[self.action_key]
        else:
            assert isinstance(observations, Tensor)
            tokens, prev_action = observations, None
        m = self.neuron(tokens.float() * self.input_scale, prev_action)
        grid = rearrange(m, "b (h w) c -> b c h w", h=self.grid_side)
        return self.linear(self.cnn(F.relu(grid)))


class AttentionNeuronVectorExtractor(BaseFeaturesExtractor):
    """AttentionNeuron features ``m_t`` (``features_dim = M``) for vector envs under SB3.

    Observation: ``Dict({obs_key: Box (N,) or (T, N), action_key: Box (A,) or (T, A)})``, i.e.
    ``PreviousActionObservation(env)``, optionally wrapped in ``FrameStackObservation(., T)``.
    The key LSTM is unrolled from a zero state over the ``T`` stacked steps
    (:meth:`AttentionNeuron.forward_sequence`) and the last step attends. A plain Box ``(N,)``
    or ``(T, N)`` is accepted too; then the key network sees no previous action
    (``action_dim = 0``). Works under ``sb3_contrib.RecurrentPPO`` (``MultiInputLstmPolicy``).

    Args:
        observation_space: see above; ``N`` may differ at call time.
        n_queries: ``M``, the output width.
        **neuron_kwargs: ``query_dim``, ``key_hidden``, ``msg_dim``, ``bias``, ``scale``,
            ``attention``, ``output_scale`` of :class:`AttentionNeuron`.

    Example:
        >>> import numpy as np
        >>> from gymnasium import spaces
        >>> space = spaces.Dict({"observation": spaces.Box(-np.inf, np.inf, (4, 5)),
        ...                      "prev_action": spaces.Box(-1.0, 1.0, (4, 1))})
        >>> _ = torch.manual_seed(0)
        >>> ext = AttentionNeuronVectorExtractor(space, n_queries=16)
        >>> ext({"observation": torch.randn(3, 4, 5), "prev_action": torch.zeros(3, 4, 1)}).shape
        torch.Size([3, 16])
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        n_queries: int = 16,
        obs_key: str = "observation",
        action_key: str = "prev_action",
        **neuron_kwargs: object,
    ) -> None:
        super().__init__(observation_space, n_queries)
        name = type(self).__name__
        obs_space, action_space = _split_dict_space(observation_space, obs_key, action_key, name)
        if len(obs_space.shape) not in (1, 2):
            raise ValueError(
                f"{name} needs a vector observation (N,) or a stacked window (T, N), got "
                f"{obs_space.shape}"
            )
        self.stacked = len(obs_space.shape) == 2
        action_dim = 0
        if action_space is not None:
            expected = (obs_space.shape[0], "A") if self.stacked else ("A",)
            if len(action_space.shape) != len(expected) or (
                self.stacked and action_space.shape[0] != obs_space.shape[0]
            ):
                raise ValueError(
                    f"{name}: {action_key!r} must have shape {expected} to match the "
                    f"observation {obs_space.shape}, got {action_space.shape}"
                )
            action_dim = action_space.shape[-1]
        self.is_dict = action_space is not None
        self.obs_key, self.action_key = obs_key, action_key
        self.neuron = AttentionNeuron(action_dim, n_queries, **neuron_kwargs)  # type: ignore[arg-type]

    def forward(self, observations: Tensor | dict[str, Tensor]) -> Tensor:
        if self.is_dict:
            assert isinstance(observations, dict)
            obs, prev = observations[self.obs_key], observations[self.action_key]
        else:
            assert isinstance(observations, Tensor)
            obs, prev = observations, None
        if not self.stacked:
            obs = obs.unsqueeze(1)
            prev = None if prev is None else prev.unsqueeze(1)
        return self.neuron.forward_sequence(obs, prev)
