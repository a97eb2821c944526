"""d-AWRL and g-AWRL on AtariARI feature observations, with the thesis baselines (seed 002, E7).

Bramlage (2020), "Generalized Attention-Weighted Reinforcement Learning", turns the AWRL value
model ``V(S) = Σ_f φ(f) v(f, S)`` into self-attention over feature tokens (thesis §4.3,
§5.3, supplementary D):

* **Tokens.** An observation of :class:`attn_envs.DistractorFeatureObservation` is a
  ``(stack, L)`` Box: ``L`` features (played game + distractor games, shuffled once per run),
  ``stack = 4`` time steps. Each feature is one token whose value is its ``stack`` stacked
  values, so an attention map is ``L x L``. (The thesis figures also show maps over
  ``4L`` per-time-step tokens; the one-token-per-feature layout is the one table 7.2's
  counts fit, see below.)
* **Extractor** (:class:`AWRLExtractor`). Per-token linear up-scaling ``Linear(stack → d)``,
  ``d = 128``; the feature's sine-cosine code (:func:`~attn_policies.attention.sinusoidal_table`
  of its position) is *added* (thesis eq. 4.6 appends it; adding keeps the count at table 7.2's
  and makes the three Q/K modes below the same size); then two attention modules, each, in the
  thesis's order, multi-head self-attention (4 heads, ``d_k = d_v = 32``), a per-token linear
  up-scaling ``Linear(4·32 → d)`` and batch-norm over the ``d`` channels, followed by ReLU
  (the thesis names no activation; SB3 puts one after every layer).
* **g-AWRL** (``variant="g"``): full softmax attention; the flattened tokens feed policy and
  value. §5.3 speaks of "a final, fully connected layer that feeds into policy- and
  value-outputs", but table 7.2 counts 131,712 inference parameters for the attention models
  and a policy head of 6,150 = 6 · (8 · 128) + 6 at Pong L: the heads read the flattened
  ``L · 128`` tokens directly, so that FC is the policy/value layer itself. ``fc_dim`` adds
  an extra FC (off by default).
* **d-AWRL** (``variant="d"``): attention masked to the diagonal, so no token ever reads
  another (eq. 4.9: ``V = Σ_i ⟨q_i, k_i⟩ W^i e(S_i)``). A plain softmax over a diagonal-only
  mask would make every weight 1, and the thesis says "one must not apply a softmax ... but
  instead use the ... inner product of query and key representations. Alternatively, the
  softmax may be applied across the diagonal". ``diagonal="dot"`` (default) uses the scaled
  inner product ``φ_i = q_i·k_i / √d_k`` unnormalised; ``diagonal="softmax"`` normalises the
  ``L`` diagonal scores of each head with a softmax across features (which couples the
  *gains* of the tokens, though each token's representation still only scales its own
  embedding). No final FC: the extractor returns the flattened per-token representations.
* **Q/K modes** (thesis §5.6, ``attend_on``): ``"both"`` adds the positional code to the
  tokens before the first module, so Q, K and V see content and position; ``"content"``
  uses no positional code anywhere in the attention stack (the stack is permutation
  equivariant; feature identity enters only through the order of the flattened output);
  ``"address"`` computes Q and K in every module from the positional code alone (maps do
  not depend on the observation) while V carries the content.

**d-AWRL in SB3** (:class:`DAWRLPolicy`). SB3's value head is one ``Linear`` on the latent.
:class:`DAWRLPolicy` is an ``ActorCriticPolicy`` that builds ``AWRLExtractor(variant="d")``,
forces ``net_arch=[]`` (an identity ``mlp_extractor``: a hidden MLP would mix features) and
replaces ``value_net`` and ``action_net`` by :class:`FeatureSumHead`\\ s, which compute
``V(s) = Σ_i v_i(token_i) + b`` and ``logits(s) = Σ_i W_π^i token_i + b_π`` from the
per-feature representations (thesis §5.4: "the same will effectively be true for the
pre-softmax logits"). With ``share_feature_heads=False`` (default, thesis eq. 4.7) each
feature has its own weights ``W^i``; that is exactly a ``Linear(L·d → 1)`` on the flattened
tokens, and gives table 7.2's head sizes (Pong: 6,150 and 1,025). With
``share_feature_heads=True`` one ``Linear(d → 1)`` (and ``Linear(d → n_actions)``) is shared by
all features. :meth:`DAWRLPolicy.feature_values` returns the per-feature terms ``v_i``.
Batch-norm statistics in training mode are taken over the batch and all tokens (as in the
thesis); in eval mode every step of d-AWRL is per token.

**Layers** (:mod:`attn_policies.awrl_layers`): :class:`~attn_policies.awrl_layers.AWRLSelfAttention`
and :class:`~attn_policies.awrl_layers.AWRLBlock`, the attention module the extractor stacks.

**Baselines** (:mod:`attn_policies.feature_baselines`).
:class:`FeatureFCExtractor` and :class:`FeatureCNNExtractor` (base CNN and a-CNN).

**Parameter counts** (table 7.2; Pong, 6 actions). Attention: inference 131,712, policy
6,150, value 1,025. ``AWRLExtractor(variant="d")`` has exactly 131,712 = 640 (``Linear(4 →
128)``) + 2 · 4 · 128² (Q, K, V and up-scaling, no biases) for every ``L`` and ``attend_on``,
and :class:`DAWRLPolicy`'s heads on Pong (``L = 8``, latent ``8·128 = 1024``) have 6,150 and
1,025: the row matches the ``d``-variant stack with bias-free projections and a batch-norm
without affine weights (``batch_norm_affine=True`` adds 512). g-AWRL adds its final FC on top.
g-AWRL has the same count as d-AWRL (the diagonal mask has no parameters); all ``attend_on``
modes too. The baselines' widths are not in the thesis ("enough filters to match the
attention models' number of parameters") and their rows (CNN 125,184 with heads 19,974 /
3,329, i.e. a 3,328-wide latent; FC 146,080 with a 32-unit latent) fit no layout we could
derive uniquely; the defaults match the inference counts on Pong ``L = 8`` within 2%: the
base CNN's two layers (52 filters per kernel, no final FC) have 125,112 (latent
``3 · 52 · L = 1,248``, heads 7,494 / 1,249), the FC baseline (embedding 32, layers 512 and
32) 148,160 (heads 198 / 33).

**Growth at 2L / 4L** (defaults, Pong ``L`` = 8 / 16 / 32, 6 actions). Attention: the
inference stack is 131,712 at every ``L`` (tokens share all weights); only the heads grow,
``(A + 1)(128 L + 1)``: 6,150 + 1,025 / 12,294 + 2,049 / 24,582 + 4,097. CNN: 125,112 at
every ``L``, heads ``(A + 1)(156 L + 1)``. a-CNN: the same 52 filters per kernel and no FC,
with ``max(2, ⌈(L - 1) / 6⌉)`` layers (2 / 3 / 6 at Pong, 7 / 14 / 20 at Asteroids), each
layer after the second adding 121,836 (Pong: 125,112 / 246,948 / 612,456). FC: the first
layer reads ``32 L`` inputs, so it grows linearly (148,160 / 279,232 / 541,376).

Observations are raw RAM bytes (0..255); the thesis normalises observations, so wrap the env
in ``VecNormalize`` for training.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Literal

import torch
import torch.nn.functional as F
from einops import rearrange
from gymnasium import spaces
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.preprocessing import preprocess_obs
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.type_aliases import PyTorchObs, Schedule
from torch import Tensor, nn

from attn_policies.attention import sinusoidal_table
from attn_policies.awrl_layers import AWRLBlock, Diagonal
from attn_policies.checks import require_int, require_sizes
from attn_policies.feature_baselines import dry_run, feature_shape

__all__ = ["AWRLExtractor", "DAWRLPolicy", "FeatureSumHead"]

Variant = Literal["g", "d"]
AttendOn = Literal["both", "content", "address"]


class AWRLExtractor(BaseFeaturesExtractor):
    """g-AWRL / d-AWRL feature extractor for ``(stack, L)`` feature observations.

    See the module docstring for the architecture and the reading of the thesis.

    Args:
        observation_space: Box of shape ``(stack, L)``.
        variant: ``"g"`` (full attention + final FC) or ``"d"`` (diagonal attention, no FC).
        attend_on: where queries and keys come from: ``"both"`` (content + position),
            ``"content"`` (no positional code) or ``"address"`` (positional code only).
        embed_dim: token width ``d`` (up-scaling output).
        n_heads: attention heads per module.
        head_dim: ``d_k = d_v`` per head.
        n_blocks: attention modules.
        diagonal: d-AWRL normalisation, ``"dot"`` (default) or ``"softmax"``; g-AWRL takes
            none.
        fc_dim: width of an extra FC after the attention modules (g-AWRL only; ``None``, the
            default, and ``"auto"``: none, the flattened tokens, as table 7.2 counts).
        activation_fn: activation after each module and the FC.
        batch_norm_affine: learnable batch-norm scale and shift (off for table 7.2's count).
        batch_stats: batch-norm with the current batch's statistics in eval mode too, instead
            of running statistics. SB3's on-policy algorithms act in eval mode and update in
            train mode; with running statistics the acting and the updated policy differ
            (on a Pong L agent trained so, their action distributions were 1.06 apart in L1
            of at most 2), which breaks PPO's ratio and clipping. Batch statistics in both
            (as OpenAI's coinrun PPO and PyTorch code that never calls ``eval()``) keep them
            equal up to the batch drawn; the output then depends on the batch, so test with
            as many envs as the rollouts use.

    Shapes:
        ``forward: (B, stack, L) -> (B, features_dim)``; :meth:`tokens` gives the per-token
        representations ``(B, L, embed_dim)``. Without FC, ``features_dim = L · embed_dim``
        laid out token by token.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> space = spaces.Box(0, 255, (4, 8))
        >>> ext = AWRLExtractor(space, variant="d")
        >>> ext(torch.rand(2, 4, 8) * 255).shape
        torch.Size([2, 1024])
        >>> sum(p.numel() for p in ext.parameters())  # thesis table 7.2
        131712
        >>> g = AWRLExtractor(space, variant="g", attend_on="address")
        >>> g.features_dim, sum(p.numel() for p in g.parameters())
        (1024, 131712)
    """

    def __init__(
        self,
        observation_space: spaces.Box,
        variant: Variant = "g",
        attend_on: AttendOn = "both",
        embed_dim: int = 128,
        n_heads: int = 4,
        head_dim: int = 32,
        n_blocks: int = 2,
        diagonal: Diagonal | None = None,
        fc_dim: int | Literal["auto"] | None = None,
        activation_fn: type[nn.Module] = nn.ReLU,
        batch_norm_affine: bool = False,
        batch_stats: bool = False,
    ) -> None:
        stack, n_tokens = feature_shape(observation_space, type(self).__name__)
        if variant not in ("g", "d"):
            raise ValueError(f"variant must be 'g' or 'd', got {variant!r}")
        if attend_on not in ("both", "content", "address"):
            raise ValueError(f"attend_on must be 'both', 'content' or 'address', got {attend_on!r}")
        if variant == "g" and diagonal is not None:
            raise ValueError(f"diagonal={diagonal!r} is for variant='d' only")
        if variant == "d" and fc_dim not in ("auto", None):
            raise ValueError(f"d-AWRL has no final FC layer; got fc_dim={fc_dim!r}")
        if fc_dim == "auto":
            fc_dim = None
        if fc_dim is not None:
            require_int(fc_dim, "fc_dim ('auto', None or a size)")
        require_sizes(embed_dim=embed_dim, n_heads=n_heads, head_dim=head_dim, n_blocks=n_blocks)
        super().__init__(observation_space, features_dim=1)
        self.variant, self.attend_on = variant, attend_on
        self.n_tokens, self.token_dim = n_tokens, embed_dim
        self.embed = nn.Linear(stack, embed_dim)
        self.register_buffer("position", sinusoidal_table(n_tokens, embed_dim)[None], False)
        diag: Diagonal | None = (diagonal or "dot") if variant == "d" else None
        self.blocks = nn.ModuleList(
            AWRLBlock(
                embed_dim, n_heads, head_dim, diag, activation_fn, batch_norm_affine, batch_stats
            )
            for _ in range(n_blocks)
        )
        n_flat = dry_run(self, self.tokens, observation_space).flatten(1).shape[1]
        self.fc: nn.Module = (
            nn.Sequential(nn.Linear(n_flat, fc_dim), activation_fn())
            if fc_dim is not None
            else nn.Identity()
        )
        self._features_dim = fc_dim if fc_dim is not None else n_flat

    def tokens(self, observations: Tensor) -> Tensor:
        """Per-token representations after the attention modules, ``(B, L, embed_dim)``."""
        h = self.embed(rearrange(observations, "b t n -> b n t"))
        position: Tensor = self.position  # type: ignore[assignment]
        if self.attend_on == "both":
            h = h + position
        qk_input = position if self.attend_on == "address" else None
        for block in self.blocks:
            h = block(h, qk_input=qk_input)
        return h

    def forward(self, observations: Tensor) -> Tensor:
        return self.fc(self.tokens(observations).flatten(1))


class FeatureSumHead(nn.Module):
    """A linear readout that is a sum of per-feature terms: ``y = Σ_i W^i x_i + b``.

    The input is the flattened ``(n_tokens, token_dim)`` token matrix. ``shared=False`` gives
    every feature its own ``W^i`` (thesis eq. 4.7; identical to ``Linear(n_tokens · token_dim
    → out)``), ``shared=True`` one ``W`` for all features. :meth:`contributions` returns the
    terms ``W^i x_i``, ``(B, n_tokens, out_features)``, without the bias.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> head = FeatureSumHead(8, 128, 1)
        >>> x = torch.randn(2, 8 * 128)
        >>> torch.allclose(head(x), head.contributions(x).sum(1) + head.linear.bias, atol=1e-5)
        True
    """

    def __init__(
        self, n_tokens: int, token_dim: int, out_features: int, shared: bool = False
    ) -> None:
        super().__init__()
        self.n_tokens, self.token_dim, self.shared = n_tokens, token_dim, shared
        self.linear = nn.Linear(token_dim if shared else n_tokens * token_dim, out_features)

    def contributions(self, latent: Tensor) -> Tensor:
        x = rearrange(latent, "b (n d) -> b n d", n=self.n_tokens)
        if self.shared:
            return F.linear(x, self.linear.weight)
        weight = rearrange(self.linear.weight, "o (n d) -> n d o", n=self.n_tokens)
        return torch.einsum("bnd,ndo->bno", x, weight)

    def forward(self, latent: Tensor) -> Tensor:
        if self.shared:
            return self.contributions(latent).sum(1) + self.linear.bias
        return self.linear(latent)


class DAWRLPolicy(ActorCriticPolicy):
    """Actor-critic policy for d-AWRL: value and logits are sums of per-feature terms.

    Builds ``AWRLExtractor(variant="d")`` (its other kwargs via ``features_extractor_kwargs``),
    an identity ``mlp_extractor`` (``net_arch=[]``; anything else is refused) and
    :class:`FeatureSumHead` value and action heads, so ``V(s) = Σ_i v_i(s) + b`` where ``v_i``
    reads only token ``i``. ``share_feature_heads`` selects per-feature (thesis, default) or
    shared head weights. Works with PPO and A2C and any action space whose SB3 action net is
    a ``Linear`` (Discrete, Box, MultiDiscrete, MultiBinary).

    Args:
        observation_space, action_space, lr_schedule: as for ``ActorCriticPolicy``.
        net_arch: must be ``None`` or empty.
        share_feature_heads: one head shared by all features instead of one per feature.
        features_extractor_class: :class:`AWRLExtractor` or a subclass.
        features_extractor_kwargs: extractor kwargs; ``variant`` defaults to ``"d"``.
        **kwargs: the other ``ActorCriticPolicy`` arguments.

    Example:
        >>> _ = torch.manual_seed(0)
        >>> space = spaces.Box(0, 255, (4, 8))
        >>> policy = DAWRLPolicy(space, spaces.Discrete(6), lambda _: 2.5e-4)
        >>> [sum(p.numel() for p in m.parameters())
        ...  for m in (policy.features_extractor, policy.action_net, policy.value_net)]
        [131712, 6150, 1025]
        >>> policy.feature_values(torch.rand(3, 4, 8) * 255).shape
        torch.Size([3, 8])
    """

    # the heads _build puts in place of SB3's Linear ones (SB3 types value_net as nn.Linear)
    action_net: FeatureSumHead
    value_net: FeatureSumHead  # type: ignore[assignment]

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        net_arch: list[int] | dict[str, list[int]] | None = None,
        *,
        share_feature_heads: bool = False,
        features_extractor_class: type[BaseFeaturesExtractor] = AWRLExtractor,
        features_extractor_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if net_arch not in (None, [], {}) and net_arch != {"pi": [], "vf": []}:
            raise ValueError(
                f"DAWRLPolicy needs net_arch=[] (a hidden MLP would mix features), got {net_arch!r}"
            )
        if not (
            isinstance(features_extractor_class, type)
            and issubclass(features_extractor_class, AWRLExtractor)
        ):
            raise TypeError(
                "DAWRLPolicy needs AWRLExtractor(variant='d') as features extractor, got "
                f"{features_extractor_class!r}"
            )
        self.share_feature_heads = share_feature_heads
        super().__init__(
            observation_space,
            action_space,
            lr_schedule,
            net_arch=[],
            features_extractor_class=features_extractor_class,
            features_extractor_kwargs={"variant": "d", **(features_extractor_kwargs or {})},
            **kwargs,
        )

    def _build(self, lr_schedule: Schedule) -> None:
        for ext in (self.pi_features_extractor, self.vf_features_extractor):
            if not isinstance(ext, AWRLExtractor) or ext.variant != "d":
                raise TypeError(
                    "DAWRLPolicy needs AWRLExtractor(variant='d') as features extractor, got "
                    f"{type(ext).__name__}(variant={getattr(ext, 'variant', None)!r})"
                )
        super()._build(lr_schedule)
        if not isinstance(self.action_net, nn.Linear):
            raise TypeError(f"unsupported action net {type(self.action_net).__name__}")
        pi_extractor = self.pi_features_extractor
        assert isinstance(pi_extractor, AWRLExtractor)  # checked above
        n, d = pi_extractor.n_tokens, pi_extractor.token_dim
        shared = self.share_feature_heads
        self.action_net = FeatureSumHead(n, d, self.action_net.out_features, shared)
        self.value_net = FeatureSumHead(n, d, 1, shared)
        if self.ortho_init:
            self.action_net.apply(partial(self.init_weights, gain=0.01))
            self.value_net.apply(partial(self.init_weights, gain=1))
        # as SB3's own _build: Optimizer's hint has no lr, its subclasses all take one
        self.optimizer = self.optimizer_class(
            self.parameters(),
            lr=lr_schedule(1),  # type: ignore[call-arg]
            **self.optimizer_kwargs,
        )

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data["share_feature_heads"] = self.share_feature_heads
        return data

    def _extract(self, obs: PyTorchObs, extractor: BaseFeaturesExtractor) -> Tensor:
        return extractor(preprocess_obs(obs, self.observation_space, self.normalize_images))

    def feature_values(self, obs: PyTorchObs) -> Tensor:
        """Per-feature values ``v_i(s)``, ``(B, L)``; ``V(s)`` is their sum plus a bias."""
        latent = self.mlp_extractor.forward_critic(self._extract(obs, self.vf_features_extractor))
        return self.value_net.contributions(latent).squeeze(-1)

    def feature_logits(self, obs: PyTorchObs) -> Tensor:
        """Per-feature action logits (or means), ``(B, L, n_outputs)``, without the bias."""
        latent = self.mlp_extractor.forward_actor(self._extract(obs, self.pi_features_extractor))
        return self.action_net.contributions(latent)
