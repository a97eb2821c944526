"""The relational module of *Deep Reinforcement Learning in Action*, ch. 10 (experiments E1, E2).

A small conv stem turns an image into a ``H' x W'`` grid of feature vectors; each grid cell,
with its ``(x, y)`` coordinates appended, becomes a node. One self-attention layer relates
the nodes, ``Linear(heads * d -> d) + ReLU + LayerNorm`` updates them and a max over nodes
reduces the set to one ``d``-vector.

Pieces, from small to large:

* :func:`image_to_nodes` and :func:`build_conv_stem`: image -> node set.
* :class:`RelationalModule`: node set ``(B, N, F)`` -> ``(B, d)``.
* :class:`RelationalTrunk`: image ``(B, C, H, W)`` -> ``(B, d)`` (stem + module), sized by a
  dry pass.
* :class:`RelationalMNIST` / :class:`CNNMNIST`: the book's MNIST classifier (listings
  10.2/10.3, 85,228 parameters) and its CNN baseline (listing 10.6, 88,252 parameters).
* :class:`RelationalDoorKey`: the book's multi-head relational Q-network (listing 10.7).
* :class:`RelationalExtractor`: the trunk as an SB3 features extractor (defaults: DoorKey).
* :class:`RelationalDQNPolicy`: SB3 ``DQNPolicy`` whose Q-network is exactly listing 10.7
  (extractor, ``net_arch=[]``, ``Linear(64 -> n_actions)``, final ``elu``).

Attention weights are recorded through :func:`attn_policies.attention.capture_attention`;
the extractor's map has shape ``(batch, heads, nodes, nodes)``, ``(B, 3, 49, 49)`` for
DoorKey.

Permutation symmetry. With ``compatibility="dot"`` and ``qkv_norm="features"`` (or ``None``)
the module is invariant to the order of its nodes: every step is per node or symmetric in the
nodes, and the output LayerNorm over ``(N, d)`` has no affine weights, so its statistics are
symmetric in the nodes too. The book's choices break this: ``qkv_norm="tokens"`` (LayerNorm
over ``(heads, N, d)`` with affine weights) gives each node *position* its own scale and shift
(invariant only while those weights are still 1 and 0, i.e. at initialisation), and the
additive compatibility scores each query against a fixed list of ``N`` key *positions*
(``q_lin``/``k_lin`` map a node to ``N`` scores, one per key index), so it is
position-dependent from the start. The coordinates appended by :func:`image_to_nodes` travel
with their nodes, so "invariant" means: shuffling the node list (after coordinates are
attached) leaves the output unchanged; the image itself is of course not shuffle invariant.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from einops import rearrange
from gymnasium import spaces
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.dqn.policies import DQNPolicy, QNetwork
from torch import Tensor, nn

from attn_policies.attention import (
    Compatibility,
    MultiHeadSelfAttention,
    QKVNorm,
    append_coordinates,
)

StemSpec = str | Sequence[tuple[int, int]]

#: Conv stems of the book: ``(out_channels, kernel)`` per layer, each conv followed by ReLU.
STEM_PRESETS: dict[str, tuple[tuple[int, int], ...]] = {
    "doorkey": ((16, 1), (20, 1)),  # listing 10.7: 1x1 convs keep the 7x7 grid cells apart
    "mnist": ((16, 4), (20, 4), (24, 4), (30, 4)),  # listing 10.2: 28x28 -> 16x16
}


def image_to_nodes(x: Tensor) -> Tensor:
    """Append coordinates to ``(B, C, H, W)`` and flatten the grid: ``(B, H * W, C + 2)``.

    Nodes are listed row by row (the book's ``permute(0, 2, 3, 1).flatten(1, 2)``); the last
    two features are the node's ``x`` and ``y`` in ``[0, 1)``.

    Example:
        >>> image_to_nodes(torch.zeros(2, 20, 7, 7)).shape
        torch.Size([2, 49, 22])
    """
    return rearrange(append_coordinates(x), "b c h w -> b (h w) c")


def build_conv_stem(in_channels: int, layers: StemSpec) -> nn.Sequential:
    """Stride-1, unpadded ``Conv2d + ReLU`` layers from ``(out_channels, kernel)`` pairs.

    Args:
        in_channels: channels of the input image.
        layers: a preset name from :data:`STEM_PRESETS` (``"doorkey"``, ``"mnist"``) or a
            sequence of ``(out_channels, kernel)`` pairs; an empty sequence is the identity.

    Example:
        >>> build_conv_stem(1, "mnist")(torch.zeros(1, 1, 28, 28)).shape
        torch.Size([1, 30, 16, 16])
    """
    if isinstance(layers, str):
        if layers not in STEM_PRESETS:
            raise ValueError(
                f"unknown conv stem preset {layers!r}; choose from {list(STEM_PRESETS)}"
            )
        layers = STEM_PRESETS[layers]
    modules: list[nn.Module] = []
    for spec in layers:
        if len(spec) != 2 or min(spec) < 1:
            raise ValueError(f"conv stem layers are (out_channels, kernel) >= 1, got {spec!r}")
        out_channels, kernel = (int(v) for v in spec)
        modules += [nn.Conv2d(in_channels, out_channels, kernel), nn.ReLU()]
        in_channels = out_channels
    return nn.Sequential(*modules)


class RelationalModule(nn.Module):
    """The book's relational module: self-attention over nodes, update, max over nodes.

    ``nodes -> MultiHeadSelfAttention -> Linear(heads * d -> d) -> ReLU ->
    LayerNorm over (N, d), no affine -> max over nodes``. Q, K and V are
    ``Linear(in_features -> heads * d)`` projections (one fused layer, same parameters as the
    book's three), each normalised as ``qkv_norm`` says. The book uses ``qkv_norm="tokens"``
    (LayerNorm over ``(heads, N, d)``; for one head, the MNIST model's ``(N, d)``) with
    ``"dot"`` attention for MNIST and ``"additive"`` attention
    ``softmax(a_lin(elu(q_lin(Q) + k_lin(K))))`` for DoorKey. ``compatibility="dot"`` with
    ``qkv_norm="features"`` (per-node LayerNorm) or ``None`` is invariant to the node order
    and works for any number of nodes (see the module docstring).

    Args:
        in_features: node size, coordinates included (the book: conv channels + 2).
        node_size: ``d``, size of each head's Q/K/V and of the output.
        n_heads: attention heads.
        compatibility: ``"dot"`` (scaled dot product) or ``"additive"``.
        qkv_norm: ``"tokens"`` (the book), ``"features"`` or ``None``.
        n_nodes: number of nodes; required by ``"additive"`` and ``qkv_norm="tokens"``.

    Shapes:
        ``forward(nodes: (B, N, in_features)) -> (B, node_size)``.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> module = RelationalModule(22, node_size=64, n_heads=3, compatibility="additive",
        ...                           n_nodes=49)
        >>> module(torch.randn(4, 49, 22)).shape
        torch.Size([4, 64])
        >>> sym = RelationalModule(6, node_size=8, qkv_norm="features")  # any N, order-free
        >>> sym(torch.randn(2, 5, 6)).shape
        torch.Size([2, 8])
    """

    def __init__(
        self,
        in_features: int,
        node_size: int = 64,
        n_heads: int = 1,
        compatibility: Compatibility = "dot",
        qkv_norm: QKVNorm = "tokens",
        n_nodes: int | None = None,
    ) -> None:
        super().__init__()
        if (compatibility == "additive" or qkv_norm == "tokens") and not n_nodes:
            raise ValueError(
                f"compatibility={compatibility!r} with qkv_norm={qkv_norm!r} ties weights to node "
                "positions and needs n_nodes; use 'dot' with qkv_norm='features' for any N"
            )
        self.node_size, self.n_nodes = node_size, n_nodes
        self.attention = MultiHeadSelfAttention(
            in_features,
            n_heads=n_heads,
            head_dim=node_size,
            compatibility=compatibility,
            n_tokens=n_nodes,
            qkv_norm=qkv_norm,
        )
        self.linear = nn.Linear(self.attention.out_features, node_size)

    def forward(self, nodes: Tensor) -> Tensor:
        if self.n_nodes is not None and nodes.shape[1] != self.n_nodes:
            raise ValueError(f"expected {self.n_nodes} nodes, got input {tuple(nodes.shape)}")
        e = F.relu(self.linear(self.attention(nodes)))
        e = F.layer_norm(e, e.shape[-2:])  # the book's LayerNorm([N, d], no affine)
        return e.amax(dim=1)


class RelationalTrunk(nn.Module):
    """Image ``(B, C, H, W)`` -> conv stem -> coordinates -> :class:`RelationalModule`.

    The number of nodes and their size are read off a dry pass of the stem on zeros of
    ``in_shape``, so any stem that leaves at least one grid cell works.

    Args:
        in_shape: ``(C, H, W)`` of one input image.
        conv_stem: preset name (``"doorkey"``, ``"mnist"``) or ``(out_channels, kernel)``
            pairs, see :func:`build_conv_stem`.
        node_size, n_heads, compatibility, qkv_norm: as in :class:`RelationalModule`.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> trunk = RelationalTrunk((3, 7, 7))  # the book's DoorKey trunk
        >>> trunk(torch.rand(2, 3, 7, 7)).shape, trunk.n_nodes
        (torch.Size([2, 64]), 49)
    """

    def __init__(
        self,
        in_shape: Sequence[int],
        conv_stem: StemSpec = "doorkey",
        node_size: int = 64,
        n_heads: int = 3,
        compatibility: Compatibility = "additive",
        qkv_norm: QKVNorm = "tokens",
    ) -> None:
        super().__init__()
        if len(in_shape) != 3 or min(in_shape) < 1:
            raise ValueError(f"in_shape must be (C, H, W) with positive sizes, got {in_shape}")
        self.stem = build_conv_stem(int(in_shape[0]), conv_stem)
        try:
            with torch.no_grad():
                nodes = image_to_nodes(self.stem(torch.zeros(1, *in_shape)))
        except RuntimeError as err:
            raise ValueError(
                f"conv stem {conv_stem!r} does not fit an input of shape {tuple(in_shape)}: {err}"
            ) from err
        _, self.n_nodes, in_features = nodes.shape
        self.relational = RelationalModule(
            in_features,
            node_size=node_size,
            n_heads=n_heads,
            compatibility=compatibility,
            qkv_norm=qkv_norm,
            n_nodes=self.n_nodes,
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.relational(image_to_nodes(self.stem(x)))


class RelationalMNIST(nn.Module):
    """The book's relational MNIST classifier (listings 10.2/10.3), 85,228 parameters.

    Four ``4x4`` convs ``1 -> 16 -> 20 -> 24 -> 30`` with ReLU (28x28 -> 16x16 = 256 nodes),
    two coordinate channels (nodes of size 32), single-head scaled dot-product attention with
    node size 36 and Q/K/V LayerNorm over ``(N, d)``, ``Linear(36 -> 36) + ReLU + LayerNorm``
    (no affine), max over nodes, ``Linear(36 -> 10)``, ``log_softmax``. Train it with
    ``nn.NLLLoss`` (the book: Adam, lr 1e-3, batches of 300).

    Shapes:
        ``forward(x: (B, 1, 28, 28) in [0, 1]) -> (B, 10)`` log-probabilities.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> model = RelationalMNIST()
        >>> sum(p.numel() for p in model.parameters())
        85228
        >>> model(torch.rand(2, 1, 28, 28)).shape
        torch.Size([2, 10])
    """

    def __init__(self, n_classes: int = 10) -> None:
        super().__init__()
        self.trunk = RelationalTrunk(
            (1, 28, 28), "mnist", node_size=36, n_heads=1, compatibility="dot", qkv_norm="tokens"
        )
        self.head = nn.Linear(36, n_classes)

    def forward(self, x: Tensor) -> Tensor:
        return F.log_softmax(self.head(self.trunk(x)), dim=-1)


class CNNMNIST(nn.Module):
    """The book's CNN baseline for :class:`RelationalMNIST` (listing 10.6), 88,252 parameters.

    ``4x4`` convs ``1 -> 10 -> 16``, ``MaxPool 2``, ``16 -> 24 -> 32 -> 64``, each conv
    followed by ReLU (28 -> 25 -> 22 -> 11 -> 8 -> 5 -> 2), flatten (256),
    ``Linear(256 -> 128) + ReLU``, ``Linear(128 -> 10)``, ``log_softmax``. The chapter's text
    lost this listing; the activation placement follows the book's published notebook.

    Shapes:
        ``forward(x: (B, 1, 28, 28)) -> (B, 10)`` log-probabilities.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> model = CNNMNIST()
        >>> sum(p.numel() for p in model.parameters())
        88252
        >>> model(torch.rand(2, 1, 28, 28)).shape
        torch.Size([2, 10])
    """

    def __init__(self, n_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 10, 4),
            nn.ReLU(),
            nn.Conv2d(10, 16, 4),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 24, 4),
            nn.ReLU(),
            nn.Conv2d(24, 32, 4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            n_flat = self.features(torch.zeros(1, 1, 28, 28)).shape[1]
        self.head = nn.Sequential(nn.Linear(n_flat, 128), nn.ReLU(), nn.Linear(128, n_classes))

    def forward(self, x: Tensor) -> Tensor:
        return F.log_softmax(self.head(self.features(x)), dim=-1)


class RelationalDoorKey(nn.Module):
    """The book's multi-head relational Q-network for DoorKey (listing 10.7), 91,597 params.

    ``1x1`` convs ``3 -> 16 -> 20`` with ReLU, coordinates (49 nodes of size 22), K/Q/V
    ``Linear(22 -> 3 * 64)`` with LayerNorm over ``(heads, N, d)``, additive attention
    ``softmax(a_lin(elu(q_lin(Q) + k_lin(K))))``, ``Linear(192 -> 64) + ReLU + LayerNorm``
    (no affine), max over nodes, ``Linear(64 -> n_actions)``, ``elu``. A standalone torch
    module for custom (double) DQN loops; with SB3 use :class:`RelationalDQNPolicy`, which
    builds the same network (same parameter count, same outputs for the same weights).

    Shapes:
        ``forward(x: (B, 3, 7, 7)) -> (B, n_actions)`` Q-values (``>= -1`` because of the elu).

    Example:
        >>> _ = torch.manual_seed(0)
        >>> q = RelationalDoorKey()
        >>> sum(p.numel() for p in q.parameters())
        91597
        >>> q(torch.rand(2, 3, 7, 7)).shape
        torch.Size([2, 5])
    """

    def __init__(self, n_actions: int = 5, in_shape: Sequence[int] = (3, 7, 7)) -> None:
        super().__init__()
        self.trunk = RelationalTrunk(in_shape)
        self.head = nn.Linear(self.trunk.relational.node_size, n_actions)

    def forward(self, x: Tensor) -> Tensor:
        return F.elu(self.head(self.trunk(x)))


class RelationalExtractor(BaseFeaturesExtractor):
    """SB3 features extractor: image observation -> relational trunk -> ``(B, node_size)``.

    Defaults are the book's DoorKey setup (``attn_envs/EgocentricDoorKey-5x5-v0``, obs
    ``Box(0, 1, (3, 7, 7))``): 1x1 conv stem ``3 -> 16 -> 20``, 3 heads, node size 64, additive
    attention, Q/K/V LayerNorm over ``(heads, N, d)``. The book's MNIST trunk is
    ``conv_stem="mnist", n_heads=1, node_size=36, compatibility="dot"`` on ``(1, 28, 28)``.
    Observations must be channel-first ``(C, H, W)``: SB3 transposes ``uint8`` images itself
    (and scales them to ``[0, 1]``), float ``Box`` images must already be ``(C, H, W)``.

    The book's Q-network puts ``Linear(64 -> 5)`` and an ``elu`` on top of this trunk. With
    SB3's DQN, ``DQN(RelationalDQNPolicy, env)`` builds exactly that;
    ``DQN("MlpPolicy", env, policy_kwargs=dict(features_extractor_class=RelationalExtractor,
    net_arch=[]))`` gives the same network without the final ``elu``. With PPO/A2C the
    usual ``net_arch`` heads sit on top of the ``node_size`` features.

    Args:
        observation_space: ``Box`` of shape ``(C, H, W)``.
        conv_stem: preset (``"doorkey"``, ``"mnist"``) or ``(out_channels, kernel)`` pairs.
        n_heads: attention heads.
        node_size: size of each head and of the features (``features_dim``).
        compatibility: ``"additive"`` (the book's DoorKey) or ``"dot"``.
        qkv_norm: ``"tokens"`` (the book), ``"features"`` (node-order invariant with
            ``"dot"``) or ``None``.
        bf16: run the trunk under bfloat16 autocast (features come back as float32): its
            forward + backward about 1.5x faster on CPUs with bf16 units (DoorKey's batch of
            50), but bf16's 3 significant digits blur Q-values that differ by a few
            hundredths: on DoorKey (``doorkey_fast``, seed 0) it had not learnt by 25,000 steps
            where fp32 solved every validation episode. Off by default.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> space = spaces.Box(0.0, 1.0, (3, 7, 7))
        >>> ext = RelationalExtractor(space)
        >>> ext.features_dim, ext(torch.rand(4, 3, 7, 7)).shape
        (64, torch.Size([4, 64]))
        >>> from attn_policies.attention import capture_attention
        >>> with capture_attention(ext) as maps:
        ...     _ = ext(torch.rand(4, 3, 7, 7))
        >>> {k: tuple(v.shape) for k, v in maps.items()}
        {'trunk.relational.attention': (4, 3, 49, 49)}
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        conv_stem: StemSpec = "doorkey",
        n_heads: int = 3,
        node_size: int = 64,
        compatibility: Compatibility = "additive",
        qkv_norm: QKVNorm = "tokens",
        bf16: bool = False,
    ) -> None:
        if not isinstance(observation_space, spaces.Box):
            raise TypeError(
                f"RelationalExtractor needs a Box image observation space of shape (C, H, W), "
                f"got {observation_space}"
            )
        if len(observation_space.shape) != 3:
            raise ValueError(
                f"RelationalExtractor needs a channel-first image Box of shape (C, H, W), "
                f"got shape {observation_space.shape}"
            )
        super().__init__(observation_space, features_dim=node_size)
        self.trunk = RelationalTrunk(
            observation_space.shape,
            conv_stem=conv_stem,
            node_size=node_size,
            n_heads=n_heads,
            compatibility=compatibility,
            qkv_norm=qkv_norm,
        )
        self.bf16 = bool(bf16)

    def forward(self, observations: Tensor) -> Tensor:
        if not self.bf16:
            return self.trunk(observations)
        with torch.autocast(observations.device.type, torch.bfloat16):
            return self.trunk(observations).float()


class ELUQNetwork(QNetwork):
    """SB3 ``QNetwork`` whose Q-values pass through a final ``elu`` (book listing 10.7)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.q_net.append(nn.ELU())


class RelationalDQNPolicy(DQNPolicy):
    """SB3 DQN policy that is the book's relational Q-network (listing 10.7).

    A ``DQNPolicy`` with :class:`RelationalExtractor` as default extractor, ``net_arch=[]``
    as default head (one ``Linear(node_size -> n_actions)``) and an ``elu`` on the Q-values
    (:class:`ELUQNetwork`), so ``DQN(RelationalDQNPolicy, env)`` on
    ``attn_envs/EgocentricDoorKey-5x5-v0`` has exactly :class:`RelationalDoorKey`'s layers.
    The ``elu`` bounds Q-values below by -1, which suits DoorKey's returns (step penalty
    -0.01, goal reward below 1). All ``DQNPolicy`` arguments still apply, e.g.
    ``policy_kwargs=dict(features_extractor_kwargs=dict(node_size=32))``.
    The book's trainer (double Q-learning, rewarding transitions inserted 50 times) is
    :class:`~attn_policies.algorithms.DoubleDQN` with
    :class:`~attn_policies.algorithms.OversamplingReplayBuffer`.

    Example:
        >>> import gymnasium as gym, attn_envs
        >>> from stable_baselines3 import DQN
        >>> model = DQN(RelationalDQNPolicy, gym.make("attn_envs/EgocentricDoorKey-5x5-v0"),
        ...             buffer_size=1000, seed=0, device="cpu")
        >>> sum(p.numel() for p in model.q_net.parameters())
        91597
        >>> model.q_net.q_net
        Sequential(
          (0): Linear(in_features=64, out_features=5, bias=True)
          (1): ELU(alpha=1.0)
        )
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Discrete,
        lr_schedule: Any,
        net_arch: list[int] | None = None,
        activation_fn: type[nn.Module] = nn.ReLU,
        features_extractor_class: type[BaseFeaturesExtractor] = RelationalExtractor,
        features_extractor_kwargs: dict[str, Any] | None = None,
        normalize_images: bool = True,
        optimizer_class: type[torch.optim.Optimizer] = torch.optim.Adam,
        optimizer_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(
            observation_space,
            action_space,
            lr_schedule,
            net_arch=[] if net_arch is None else net_arch,
            activation_fn=activation_fn,
            features_extractor_class=features_extractor_class,
            features_extractor_kwargs=features_extractor_kwargs,
            normalize_images=normalize_images,
            optimizer_class=optimizer_class,
            optimizer_kwargs=optimizer_kwargs,
        )

    def make_q_net(self) -> QNetwork:
        net_args = self._update_features_extractor(self.net_args, features_extractor=None)
        return ELUQNetwork(**net_args).to(self.device)
