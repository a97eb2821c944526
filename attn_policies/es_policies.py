"""The ES flat-parameter agents of seed 001: AttentionNeuronPolicy (E3/E4) and FNNPolicy.

:class:`AttentionNeuronPolicy` (AttentionNeuron -> [hidden tanh layers] -> Linear -> tanh)
and :class:`FNNPolicy` (the E3 baseline, no attention): small modules with explicit state and
a flat parameter vector, for the CMA-ES trainer. The agent feeds its own last output back as
``a_{t-1}`` through its state: ``state = policy.initial_state(batch, n_inputs)``;
``action, state = policy(obs, state)``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor, nn

from attn_policies._es_support import FlatParameters
from attn_policies.attention_neuron import AttentionNeuron, NeuronState, zero_rows
from attn_policies.checks import require_sizes
from attn_policies.neuron_kernels import NeuronWeights, NeuronWindow

__all__ = ["AttentionNeuronPolicy", "FNNPolicy", "PolicyState"]


class PolicyState(NamedTuple):
    """State of :class:`AttentionNeuronPolicy`: key-network state and the last action ``(B, A)``."""

    keys: NeuronState
    prev_action: Tensor


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
            AttentionNeuron.reset_state(state.keys, done), zero_rows(state.prev_action, done)
        )

    def forward(self, obs: Tensor, state: PolicyState | None = None) -> tuple[Tensor, PolicyState]:
        if state is None:
            state = self.initial_state(obs.shape[0], obs.shape[1])
        m, keys = self.neuron(obs, state.prev_action, state.keys)
        action = self.head(m)
        return action, PolicyState(keys, action)

    def forward_window(
        self,
        obs: Tensor,
        prev_actions: Tensor,
        state: PolicyState | None = None,
        compiled: bool = True,
    ) -> tuple[Tensor, PolicyState]:
        """The agent unrolled over a window whose previous actions are given (teacher forcing,
        as behaviour cloning feeds the recorded actions): ``obs`` ``(T, B, N)``,
        ``prev_actions`` ``(T, B, A)`` the ``a_{t-1}`` fed at each step (``state``'s own is
        not used) -> outputs ``(T, B, A)`` and the state after the last step.

        Equals ``T`` calls of :meth:`forward` with ``state.prev_action`` replaced by
        ``prev_actions[t]``, to float tolerance. ``compiled`` (float32, tanh attention): the
        whole window forward and backward in compiled code
        (:class:`~attn_policies.neuron_kernels.NeuronWindow`) rather than ``T`` steps of
        torch ops; gradients reach the weights only.
        """
        steps, rows, n = obs.shape
        if prev_actions.shape != (steps, rows, self.action_dim):
            raise ValueError(
                f"prev_actions must be {(steps, rows, self.action_dim)}, got "
                f"{tuple(prev_actions.shape)}"
            )
        keys = state.keys if state is not None else self.neuron.initial_state(rows, n)
        fast = (
            compiled
            and self.neuron.attention == "tanh"
            and obs.dtype == torch.float32
            and self.neuron.query_proj.weight.dtype == torch.float32
            and not self.neuron.capturing
        )
        if not fast:
            outs = []
            current = PolicyState(keys, prev_actions[0])
            for t in range(steps):
                out, current = self(obs[t], current._replace(prev_action=prev_actions[t]))
                outs.append(out)
            return torch.stack(outs), current
        neuron = self.neuron
        cell = neuron.key_net
        q, score_bias = neuron.folded_queries()
        if score_bias is None:
            score_bias = q.new_zeros(q.shape[0], 1)
        head: list[Tensor] = []
        for layer in self.head:
            if isinstance(layer, nn.Linear):
                head += [layer.weight, layer.bias]
        out, h, c = NeuronWindow.apply(
            obs,
            prev_actions,
            keys.h,
            keys.c,
            neuron.output_scale,
            cell.weight_ih[:, 0],
            cell.weight_ih[:, 1:].T,
            cell.bias_ih + cell.bias_hh,
            cell.weight_hh.T,
            q.T,
            score_bias[:, 0],
            *head,
        )
        return out, PolicyState(NeuronState(h, c), out[-1])

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

    def kernel_weights(self, params: dict[str, Tensor]) -> NeuronWeights:
        """:meth:`population_weights` laid out for the compiled step
        (:func:`attn_policies.neuron_kernels.population_step`): float32 numpy, the folded
        queries and the head weights transposed so the kernel's wide loops are contiguous."""
        w_obs, w_act, bias, w_hh, scores, score_bias, *head = (
            w.detach().to(torch.float32) for w in self.population_weights(params)
        )

        def arr(t: Tensor) -> np.ndarray:
            return np.ascontiguousarray(t.numpy())

        return NeuronWeights(
            w_obs=arr(w_obs),
            w_act=arr(w_act),
            bias=arr(bias),
            w_hh=arr(w_hh),
            queries_t=arr(scores.transpose(1, 2)),
            score_bias=arr(score_bias[..., 0]),
            head_w=tuple(arr(w.transpose(1, 2)) for w in head[::2]),  # (P, out, in)
            head_b=tuple(arr(b) for b in head[1::2]),
            output_scale=float(self.neuron.output_scale),
            softmax=self.neuron.attention == "softmax",
        )

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
        attn = self.neuron.weights(scores, h, score_bias)  # (L, M, N), the layer's scoring
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
