"""Non-local (SAGAN-style) self-attention in the Nature CNN, as in seed 003 (experiment E8).

Wang et al., "Non-local self-attention structure for function approximation in deep RL"
(ICASSP 2019) add a self-attention layer to the A2C Nature CNN: ``q``, ``k`` and ``v`` are
1x1 convolutions of the feature map, attention weights are a softmax of ``q·k`` scores, and
the block returns ``y_out = β·y + x`` with a learned scalar ``β`` (zero at initialisation, so
every block starts as the identity). The layer goes before conv1 (on the input), conv2,
conv3 or the fully connected layer (default), or before all four; ablations replace it by a
Conv 32 1x1 or Conv 32 3x3 layer.

Two forms of attention are provided:

* ``"row"`` (default; the form the seed says it actually ran). The seed's formula makes
  every *element* of the ``CxHxW`` map a position with a scalar query and key
  (``s_ij = q(x_i) k(x_j)``, softmax over positions, ``y_j = Σ_i a_ji v(x_i)``), and then
  says "in practice ... softmax is performed only on each row inside each feature channel"
  (Fig. 1: "The Softmax is performed on each row inside one channel"). We read "row" as an
  image row: element ``(c, h, j)`` attends to the ``W`` elements ``(c, h, i)`` of its own row
  in its own channel with weights ``softmax_i(q[c,h,j] · k[c,h,i])`` and mixes ``v[c,h,i]``.
  Since every output channel needs its own scalar queries and keys, ``q``, ``k`` and ``v``
  are all ``C → C`` 1x1 convolutions here. Scores are not scaled (the seed's formula has no
  ``1/√d``; with scalar keys the SDPA scale ``1/√1`` agrees). Cost ``O(B·C·H·W²)``. With
  ``fast_rows``, rows of at most :data:`ROW_KERNEL_MAX_WIDTH` elements (conv3 and fc on
  84x84 frames) take a kernel of their own with a closed-form backward
  (:func:`row_attention`): SDPA's CPU kernel spends most of its time on per-head overhead
  for ``C·H`` heads of ``W`` scalar tokens, twice the time there. It rounds differently, so
  it is opt-in and runs recorded without it replay to the last bit; wider rows keep SDPA,
  which never stores the ``W²`` weights.
* ``"full"`` (SAGAN, Zhang et al. 2018, which the seed cites). Every spatial position is a
  token: ``q, k: C → max(1, C // qk_reduction)`` (SAGAN's ``C/8``), ``v: C → C``, unscaled
  scores ``q_j·k_i``, softmax over all ``H·W`` positions. Cost ``O(B·(H·W)²)``: on an 84x84
  input that is 7056x7056 scores per sample, so the fast path uses
  :func:`torch.nn.functional.scaled_dot_product_attention`, whose CPU flash kernel never
  materialises them (q and k are zero-padded to the value width, which the kernel needs and
  which leaves the scores unchanged).

Captured weights (inside :func:`~attn_policies.attention.capture_attention`):

* ``"row"``: ``(B, C·H, W, W)``; head ``c·H + h`` is row ``h`` of channel ``c``, so
  ``rearrange(w, "b (c h) q k -> b c h q k", c=C)`` gives per-channel, per-row maps.
* ``"full"``: ``(B, 1, H·W, H·W)`` with row-major positions ``h·W + w``. Above
  ``max_capture_bytes`` (default 256 MiB; one 84x84 map is 199 MB) the block warns and takes
  the fast path instead of recording.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Literal, get_args

import torch
import torch.nn.functional as F
from einops import rearrange
from gymnasium import spaces
from stable_baselines3.common.preprocessing import is_image_space, is_image_space_channels_first
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import Tensor, nn
from torch.autograd.function import FunctionCtx, once_differentiable

from attn_policies import attention
from attn_policies.attention import AttentionCapture
from attn_policies.checks import require_int, require_sizes

NonLocalForm = Literal["row", "full"]
ROW_KERNEL_MAX_WIDTH = 16
"""Widest row on :func:`row_attention`; measured on the CPU with batch 80 (forward and
backward of the block): 2.0-2.3x faster than SDPA at W = 7 and 9, even at 20, 2x slower at 84."""
Position = Literal["conv1", "conv2", "conv3", "fc"]
Replacement = Literal["conv1x1", "conv3x3"]

POSITIONS: tuple[Position, ...] = get_args(Position)


class _RowAttention(torch.autograd.Function):
    """``y_i = Σ_j p_ij v_j`` with ``p_ij = softmax_j(q_i k_j)`` over the last axis.

    The backward is written out, since autograd through the softmax would keep several
    ``(..., W, W)`` tensors: with ``t_ij = p_ij (v_j - y_i)`` (the score gradient over
    ``dy_i``), ``dq_i = dy_i Σ_j t_ij k_j``, ``dk_j = Σ_i dy_i q_i t_ij`` and
    ``dv_j = Σ_i p_ij dy_i``; each sum is one batched matrix product with ``p``.
    """

    @staticmethod
    def forward(ctx: FunctionCtx, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        dtype = q.dtype
        wide = torch.promote_types(dtype, torch.float32)  # bf16 autocast hands in bf16 maps
        q, k, v = q.to(wide), k.to(wide), v.to(wide)
        # the row maximum of q_i k_j is q_i times k's largest or smallest entry
        top = torch.maximum(q * k.amax(-1, keepdim=True), q * k.amin(-1, keepdim=True))
        p = torch.addcmul(top.unsqueeze(-1).neg(), q.unsqueeze(-1), k.unsqueeze(-2)).exp_()
        p = p.div_(p.sum(-1, keepdim=True))
        y = (p @ v.unsqueeze(-1)).squeeze(-1)
        ctx.save_for_backward(q, k, v, p, y)
        ctx.dtype = dtype  # type: ignore[attr-defined]
        return y.to(dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, dy: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v, p, y = ctx.saved_tensors  # type: ignore[attr-defined]
        dy = dy.to(p.dtype)
        rows = p @ torch.stack((v * k, k), -1)  # Σ_j p_ij [v_j k_j, k_j]
        u = dy * q
        cols = p.transpose(-1, -2) @ torch.stack((dy, u, u * y), -1)  # Σ_i p_ij [...]_i
        dq = dy * (rows[..., 0] - y * rows[..., 1])
        dk = v * cols[..., 1] - cols[..., 2]
        dtype = ctx.dtype  # type: ignore[attr-defined]
        return dq.to(dtype), dk.to(dtype), cols[..., 0].to(dtype)


def row_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Attention along the last axis with scalar queries and keys: ``y_i = Σ_j
    softmax_j(q_i k_j) v_j``, without scaling; the row form's weights applied directly.

    Stores the ``(..., W, W)`` weights for the backward (use it for short rows: see
    :data:`ROW_KERNEL_MAX_WIDTH`); not twice differentiable.

    Example:
        >>> q, k, v = torch.randn(2, 3, 7), torch.randn(2, 3, 7), torch.randn(2, 3, 7)
        >>> w = (q.unsqueeze(-1) * k.unsqueeze(-2)).softmax(-1)
        >>> torch.allclose(row_attention(q, k, v), (w @ v.unsqueeze(-1)).squeeze(-1), atol=1e-6)
        True
    """
    return _RowAttention.apply(q, k, v)


class NonLocalBlock(AttentionCapture, nn.Module):
    """SAGAN-style non-local block ``y_out = β·attention(x) + x`` on ``(B, C, H, W)`` maps.

    See the module docstring for the two forms and the captured weight layouts. We cannot
    reuse :class:`~attn_policies.attention.MultiHeadSelfAttention`: its Q, K and V share one
    width and its scores are scaled by ``1/√d``, while here keys are narrower than values
    (full form) or scalar per channel (row form) and scores are unscaled, as in the seed and
    SAGAN.

    Args:
        channels: ``C``, channels of the input and output map.
        form: ``"row"`` (seed 003 in practice; the default) or ``"full"`` (SAGAN).
        qk_reduction: full form only: queries and keys have ``max(1, C // qk_reduction)``
            channels (SAGAN: 8). The row form needs ``C`` and ignores it.
        max_capture_bytes: largest weight tensor recorded while capturing; above it the
            block warns and records nothing.
        fast_rows: row form only: rows of at most :data:`ROW_KERNEL_MAX_WIDTH` elements
            on :func:`row_attention` instead of SDPA (about 2x faster on the CPU, other
            float rounding).

    Shapes:
        ``forward(x: (B, C, H, W)) -> (B, C, H, W)``.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> block = NonLocalBlock(32, form="full")
        >>> x = torch.randn(2, 32, 7, 7)
        >>> block(x).shape, torch.equal(block(x), x)  # beta starts at 0: identity
        (torch.Size([2, 32, 7, 7]), True)
        >>> [tuple(p.shape) for p in block.parameters()]
        [(), (4, 32, 1, 1), (4,), (4, 32, 1, 1), (4,), (32, 32, 1, 1), (32,)]
    """

    def __init__(
        self,
        channels: int,
        form: NonLocalForm = "row",
        qk_reduction: int = 8,
        max_capture_bytes: int = 256 * 2**20,
        fast_rows: bool = False,
    ) -> None:
        super().__init__()
        if form not in get_args(NonLocalForm):
            raise ValueError(f"form must be 'row' or 'full', got {form!r}")
        require_sizes(channels=channels, qk_reduction=qk_reduction)
        if max_capture_bytes is not None:
            require_int(max_capture_bytes, "max_capture_bytes", minimum=0)
        self.channels, self.form, self.max_capture_bytes = channels, form, max_capture_bytes
        self.fast_rows = bool(fast_rows)
        self.qk_channels = channels if form == "row" else max(1, channels // qk_reduction)
        self.beta = nn.Parameter(torch.zeros(()))
        self.query = nn.Conv2d(channels, self.qk_channels, kernel_size=1)
        self.key = nn.Conv2d(channels, self.qk_channels, kernel_size=1)
        self.value = nn.Conv2d(channels, channels, kernel_size=1)

    def extra_repr(self) -> str:
        return f"form={self.form!r}" + (", fast_rows=True" if self.fast_rows else "")

    def _tokens(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q, k, v as ``(batch, head, token, dim)``; see the module docstring for heads."""
        q, k, v = self.query(x), self.key(x), self.value(x)
        if self.form == "row":
            pattern = "b c h w -> b (c h) w 1"
            return rearrange(q, pattern), rearrange(k, pattern), rearrange(v, pattern)
        pattern = "b d h w -> b 1 (h w) d"
        return rearrange(q, pattern), rearrange(k, pattern), rearrange(v, pattern)

    @staticmethod
    def weights(q: Tensor, k: Tensor) -> Tensor:
        """The scoring function: ``softmax(q k^T)``, unscaled as in the seed and SAGAN."""
        return (q @ k.transpose(-2, -1)).softmax(dim=-1)

    def _flash(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """:meth:`weights` applied by the CPU flash kernel, which wants one contiguous width
        for q, k and v; zero columns leave q·k unchanged."""
        width = max(q.shape[-1], v.shape[-1])
        q, k, v = (F.pad(t, (0, width - t.shape[-1])).contiguous() for t in (q, k, v))
        return F.scaled_dot_product_attention(q, k, v, scale=1.0)[..., : self.channels]

    @staticmethod
    def _rows(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """:meth:`weights` applied by :func:`row_attention` to ``(B, C·H, W, 1)`` tokens."""
        return row_attention(q[..., 0], k[..., 0], v[..., 0]).unsqueeze(-1)

    def attend(self, x: Tensor) -> Tensor:
        """The attention output ``y`` (before ``β·y + x``), shape ``(B, C, H, W)``."""
        _, _, h, w = x.shape
        q, k, v = self._tokens(x)
        short = self.fast_rows and self.form == "row" and w <= ROW_KERNEL_MAX_WIDTH
        y = attention.attend(
            self, q, k, v, self.weights, fused=self._rows if short else self._flash
        )
        if self.form == "row":
            return rearrange(y, "b (c h) w 1 -> b c h w", h=h)
        # contiguous: a channels-last y would make the sum, and every conv after it,
        # channels-last too (other kernels, not bit-identical to the plain CNN at beta = 0)
        return rearrange(y, "b 1 (h w) c -> b c h w", h=h, w=w).contiguous()

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() != 4 or x.shape[1] != self.channels:
            raise ValueError(f"expected (B, {self.channels}, H, W), got {tuple(x.shape)}")
        return self.beta * self.attend(x) + x


class NonLocalNatureCNN(BaseFeaturesExtractor):
    """Nature CNN with non-local blocks (or their conv ablations) before chosen layers.

    Layers: Conv 32 8x8/4, Conv 64 4x4/2, Conv ``conv3_channels`` 3x3/1 (each + ReLU),
    flatten, Linear ``features_dim`` + ReLU. Seed 003 writes 32 filters for conv3 and is
    consistent about it (its FC input is "32x7x7", its 32-filter ablations keep that width),
    so 32 is the default; ``conv3_channels=64`` gives SB3's
    :class:`~stable_baselines3.common.torch_layers.NatureCNN` exactly (and, with ``β = 0``,
    the same outputs for the same conv and FC weights).

    ``positions`` places a :class:`NonLocalBlock` before ``"conv1"`` (on the normalised
    input), ``"conv2"``, ``"conv3"`` or ``"fc"`` (after conv3's ReLU, before flattening; the
    seed's default), any subset, ``"all"`` for the four, or ``()`` for the plain CNN.

    ``replacement`` swaps every block for the seed's ablation: Conv ``replacement_channels``
    (32) 1x1 or 3x3, stride 1. The seed's 3x3 ablation shrinks the FC input from 32x7x7 to
    32x5x5, so there is no padding; the seed names no activation, and like every other conv
    of the network the replacement is followed by a ReLU. The replacement's 32 output channels
    feed the next layer (at ``"fc"`` with the default conv3 that keeps the width at 32).
    The seed says the 1x1 ablation (1056 parameters at ``"fc"``) has as many parameters as
    the attention layer; neither form does (row 3169, full 1321: q and k cost the difference).

    Blocks live in ``self.cnn`` as ``attn_<position>`` (or ``replace_<position>``), so
    :func:`~attn_policies.attention.capture_attention` on the extractor (or a policy) yields
    keys like ``"cnn.attn_fc"``. Sizes come from a dry pass; observations must be
    channel-first images (SB3 transposes channel-last image envs and divides uint8 by 255).

    Args:
        observation_space: ``Box`` of shape ``(C, H, W)``, at least 36x36; uint8 in
            ``[0, 255]`` unless ``normalized_image``.
        features_dim: width of the FC layer (512).
        positions: where blocks go (see above); a single name is also accepted.
        form: ``"row"`` (seed 003 in practice, default) or ``"full"`` (SAGAN); see
            :class:`NonLocalBlock`.
        replacement: ``None`` (attention), ``"conv1x1"`` or ``"conv3x3"``.
        conv3_channels: filters of conv3 (seed: 32, SB3: 64).
        replacement_channels: filters of the replacement conv (seed: 32).
        qk_reduction: full form's query/key reduction (SAGAN: 8).
        normalized_image: as in SB3's ``NatureCNN`` (set by SB3 when ``normalize_images``
            is False): skip the uint8 and bounds check.
        channels_last: keep weights and activations channels-last (NHWC): the same fp32
            arithmetic, which oneDNN's CPU convolutions run about twice as fast.
        fast_rows: the blocks' short rows on :func:`row_attention` (see
            :class:`NonLocalBlock`).
        bf16: run the network under bfloat16 autocast (features come back as float32):
            faster on CPUs with bf16 units, at a precision whose effect on learning must be
            checked against fp32 (``benchmarks/atari.py``).

    Example:
        >>> _ = torch.manual_seed(0)
        >>> space = spaces.Box(0, 255, (4, 84, 84), dtype="uint8")
        >>> ext = NonLocalNatureCNN(space, positions=("conv3", "fc"))
        >>> ext(torch.rand(2, 4, 84, 84)).shape
        torch.Size([2, 512])
        >>> [name for name, _ in ext.cnn.named_children() if name.startswith("attn")]
        ['attn_conv3', 'attn_fc']
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        features_dim: int = 512,
        positions: Sequence[Position] | Literal["all"] = ("fc",),
        form: NonLocalForm = "row",
        replacement: Replacement | None = None,
        conv3_channels: int = 32,
        replacement_channels: int = 32,
        qk_reduction: int = 8,
        normalized_image: bool = False,
        channels_last: bool = False,
        bf16: bool = False,
        fast_rows: bool = False,
    ) -> None:
        require_sizes(
            features_dim=features_dim,
            conv3_channels=conv3_channels,
            replacement_channels=replacement_channels,
            qk_reduction=qk_reduction,
        )
        if not isinstance(observation_space, spaces.Box) or len(observation_space.shape) != 3:
            raise TypeError(
                "NonLocalNatureCNN needs a Box image space of shape (C, H, W), got "
                f"{observation_space}"
            )
        if not is_image_space(
            observation_space, check_channels=False, normalized_image=normalized_image
        ):
            raise ValueError(
                f"NonLocalNatureCNN needs a uint8 image space with bounds [0, 255], got "
                f"{observation_space}; pass normalized_image=True (SB3: normalize_images=False)"
                " for float images"
            )
        if not is_image_space_channels_first(observation_space):
            raise ValueError(
                f"NonLocalNatureCNN needs channel-first (C, H, W) images, got shape "
                f"{observation_space.shape}; transpose them (SB3's VecTransposeImage)"
            )
        super().__init__(observation_space, features_dim)
        self.positions = _positions(positions)
        if form not in get_args(NonLocalForm):
            raise ValueError(f"form must be 'row' or 'full', got {form!r}")
        if replacement not in (*get_args(Replacement), None):
            raise ValueError(
                f"replacement must be None, 'conv1x1' or 'conv3x3', got {replacement!r}"
            )
        if replacement is not None and not self.positions:
            raise ValueError(f"replacement={replacement!r} needs at least one position")
        self.form, self.replacement = form, replacement

        layers: OrderedDict[str, nn.Module] = OrderedDict()
        channels = observation_space.shape[0]
        convs = {
            "conv1": (32, 8, 4),
            "conv2": (64, 4, 2),
            "conv3": (conv3_channels, 3, 1),
        }
        for position in POSITIONS:
            if position in self.positions:
                if replacement is None:
                    layers[f"attn_{position}"] = NonLocalBlock(
                        channels, form, qk_reduction, fast_rows=fast_rows
                    )
                else:
                    size = 1 if replacement == "conv1x1" else 3
                    conv = nn.Conv2d(channels, replacement_channels, kernel_size=size)
                    layers[f"replace_{position}"] = nn.Sequential(conv, nn.ReLU())
                    channels = replacement_channels
            if position in convs:
                out, kernel, stride = convs[position]
                layers[position] = nn.Conv2d(channels, out, kernel_size=kernel, stride=stride)
                layers[f"relu_{position}"] = nn.ReLU()
                channels = out
        layers["flatten"] = nn.Flatten()
        self.cnn = nn.Sequential(layers)

        try:
            with torch.no_grad():
                n_flatten = self.cnn(torch.zeros(1, *observation_space.shape)).shape[1]
        except RuntimeError as err:
            raise ValueError(
                f"image {observation_space.shape[1:]} is too small for NonLocalNatureCNN "
                f"(positions={self.positions}, replacement={replacement!r}): {err}"
            ) from err
        self.linear = nn.Sequential(nn.Linear(n_flatten, features_dim), nn.ReLU())
        self.channels_last, self.bf16 = bool(channels_last), bool(bf16)

    def forward(self, observations: Tensor) -> Tensor:
        if self.channels_last:
            # The weights move at the first forward, not in __init__: SB3's orthogonal init
            # (a .view of each weight) runs after the extractor is built and needs NCHW.
            for weight in self.cnn.parameters():
                if weight.dim() == 4 and not weight.is_contiguous(
                    memory_format=torch.channels_last
                ):
                    weight.data = weight.data.contiguous(memory_format=torch.channels_last)
            observations = observations.contiguous(memory_format=torch.channels_last)
        with torch.autocast(observations.device.type, torch.bfloat16, enabled=self.bf16):
            features = self.linear(self.cnn(observations))
        return features.float()


def _positions(positions: Sequence[Position] | Literal["all"]) -> tuple[Position, ...]:
    """Validated positions in network order."""
    if positions == "all":
        return POSITIONS
    if isinstance(positions, str):
        positions = (positions,)  # type: ignore[assignment]
    chosen = tuple(positions)
    unknown = [p for p in chosen if p not in POSITIONS]
    if unknown or len(set(chosen)) != len(chosen):
        raise ValueError(
            f"positions must be distinct names from {POSITIONS} or 'all', got {positions!r}"
        )
    return tuple(p for p in POSITIONS if p in chosen)
