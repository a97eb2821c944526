"""What lets a module run inside a population-batched evolution-strategies rollout.

An ES trainer handles a policy as one flat parameter vector (:class:`FlatParameters`) and
evaluates a whole population at once with ``torch.func.functional_call`` + ``vmap``;
``aten::lstm_cell`` has no vmap rule, so recurrent modules step their ``nn.LSTMCell`` through
:func:`lstm_cell` instead.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn


def lstm_cell(cell: nn.LSTMCell, x: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
    """``cell(x, (h, c))`` written out with ``F.linear`` (same gate order i, f, g, o).

    Example:
        >>> _ = torch.manual_seed(0)
        >>> cell = nn.LSTMCell(3, 4)
        >>> x, h, c = torch.randn(2, 3), torch.randn(2, 4), torch.randn(2, 4)
        >>> ref = cell(x, (h, c))
        >>> all(torch.allclose(a, b, atol=1e-6) for a, b in zip(lstm_cell(cell, x, h, c), ref))
        True
    """
    gates = F.linear(x, cell.weight_ih, cell.bias_ih) + F.linear(h, cell.weight_hh, cell.bias_hh)
    # Activations on per-gate views, not one call over all gates: a flat call rounds the
    # vectorised tail differently, so permuting the rows would change the result by an ulp.
    i, f, g, o = gates.chunk(4, dim=-1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


class FlatParameters:
    """Flat-vector access to a module's parameters, the interface an ES optimiser needs.

    Mix into an ``nn.Module``. The vector lists every parameter in registration order
    (``self.parameters()``), each flattened row-major, as
    :func:`torch.nn.utils.parameters_to_vector` does.

    Example:
        >>> class Net(FlatParameters, nn.Linear): ...
        >>> net = Net(3, 2)
        >>> net.num_parameters
        8
        >>> net.set_flat_parameters(np.arange(8, dtype=np.float32))
        >>> net.bias.tolist()
        [6.0, 7.0]
    """

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())  # type: ignore[attr-defined]

    def get_flat_parameters(self) -> Tensor:
        """A detached 1-D copy of all parameters."""
        return torch.cat([p.detach().reshape(-1) for p in self.parameters()])  # type: ignore[attr-defined]

    def set_flat_parameters(self, vector: Tensor | np.ndarray) -> None:
        """Copy a 1-D vector of length :attr:`num_parameters` into the parameters.

        Values are copied (unlike ``vector_to_parameters``, which makes the parameters views
        of ``vector``), so later changes to ``vector`` do not leak into the module.
        """
        ref = next(self.parameters())  # type: ignore[attr-defined]
        vec = torch.as_tensor(vector, dtype=ref.dtype, device=ref.device)
        if vec.shape != (self.num_parameters,):
            raise ValueError(
                f"{type(self).__name__} has {self.num_parameters} parameters, got a vector of "
                f"shape {tuple(vec.shape)}"
            )
        params = list(self.parameters())  # type: ignore[attr-defined]
        with torch.no_grad():
            for param, chunk in zip(params, vec.split([p.numel() for p in params]), strict=True):
                param.copy_(chunk.view_as(param))


@functools.cache
def keep_large_allocations(threshold: int = 256 << 20) -> bool:
    """Stop glibc from returning every large tensor buffer to the OS (once per process).

    A batched rollout allocates the same few-MB activations every step; by default glibc
    serves them with fresh ``mmap`` pages that fault in on first touch, which made a
    CartPoleSwingUp generation (4096 rows) about 2x slower. Raising ``M_MMAP_THRESHOLD`` and
    ``M_TRIM_THRESHOLD`` keeps those buffers on the heap for reuse. Returns False (and does
    nothing) off glibc.
    """
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(mallopt(m_mmap_threshold, threshold)) and bool(mallopt(m_trim_threshold, threshold))
