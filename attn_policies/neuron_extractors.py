"""SB3 feature extractors around the AttentionNeuron layers of seed 001, and Dict parsing.

* :class:`AttentionNeuronExtractor` (Puzzle Pong student, E5) and
  :class:`AttentionNeuronVectorExtractor` (vector envs): SB3 ``BaseFeaturesExtractor``\\ s.

How ``a_{t-1}`` and the recurrent key state reach each extractor:

* ``a_{t-1}``: SB3 policies only see the observation, so the env must carry it:
  ``attn_envs.PreviousActionObservation`` adds it as a ``"prev_action"`` Dict entry (one-hot
  for Discrete, the clipped action for Box, zeros after reset), and the extractors read it
  from there. The ES agents feed their own last output back through their state instead.
* Recurrent keys (vector case): SB3's feed-forward policies cannot carry extractor state, so
  the env stacks the last ``T`` Dict observations
  (``FrameStackObservation(PreviousActionObservation(env), T)``) and
  :class:`AttentionNeuronVectorExtractor` unrolls the LSTM over that window from a zero state
  (:meth:`AttentionNeuron.forward_sequence`). The keys then remember ``T`` steps, not the whole
  episode; ``T = 1`` (no stacking) still works. ``sb3_contrib.RecurrentPPO`` can wrap the
  extractor too (its LSTM sits *after* the extractor, so it adds memory of ``m_t``, not of
  the keys). The ES agents (:mod:`attn_policies.es_policies`) keep the true per-neuron LSTM
  state explicitly instead.
* The vision layer is stateless: the frame stack in each token carries the temporal signal.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange
from gymnasium import spaces
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import Tensor, nn

from attn_policies.attention_neuron import AttentionNeuron, VisionAttentionNeuron
from attn_policies.checks import require_sizes

__all__ = ["AttentionNeuronExtractor", "AttentionNeuronVectorExtractor", "split_dict_space"]


def split_dict_space(
    space: spaces.Space, obs_key: str, action_key: str, name: str
) -> tuple[spaces.Box, spaces.Box | None]:
    """The (observation, previous action) Boxes of a Dict or plain Box observation space."""
    if isinstance(space, spaces.Box):
        return space, None
    if isinstance(space, spaces.Dict):
        missing = [k for k in (obs_key, action_key) if k not in space.spaces]
        if missing:
            raise ValueError(
                f"{name} needs Dict entries {obs_key!r} and {action_key!r} (as "
                f"attn_envs.PreviousActionObservation makes); {missing} missing from "
                f"{list(space.spaces)}"
            )
        extra = sorted(set(space.spaces) - {obs_key, action_key})
        if extra:
            raise ValueError(f"{name} would ignore the Dict entries {extra}; remove them")
        obs, act = space.spaces[obs_key], space.spaces[action_key]
        for key, sub in ((obs_key, obs), (action_key, act)):
            if not isinstance(sub, spaces.Box):
                raise TypeError(f"{name}: Dict entry {key!r} must be a Box, got {sub}")
        return obs, act  # type: ignore[return-value]
    raise TypeError(
        f"{name} needs a Box or a Dict({obs_key!r}, {action_key!r}) observation space, got "
        f"{type(space).__name__}: {space}"
    )


class AttentionNeuronExtractor(BaseFeaturesExtractor):
    """The Puzzle Pong student (E5): VisionAttentionNeuron -> 2-D grid -> CNN -> FC(512).

    ``m_t`` ``(M, d_v)`` = ``(400, 32)`` is read as a ``20 x 20`` grid of 32 channels, then (as
    in the authors' ``PuzzlePongSolution``) ReLU, Conv(32->64, k4, s2) + ReLU,
    Conv(64->64, k3, s1) + ReLU, flatten (3136), Linear(3136->512) + ReLU. The article's last
    layer FC(512->6) is SB3's ``action_net``; pass ``policy_kwargs=dict(net_arch=[])`` to get
    exactly the article's network (SB3's default adds 64-64 MLP heads).

    Observation: ``Dict({obs_key: Box (N, P*P*C), action_key: Box (|A|,)})`` as produced by
    ``attn_envs.PreviousActionObservation(gym.make("attn_envs/PuzzlePong-v0"))``. SB3 does not
    scale a 2-D ``uint8`` Box (it is not an image space), so a ``uint8`` token Box is divided by
    255 here; other dtypes are used as they come. (As in the article, the previous action
    cannot actually influence the features; see :class:`VisionAttentionNeuron`.) A plain
    token ``Box`` is accepted too: then
    there is no previous action -- the keys are the frame differences alone unless
    ``action_dim`` is given, in which case zeros are fed in its place (same weight shapes as a
    Dict-trained model).

    Args:
        observation_space: see above; ``N`` may differ at call time.
        n_queries: ``M``; ``sqrt(M)`` must be an integer (the grid side, >= 8 for the convs).
        conv_channels: output channels of the two convolutions.
        features_dim: width of the last FC layer.
        action_dim: only for a plain Box space (see above).
        obs_key, action_key: Dict entry names.
        **neuron_kwargs: ``query_dim``, ``qk_dim``, ``value_dim``, ``patch_size``,
            ``layer_norm_affine`` of :class:`VisionAttentionNeuron`; ``n_frames`` is inferred
            from the token size.

    Example:
        >>> import numpy as np
        >>> from gymnasium import spaces
        >>> space = spaces.Dict({"observation": spaces.Box(0, 255, (196, 144), np.uint8),
        ...                      "prev_action": spaces.Box(0.0, 1.0, (6,))})
        >>> _ = torch.manual_seed(0)
        >>> ext = AttentionNeuronExtractor(space)
        >>> obs = {"observation": torch.zeros(2, 196, 144), "prev_action": torch.zeros(2, 6)}
        >>> ext(obs).shape
        torch.Size([2, 512])
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        n_queries: int = 400,
        conv_channels: tuple[int, int] = (64, 64),
        features_dim: int = 512,
        action_dim: int | None = None,
        obs_key: str = "observation",
        action_key: str = "prev_action",
        **neuron_kwargs: object,
    ) -> None:
        channels = tuple(conv_channels)
        if len(channels) != 2:
            raise ValueError(f"conv_channels must be two sizes, got {conv_channels!r}")
        require_sizes(
            n_queries=n_queries,
            conv_channels_0=channels[0],
            conv_channels_1=channels[1],
            features_dim=features_dim,
        )
        super().__init__(observation_space, features_dim)
        name = type(self).__name__
        token_space, action_space = split_dict_space(observation_space, obs_key, action_key, name)
        if len(token_space.shape) != 2:
            raise ValueError(
                f"{name} needs patch tokens of shape (n_patches, patch_size**2 * n_frames) "
                f"(PatchObservation with flatten=True), got {token_space.shape}"
            )
        if action_space is not None:
            if len(action_space.shape) != 1:
                raise ValueError(
                    f"{name}: {action_key!r} must be a 1-D Box, got {action_space.shape}"
                )
            if action_dim is not None and action_dim != action_space.shape[0]:
                raise ValueError(
                    f"{name}: action_dim={action_dim} contradicts the {action_key!r} Box "
                    f"{action_space.shape}"
                )
            action_dim = action_space.shape[0]
        side = math.isqrt(n_queries)
        if n_queries < 1 or side * side != n_queries:
            raise ValueError(
                f"{name}: n_queries must be a perfect square (the codes form a sqrt(M) x "
                f"sqrt(M) grid), got {n_queries}"
            )
        patch_size = int(neuron_kwargs.pop("patch_size", 6))  # type: ignore[call-overload]
        token_dim = token_space.shape[1]
        if token_dim % (patch_size * patch_size):
            raise ValueError(
                f"{name}: token size {token_dim} is not a multiple of patch_size**2 = "
                f"{patch_size**2}"
            )
        self.is_dict = action_space is not None
        self.obs_key, self.action_key = obs_key, action_key
        self.input_scale = 1.0 / 255.0 if token_space.dtype == np.uint8 else 1.0
        self.grid_side = side
        self.neuron = VisionAttentionNeuron(
            action_dim=action_dim or 0,
            n_queries=n_queries,
            patch_size=patch_size,
            n_frames=token_dim // (patch_size * patch_size),
            **neuron_kwargs,  # type: ignore[arg-type]
        )
        c1, c2 = conv_channels
        self.cnn = nn.Sequential(
            nn.Conv2d(self.neuron.value_dim, c1, kernel_size=4, stride=2),
            nn.ReLU(),
            nn.Conv2d(c1, c2, kernel_size=3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            grid = torch.zeros(1, self.neuron.value_dim, side, side)
            try:
                n_flatten = self.cnn(grid).shape[1]
            except RuntimeError as err:
                raise ValueError(
                    f"{name}: a {side}x{side} grid (n_queries={n_queries}) is too small for "
                    "Conv(k4, s2) then Conv(k3, s1); use n_queries >= 64"
                ) from err
        self.linear = nn.Sequential(nn.Linear(n_flatten, features_dim), nn.ReLU())

    def forward(self, observations: Tensor | dict[str, Tensor]) -> Tensor:
        if self.is_dict:
            assert isinstance(observations, dict)
            tokens, prev_action = observations[self.obs_key], observations[self.action_key]
        else:
            assert isinstance(observations, Tensor)
            tokens, prev_action = observations, None
        m = self.neuron(tokens, prev_action, scale=self.input_scale)  # uint8 stays uint8
        grid = rearrange(m, "b (h w) c -> b c h w", h=self.grid_side)
        return self.linear(self.cnn(F.relu(grid)))


class AttentionNeuronVectorExtractor(BaseFeaturesExtractor):
    """AttentionNeuron features ``m_t`` (``features_dim = M``) for vector envs under SB3.

    Observation: ``Dict({obs_key: Box (N,) or (T, N), action_key: Box (A,) or (T, A)})``, i.e.
    ``PreviousActionObservation(env)``, optionally wrapped in ``FrameStackObservation(., T)``.
    The key LSTM is unrolled from a zero state over the ``T`` stacked steps
    (:meth:`AttentionNeuron.forward_sequence`) and the last step attends. A plain Box ``(N,)``
    or ``(T, N)`` is accepted too; then the key network sees no previous action
    (``action_dim = 0``). Works under ``sb3_contrib.RecurrentPPO`` (``MultiInputLstmPolicy``).

    Args:
        observation_space: see above; ``N`` may differ at call time.
        n_queries: ``M``, the output width.
        **neuron_kwargs: ``query_dim``, ``key_hidden``, ``msg_dim``, ``bias``, ``scale``,
            ``attention``, ``output_scale`` of :class:`AttentionNeuron`.

    Example:
        >>> import numpy as np
        >>> from gymnasium import spaces
        >>> space = spaces.Dict({"observation": spaces.Box(-np.inf, np.inf, (4, 5)),
        ...                      "prev_action": spaces.Box(-1.0, 1.0, (4, 1))})
        >>> _ = torch.manual_seed(0)
        >>> ext = AttentionNeuronVectorExtractor(space, n_queries=16)
        >>> ext({"observation": torch.randn(3, 4, 5), "prev_action": torch.zeros(3, 4, 1)}).shape
        torch.Size([3, 16])
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        n_queries: int = 16,
        obs_key: str = "observation",
        action_key: str = "prev_action",
        **neuron_kwargs: object,
    ) -> None:
        super().__init__(observation_space, n_queries)
        name = type(self).__name__
        obs_space, action_space = split_dict_space(observation_space, obs_key, action_key, name)
        if len(obs_space.shape) not in (1, 2):
            raise ValueError(
                f"{name} needs a vector observation (N,) or a stacked window (T, N), got "
                f"{obs_space.shape}"
            )
        self.stacked = len(obs_space.shape) == 2
        action_dim = 0
        if action_space is not None:
            expected = (obs_space.shape[0], "A") if self.stacked else ("A",)
            if len(action_space.shape) != len(expected) or (
                self.stacked and action_space.shape[0] != obs_space.shape[0]
            ):
                raise ValueError(
                    f"{name}: {action_key!r} must have shape {expected} to match the "
                    f"observation {obs_space.shape}, got {action_space.shape}"
                )
            action_dim = action_space.shape[-1]
        self.is_dict = action_space is not None
        self.obs_key, self.action_key = obs_key, action_key
        self.neuron = AttentionNeuron(action_dim, n_queries, **neuron_kwargs)  # type: ignore[arg-type]

    def forward(self, observations: Tensor | dict[str, Tensor]) -> Tensor:
        if self.is_dict:
            assert isinstance(observations, dict)
            obs, prev = observations[self.obs_key], observations[self.action_key]
        else:
            assert isinstance(observations, Tensor)
            obs, prev = observations, None
        if not self.stacked:
            obs = obs.unsqueeze(1)
            prev = None if prev is None else prev.unsqueeze(1)
        return self.neuron.forward_sequence(obs, prev)
