"""Tests for attn_policies.feature_baselines (the FC, CNN and a-CNN baselines of seed 002, E7).

Their shapes, SB3 contract, round trips and space validation are run beside the attention
extractors in tests/test_awrl.py (parametrised over every E7 extractor).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _sb3 import n_params, sample_batch
from gymnasium import spaces
from torch import Tensor, nn

from attn_policies.feature_baselines import (
    FeatureCNNExtractor,
    FeatureFCExtractor,
    layers_to_span,
)


def feature_space(n_features: int, stack: int = 4) -> spaces.Box:
    return spaces.Box(0.0, 255.0, (stack, n_features), np.float32)


def obs_batch(n_features: int, batch: int = 4, seed: int = 0) -> Tensor:
    return sample_batch(feature_space(n_features), batch, seed)


def test_catalog_names_the_baselines() -> None:
    from attn_policies.catalog import get_extractor

    assert get_extractor("attn_policies.feature_baselines:FeatureFCExtractor") is FeatureFCExtractor
    assert get_extractor("feature_cnn") is FeatureCNNExtractor


def test_baseline_counts_follow_their_layers() -> None:
    # Not table 7.2's numbers (the thesis gives no widths; see module docstring): the counts
    # of the layers the thesis describes, so an architecture change shows up here.
    cnn = FeatureCNNExtractor(feature_space(8))
    first = sum(k * 4 * 52 + 52 for k in (3, 5, 7))
    second = sum(k * 156 * 52 + 52 for k in (3, 5, 7))
    assert n_params(cnn) == first + second == 125_112
    fc = FeatureFCExtractor(feature_space(8))
    assert n_params(fc) == (4 * 32 + 32) + (8 * 32 * 512 + 512) + (512 * 32 + 32) == 148_160
    assert n_params(FeatureFCExtractor(feature_space(16))) - n_params(fc) == 8 * 32 * 512


def test_a_cnn_depth_spans_the_features() -> None:
    for n_features in (8, 10, 16, 20, 32, 40, 41, 82):
        ext = FeatureCNNExtractor(feature_space(n_features), deep=True, channels=2)
        assert ext.receptive_field >= n_features
        assert ext.n_layers == max(2, layers_to_span(n_features))
        shallower = 1 + (ext.n_layers - 1) * 6
        assert shallower < n_features or ext.n_layers == 2
    capped = FeatureCNNExtractor(feature_space(164), deep=True, channels=2)
    assert capped.n_layers == 20  # thesis: "up to 20 sequential layers"
    assert FeatureCNNExtractor(feature_space(164), channels=2).n_layers == 2
    assert FeatureCNNExtractor(feature_space(164), deep=True, n_layers=5, channels=2).n_layers == 5


@pytest.mark.parametrize(("deep", "expected_span"), [(False, 13), (True, 32)])
def test_cnn_centre_sees_its_receptive_field(deep: bool, expected_span: int) -> None:
    """Which input features reach the centre position of the last conv layer."""
    torch.manual_seed(0)
    ext = FeatureCNNExtractor(
        feature_space(32), deep=deep, channels=4, fc_dim=None, activation_fn=nn.Identity
    )
    obs = obs_batch(32, batch=1).requires_grad_(True)
    maps = ext.convs(obs)
    maps[0, :, 16].sum().backward()
    assert obs.grad is not None
    seen = (obs.grad.abs().sum(dim=(0, 1)) > 0).nonzero().flatten()
    assert len(seen) == expected_span
    assert seen.min() == max(0, 16 - 3 * ext.n_layers)
