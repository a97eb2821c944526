"""Compiled (numba) kernels for the AttentionNeuron agents' hot loops.

An ES generation of the E3 agent steps 256 x 16 = 4096 copies, each with its own weights, for
up to 1,000 steps. In torch every step is a few dozen small batched ops (the per-row
``(5, 8) x (8, 32)`` key-LSTM products, gate activations over the whole gate tensor, the
16 x 5 scores), so the time goes in dispatch and in passes over memory, not arithmetic.
:func:`population_step` does one step of every row in one compiled loop: a row's LSTM cells,
scores, output and head run in registers and L1, its weights are read through ``owner``
from one copy per individual (no per-row copies), and each gate takes one activation (torch's
path takes both sigmoid and tanh of all four gates).

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
from typing import NamedTuple

import numpy as np
from numba import njit

__all__ = ["NeuronWeights", "population_step", "step_kernel", "tanh32", "tanh_array"]

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

    Loop order is what makes it fast. Each phase runs over all ``N`` neurons of a row before
    the next (the gates of every neuron, then one pass of activations over all of them, the
    cells, the scores, then their tanh), so the short per-neuron chains are independent and
    overlap; interleaving the phases neuron by neuron measured 1.7x slower. The vectorised
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
        const = np.empty(gates_n, dtype=np.float32)
        gates = np.empty((n_inputs, gates_n), dtype=np.float32)
        flat_g = gates.ravel()
        pre = np.empty(n_inputs * gates_n, dtype=np.float32)
        post = np.empty(n_inputs * gates_n, dtype=np.float32)
        for j in range(n_inputs * gates_n):  # i, f, o: sigmoid(x) = tanh(x / 2) / 2 + 1 / 2
            cell = (j % gates_n) // width_h == 2
            pre[j] = 1.0 if cell else 0.5
            post[j] = 0.0 if cell else 0.5
        scores = np.empty((n_inputs, m_q), dtype=np.float32)
        flat_s = scores.ravel()
        x = np.empty(width, dtype=np.float32)
        y = np.empty(width, dtype=np.float32)
        for r in range(rows):
            p = owner[r]
            for g in range(gates_n):
                s = bias[p, g]
                for a in range(n_act):
                    s += prev[r, a] * w_act[p, a, g]
                const[g] = s
            for n in range(n_inputs):  # the gates of every neuron, before any activation
                o_n = obs[r, n]
                for g in range(gates_n):
                    s = const[g] + o_n * w_obs[p, g]
                    for k in range(hid):
                        s += h[r, n, k] * w_hh[p, k, g]
                    gates[n, g] = s
            for j in range(n_inputs * gates_n):  # one tanh per gate, all neurons at once
                flat_g[j] = tanh32(pre[j] * flat_g[j]) * pre[j] + post[j]
            for n in range(n_inputs):  # gate order i, f, g, o (torch's LSTMCell)
                row = gates[n]
                for k in range(width_h):
                    c_k = row[width_h + k] * c[r, n, k] + row[k] * row[2 * width_h + k]
                    c[r, n, k] = c_k
                    h[r, n, k] = row[3 * width_h + k] * tanh32(c_k)
            for n in range(n_inputs):
                for m in range(m_q):
                    s = score_bias[p, m]
                    for k in range(hid):
                        s += h[r, n, k] * queries_t[p, k, m]
                    scores[n, m] = s
            if softmax:  # over the N inputs, per query
                for m in range(m_q):
                    top = scores[0, m]
                    for n in range(1, n_inputs):
                        top = max(top, scores[n, m])
                    total = np.float32(0.0)
                    for n in range(n_inputs):
                        e = np.float32(np.exp(scores[n, m] - top))
                        scores[n, m] = e
                        total += e
                    for n in range(n_inputs):
                        scores[n, m] /= total
            else:
                for j in range(n_inputs * m_q):
                    flat_s[j] = tanh32(flat_s[j])
            for m in range(m_q):
                x[m] = 0.0
            for n in range(n_inputs):
                o_n = obs[r, n]
                for m in range(m_q):
                    x[m] += flat_s[n * m_q + m] * o_n
            for m in range(m_q):
                x[m] = tanh32(output_scale * x[m])
            size = m_q
            for layer in range(len(head_w)):
                w = head_w[layer]
                b = head_b[layer]
                out = w.shape[1]
                for j in range(out):
                    s = b[p, j]
                    for i in range(size):
                        s += x[i] * w[p, j, i]
                    y[j] = s
                for j in range(out):
                    x[j] = tanh32(y[j])
                size = out
            for a in range(n_act):
                prev[r, a] = x[a]

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
        >>> policy = AttentionNeuronPolicy.cartpole()
        >>> weights = policy.kernel_weights(policy.population_params(np.zeros((2, 913))))
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
