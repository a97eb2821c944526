"""Attention maps of any model in one call.

:func:`attention_maps` runs one forward pass of a plain ``nn.Module``, an SB3 algorithm or an
SB3 policy under :func:`~attn_policies.attention.capture_attention` and returns every recorded
``(batch, head, query, key)`` map by qualified module name. Normal forward passes stay on the
fast path: nothing is materialised unless this function (or ``capture_attention``) asks.

Reducing the maps is :mod:`attn_policies.saliency`'s job, drawing them
:mod:`attn_policies.attention_plots`' and :mod:`attn_policies.attention_rollouts`'.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, TypeGuard

import numpy as np
import numpy.typing as npt
import torch
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.policies import BasePolicy
from torch import Tensor, nn

from attn_policies.attention import AttentionCapture, capture_attention

__all__ = [
    "ArrayData",
    "Model",
    "Observation",
    "as_numpy",
    "attention_maps",
    "is_sb3",
    "select_layer",
]

Model = nn.Module | BaseAlgorithm
"""What the capture and figure functions take: a plain module, an SB3 policy or algorithm."""

ArrayData = npt.ArrayLike | Tensor
"""Weights, scores or images as the figures take them: anything ``np.asarray`` reads, or a
tensor on any device (:func:`as_numpy` moves it to the CPU first)."""

Observation = ArrayData | Mapping[str, ArrayData]
"""What a model is run on: a tensor, an array or a dict of them."""


def as_numpy(x: Any) -> Any:
    """Tensors (also inside a mapping) as numpy arrays; anything else unchanged."""
    if isinstance(x, Tensor):
        return x.detach().cpu().numpy()
    if isinstance(x, Mapping):
        return {k: as_numpy(v) for k, v in x.items()}
    return x


def _as_float_tensor(x: Any, device: torch.device) -> Any:
    if isinstance(x, Mapping):
        return {k: _as_float_tensor(v, device) for k, v in x.items()}
    if isinstance(x, Tensor):
        t = x if x.is_floating_point() else x.to(torch.get_default_dtype())
    else:
        t = torch.as_tensor(np.asarray(x), dtype=torch.get_default_dtype())
    return t.to(device)


def _module_device(module: nn.Module) -> torch.device:
    for t in (*module.parameters(), *module.buffers()):
        return t.device
    return torch.device("cpu")


def attention_maps(model: Model, obs: Observation, *args: Any, **kwargs: Any) -> dict[str, Tensor]:
    """Attention weights of one forward pass, by layer name, each ``(batch, head, query, key)``.

    The model runs in eval mode under ``torch.no_grad()`` inside
    :func:`~attn_policies.attention.capture_attention`; afterwards every submodule's training
    flag is restored, so the call leaves no trace on later forward passes.

    * A plain ``nn.Module`` is called as ``model(obs, *args, **kwargs)``. ``obs`` (a tensor,
      array or dict of them) becomes float tensors on the model's device, values unchanged
      (a ``uint8`` screen stays 0..255: scale it yourself if the module expects [0, 1]); it
      is passed as given, so include the batch dimension the module expects.
    * An SB3 ``BaseAlgorithm`` stands for its ``.policy``. ``obs`` is the raw env
      observation (apply ``VecNormalize`` yourself if training used it); ``policy.obs_to_tensor``
      converts it (a single unbatched observation gets a batch dimension of 1, channels-last
      images are transposed as in training) and ``policy(obs, deterministic=True)`` runs the
      policy's own preprocessing (images / 255, one-hot) and forward pass: actor and critic
      for ``ActorCriticPolicy``, the Q-network for DQN, the actor for SAC/TD3. Policies whose
      forward needs more (recurrent ones), or calls with ``args``/``kwargs``, go through
      ``policy.predict(obs, *args, deterministic=True, **kwargs)`` instead (e.g.
      ``state=``, ``episode_start=``), which runs the actor only.

    Names are qualified module names relative to the module that runs: for SB3 the policy,
    with nothing stripped, e.g. ``"features_extractor.attention"`` (shared extractor of
    on-policy algorithms), ``"features_extractor..."`` and ``"vf_features_extractor..."``
    (separate ones: SB3's ``pi_features_extractor`` is the ``features_extractor`` module and
    ``named_modules`` keeps its first name) or ``"q_net.features_extractor..."`` (DQN; the
    target network does not run). A module that is itself an attention layer is ``"self"``;
    one called ``n`` times gives ``name[0]`` ... ``name[n-1]``.
    Layers the forward pass does not reach are absent.

    Raises:
        TypeError: if ``model`` is neither an ``nn.Module`` nor an SB3 algorithm.
        ValueError: if the model contains no :class:`AttentionCapture` module.

    Example:
        >>> from attn_policies.attention import MultiHeadSelfAttention
        >>> _ = torch.manual_seed(0)
        >>> net = nn.Sequential(MultiHeadSelfAttention(8, n_heads=2, head_dim=4))
        >>> {k: tuple(v.shape) for k, v in attention_maps(net, torch.randn(3, 5, 8)).items()}
        {'0': (3, 2, 5, 5)}
    """
    module = model.policy if isinstance(model, BaseAlgorithm) else model
    if not isinstance(module, nn.Module):
        raise TypeError(
            "attention_maps needs an nn.Module, an SB3 policy or an SB3 algorithm, "
            f"got {type(model).__name__}"
        )
    if not any(isinstance(m, AttentionCapture) for m in module.modules()):
        raise ValueError(
            f"{type(module).__name__} has no attention layer: no submodule inherits "
            "attn_policies.attention.AttentionCapture, so there are no weights to record"
        )
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        with torch.no_grad(), capture_attention(module) as maps:
            if (
                isinstance(module, BasePolicy)
                and not args
                and not kwargs
                and _forward_obs_only(module)
            ):
                module(module.obs_to_tensor(as_numpy(obs))[0], deterministic=True)
            elif isinstance(module, BasePolicy):
                module.predict(as_numpy(obs), *args, **{"deterministic": True, **kwargs})
            else:
                module(_as_float_tensor(obs, _module_device(module)), *args, **kwargs)
    finally:
        for m, training in modes:
            m.training = training
    return maps


def _forward_obs_only(policy: BasePolicy) -> bool:
    """Whether ``policy(obs, deterministic=True)`` runs (recurrent policies need states)."""
    params = list(inspect.signature(policy.forward).parameters.values())
    required = [
        p
        for p in params[1:]
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    return bool(params) and not required and any(p.name == "deterministic" for p in params)


def select_layer(maps: Mapping[str, Tensor], layer: str | int | None) -> str:
    """The recorded layer ``layer`` names: by name, by position, or the first if None.

    Example:
        >>> select_layer({"a": torch.ones(1), "b": torch.ones(1)}, -1)
        'b'
    """
    names = list(maps)
    if not names:
        raise ValueError(
            "the forward pass recorded no attention: no AttentionCapture layer was called"
        )
    if layer is None:
        return names[0]
    if isinstance(layer, int) and not isinstance(layer, bool):
        if not -len(names) <= layer < len(names):
            raise ValueError(f"layer index {layer} out of range for recorded layers {names}")
        return names[layer]
    if layer in maps:
        return str(layer)
    raise ValueError(f"no recorded attention layer {layer!r}; recorded layers: {names}")


def is_sb3(model: object) -> TypeGuard[BaseAlgorithm | BasePolicy]:
    """Whether ``model`` is an SB3 algorithm or policy (they batch observations themselves)."""
    return isinstance(model, BaseAlgorithm | BasePolicy)
