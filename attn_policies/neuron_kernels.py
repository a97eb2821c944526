"""Compiled (numba) kernels for the AttentionNeuron agents' hot loops.

An ES generation of the E3 agent steps 256 x 16 = 4096 copies, each with its own weights, for
up to 1,000 steps. In torch every step is a few dozen small batched ops (the per-row
``(5, 8) x (8, 32)`` key-LSTM products, gate activations over the whole gate tensor, the
16 x 5 scores), so the time goes in dispatch and in passes over memory, not arithmetic.
:func:`population_step` does one step of every row in one compiled loop: a row's LSTM cells,
scores, output and head run in registers and L1, its weights are read through ``owner``
from one copy per individual (no per-row copies), and each gate takes one activation (torch's
path takes both sigmoid and tanh of all four gates).

Behaviour cloning (E4) trains the same agent by truncated BPTT through windows of up to 500
steps; :class:`NeuronWindow` runs a whole window's forward and backward in compiled code
(:func:`window_kernels`) instead of a few dozen torch ops per step each way.

The activations are a float32 rational approximation (:func:`tanh32`, the minimax form Eigen
uses for float tanh) so that LLVM vectorises the gate loops; it is within a few float32 ulps
of ``torch.tanh``. Results therefore equal the torch path to float tolerance, not to the bit.

Example:
    >>> import numpy as np
    >>> x = np.linspace(-9, 9, 7, dtype=np.float32)
    >>> bool(np.allclose(tanh_array(x), np.tanh(x), atol=1e-6))
    True
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch
from numba import njit

__all__ = [
    "NeuronWeights",
    "NeuronWindow",
    "population_step",
    "step_kernel",
    "tanh32",
    "tanh_array",
    "window_kernels",
]

_CLAMP = np.float32(7.90531110763549805)  # tanh(x) rounds to +-1 in float32 beyond this
_A1 = np.float32(4.89352455891786e-03)
_A3 = np.float32(6.37261928875436e-04)
_A5 = np.float32(1.48572235717979e-05)
_A7 = np.float32(5.12229709037114e-08)
_A9 = np.float32(-8.60467152213735e-11)
_A11 = np.float32(2.00018790482477e-13)
_A13 = np.float32(-2.76076847742355e-16)
_B0 = np.float32(4.89352518554385e-03)
_B2 = np.float32(2.26843463243900e-03)
_B4 = np.float32(1.18534705686654e-04)
_B6 = np.float32(1.19825839466702e-06)


@njit(inline="always", fastmath=True, error_model="numpy")
def tanh32(x):  # numba infers the float32 signature
    """float32 tanh as a 13/6 rational polynomial on ``[-7.9, 7.9]`` (branch-free)."""
    x = min(max(x, -_CLAMP), _CLAMP)
    x2 = x * x
    p = x2 * _A13 + _A11
    p = x2 * p + _A9
    p = x2 * p + _A7
    p = x2 * p + _A5
    p = x2 * p + _A3
    p = x2 * p + _A1
    q = x2 * _B6 + _B4
    q = x2 * q + _B2
    q = x2 * q + _B0
    return x * p / q


@njit(cache=True, fastmath=True, error_model="numpy")
def tanh_array(x: np.ndarray) -> np.ndarray:
    """:func:`tanh32` elementwise over a float32 array (for tests and checks)."""
    out = np.empty_like(x)
    flat, res = x.ravel(), out.ravel()
    for i in range(flat.size):
        res[i] = tanh32(flat[i])
    return out


@functools.cache
def step_kernel(hid: int, n_act: int, softmax: bool) -> Callable[..., None]:
    """The compiled step of every row for one key-LSTM width ``hid``, ``n_act`` actions and
    attention activation; :func:`population_step` calls it.

    Loop order is what makes it fast. Each phase runs over all ``N`` neurons of a block of
    rows before the next (the gates of every neuron, then one pass of activations over all of
    them, the cells, the scores, then their tanh), so the short per-neuron chains are
    independent and overlap; interleaving the phases neuron by neuron measured 1.7x slower,
    one row at a time 1.6x slower for E3. The vectorised
    loops run over the wide axes (the 4H gates, the M queries, the flat activations) with the
    short reductions over ``hid`` and ``n_act`` inside, unrolled since those two are
    compile-time constants here, so each gate or score is summed in a register. The wide
    sizes stay runtime values: with them constant too, LLVM unrolls the wide loops into
    scalar code (2-7x slower, measured).
    """

    @njit(fastmath=True, error_model="numpy")
    def kernel(obs, owner, w_obs, w_act, bias, w_hh, queries_t, score_bias, head_w, head_b,
               output_scale, h, c, prev):  # fmt: skip
        rows, n_inputs = obs.shape
        gates_n = w_hh.shape[2]
        width_h = h.shape[2]
        m_q = queries_t.shape[2]
        width = m_q
        for w in head_w:
            width = max(width, w.shape[1])
        # Rows in blocks: each phase runs over a block's rows before the next, so the
        # short chains of several rows overlap (E3's 5 inputs: 4 rows, 1.6x, the same bits);
        # with many inputs a row alone fills the pipeline (E4's 28: no gain, so 1).
        blk = 4 if n_inputs * gates_n <= 256 else 1
        const = np.empty((blk, gates_n), dtype=np.float32)
        gates = np.empty((blk, n_inputs, gates_n), dtype=np.float32)
        flat_g = gates.ravel()
        per = n_inputs * gates_n
        pre = np.empty(blk * per, dtype=np.float32)
        post = np.empty(blk * per, dtype=np.float32)
        for j in range(blk * per):
            cell = (j % gates_n) // width_h == 2
            pre[j] = 1.0 if cell else 0.5
            post[j] = 0.0 if cell else 0.5
        scores = np.empty((blk, n_inputs, m_q), dtype=np.float32)
        flat_s = scores.ravel()
        x = np.empty((blk, width), dtype=np.float32)
        y = np.empty(width, dtype=np.float32)
        for r0 in range(0, rows, blk):
            nb = min(blk, rows - r0)
            for b in range(nb):
                r = r0 + b
                p = owner[r]
                for g in range(gates_n):
                    s = bias[p, g]
                    for a in range(n_act):
                        s += prev[r, a] * w_act[p, a, g]
                    const[b, g] = s
            for b in range(nb):
                r = r0 + b
                p = owner[r]
                for n in range(n_inputs):
                    o_n = obs[r, n]
                    for g in range(gates_n):
                        s = const[b, g] + o_n * w_obs[p, g]
                        for k in range(hid):
                            s += h[r, n, k] * w_hh[p, k, g]
                        gates[b, n, g] = s
            for j in range(nb * per):
                flat_g[j] = tanh32(pre[j] * flat_g[j]) * pre[j] + post[j]
            for b in range(nb):
                r = r0 + b
                for n in range(n_inputs):
                    row = gates[b, n]
                    for k in range(width_h):
                        c_k = row[width_h + k] * c[r, n, k] + row[k] * row[2 * width_h + k]
                        c[r, n, k] = c_k
                        h[r, n, k] = row[3 * width_h + k] * tanh32(c_k)
            for b in range(nb):
                r = r0 + b
                p = owner[r]
                for n in range(n_inputs):
                    for m in range(m_q):
                        s = score_bias[p, m]
                        for k in range(hid):
                            s += h[r, n, k] * queries_t[p, k, m]
                        scores[b, n, m] = s
            if softmax:
                for b in range(nb):
                    for m in range(m_q):
                        top = scores[b, 0, m]
                        for n in range(1, n_inputs):
                            top = max(top, scores[b, n, m])
                        total = np.float32(0.0)
                        for n in range(n_inputs):
                            e = np.float32(np.exp(scores[b, n, m] - top))
                            scores[b, n, m] = e
                            total += e
                        for n in range(n_inputs):
                            scores[b, n, m] /= total
            else:
                for j in range(nb * n_inputs * m_q):
                    flat_s[j] = tanh32(flat_s[j])
            for b in range(nb):
                r = r0 + b
                xb = x[b]
                for m in range(m_q):
                    xb[m] = 0.0
                for n in range(n_inputs):
                    o_n = obs[r, n]
                    for m in range(m_q):
                        xb[m] += scores[b, n, m] * o_n
                for m in range(m_q):
                    xb[m] = tanh32(output_scale * xb[m])
            for b in range(nb):
                r = r0 + b
                p = owner[r]
                xb = x[b]
                size = m_q
                for layer in range(len(head_w)):
                    w = head_w[layer]
                    bl = head_b[layer]
                    out = w.shape[1]
                    for j in range(out):
                        s = bl[p, j]
                        for i in range(size):
                            s += xb[i] * w[p, j, i]
                        y[j] = s
                    for j in range(out):
                        xb[j] = tanh32(y[j])
                    size = out
                for a in range(n_act):
                    prev[r, a] = xb[a]

    return kernel


class NeuronWeights(NamedTuple):
    """A population's AttentionNeuron-agent weights as :func:`population_step` reads them.

    Every array is float32, C-contiguous, with the individual as its first axis; build it
    with :meth:`attn_policies.es_policies.AttentionNeuronPolicy.kernel_weights`.
    """

    w_obs: np.ndarray  # (P, 4H): the key LSTM's input weights of o_i
    w_act: np.ndarray  # (P, A, 4H): its input weights of a_{t-1}
    bias: np.ndarray  # (P, 4H): both LSTM biases summed
    w_hh: np.ndarray  # (P, H, 4H): recurrent weights, transposed
    queries_t: np.ndarray  # (P, H, M): folded query-key product (score scale in), transposed
    score_bias: np.ndarray  # (P, M)
    head_w: tuple[np.ndarray, ...]  # (P, out, in) per head layer, tanh after each
    head_b: tuple[np.ndarray, ...]  # (P, out)
    output_scale: float
    softmax: bool


def population_step(
    weights: NeuronWeights,
    obs: np.ndarray,
    owner: np.ndarray,
    h: np.ndarray,
    c: np.ndarray,
    prev: np.ndarray,
) -> None:
    """One step of ``L`` rows of an AttentionNeuron agent, each with its own individual's
    weights; the state is updated in place.

    Equals :meth:`~attn_policies.es_policies.AttentionNeuronPolicy.population_step` row by
    row to float tolerance. Rows are independent, so any subset or order of rows gives the
    same per-row result.

    Args:
        weights: the population's weights.
        obs: ``(L, N)`` float32 observations.
        owner: ``(L,)`` int64: the individual of each row.
        h, c: ``(L, N, H)`` float32 key-LSTM state.
        prev: ``(L, A)`` float32 previous action; becomes this step's action.

    Example:
        >>> from attn_policies.es_policies import AttentionNeuronPolicy
        >>> from torch.func import stack_module_state
        >>> policy = AttentionNeuronPolicy.cartpole()
        >>> policy.set_flat_parameters(np.zeros(913, np.float32))
        >>> params, _ = stack_module_state([policy, policy])  # a population of two
        >>> weights = policy.kernel_weights(params)
        >>> h = np.zeros((3, 5, 8), np.float32)
        >>> c, prev = h.copy(), np.zeros((3, 1), np.float32)
        >>> obs = np.ones((3, 5), np.float32)
        >>> population_step(weights, obs, np.array([0, 1, 1]), h, c, prev)
        >>> prev.tolist()  # all-zero weights: zero actions
        [[0.0], [0.0], [0.0]]
    """
    rows = obs.shape[0]
    hid = weights.w_hh.shape[1]
    expect = {"owner": (rows,), "h": (rows, obs.shape[1], hid), "c": (rows, obs.shape[1], hid)}
    expect["prev"] = (rows, weights.w_act.shape[1])
    for name, array in (("owner", owner), ("h", h), ("c", c), ("prev", prev)):
        if array.shape != expect[name]:
            raise ValueError(f"{name} must have shape {expect[name]}, got {array.shape}")
    kernel = step_kernel(hid, weights.w_act.shape[1], bool(weights.softmax))
    kernel(
        np.ascontiguousarray(obs, dtype=np.float32),
        np.ascontiguousarray(owner, dtype=np.int64),
        weights.w_obs,
        weights.w_act,
        weights.bias,
        weights.w_hh,
        weights.queries_t,
        weights.score_bias,
        weights.head_w,
        weights.head_b,
        np.float32(weights.output_scale),
        h,
        c,
        prev,
    )


# -- truncated BPTT through the agent (behaviour cloning) ------------------------------------


@functools.cache
def window_kernels(hid: int, n_act: int) -> tuple[Callable[..., None], Callable[..., None]]:
    """The compiled forward and backward of :class:`NeuronWindow` for one key-LSTM width and
    action size (tanh attention; compile-time constants as in :func:`step_kernel`).

    The forward keeps, per step, everything the backward reads: the gate activations, the
    cell and hidden states, the attention weights, ``m_t`` and each head layer's output, so
    the backward is one reverse sweep with no recomputation.
    """

    @njit(fastmath=True, error_model="numpy")
    def forward(obs, prev, h0, c0, w_obs, w_act, bias, w_hh, queries_t, score_bias, head_w,
                head_b, output_scale, acts, cs, hs, attn, ms, zs):  # fmt: skip
        steps, rows, n_inputs = obs.shape
        gates_n = w_hh.shape[1]
        m_q = queries_t.shape[1]
        const = np.empty(gates_n, dtype=np.float32)
        pre = np.empty(gates_n, dtype=np.float32)
        post = np.empty(gates_n, dtype=np.float32)
        for g in range(gates_n):
            cell = g // hid == 2
            pre[g] = 1.0 if cell else 0.5
            post[g] = 0.0 if cell else 0.5
        for b in range(rows):
            for n in range(n_inputs):
                for k in range(hid):
                    hs[0, b, n, k] = h0[b, n, k]
                    cs[0, b, n, k] = c0[b, n, k]
        for t in range(steps):
            for b in range(rows):
                for g in range(gates_n):
                    s = bias[g]
                    for a in range(n_act):
                        s += prev[t, b, a] * w_act[a, g]
                    const[g] = s
                for n in range(n_inputs):
                    o_n = obs[t, b, n]
                    act = acts[t, b, n]
                    for g in range(gates_n):
                        s = const[g] + o_n * w_obs[g]
                        for k in range(hid):
                            s += hs[t, b, n, k] * w_hh[k, g]
                        act[g] = tanh32(pre[g] * s) * pre[g] + post[g]
                    for k in range(hid):
                        c_k = act[hid + k] * cs[t, b, n, k] + act[k] * act[2 * hid + k]
                        cs[t + 1, b, n, k] = c_k
                        hs[t + 1, b, n, k] = act[3 * hid + k] * tanh32(c_k)
                    for m in range(m_q):
                        s = score_bias[m]
                        for k in range(hid):
                            s += hs[t + 1, b, n, k] * queries_t[k, m]
                        attn[t, b, n, m] = tanh32(s)
                x = ms[t, b]
                for m in range(m_q):
                    x[m] = 0.0
                for n in range(n_inputs):
                    o_n = obs[t, b, n]
                    for m in range(m_q):
                        x[m] += attn[t, b, n, m] * o_n
                for m in range(m_q):
                    x[m] = tanh32(output_scale * x[m])
                offset = 0
                for layer in range(len(head_w)):
                    w = head_w[layer]
                    bl = head_b[layer]
                    out, size = w.shape
                    z = zs[t, b, offset : offset + out]
                    for j in range(out):
                        s = bl[j]
                        for i in range(size):
                            s += x[i] * w[j, i]
                        z[j] = tanh32(s)
                    x = z
                    offset += out

    @njit(fastmath=True, error_model="numpy")
    def backward(d_out, d_hT, d_cT, obs, prev, w_hh, queries_t, head_w,
                 output_scale, acts, cs, hs, attn, ms, zs, g_obs, g_act, g_bias, g_hh, g_q,
                 g_sb, g_head_w, g_head_b):  # fmt: skip
        steps, rows, n_inputs = obs.shape
        gates_n = w_hh.shape[1]
        m_q = queries_t.shape[1]
        n_layers = len(head_w)
        width = m_q
        for w in head_w:
            width = max(width, w.shape[0])
        dh = np.empty((rows, n_inputs, hid), dtype=np.float32)
        dc = np.empty((rows, n_inputs, hid), dtype=np.float32)
        for b in range(rows):
            for n in range(n_inputs):
                for k in range(hid):
                    dh[b, n, k] = d_hT[b, n, k]
                    dc[b, n, k] = d_cT[b, n, k]
        dz = np.empty(width, dtype=np.float32)
        dx = np.empty(width, dtype=np.float32)
        dpm = np.empty(m_q, dtype=np.float32)
        dgates = np.empty(gates_n, dtype=np.float32)
        dgate_sum = np.empty(gates_n, dtype=np.float32)
        for t in range(steps - 1, -1, -1):
            for b in range(rows):
                # the head, last layer first
                offset = zs.shape[2]
                size_out = head_w[n_layers - 1].shape[0]
                for j in range(size_out):
                    dz[j] = d_out[t, b, j]
                for layer in range(n_layers - 1, -1, -1):
                    w = head_w[layer]
                    out, size = w.shape
                    offset -= out
                    gw = g_head_w[layer]
                    gb = g_head_b[layer]
                    for j in range(out):
                        zj = zs[t, b, offset + j]
                        dz[j] *= 1.0 - zj * zj
                        gb[j] += dz[j]
                    for i in range(size):
                        dx[i] = 0.0
                    for j in range(out):
                        dj = dz[j]
                        for i in range(size):  # the layer's input: m_t or the layer below
                            xi = ms[t, b, i] if layer == 0 else zs[t, b, offset - size + i]
                            gw[j, i] += dj * xi
                            dx[i] += dj * w[j, i]
                    for i in range(size):
                        dz[i] = dx[i]
                for m in range(m_q):  # m_t = tanh(output_scale * sum_n a_nm o_n)
                    mm = ms[t, b, m]
                    dpm[m] = dz[m] * (1.0 - mm * mm) * output_scale
                for g in range(gates_n):
                    dgate_sum[g] = 0.0
                for n in range(n_inputs):
                    o_n = obs[t, b, n]
                    act = acts[t, b, n]
                    for k in range(hid):
                        s = dh[b, n, k]
                        for m in range(m_q):
                            a = attn[t, b, n, m]
                            ds = dpm[m] * o_n * (1.0 - a * a)
                            g_q[k, m] += ds * hs[t + 1, b, n, k]
                            s += ds * queries_t[k, m]
                        dh[b, n, k] = s
                    for m in range(m_q):
                        a = attn[t, b, n, m]
                        g_sb[m] += dpm[m] * o_n * (1.0 - a * a)
                    for k in range(hid):  # the cell, gate order i, f, g, o
                        i_k, f_k = act[k], act[hid + k]
                        g_k, o_k = act[2 * hid + k], act[3 * hid + k]
                        tc = tanh32(cs[t + 1, b, n, k])
                        dct = dc[b, n, k] + dh[b, n, k] * o_k * (1.0 - tc * tc)
                        dgates[k] = dct * g_k * i_k * (1.0 - i_k)
                        dgates[hid + k] = dct * cs[t, b, n, k] * f_k * (1.0 - f_k)
                        dgates[2 * hid + k] = dct * i_k * (1.0 - g_k * g_k)
                        dgates[3 * hid + k] = dh[b, n, k] * tc * o_k * (1.0 - o_k)
                        dc[b, n, k] = dct * f_k
                    for g in range(gates_n):
                        dgate_sum[g] += dgates[g]
                        g_obs[g] += dgates[g] * o_n
                    for k in range(hid):
                        hk = hs[t, b, n, k]
                        s = np.float32(0.0)
                        for g in range(gates_n):
                            g_hh[k, g] += hk * dgates[g]
                            s += w_hh[k, g] * dgates[g]
                        dh[b, n, k] = s
                for g in range(gates_n):
                    g_bias[g] += dgate_sum[g]
                    for a in range(n_act):
                        g_act[a, g] += prev[t, b, a] * dgate_sum[g]

    return forward, backward


def _np(t: torch.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.detach().to(torch.float32).numpy())


class NeuronWindow(torch.autograd.Function):
    """An AttentionNeuron agent unrolled over a window with given previous actions, forward and
    backward compiled (:func:`window_kernels`); the weights are the only inputs with
    gradients. Use it through
    :meth:`~attn_policies.es_policies.AttentionNeuronPolicy.forward_window`.

    ``apply(obs (T, B, N), prev (T, B, A), h0, c0 (B, N, H), output_scale, w_obs (4H,),
    w_act (A, 4H), bias (4H,), w_hh (H, 4H), queries_t (H, M), score_bias (M,), *head)``
    with ``head`` each tanh layer's ``weight (out, in)`` then ``bias (out,)``; returns the
    outputs ``(T, B, A_out)`` and the final ``h``, ``c``.
    """

    @staticmethod
    def forward(
        ctx: Any,
        obs: torch.Tensor,
        prev: torch.Tensor,
        h0: torch.Tensor,
        c0: torch.Tensor,
        output_scale: float,
        *weights: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        w_obs, w_act, bias, w_hh, queries_t, score_bias, *head = (_np(w) for w in weights)
        head_w, head_b = tuple(head[::2]), tuple(head[1::2])
        steps, rows, n = obs.shape
        hid, m_q = w_hh.shape[0], queries_t.shape[1]
        forward_k, _ = window_kernels(hid, w_act.shape[0])
        saved = {
            "acts": np.empty((steps, rows, n, 4 * hid), np.float32),
            "cs": np.empty((steps + 1, rows, n, hid), np.float32),
            "hs": np.empty((steps + 1, rows, n, hid), np.float32),
            "attn": np.empty((steps, rows, n, m_q), np.float32),
            "ms": np.empty((steps, rows, m_q), np.float32),
            "zs": np.empty((steps, rows, sum(b.shape[0] for b in head_b)), np.float32),
        }
        obs_np, prev_np = _np(obs), _np(prev)
        scale = np.float32(output_scale)
        forward_k(obs_np, prev_np, _np(h0), _np(c0), w_obs, w_act, bias, w_hh, queries_t,
                  score_bias, head_w, head_b, scale, *saved.values())  # fmt: skip
        ctx.arrays = (obs_np, prev_np, w_hh, queries_t, head_w, output_scale, saved)
        ctx.shapes = [w.shape for w in weights]
        out = saved["zs"][:, :, -head_b[-1].shape[0] :]
        return (
            torch.from_numpy(out.copy()),
            torch.from_numpy(saved["hs"][-1].copy()),
            torch.from_numpy(saved["cs"][-1].copy()),
        )

    @staticmethod
    def backward(
        ctx: Any, d_out: torch.Tensor, d_h: torch.Tensor, d_c: torch.Tensor
    ) -> tuple[torch.Tensor | None, ...]:
        obs_np, prev_np, w_hh, queries_t, head_w, output_scale, saved = ctx.arrays
        grads = [np.zeros(shape, np.float32) for shape in ctx.shapes]
        g_obs, g_act, g_bias, g_hh, g_q, g_sb, *g_head = grads
        _, backward_k = window_kernels(w_hh.shape[0], prev_np.shape[2])
        backward_k(_np(d_out), _np(d_h), _np(d_c), obs_np, prev_np, w_hh, queries_t, head_w,
                   np.float32(output_scale), *saved.values(), g_obs, g_act, g_bias, g_hh, g_q,
                   g_sb, tuple(g_head[::2]), tuple(g_head[1::2]))  # fmt: skip
        return (None, None, None, None, None, *(torch.from_numpy(g) for g in grads))
