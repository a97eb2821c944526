"""The thesis's non-attention baselines on AtariARI feature observations (seed 002, E7).

**Baselines.** :class:`FeatureFCExtractor` (shared per-feature embedding, then two fully
connected layers) and :class:`FeatureCNNExtractor` (parallel 1-D convolutions with kernels
3/5/7 along the feature axis, channels = time steps; ``deep=True`` is the a-CNN, with enough
layers, at most 20, for the receptive field ``1 + n·6`` to cover all ``L`` features).

Their widths are not in the thesis ("enough filters to match the attention models' number
of parameters"); the parameter counts at Pong ``L = 8`` and their growth at ``2L`` / ``4L``
are listed beside the attention models' in :mod:`attn_policies.awrl`.

Observations are ``(stack, L)`` Boxes of :class:`attn_envs.DistractorFeatureObservation` (raw
RAM bytes 0..255; wrap the env in ``VecNormalize`` for training).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from einops import rearrange
from gymnasium import spaces
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import Tensor, nn

from attn_policies.checks import require_sizes

__all__ = [
    "FeatureCNNExtractor",
    "FeatureFCExtractor",
    "ParallelConv1d",
    "dry_run",
    "feature_shape",
    "layers_to_span",
]


def feature_shape(space: spaces.Space, name: str) -> tuple[int, int]:
    """``(stack, n_features)`` of a feature-observation Box, or a clear error."""
    if not isinstance(space, spaces.Box):
        raise TypeError(
            f"{name} needs a Box observation space of shape (stack, n_features), as made by "
            f"attn_envs.DistractorFeatureObservation; got {space!r}"
        )
    if len(space.shape) != 2 or min(space.shape) < 1:
        raise ValueError(
            f"{name} needs observations of shape (stack, n_features), got shape {space.shape}"
        )
    return int(space.shape[0]), int(space.shape[1])


def dry_run(module: nn.Module, fn: Callable[[Tensor], Tensor], space: spaces.Space) -> Tensor:
    """``fn`` on one zero observation, in eval mode (batch-norm buffers stay untouched)."""
    was_training = module.training
    module.train(False)
    assert space.shape is not None, "dry_run needs a space with a shape"
    with torch.no_grad():
        out = fn(torch.zeros((1, *space.shape), dtype=torch.float32))
    module.train(was_training)
    return out


class FeatureFCExtractor(BaseFeaturesExtractor):
    """The thesis's FC baseline: a shared per-feature embedding, then fully connected layers.

    Each feature's ``stack`` values go through the same ``Linear(stack → embed_dim)`` + ReLU
    (the thesis's "feature-wise embedding"), the ``L`` embeddings are flattened and passed
    through ``net_arch`` (Linear + ReLU each; default 512 then 32, the 32-unit latent of table
    7.2's FC row).

    Args:
        observation_space: Box of shape ``(stack, L)``.
        embed_dim: width of the shared per-feature embedding.
        net_arch: widths of the fully connected layers after the embedding.
        activation_fn: activation after every layer.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> ext = FeatureFCExtractor(spaces.Box(0, 255, (4, 8)))
        >>> ext(torch.rand(2, 4, 8)).shape
        torch.Size([2, 32])
        >>> sum(p.numel() for p in ext.parameters())  # table 7.2: 146,080
        148160
    """

    def __init__(
        self,
        observation_space: spaces.Box,
        embed_dim: int = 32,
        net_arch: Sequence[int] = (512, 32),
        activation_fn: type[nn.Module] = nn.ReLU,
    ) -> None:
        stack, _ = feature_shape(observation_space, type(self).__name__)
        super().__init__(observation_space, features_dim=1)
        self.embed = nn.Sequential(nn.Linear(stack, embed_dim), activation_fn())
        n_flat = dry_run(self, self._embed_flat, observation_space).shape[1]
        layers: list[nn.Module] = []
        for width in net_arch:
            layers += [nn.Linear(n_flat, width), activation_fn()]
            n_flat = width
        self.mlp = nn.Sequential(*layers)
        self._features_dim = n_flat

    def _embed_flat(self, observations: Tensor) -> Tensor:
        return self.embed(rearrange(observations, "b t n -> b n t")).flatten(1)

    def forward(self, observations: Tensor) -> Tensor:
        return self.mlp(self._embed_flat(observations))


class ParallelConv1d(nn.Module):
    """Parallel ``Conv1d`` branches with odd kernels and "same" padding, concatenated.

    ``(B, C_in, L) -> (B, len(kernel_sizes) · channels, L)``.

    Example:
        >>> ParallelConv1d(4, 8)(torch.zeros(2, 4, 10)).shape
        torch.Size([2, 24, 10])
    """

    def __init__(
        self, in_channels: int, channels: int, kernel_sizes: Sequence[int] = (3, 5, 7)
    ) -> None:
        super().__init__()
        if not kernel_sizes or any(k < 1 or k % 2 == 0 for k in kernel_sizes):
            raise ValueError(f"kernel_sizes must be odd and positive, got {tuple(kernel_sizes)}")
        self.convs = nn.ModuleList(
            nn.Conv1d(in_channels, channels, k, padding=k // 2) for k in kernel_sizes
        )
        self.out_channels = channels * len(kernel_sizes)

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([conv(x) for conv in self.convs], dim=1)


def layers_to_span(n_features: int, kernel_size: int = 7, max_layers: int = 20) -> int:
    """Fewest stacked stride-1 layers whose receptive field ``1 + n (k - 1)`` covers
    ``n_features``, capped at ``max_layers``.

    Example:
        >>> [layers_to_span(n) for n in (8, 16, 32, 41, 82, 164)]
        [2, 3, 6, 7, 14, 20]
    """
    return min(max_layers, max(1, math.ceil((n_features - 1) / (kernel_size - 1))))


class FeatureCNNExtractor(BaseFeaturesExtractor):
    """The thesis's CNN baselines: parallel 1-D convolutions (kernels 3/5/7) over the features.

    The ``stack`` time steps are the input channels and the ``L`` features the length axis.
    Every layer is a :class:`ParallelConv1d` (``channels`` filters per kernel) + ReLU. The base
    CNN (``deep=False``) has two layers; the a-CNN (``deep=True``) has
    ``max(2, layers_to_span(L))`` layers, so that one output position sees all ``L`` features
    (receptive field ``1 + 6 n``), at most ``max_layers = 20`` (thesis: "up to 20"; for
    ``L > 121``, e.g. Asteroids 4L = 164, the cap leaves the field at 121). ``n_layers``
    overrides both. The flattened maps feed policy and value directly, as for g-AWRL (table
    7.2); ``fc_dim`` adds a final FC (+ ReLU). The a-CNN keeps the base CNN's width, so it
    grows by one layer's parameters per extra layer (see the module docstring).

    Args:
        observation_space: Box of shape ``(stack, L)``.
        deep: a-CNN (enough layers to span ``L``) instead of the two-layer base CNN.
        channels: filters per kernel size in every layer.
        kernel_sizes: odd kernel sizes of the parallel branches.
        n_layers: explicit number of layers (overrides ``deep``).
        max_layers: cap on the a-CNN's depth.
        fc_dim: width of an extra final FC; ``None`` (default): the flattened maps.
        activation_fn: activation after every layer.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> space = spaces.Box(0, 255, (4, 41))
        >>> deep = FeatureCNNExtractor(space, deep=True, channels=8)
        >>> deep.n_layers, deep.receptive_field, deep(torch.rand(2, 4, 41)).shape
        (7, 43, torch.Size([2, 984]))
        >>> base = FeatureCNNExtractor(spaces.Box(0, 255, (4, 8)))
        >>> sum(p.numel() for p in base.parameters())  # table 7.2: 125,184
        125112
    """

    def __init__(
        self,
        observation_space: spaces.Box,
        deep: bool = False,
        channels: int = 52,
        kernel_sizes: Sequence[int] = (3, 5, 7),
        n_layers: int | None = None,
        max_layers: int = 20,
        fc_dim: int | None = None,
        activation_fn: type[nn.Module] = nn.ReLU,
    ) -> None:
        stack, n_features = feature_shape(observation_space, type(self).__name__)
        if n_layers is None:
            n_layers = (
                max(2, layers_to_span(n_features, max(kernel_sizes), max_layers)) if deep else 2
            )
        require_sizes(n_layers=n_layers, channels=channels, max_layers=max_layers)
        if fc_dim is not None:
            require_sizes(fc_dim=fc_dim)
        super().__init__(observation_space, features_dim=1)
        self.n_layers, self.kernel_sizes = n_layers, tuple(kernel_sizes)
        layers: list[nn.Module] = []
        in_channels = stack
        for _ in range(n_layers):
            conv = ParallelConv1d(in_channels, channels, kernel_sizes)
            layers += [conv, activation_fn()]
            in_channels = conv.out_channels
        self.convs = nn.Sequential(*layers)
        n_flat = dry_run(self, self.convs, observation_space).flatten(1).shape[1]
        self.fc: nn.Module = (
            nn.Sequential(nn.Linear(n_flat, fc_dim), activation_fn())
            if fc_dim is not None
            else nn.Identity()
        )
        self._features_dim = fc_dim if fc_dim is not None else n_flat

    @property
    def receptive_field(self) -> int:
        return 1 + self.n_layers * (max(self.kernel_sizes) - 1)

    def forward(self, observations: Tensor) -> Tensor:
        return self.fc(self.convs(observations).flatten(1))
