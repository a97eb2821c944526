"""Multi-head self-attention, positional codes, attention-weight capture and the one helper
that applies attention.

Every module in :mod:`attn_policies` that computes attention weights inherits
:class:`AttentionCapture`, has one scoring function (queries and keys to weights) and applies
it through :func:`attend`. In a normal forward pass :func:`attend` takes the fused path (for
``softmax(Q K^T * scale) V``, :func:`torch.nn.functional.scaled_dot_product_attention`, which
never materialises the weights; a layer may pass its own fused kernel) and stores nothing.
Inside :func:`capture_attention` it computes the weights with the layer's scoring function,
records them as ``(batch, head, query, key)`` tensors and applies them, so plots cost nothing
when nobody asks for them.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from attn_policies.checks import require_sizes

Compatibility = Literal["dot", "additive"]
QKVNorm = Literal["tokens", "features"] | None


class AttentionCapture:
    """Mixin for ``nn.Module``s that compute attention weights.

    Such a layer applies its weights through :func:`attend`, which checks :attr:`capturing`
    to decide whether to materialise them and passes them to :meth:`record` as a
    ``(batch, head, query, key)`` tensor. :attr:`max_capture_bytes` (``None``: no limit) caps
    the weight tensor a capture may materialise; above it :func:`attend` warns and takes the
    fused path.
    """

    _attention_store: list[Tensor] | None = None
    max_capture_bytes: int | None = None

    @property
    def capturing(self) -> bool:
        return self._attention_store is not None

    def record(self, weights: Tensor) -> None:
        if self._attention_store is not None:
            if weights.dim() != 4:
                raise ValueError(
                    f"{type(self).__name__} recorded attention of shape {tuple(weights.shape)}; "
                    "expected (batch, head, query, key)"
                )
            self._attention_store.append(weights.detach())

    def capture_fits(self, q: Tensor, k: Tensor) -> bool:
        """Whether the ``(*q.shape[:-1], k.shape[-2])`` weights fit :attr:`max_capture_bytes`."""
        if self.max_capture_bytes is None:
            return True
        shape = (*q.shape[:-1], k.shape[-2])
        size = math.prod(shape) * q.element_size()
        if size <= self.max_capture_bytes:
            return True
        extra = self.extra_repr() if isinstance(self, nn.Module) else ""
        warnings.warn(
            f"{type(self).__name__}({extra}) not recording {size / 2**20:.0f} MiB of attention "
            f"weights {shape} "
            f"(max_capture_bytes={self.max_capture_bytes}); capture a smaller batch or input",
            stacklevel=4,
        )
        return False


Scoring = Callable[[Tensor, Tensor], Tensor]
FusedKernel = Callable[[Tensor, Tensor, Tensor], Tensor]


def attend(
    layer: AttentionCapture,
    q: Tensor,
    k: Tensor,
    v: Tensor | None,
    weights: Scoring,
    *,
    fused: bool | FusedKernel = True,
    scale: float | None = None,
    mask: Tensor | None = None,
    apply: Callable[[Tensor], Tensor] | None = None,
) -> Tensor:
    """Attention of ``layer``: its weights ``weights(q, k)`` applied to ``v``, by the fastest
    path that gives the same result.

    ``weights`` is the layer's one scoring function, queries and keys to the attention weights
    ``(batch, [head,] query, key)``. While ``layer`` captures (:func:`capture_attention`), or
    when it has no fused kernel (``fused=False``, e.g. a ``tanh`` score), the weights are
    computed, recorded (a 3-D tensor as one head) and applied (``apply(w)``, by default
    ``w @ v``). Otherwise ``fused=True`` calls
    :func:`~torch.nn.functional.scaled_dot_product_attention` with ``scale`` and ``mask`` (a
    bool "may attend" or a float additive mask): the layer promises that ``weights(q, k)`` is
    ``softmax(q k^T * scale + mask)``. A callable ``fused(q, k, v)`` is the layer's own kernel
    for its own weights (a diagonal, a blockwise column sum, a padded flash call). The tests
    of each layer keep the two branches equal.

    Example:
        >>> layer = MultiHeadSelfAttention(4, n_heads=1, head_dim=2)
        >>> q, k, v = torch.randn(3, 1, 5, 2), torch.randn(3, 1, 5, 2), torch.randn(3, 1, 5, 2)
        >>> softmax = lambda q, k: (q @ k.transpose(-2, -1) / math.sqrt(2)).softmax(-1)
        >>> fast = attend(layer, q, k, v, softmax)
        >>> with capture_attention(layer) as maps:
        ...     slow = attend(layer, q, k, v, softmax)
        >>> torch.allclose(fast, slow, atol=1e-6), tuple(maps["self"].shape)
        (True, (3, 1, 5, 5))
    """
    if fused is not False and not (layer.capturing and layer.capture_fits(q, k)):
        if fused is True:
            assert v is not None, "the fused kernel needs values"
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
        return fused(q, k, v)  # type: ignore[arg-type]
    w = weights(q, k)
    if layer.capturing:
        layer.record(w if w.dim() == 4 else w.unsqueeze(1))
    if apply is not None:
        return apply(w)
    assert v is not None, "attend needs values or an apply function"
    return w @ v


@contextmanager
def capture_attention(module: nn.Module) -> Iterator[dict[str, Tensor]]:
    """Record the attention weights of every :class:`AttentionCapture` inside ``module``.

    Yields a dict that is filled when the block exits: the submodule's qualified name maps to
    its ``(batch, head, query, key)`` weights. A module called several times in the block
    (a recurrent step, a shared extractor) gets ``name[0]``, ``name[1]``, ... in call order.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> attn = MultiHeadSelfAttention(8, n_heads=2, head_dim=4)
        >>> with capture_attention(attn) as maps:
        ...     _ = attn(torch.randn(3, 5, 8))
        >>> {k: tuple(v.shape) for k, v in maps.items()}
        {'self': (3, 2, 5, 5)}
    """
    targets = {
        name or "self": m for name, m in module.named_modules() if isinstance(m, AttentionCapture)
    }
    for m in targets.values():
        m._attention_store = []
    maps: dict[str, Tensor] = {}
    try:
        yield maps
    finally:
        for name, m in targets.items():
            store = m._attention_store or []
            m._attention_store = None
            if len(store) == 1:
                maps[name] = store[0]
            else:
                maps.update({f"{name}[{i}]": w for i, w in enumerate(store)})


def sinusoidal_table(n_positions: int, dim: int, base: float = 10_000.0) -> Tensor:
    """The transformer's fixed sine-cosine position codes, shape ``(n_positions, dim)``.

    Row ``p`` holds ``sin(p / base^(2i/dim))`` in even columns and the matching cosines in odd
    columns (odd ``dim`` drops the last cosine).

    Example:
        >>> sinusoidal_table(16, 8).shape
        torch.Size([16, 8])
    """
    if n_positions < 1 or dim < 1:
        raise ValueError(f"need n_positions >= 1 and dim >= 1, got {n_positions}, {dim}")
    position = torch.arange(n_positions, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(base) / dim))
    table = torch.zeros(n_positions, dim)
    table[:, 0::2] = torch.sin(position * freq)
    table[:, 1::2] = torch.cos(position * freq)[:, : dim // 2]
    return table


def append_coordinates(x: Tensor) -> Tensor:
    """Append the book's (x, y) coordinate channels, each in ``[0, 1)``, to ``(B, C, H, W)``.

    Example:
        >>> append_coordinates(torch.zeros(2, 3, 7, 7)).shape
        torch.Size([2, 5, 7, 7])
    """
    b, _, h, w = x.shape
    xs = torch.arange(w, dtype=x.dtype, device=x.device) / w
    ys = torch.arange(h, dtype=x.dtype, device=x.device) / h
    coords = torch.stack(torch.meshgrid(ys, xs, indexing="ij")[::-1])  # (2, H, W): x then y
    return torch.cat([x, coords.expand(b, 2, h, w)], dim=1)


class MultiHeadSelfAttention(AttentionCapture, nn.Module):
    """Multi-head self-attention over a set of tokens, as in the book's relational module.

    Q, K and V are linear projections of the tokens, optionally layer-normalised (the book
    normalises each over ``(heads, tokens, head_dim)``; ``"features"`` normalises each token
    alone, which keeps the module permutation equivariant). The compatibility function is
    either the scaled dot product (fused path: ``scaled_dot_product_attention``) or the book's
    additive form ``softmax(a_lin(elu(q_lin(Q) + k_lin(K))))``, whose rows are scores over a
    fixed number of key positions, so it needs ``n_tokens`` and ties keys to their index.

    Args:
        in_features: token size.
        n_heads: number of heads.
        head_dim: size of each head's queries, keys and values.
        compatibility: ``"dot"`` or ``"additive"``.
        n_tokens: number of tokens; required for ``"additive"`` and for ``qkv_norm="tokens"``.
        qkv_norm: ``"tokens"`` (the book), ``"features"`` or ``None``.
        bias: whether the Q/K/V projections have a bias.

    Shapes:
        ``forward(x: (B, N, in_features), mask: (N, N) bool | None) -> (B, N, n_heads *
        head_dim)``; ``mask[i, j]`` True lets query ``i`` see key ``j``.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> attn = MultiHeadSelfAttention(22, n_heads=3, head_dim=64, compatibility="additive",
        ...                               n_tokens=49)
        >>> attn(torch.randn(4, 49, 22)).shape
        torch.Size([4, 49, 192])
    """

    def __init__(
        self,
        in_features: int,
        n_heads: int = 1,
        head_dim: int = 64,
        compatibility: Compatibility = "dot",
        n_tokens: int | None = None,
        qkv_norm: QKVNorm = None,
        bias: bool = True,
    ) -> None:
        super().__init__()
        require_sizes(in_features=in_features, n_heads=n_heads, head_dim=head_dim)
        if compatibility not in ("dot", "additive"):
            raise ValueError(f"compatibility must be 'dot' or 'additive', got {compatibility!r}")
        if qkv_norm not in ("tokens", "features", None):
            raise ValueError(f"qkv_norm must be 'tokens', 'features' or None, got {qkv_norm!r}")
        if (compatibility == "additive" or qkv_norm == "tokens") and not n_tokens:
            raise ValueError(
                f"compatibility={compatibility!r} with qkv_norm={qkv_norm!r} needs n_tokens"
            )
        self.n_heads, self.head_dim, self.n_tokens = n_heads, head_dim, n_tokens
        self.compatibility = compatibility
        self.qkv = nn.Linear(in_features, 3 * n_heads * head_dim, bias=bias)
        shapes = {"tokens": (n_heads, n_tokens, head_dim), "features": (head_dim,)}
        shape = None if qkv_norm is None else shapes[qkv_norm]
        self.norms = nn.ModuleList(nn.LayerNorm(shape) for _ in range(3)) if shape else None
        if compatibility == "additive":
            assert n_tokens is not None
            self.q_lin = nn.Linear(head_dim, n_tokens)
            self.k_lin = nn.Linear(head_dim, n_tokens)
            self.a_lin = nn.Linear(n_tokens, n_tokens)

    @property
    def out_features(self) -> int:
        return self.n_heads * self.head_dim

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Q, K, V of shape ``(B, heads, N, head_dim)``, each contiguous, normalised if
        configured."""
        *batch, n, _ = x.shape
        # One copy into (three, B, heads, N, d) order (einops' "b n (three h d) -> three b h n
        # d" as a strided view cost a LayerNorm copy per tensor forward and a 5-D gather
        # backward: 7% of the DoorKey Q-network's forward + backward, same numbers).
        qkv = self.qkv(x).view(*batch, n, 3, self.n_heads, self.head_dim)
        q, k, v = qkv.movedim((-3, -2), (0, -3)).contiguous().unbind(0)
        if self.norms is not None:
            q, k, v = (norm(t) for norm, t in zip(self.norms, (q, k, v), strict=True))
        return q, k, v

    def weights(self, q: Tensor, k: Tensor, mask: Tensor | None = None) -> Tensor:
        """Attention weights ``(B, heads, N, N)`` from projected queries and keys (the
        scoring function: ``"dot"`` is what :func:`attend`'s fused kernel computes)."""
        if self.compatibility == "dot":
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        else:
            scores = self.a_lin(F.elu(self.q_lin(q) + self.k_lin(k)))
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return scores.softmax(dim=-1)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        q, k, v = self.project(x)
        scoring = functools.partial(self.weights, mask=mask)
        out = attend(self, q, k, v, scoring, fused=self.compatibility == "dot", mask=mask)
        return rearrange(out, "b h n d -> b n (h d)")
