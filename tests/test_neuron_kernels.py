"""Tests for attn_policies.neuron_kernels: the compiled AttentionNeuron population step."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn
from torch.func import stack_module_state

from attn_policies.attention import sinusoidal_table
from attn_policies.es_policies import AttentionNeuronPolicy, PolicyState
from attn_policies.neuron_kernels import population_step, tanh_array

MAKERS = {
    "cartpole": AttentionNeuronPolicy.cartpole,
    "ant": AttentionNeuronPolicy.ant,
    "softmax_bias": lambda: AttentionNeuronPolicy.cartpole(
        attention="softmax", bias=True, scale=True, output_scale=0.5
    ),
    "hidden2": lambda: AttentionNeuronPolicy(3, n_queries=8, hidden_layers=2),
}


def test_tanh32_is_within_float32_rounding_of_tanh() -> None:
    x = np.concatenate([np.linspace(-12, 12, 200_001), [0.0, 1e-30, -1e-30, 7.9, 50.0, -50.0]])
    x = x.astype(np.float32)
    got = tanh_array(x)
    exact = np.tanh(x.astype(np.float64))
    assert np.abs(got - exact).max() < 4e-7
    np.testing.assert_array_equal(tanh_array(-x), -got)  # odd
    assert got.max() <= 1.0 and got.min() >= -1.0
    assert tanh_array(np.array([20.0], np.float32))[0] >= 1.0 - 3e-7  # saturates


def _population(make, n_pop: int, seed: int) -> tuple[AttentionNeuronPolicy, dict]:
    torch.manual_seed(seed)
    policies = [make() for _ in range(n_pop)]
    for p in policies:  # larger than the default init so the gates and scores saturate a bit
        p.set_flat_parameters(torch.randn(p.num_parameters) * 0.5)
    params, _ = stack_module_state(policies)
    return policies[0], {k: v.detach() for k, v in params.items()}


@pytest.mark.parametrize("name", list(MAKERS))
def test_kernel_equals_the_torch_population_step(name: str) -> None:
    """From the same state, one compiled step equals population_step row by row; rows of
    several individuals in any order (owner), N not the preset's."""
    policy, params = _population(MAKERS[name], 3, seed=0)
    owner = np.array([2, 0, 0, 1, 2, 1, 0])
    weights_t = tuple(w[torch.as_tensor(owner)] for w in policy.population_weights(params))
    weights = policy.kernel_weights(params)
    rows, n, hid = len(owner), 7, policy.neuron.key_hidden
    gen = torch.Generator().manual_seed(1)
    h = (torch.randn(rows, n, hid, generator=gen) * 0.5).numpy()
    c = (torch.randn(rows, n, hid, generator=gen)).numpy()
    prev = (torch.rand(rows, policy.action_dim, generator=gen) * 2 - 1).numpy()
    for _ in range(5):  # teacher forcing: both paths start every step from the kernel's state
        obs = (torch.randn(rows, n, generator=gen) * 2).numpy()
        state = tuple(torch.from_numpy(s.copy()) for s in (h, c, prev))
        with torch.no_grad():
            out, (h_ref, c_ref, _) = policy.population_step(weights_t, torch.from_numpy(obs), state)
        population_step(weights, obs, owner, h, c, prev)
        # a few float32 ulps: tanh32 and the summation order differ from torch's
        np.testing.assert_allclose(prev, out.numpy(), rtol=1e-5, atol=3e-6)
        np.testing.assert_allclose(h, h_ref.numpy(), rtol=1e-5, atol=3e-6)
        np.testing.assert_allclose(c, c_ref.numpy(), rtol=1e-5, atol=3e-6)


def _unfolded_forward(
    policy: AttentionNeuronPolicy, obs: torch.Tensor, prev: torch.Tensor, h: torch.Tensor,
    c: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """The article's layer written out with nothing folded: an ``nn.LSTMCell`` per input,
    K = h W_k^T + b_k, Q = table W_q^T + b_q, scores Q K^T / sqrt(d) -> tanh, m = tanh(A o)."""
    neuron = policy.neuron
    b, n = obs.shape
    x = torch.cat([obs.unsqueeze(-1), prev.unsqueeze(1).expand(b, n, -1)], -1).reshape(b * n, -1)
    cell: nn.LSTMCell = neuron.key_net
    h2, c2 = cell(x, (h.reshape(b * n, -1), c.reshape(b * n, -1)))
    h2, c2 = h2.view(b, n, -1), c2.view(b, n, -1)
    keys = neuron.key_proj(h2)  # (B, N, D)
    table = sinusoidal_table(neuron.n_queries, neuron.queries.shape[1])
    queries = neuron.query_proj(table)  # (M, D)
    scale = 1.0 / math.sqrt(keys.shape[-1]) if neuron.score_scale != 1.0 else 1.0
    scores = torch.einsum("md,bnd->bmn", queries, keys) * scale
    weights = scores.tanh() if neuron.attention == "tanh" else scores.softmax(-1)
    m = torch.tanh(neuron.output_scale * torch.einsum("bmn,bn->bm", weights, obs))
    return policy.head(m), h2, c2


@pytest.mark.parametrize("name", ["ant", "softmax_bias"])
def test_kernel_and_torch_paths_equal_the_unfolded_layer(name: str) -> None:
    """Both fast paths fold the queries into W_k (and the key bias into a score bias);
    checked against the layer written out unfolded, so a folded bias that lost its score
    scale (or its sign) fails here even though the two fast paths agree with each other."""
    policy, params = _population(MAKERS[name], 1, seed=3)
    policy.set_flat_parameters(torch.cat([v[0].reshape(-1) for v in params.values()]))
    weights = policy.kernel_weights(params)
    rows, n, hid = 4, 6, policy.neuron.key_hidden
    gen = torch.Generator().manual_seed(2)
    obs = torch.randn(rows, n, generator=gen) * 2
    prev = torch.rand(rows, policy.action_dim, generator=gen) * 2 - 1
    h0, c0 = torch.randn(rows, n, hid, generator=gen), torch.randn(rows, n, hid, generator=gen)
    with torch.no_grad():
        ref, h_ref, _ = _unfolded_forward(policy, obs, prev, h0, c0)
        weights_t = tuple(w.expand(rows, *w.shape[1:]) for w in policy.population_weights(params))
        out_t, _ = policy.population_step(weights_t, obs, (h0, c0, prev))
        out_f, _ = policy(
            obs,
            policy.initial_state(rows, n)
            ._replace(prev_action=prev)
            ._replace(keys=policy.neuron.initial_state(rows, n)._replace(h=h0, c=c0)),
        )
    h, c, p = h0.numpy().copy(), c0.numpy().copy(), prev.numpy().copy()
    population_step(weights, obs.numpy(), np.zeros(rows, np.int64), h, c, p)
    assert (ref - ref.mean()).abs().max() > 0.05  # the bias and scale matter at these weights
    for got in (out_t.numpy(), out_f.numpy(), p):
        np.testing.assert_allclose(got, ref.numpy(), atol=3e-6)
    np.testing.assert_allclose(h, h_ref.numpy(), atol=3e-6)


def test_rows_are_independent() -> None:
    """A row's result does not depend on the other rows: any subset or order, same bits."""
    policy, params = _population(MAKERS["ant"], 4, seed=5)
    weights = policy.kernel_weights(params)
    rng = np.random.default_rng(0)
    owner = rng.integers(0, 4, 9)
    obs = rng.standard_normal((9, 28)).astype(np.float32)
    state = [np.zeros((9, 28, 8), np.float32), np.zeros((9, 28, 8), np.float32)]
    state.append(np.zeros((9, 8), np.float32))
    full = [s.copy() for s in state]
    for _ in range(3):
        population_step(weights, obs, owner, *full)
    order = np.array([8, 3, 0, 5])
    part = [s[order].copy() for s in state]
    for _ in range(3):
        population_step(weights, obs[order], owner[order], *part)
    for a, b in zip(part, full, strict=True):
        np.testing.assert_array_equal(a, b[order])


def test_permuting_the_inputs_permutes_the_state_only() -> None:
    policy, params = _population(MAKERS["cartpole"], 1, seed=6)
    weights = policy.kernel_weights(params)
    rng = np.random.default_rng(1)
    perm = np.array([3, 0, 4, 1, 2])
    a = [np.zeros((3, 5, 8), np.float32), np.zeros((3, 5, 8), np.float32)]
    a.append(np.zeros((3, 1), np.float32))
    b = [s.copy() for s in a]
    for _ in range(6):
        obs = rng.standard_normal((3, 5)).astype(np.float32)
        population_step(weights, obs, np.zeros(3, np.int64), *a)
        population_step(weights, obs[:, perm], np.zeros(3, np.int64), *b)
        np.testing.assert_allclose(b[0], a[0][:, perm], atol=1e-6)
        np.testing.assert_allclose(b[2], a[2], atol=1e-6)


def test_shapes_are_checked() -> None:
    policy, params = _population(MAKERS["cartpole"], 1, seed=0)
    weights = policy.kernel_weights(params)
    h = np.zeros((2, 5, 8), np.float32)
    with pytest.raises(ValueError, match="prev must have shape"):
        population_step(weights, np.zeros((2, 5), np.float32), np.zeros(2, np.int64), h,
                        h.copy(), np.zeros((2, 3), np.float32))  # fmt: skip
    with pytest.raises(ValueError, match="h must have shape"):
        population_step(weights, np.zeros((2, 6), np.float32), np.zeros(2, np.int64), h,
                        h.copy(), np.zeros((2, 1), np.float32))  # fmt: skip


@pytest.mark.parametrize("name", ["cartpole", "ant", "hidden2"])
def test_compiled_window_has_the_torch_outputs_and_gradients(name: str) -> None:
    """forward_window compiled == T torch steps fed the same previous actions: outputs, final
    state and every weight's gradient (a loss on the outputs and on the final key state)."""
    torch.manual_seed(4)
    policy = MAKERS[name]()
    policy.set_flat_parameters(torch.randn(policy.num_parameters) * 0.4)
    steps, rows, n = 12, 3, 6
    gen = torch.Generator().manual_seed(5)
    obs = torch.randn(steps, rows, n, generator=gen)
    prev = torch.rand(steps, rows, policy.action_dim, generator=gen) * 2 - 1
    target = torch.randn(steps, rows, policy.action_dim, generator=gen)
    keys = policy.neuron.initial_state(rows, n)
    keys = keys._replace(h=torch.randn(rows, n, 8, generator=gen), c=torch.randn(rows, n, 8))
    start = PolicyState(keys, torch.zeros(rows, policy.action_dim))
    results = []
    for compiled in (True, False):
        policy.zero_grad()
        out, state = policy.forward_window(obs, prev, start, compiled=compiled)
        loss = ((out - target) ** 2).sum() + state.keys.h.square().sum() + state.keys.c.sum()
        loss.backward()
        grads = {k: p.grad.clone() for k, p in policy.named_parameters()}
        results.append((out.detach(), state.keys.h.detach(), state.keys.c.detach(), grads))
    (out_f, h_f, c_f, g_f), (out_t, h_t, c_t, g_t) = results
    np.testing.assert_allclose(out_f, out_t, rtol=1e-5, atol=3e-6)
    np.testing.assert_allclose(h_f, h_t, rtol=1e-5, atol=3e-6)
    np.testing.assert_allclose(c_f, c_t, rtol=1e-5, atol=3e-6)
    for key, grad in g_t.items():
        assert grad.abs().max() > 1e-3, key  # every weight takes part
        np.testing.assert_allclose(
            g_f[key], grad, rtol=1e-4, atol=1e-4 * grad.abs().max(), err_msg=key
        )


def test_window_falls_back_to_torch_steps_where_it_has_no_kernel() -> None:
    policy = MAKERS["softmax_bias"]()
    obs, prev = torch.randn(4, 2, 5), torch.zeros(4, 2, 1)
    out, _ = policy.forward_window(obs, prev)
    ref, _ = policy.forward_window(obs, prev, compiled=False)
    assert torch.equal(out, ref)  # softmax attention: the torch steps themselves
    with pytest.raises(ValueError, match="prev_actions must be"):
        policy.forward_window(obs, torch.zeros(4, 2, 3))
