"""The seeds' attention figures in one call, from a model (and an env or observation).

Each function runs :func:`~attn_policies.capture.attention_maps` on the model (a plain
``nn.Module``, an SB3 policy or algorithm), reduces the maps with
:mod:`attn_policies.saliency` and draws them with :mod:`attn_policies.attention_plots`:

* :func:`doorkey_attention_figure` -- book fig. 10.24, agent/key/door rows x heads over the
  DoorKey view.
* :func:`feature_attention_figure` -- thesis fig. 4.4.2, feature attention over a rollout.
* :func:`top_patches_figure` -- seed 001's CarRacing figure, the top-K attended patches.
* :func:`saliency_figure` -- book fig. 10.25, a spatial layer's saliency over the frame.
"""

from __future__ import annotations

from typing import Any, Literal

import gymnasium as gym
import numpy as np
import numpy.typing as npt
import torch
from matplotlib.figure import Figure
from stable_baselines3.common.base_class import BaseAlgorithm
from torch import Tensor

from attn_policies.attention_plots import (
    Head,
    PathLike,
    doorkey_frame,
    doorkey_grid,
    doorkey_nodes,
    plot_feature_attention,
    plot_grid_attention,
    plot_saliency,
    plot_top_patches,
)
from attn_policies.capture import (
    ArrayData,
    Model,
    Observation,
    as_numpy,
    attention_maps,
    is_sb3,
    select_layer,
)
from attn_policies.checks import require_int
from attn_policies.saliency import attention_saliency, patch_scores, split_time_blocks

__all__ = [
    "doorkey_attention_figure",
    "feature_attention_figure",
    "saliency_figure",
    "top_patches_figure",
]


def _batched(model: Model, obs: Observation, unbatched_ndim: int) -> Observation:
    """``obs`` with a batch axis for plain modules (SB3 policies add it themselves)."""
    if is_sb3(model):
        return obs
    x = as_numpy(obs)
    return np.asarray(x)[None] if np.ndim(x) == unbatched_ndim else x


def doorkey_attention_figure(
    model: Model,
    obs: ArrayData,
    grid: Any = None,
    *,
    layer: str | int | None = None,
    path: PathLike | None = None,
) -> Figure:
    """Book fig. 10.24 in one call: agent/key/door rows x heads over the DoorKey view.

    Runs :func:`attention_maps` on one ``attn_envs/EgocentricDoorKey-*`` observation
    ``(3, 7, 7)`` (a plain module gets a batch axis), finds the nodes with
    :func:`doorkey_nodes` in ``grid`` (the ``info`` returned with ``obs``, or its raw grid;
    default ``obs`` itself, which works only for an unscaled observation,
    ``EgocentricGridObservation(scale=None)``) and draws :func:`plot_grid_attention` upright
    (agent at the bottom centre) over :func:`doorkey_frame`. ``layer`` picks a recorded layer
    by name or position (default the first); its keys must be the view's cells.

    Raises:
        ValueError: if ``obs`` is not one view, or ``grid`` holds no raw grid of its shape.

    Example:
        >>> import gymnasium as gym, attn_envs
        >>> from einops import rearrange
        >>> from torch import nn
        >>> from attn_policies.attention import MultiHeadSelfAttention
        >>> class Nodes(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.attention = MultiHeadSelfAttention(3, n_heads=3, head_dim=4)
        ...     def forward(self, x):
        ...         return self.attention(rearrange(x, "b c h w -> b (h w) c"))
        >>> obs, info = gym.make("attn_envs/EgocentricDoorKey-5x5-v0").reset(seed=2)
        >>> fig = doorkey_attention_figure(Nodes(), obs, info)
        >>> len(fig.axes), [ax.get_ylabel() for ax in fig.axes[::3]]
        (10, ['agent', 'key', 'door', 'attention'])
    """
    single = np.asarray(as_numpy(obs))
    if single.ndim != 3:
        raise ValueError(f"need one DoorKey observation of shape (3, H, W), got {single.shape}")
    cells = doorkey_grid(single if grid is None else grid)
    if cells.shape != single.shape:
        raise ValueError(f"raw grid of shape {cells.shape} for an observation of {single.shape}")
    maps = attention_maps(model, _batched(model, single, 3))
    weights = maps[select_layer(maps, layer)][0]
    return plot_grid_attention(
        weights,
        doorkey_nodes(cells),
        grid_shape=single.shape[1:],
        frame=doorkey_frame(cells),
        transpose=True,
        path=path,
    )


def _model_action(model: Model, obs: Any, env: gym.Env) -> Any:
    if is_sb3(model):
        policy = model.policy if isinstance(model, BaseAlgorithm) else model
        return policy.predict(obs, deterministic=True)[0]
    return env.action_space.sample()


def feature_attention_figure(
    model: Model,
    env: gym.Env | str,
    n_steps: int = 4,
    layer: str | int | None = None,
    head: Head = "mean",
    seed: int = 0,
    *,
    layout: Literal["rollout", "blocks"] = "rollout",
    path: PathLike | None = None,
) -> Figure:
    """Thesis fig. 4.4.2 in one call: feature attention maps of a rollout, named by feature.

    Resets ``env`` (an env with a ``DistractorFeatureObservation`` or
    ``RamFeatureObservation`` in its wrapper chain, or an id to ``gym.make``; an id is closed
    afterwards) with ``seed`` and steps it ``n_steps - 1`` times, acting with the SB3
    model's deterministic policy (a plain module gets seeded random actions and a batch
    axis), and records the ``layer`` map of every observation (default the first recorded
    layer). Keys are labelled with the wrapper's ``feature_names``, read after the seeded
    reset (their order is the episode's shuffle). Models with one token per feature give
    ``(L, L)`` maps; models with one token per (stacked step, feature), time-major, get the
    names suffixed ``@t-k``.

    ``layout="rollout"`` draws one panel per step of the rollout. ``layout="blocks"`` draws
    the thesis's reading of a single map of stacked-step tokens: the last observation's map
    split by :func:`split_time_blocks` into one panel per stacked step (queries of the
    newest step); it needs a model with one token per (step, feature).

    Raises:
        ValueError: if no wrapper has ``feature_names``, or the map size fits neither
            ``L`` nor ``stack * L`` tokens.

    Example:
        >>> from einops import rearrange
        >>> from torch import nn
        >>> from attn_policies.attention import MultiHeadSelfAttention
        >>> from attn_envs.atari_ram import make_distractor_env
        >>> class Tokens(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.attention = MultiHeadSelfAttention(4, n_heads=2, head_dim=4)
        ...     def forward(self, x):  # (B, stack, L): one token per feature
        ...         return self.attention(rearrange(x, "b t l -> b l t") / 255)
        >>> env = make_distractor_env("Pong", n_distractors=0, stack=4)
        >>> fig = feature_attention_figure(Tokens(), env, n_steps=4)
        >>> len(fig.axes), fig.axes[0].get_xticklabels()[0].get_text()
        (5, 'player/enemy_x')
        >>> env.close()
    """
    require_int(n_steps, "n_steps")
    if layout not in ("rollout", "blocks"):
        raise ValueError(f"layout must be 'rollout' or 'blocks', got {layout!r}")
    own = isinstance(env, str)
    env = gym.make(env) if isinstance(env, str) else env
    try:
        obs, _ = env.reset(seed=seed)
        env.action_space.seed(seed)
        try:
            names = list(env.get_wrapper_attr("feature_names"))
        except AttributeError:
            raise ValueError(
                f"{env} has no wrapper with feature_names (DistractorFeatureObservation or "
                "RamFeatureObservation)"
            ) from None
        try:
            stack = int(env.get_wrapper_attr("stack"))
        except AttributeError:
            stack = 1
        obs_shape = env.observation_space.shape
        assert obs_shape is not None  # the feature wrappers' Box
        panels: list[Tensor] = []
        for t in range(n_steps):
            maps = attention_maps(model, _batched(model, obs, len(obs_shape)))
            panels.append(maps[select_layer(maps, layer)][0])  # (heads, K, K)
            if t < n_steps - 1:
                obs, _, terminated, truncated, _ = env.step(_model_action(model, obs, env))
                if terminated or truncated:
                    obs, _ = env.reset()
    finally:
        if own:
            env.close()
    n_tokens, n_feat = panels[0].shape[-1], len(names)
    stacked = stack > 1 and n_tokens == stack * n_feat
    if n_tokens != n_feat and not stacked:
        raise ValueError(
            f"layer maps have {n_tokens} tokens; expected {n_feat} (one per feature) or "
            f"{stack} * {n_feat} (one per stacked step and feature)"
        )
    if layout == "blocks":
        if not stacked:
            raise ValueError(
                f'layout="blocks" needs one token per (step, feature): {stack} * {n_feat} '
                f"tokens, got {n_tokens}"
            )
        blocks = split_time_blocks(panels[-1], n_steps=stack)  # (stack, heads, L, L)
        return plot_feature_attention(blocks, names, head=head, path=path)
    labels = names
    if stacked:
        labels = [f"{n}@t-{stack - 1 - s}" if s < stack - 1 else f"{n}@t" for s in range(stack)
                  for n in names]  # fmt: skip
    return plot_feature_attention(torch.stack(panels), labels, head=head, path=path)


def top_patches_figure(
    model: Model,
    obs: Observation,
    frame: ArrayData,
    *,
    patch_size: int,
    stride: int | None = None,
    origins: npt.ArrayLike | None = None,
    k: int = 10,
    layer: str | int | None = None,
    method: Literal["votes", "argmax"] = "votes",
    path: PathLike | None = None,
) -> Figure:
    """Seed 001's CarRacing figure in one call: the top-``k`` attended patches on ``frame``.

    Runs :func:`attention_maps` on ``obs`` (passed as given: batch it for a plain module; the
    first sample is drawn), scores the key patches of ``layer`` with :func:`patch_scores`
    (``"votes"``: AttentionAgent's voting; ``"argmax"``: the AttentionNeuron appendix, only
    patches some query picks count) and boxes the best ``k`` with :func:`plot_top_patches`.

    Example:
        >>> from attn_policies.attention import MultiHeadSelfAttention
        >>> attn = MultiHeadSelfAttention(147, n_heads=1, head_dim=4)
        >>> frame = np.zeros((96, 96, 3), np.uint8)
        >>> fig = top_patches_figure(attn, torch.rand(1, 529, 147), frame, patch_size=7, stride=4)
        >>> len(fig.axes[0].patches)
        10
    """
    maps = attention_maps(model, obs)
    weights = maps[select_layer(maps, layer)]
    scores = patch_scores(weights, method)[0]
    if method == "argmax":
        picked = torch.nonzero(scores).ravel()
        order = torch.argsort(-scores[picked], stable=True)
        chosen = picked[order][:k]
        return plot_top_patches(
            frame, indices=chosen, patch_size=patch_size, stride=stride, origins=origins, path=path
        )
    return plot_top_patches(
        frame, scores, patch_size=patch_size, stride=stride, origins=origins, k=k, path=path
    )


def saliency_figure(
    model: Model,
    obs: Observation,
    frame: ArrayData,
    *,
    layer: str | int | None = None,
    grid_shape: tuple[int, int] | None = None,
    rows: int | None = None,
    alpha: float = 0.5,
    path: PathLike | None = None,
) -> Figure:
    """Book fig. 10.25 in one call: a spatial attention layer's saliency over ``frame``.

    Runs :func:`attention_maps` on ``obs`` (passed as given: batch it for a plain module; the
    first sample is drawn), reduces ``layer``'s ``(B, head, Q, K)`` map with
    :func:`attention_saliency` and overlays it with :func:`plot_saliency`. The keys must be
    the positions of a feature map: ``grid_shape`` or a square number of them; for
    row-restricted attention (``NonLocalBlock(form="row")``) pass the map's ``rows``.

    Example:
        >>> from attn_policies.attention import MultiHeadSelfAttention
        >>> attn = MultiHeadSelfAttention(8, n_heads=2, head_dim=4)
        >>> frame = np.zeros((84, 84), np.uint8)
        >>> fig = saliency_figure(attn, torch.rand(1, 49, 8), frame)
        >>> fig.axes[1].images[1].get_array().shape
        (84, 84)
    """
    maps = attention_maps(model, obs)
    saliency = attention_saliency(maps[select_layer(maps, layer)], rows=rows)[0]
    return plot_saliency(frame, saliency, grid_shape, alpha=alpha, path=path)
