"""Old import path of the attention-map tools; they live in four modules now.

* :mod:`attn_policies.capture` -- :func:`attention_maps`.
* :mod:`attn_policies.saliency` -- tensor reductions (:func:`attention_saliency`,
  :func:`patch_scores`, :func:`split_time_blocks`, :func:`upsample_saliency`,
  :func:`patch_grid_origins`).
* :mod:`attn_policies.attention_plots` -- figures drawn from arrays and the DoorKey views
  (:func:`plot_grid_attention`, :func:`plot_feature_attention`, :func:`plot_top_patches`,
  :func:`plot_saliency`, :func:`doorkey_nodes`, :func:`doorkey_frame`).
* :mod:`attn_policies.attention_rollouts` -- the same figures in one call from a model
  (:func:`doorkey_attention_figure`, :func:`feature_attention_figure`,
  :func:`top_patches_figure`, :func:`saliency_figure`).
"""

from __future__ import annotations

from attn_policies.attention_plots import (
    doorkey_frame,
    doorkey_grid,
    doorkey_nodes,
    plot_feature_attention,
    plot_grid_attention,
    plot_saliency,
    plot_top_patches,
)
from attn_policies.attention_rollouts import (
    doorkey_attention_figure,
    feature_attention_figure,
    saliency_figure,
    top_patches_figure,
)
from attn_policies.capture import attention_maps
from attn_policies.saliency import (
    attention_saliency,
    patch_grid_origins,
    patch_scores,
    split_time_blocks,
    upsample_saliency,
)

__all__ = [
    "attention_maps",
    "attention_saliency",
    "doorkey_attention_figure",
    "doorkey_frame",
    "doorkey_grid",
    "doorkey_nodes",
    "feature_attention_figure",
    "patch_grid_origins",
    "patch_scores",
    "plot_feature_attention",
    "plot_grid_attention",
    "plot_saliency",
    "plot_top_patches",
    "saliency_figure",
    "split_time_blocks",
    "top_patches_figure",
    "upsample_saliency",
]
