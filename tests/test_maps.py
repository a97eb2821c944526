"""Tests for attn_policies.maps, the old import path of the attention-map tools."""

from __future__ import annotations

import attn_policies
import attn_policies.maps as maps
from attn_policies import attention_plots, attention_rollouts, capture, saliency

# attn_policies.maps.__all__ before the split: every one must keep working from here
OLD_NAMES = [
    "attention_maps", "attention_saliency", "doorkey_attention_figure", "doorkey_frame",
    "doorkey_nodes", "feature_attention_figure", "patch_grid_origins", "patch_scores",
    "plot_feature_attention", "plot_grid_attention", "plot_saliency", "plot_top_patches",
    "saliency_figure", "split_time_blocks", "top_patches_figure", "upsample_saliency",
]  # fmt: skip


def test_every_old_name_is_the_one_of_its_new_home() -> None:
    homes = (capture, saliency, attention_plots, attention_rollouts)
    assert set(OLD_NAMES) <= set(maps.__all__)
    for name in maps.__all__:
        (home,) = [m for m in homes if name in m.__all__]  # exactly one new home
        assert getattr(maps, name) is getattr(home, name), name


def test_package_level_names_resolve_to_the_new_homes() -> None:
    public = [name for name in OLD_NAMES if name in attn_policies.__all__]
    assert len(public) == 9  # attention_maps, four plot_* and four *_figure
    for name in public:
        assert getattr(attn_policies, name) is getattr(maps, name), name
