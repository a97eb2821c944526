"""Tests for attn_policies.awrl (d-AWRL / g-AWRL thesis, seed 002, experiment E7)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from _sb3 import assert_extractor_contract, assert_sb3_roundtrip, n_params, sample_batch
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import Tensor

import attn_envs  # noqa: F401  (registers attn_envs/...)
from attn_policies.attention import capture_attention
from attn_policies.awrl import (
    AWRLExtractor,
    DAWRLPolicy,
    FeatureSumHead,
)
from attn_policies.feature_baselines import FeatureCNNExtractor, FeatureFCExtractor

PONG = "attn_envs/DistractorPong-v0"
E7_LENGTHS = (8, 16, 32, 41, 164)  # Pong L/2L/4L, Asteroids L, Asteroids 4L
ATTEND_ON = ("both", "content", "address")
FAST = settings(max_examples=12, deadline=None)


def feature_space(n_features: int, stack: int = 4) -> spaces.Box:
    return spaces.Box(0.0, 255.0, (stack, n_features), np.float32)


def make_pong() -> gym.Env:
    return gym.make(PONG, n_distractors=0)


def obs_batch(n_features: int, batch: int = 4, seed: int = 0) -> Tensor:
    return sample_batch(feature_space(n_features), batch, seed)


def warmed(ext: AWRLExtractor, seed: int = 0) -> AWRLExtractor:
    """Move the batch-norm running statistics off (0, 1) with one batch, then eval mode."""
    with torch.no_grad():
        ext(obs_batch(ext.n_tokens, batch=16, seed=seed + 100))
    return ext.eval()


def awrl(n_features: int, seed: int = 0, **kwargs: Any) -> AWRLExtractor:
    torch.manual_seed(seed)
    return warmed(AWRLExtractor(feature_space(n_features), **kwargs), seed)


def test_batch_stats_act_as_they_update() -> None:
    """With batch statistics the eval-mode policy (SB3's rollouts) is the train-mode one."""
    torch.manual_seed(0)
    x = obs_batch(8, batch=16)
    for kwargs in ({"variant": "g"}, {"variant": "d"}):
        ext = AWRLExtractor(feature_space(8), batch_stats=True, **kwargs)
        assert all(b.norm.running_mean is None for b in ext.blocks)
        train = ext.train()(x)
        torch.testing.assert_close(ext.eval()(x), train)
        running = AWRLExtractor(feature_space(8), **kwargs)
        running.load_state_dict(ext.state_dict(), strict=False)
        running.train()(x)
        assert not torch.allclose(running.eval()(x), train, atol=1e-3)


# --- shapes, capture, contract ---------------------------------------------------------------

EXTRACTORS: dict[str, tuple[type[BaseFeaturesExtractor], dict[str, Any]]] = {
    "g-both": (AWRLExtractor, {"variant": "g"}),
    "g-content": (AWRLExtractor, {"variant": "g", "attend_on": "content", "fc_dim": 256}),
    "g-address": (AWRLExtractor, {"variant": "g", "attend_on": "address", "fc_dim": None}),
    "d-dot": (AWRLExtractor, {"variant": "d"}),
    "d-softmax-address": (
        AWRLExtractor,
        {"variant": "d", "diagonal": "softmax", "attend_on": "address"},
    ),
    "fc": (FeatureFCExtractor, {}),
    "cnn": (FeatureCNNExtractor, {}),
    "a-cnn": (FeatureCNNExtractor, {"deep": True, "channels": 8}),
    "cnn-fc": (FeatureCNNExtractor, {"fc_dim": 256}),
}


def expected_features_dim(name: str, n_features: int) -> int:
    if name == "fc":
        return 32
    if name in ("g-content", "cnn-fc"):
        return 256
    if name == "cnn":
        return n_features * 3 * 52
    if name == "a-cnn":
        return n_features * 3 * 8
    return n_features * 128


@pytest.mark.parametrize("n_features", E7_LENGTHS)
@pytest.mark.parametrize("name", list(EXTRACTORS))
def test_output_shapes(name: str, n_features: int) -> None:
    cls, kwargs = EXTRACTORS[name]
    torch.manual_seed(0)
    ext = cls(feature_space(n_features), **kwargs)
    out = ext(obs_batch(n_features, batch=2))
    assert out.shape == (2, expected_features_dim(name, n_features)) == (2, ext.features_dim)
    if isinstance(ext, AWRLExtractor):
        assert ext.tokens(obs_batch(n_features, batch=2)).shape == (2, n_features, 128)


@pytest.mark.parametrize("n_features", E7_LENGTHS)
@pytest.mark.parametrize("variant", ["g", "d"])
def test_capture_gives_one_4_head_map_per_attention_layer(variant: str, n_features: int) -> None:
    ext = awrl(n_features, variant=variant)
    with capture_attention(ext) as maps:
        ext(obs_batch(n_features, batch=3))
    assert {k: tuple(v.shape) for k, v in maps.items()} == {
        "blocks.0.attention": (3, 4, n_features, n_features),
        "blocks.1.attention": (3, 4, n_features, n_features),
    }
    for weights in maps.values():
        if variant == "g":  # softmax rows
            torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4, n_features))
        else:  # nothing off the diagonal
            assert torch.count_nonzero(weights - torch.diag_embed(weights.diagonal(0, -2, -1))) == 0


@pytest.mark.parametrize("name", list(EXTRACTORS))
def test_extractor_contract(name: str) -> None:
    cls, kwargs = EXTRACTORS[name]
    n_features = 16 if name == "a-cnn" else 8
    assert_extractor_contract(lambda: cls(feature_space(n_features), **kwargs))


@pytest.mark.parametrize(
    ("variant", "attend_on", "diagonal"),
    [("g", a, None) for a in ATTEND_ON]
    + [("d", a, "dot") for a in ATTEND_ON]
    + [
        ("d", "both", "softmax"),
        ("d", "address", "softmax"),
    ],
)
def test_capture_path_equals_fast_path(variant: str, attend_on: str, diagonal: str | None) -> None:
    # float64: unnormalised diagonal scores of raw RAM bytes are large, float32 rounding of
    # the two summation orders would need a loose tolerance
    ext = awrl(12, variant=variant, attend_on=attend_on, diagonal=diagonal).double()
    obs = obs_batch(12, batch=5, seed=3).double()
    with torch.no_grad():
        fast = ext(obs)
        with capture_attention(ext) as maps:
            slow = ext(obs)
    assert len(maps) == 2
    torch.testing.assert_close(slow, fast, rtol=1e-10, atol=1e-10)


# --- sb3 ---------------------------------------------------------------------------------------

ROUNDTRIPS: list[tuple[str, type[BaseFeaturesExtractor], dict[str, Any]]] = [
    ("ppo", AWRLExtractor, {"variant": "g"}),
    ("a2c", AWRLExtractor, {"variant": "d", "attend_on": "content"}),
    ("dqn", AWRLExtractor, {"variant": "g", "attend_on": "address", "fc_dim": 64}),
    ("ppo", FeatureFCExtractor, {"embed_dim": 8, "net_arch": (64, 32)}),
    ("a2c", FeatureFCExtractor, {}),
    ("dqn", FeatureFCExtractor, {"embed_dim": 8, "net_arch": (64, 32)}),
    ("ppo", FeatureCNNExtractor, {"deep": True, "channels": 8}),
    ("a2c", FeatureCNNExtractor, {"channels": 8, "fc_dim": 64}),
    ("dqn", FeatureCNNExtractor, {"channels": 8, "fc_dim": 64}),
]


@pytest.mark.parametrize(
    ("algo", "cls", "kwargs"), ROUNDTRIPS, ids=[f"{a}-{c.__name__}" for a, c, _ in ROUNDTRIPS]
)
def test_sb3_roundtrip(
    algo: str, cls: type[BaseFeaturesExtractor], kwargs: dict[str, Any], tmp_path: Path
) -> None:
    assert_sb3_roundtrip(make_pong, cls, kwargs, algo, tmp_path, n_timesteps=128)


@pytest.mark.parametrize("shared", [False, True])
def test_dawrl_policy_ppo_roundtrip(shared: bool, tmp_path: Path) -> None:
    model = assert_sb3_roundtrip(
        make_pong,
        AWRLExtractor,
        {"attend_on": "address"},
        "ppo",
        tmp_path,
        n_timesteps=128,
        policy=DAWRLPolicy,
        policy_kwargs={"share_feature_heads": shared},
    )
    assert isinstance(model.policy.value_net, FeatureSumHead)
    assert model.policy.value_net.shared is shared
    assert model.policy.features_extractor.variant == "d"


# --- parameter counts (thesis table 7.2) --------------------------------------------------------


@pytest.mark.parametrize("attend_on", ATTEND_ON)
def test_attention_stack_has_table_7_2_count(attend_on: str) -> None:
    for n_features in (8, 41, 164):
        d = AWRLExtractor(feature_space(n_features), variant="d", attend_on=attend_on)
        g = AWRLExtractor(feature_space(n_features), variant="g", attend_on=attend_on, fc_dim=None)
        assert n_params(d) == n_params(g) == 131_712
        affine = AWRLExtractor(feature_space(n_features), variant="d", batch_norm_affine=True)
        assert n_params(affine) == 131_712 + 2 * 2 * 128
    attention = d.blocks[0].attention
    assert (attention.n_heads, attention.head_dim) == (4, 32)  # supplementary table 7.1
    g = AWRLExtractor(feature_space(8), variant="g", fc_dim=256)
    assert n_params(g) == 131_712 + 1024 * 256 + 256


def test_dawrl_heads_have_table_7_2_count_on_pong() -> None:
    policy = DAWRLPolicy(feature_space(8), spaces.Discrete(6), lambda _: 2.5e-4)
    assert n_params(policy.features_extractor) == 131_712
    assert n_params(policy.action_net) == 6_150
    assert n_params(policy.value_net) == 1_025
    shared = DAWRLPolicy(
        feature_space(8), spaces.Discrete(6), lambda _: 2.5e-4, share_feature_heads=True
    )
    assert (n_params(shared.action_net), n_params(shared.value_net)) == (6 * 129, 129)


# Table 7.2 (Pong L, 6 actions): inference / policy / value. The baselines' heads are not
# matched (their 3,328-wide CNN latent fits no layout of the described layers).
TABLE_7_2 = {"attention": (131_712, 6_150, 1_025), "cnn": (125_184, None, None),
             "fc": (146_080, 198, None)}  # fmt: skip
KIND = {"g_awrl": "attention", "d_awrl": "attention", "content": "attention",
        "address": "attention", "cnn": "cnn", "acnn": "cnn", "fc": "fc"}  # fmt: skip


@pytest.mark.filterwarnings("ignore:You have specified a mini-batch size")  # 1-env probe
def test_zoo_atariari_models_have_table_7_2_sizes_on_pong_l() -> None:
    from zoo.config import load_runs
    from zoo.factory import make_model, make_vec_env

    runs = load_runs("atariari", overrides={"game": "Pong", "condition": "L"})
    assert sorted(r.tag.split("-")[-1] for r in runs) == sorted(KIND)
    env = make_vec_env(runs[0], n_envs=1)
    try:
        for run in runs:
            policy = make_model(run, env, probe=True).policy
            inference, pi, vf = TABLE_7_2[KIND[run.tag.split("-")[-1]]]
            got = n_params(policy.features_extractor), n_params(policy.action_net)
            assert abs(got[0] - inference) <= 0.02 * inference, (run.tag, got)
            if pi is not None:
                assert got[1] == pi, (run.tag, got)
            if vf is not None:
                assert n_params(policy.value_net) == vf, run.tag
            assert n_params(policy.mlp_extractor) == 0, run.tag  # net_arch: [] for all models
    finally:
        env.close()


# --- d-AWRL: selection without mixing; value is a sum over features ------------------------------


@FAST
@given(
    n_features=st.integers(2, 10),
    data=st.data(),
    attend_on=st.sampled_from(ATTEND_ON),
    seed=st.integers(0, 2**16),
)
def test_d_awrl_changing_one_token_changes_only_its_representation(
    n_features: int, data: st.DataObject, attend_on: str, seed: int
) -> None:
    j = data.draw(st.integers(0, n_features - 1))
    ext = awrl(n_features, seed=seed, variant="d", attend_on=attend_on)
    obs = obs_batch(n_features, batch=3, seed=seed)
    changed = obs.clone()
    changed[:, :, j] = torch.rand(3, 4, generator=torch.Generator().manual_seed(seed)) * 255
    with torch.no_grad():
        before, after = ext.tokens(obs), ext.tokens(changed)
    others = [i for i in range(n_features) if i != j]
    torch.testing.assert_close(after[:, others], before[:, others], rtol=1e-6, atol=1e-6)
    assert not torch.allclose(after[:, j], before[:, j])


def test_g_awrl_does_mix_tokens() -> None:
    ext = awrl(8, variant="g", fc_dim=None)
    obs = obs_batch(8, batch=3)
    changed = obs.clone()
    changed[:, :, 0] += 50.0
    with torch.no_grad():
        delta = (ext.tokens(changed) - ext.tokens(obs)).abs().amax(dim=(0, 2))
    assert (delta[1:] > 1e-4).all()


def test_diagonal_weights_are_the_thesis_inner_product() -> None:
    """Eq. 4.9: φ_i = ⟨q_i, k_i⟩ (scaled by 1/√d_k), recomputed here from the weights."""
    for diagonal in ("dot", "softmax"):
        ext = awrl(6, variant="d", diagonal=diagonal)
        obs = obs_batch(6, batch=2)
        with torch.no_grad(), capture_attention(ext) as maps:
            ext(obs)
            x = ext.embed(obs.transpose(1, 2)) + ext.position
            w = ext.blocks[0].attention.qkv.weight
            q = (x @ w[:128].T).unflatten(-1, (4, 32))
            k = (x @ w[128:256].T).unflatten(-1, (4, 32))
            phi = (q * k).sum(-1).transpose(1, 2) / math.sqrt(32)  # (B, heads, L)
        if diagonal == "softmax":
            phi = phi.softmax(-1)
        torch.testing.assert_close(maps["blocks.0.attention"], torch.diag_embed(phi))


def explicit_feature_terms(policy: DAWRLPolicy, obs: Tensor, head: FeatureSumHead) -> Tensor:
    """Σ-terms written out: token i times W^i (or the shared W), ``(B, L, out)``."""
    tokens = policy.features_extractor.tokens(obs)
    weight = head.linear.weight
    if head.shared:
        return torch.einsum("bld,od->blo", tokens, weight)
    n, d = tokens.shape[1:]
    return torch.stack([tokens[:, i] @ weight[:, i * d : (i + 1) * d].T for i in range(n)], 1)


@pytest.mark.parametrize("shared", [False, True])
def test_dawrl_value_is_a_sum_of_per_feature_values(shared: bool) -> None:
    torch.manual_seed(0)
    policy = DAWRLPolicy(
        feature_space(8), spaces.Discrete(6), lambda _: 1e-3, share_feature_heads=shared
    )
    policy.features_extractor.train()(obs_batch(8, batch=16, seed=9))  # move BN statistics
    policy.set_training_mode(False)
    obs = obs_batch(8, batch=4, seed=1)
    changed = obs.clone()
    changed[:, :, 5] = 255.0 - changed[:, :, 5]
    with torch.no_grad():
        value, value2 = policy.predict_values(obs), policy.predict_values(changed)
        terms, terms2 = policy.feature_values(obs), policy.feature_values(changed)
        bias = policy.value_net.linear.bias
        torch.testing.assert_close(value[:, 0], terms.sum(1) + bias, rtol=1e-5, atol=1e-5)
        expected = explicit_feature_terms(policy, obs, policy.value_net)[..., 0]
        torch.testing.assert_close(terms, expected, rtol=1e-5, atol=1e-5)
        # only feature 5's term moves, and the value moves by exactly that much
        torch.testing.assert_close(terms2[:, :5], terms[:, :5])
        torch.testing.assert_close(terms2[:, 6:], terms[:, 6:])
        assert not torch.allclose(terms2[:, 5], terms[:, 5])
        torch.testing.assert_close(
            value2[:, 0] - value[:, 0], terms2[:, 5] - terms[:, 5], rtol=1e-4, atol=1e-5
        )
        # the policy logits are per-feature sums too
        latent = policy.mlp_extractor.forward_actor(policy.features_extractor(obs))
        logits = policy.action_net(latent)
        per_feature = policy.feature_logits(obs)
        assert per_feature.shape == (4, 8, 6)
        torch.testing.assert_close(
            logits, per_feature.sum(1) + policy.action_net.linear.bias, rtol=1e-5, atol=1e-5
        )
        torch.testing.assert_close(
            per_feature,
            explicit_feature_terms(policy, obs, policy.action_net),
            rtol=1e-5,
            atol=1e-5,
        )


def test_dawrl_policy_refuses_feature_mixing() -> None:
    args = (feature_space(8), spaces.Discrete(6), lambda _: 1e-3)
    with pytest.raises(ValueError, match="net_arch"):
        DAWRLPolicy(*args, net_arch=[64])
    with pytest.raises(TypeError, match="variant='d'"):
        DAWRLPolicy(*args, features_extractor_kwargs={"variant": "g"})
    with pytest.raises(TypeError, match="AWRLExtractor"):
        DAWRLPolicy(*args, features_extractor_class=FeatureFCExtractor)


# --- content-only and address-only attention (thesis 5.6) --------------------------------------


@FAST
@given(
    n_features=st.integers(2, 10),
    data=st.data(),
    variant=st.sampled_from(["g", "d"]),
    seed=st.integers(0, 2**16),
)
def test_content_only_is_permutation_equivariant(
    n_features: int, data: st.DataObject, variant: str, seed: int
) -> None:
    perm = data.draw(st.permutations(range(n_features)))
    ext = awrl(n_features, seed=seed, variant=variant, attend_on="content")
    obs = obs_batch(n_features, batch=3, seed=seed)
    with torch.no_grad():
        tokens = ext.tokens(obs)
        permuted = ext.tokens(obs[:, :, perm])
    # float32 sums in a new order: ~4e-5 absolute noise seen at 9 features x 4 steps
    torch.testing.assert_close(permuted, tokens[:, perm], rtol=1e-4, atol=1e-4)
    # a sum over n tokens carries up to n times one token's noise (1.75e-4 seen at 6)
    atol = 1e-4 * n_features
    torch.testing.assert_close(permuted.sum(1), tokens.sum(1), rtol=1e-5, atol=atol)


@pytest.mark.parametrize("attend_on", ["both", "address"])
def test_positional_modes_are_not_permutation_equivariant(attend_on: str) -> None:
    ext = awrl(8, variant="g", attend_on=attend_on)
    obs = obs_batch(8, batch=3)
    perm = [1, 0, 3, 2, 5, 4, 7, 6]
    with torch.no_grad():
        assert not torch.allclose(ext.tokens(obs[:, :, perm]), ext.tokens(obs)[:, perm], atol=1e-3)


@pytest.mark.parametrize("variant", ["g", "d"])
def test_address_only_attention_ignores_content(variant: str) -> None:
    def maps_for(ext: AWRLExtractor, seed: int) -> dict[str, Tensor]:
        with torch.no_grad(), capture_attention(ext) as maps:
            ext(obs_batch(10, batch=3, seed=seed))
        return maps

    ext = awrl(10, variant=variant, attend_on="address")
    a, b = maps_for(ext, 1), maps_for(ext, 2)
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0)
        torch.testing.assert_close(a[name], a[name][:1].expand_as(a[name]), rtol=0, atol=0)
    both = awrl(10, variant=variant, attend_on="both")
    a, b = maps_for(both, 1), maps_for(both, 2)
    assert not torch.allclose(a["blocks.0.attention"], b["blocks.0.attention"])


# --- validation --------------------------------------------------------------------------------

FACTORIES: list[Callable[[spaces.Space], BaseFeaturesExtractor]] = [
    AWRLExtractor,
    FeatureFCExtractor,
    FeatureCNNExtractor,
]


@pytest.mark.parametrize("factory", FACTORIES)
def test_rejects_other_observation_spaces(
    factory: Callable[[spaces.Space], BaseFeaturesExtractor],
) -> None:
    with pytest.raises(TypeError, match="Box"):
        factory(spaces.Discrete(4))
    with pytest.raises(ValueError, match=r"\(stack, n_features\)"):
        factory(spaces.Box(0, 255, (4, 8, 2), np.float32))


def test_rejects_bad_options() -> None:
    space = feature_space(8)
    with pytest.raises(ValueError, match="variant"):
        AWRLExtractor(space, variant="x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="attend_on"):
        AWRLExtractor(space, attend_on="where")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no final FC"):
        AWRLExtractor(space, variant="d", fc_dim=64)
    with pytest.raises(ValueError, match="variant='d'"):
        AWRLExtractor(space, variant="g", diagonal="dot")
    with pytest.raises(ValueError, match="odd"):
        FeatureCNNExtractor(space, kernel_sizes=(3, 4))
    with pytest.raises(ValueError, match="n_blocks must be a positive integer, got 0"):
        AWRLExtractor(space, n_blocks=0)
    with pytest.raises(ValueError, match=r"fc_dim .* must be a positive integer, got 2\.5"):
        AWRLExtractor(space, fc_dim=2.5)  # type: ignore[arg-type]
