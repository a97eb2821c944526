"""Tests for attn_policies.relational (book ch. 10 relational module, experiments E1 and E2)."""

from __future__ import annotations

import math
from contextlib import nullcontext
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _sb3 import assert_extractor_contract, assert_sb3_roundtrip, n_params, perturb_
from einops import rearrange
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st
from stable_baselines3 import DQN
from torch import Tensor, nn

import attn_envs  # noqa: F401  (registers attn_envs/...)
from attn_policies.attention import capture_attention
from attn_policies.relational import (
    CNNMNIST,
    STEM_PRESETS,
    ELUQNetwork,
    RelationalDoorKey,
    RelationalDQNPolicy,
    RelationalExtractor,
    RelationalMNIST,
    RelationalModule,
    RelationalTrunk,
    build_conv_stem,
    image_to_nodes,
)

DOORKEY = "attn_envs/EgocentricDoorKey-5x5-v0"
DOORKEY_SPACE = spaces.Box(0.0, 1.0, (3, 7, 7), np.float32)
MNIST_SPACE = spaces.Box(0, 255, (1, 28, 28), np.uint8)
MNIST_KWARGS = {"conv_stem": "mnist", "n_heads": 1, "node_size": 36, "compatibility": "dot"}


def make_doorkey() -> gym.Env:
    return gym.make(DOORKEY)


# --- the book's listings, written out op by op, reading our modules' weights --------------


def book_nodes(stem: nn.Sequential, x: Tensor) -> Tensor:
    """Conv + ReLU stem, then the book's own coordinate construction and flattening."""
    for conv in stem:
        if isinstance(conv, nn.Conv2d):
            x = torch.relu(conv(x))
    b, _, ch, cw = x.shape
    xcoords = torch.arange(cw).repeat(ch, 1).float() / cw
    ycoords = torch.arange(ch).repeat(cw, 1).transpose(1, 0).float() / ch
    coords = torch.stack([xcoords, ycoords], dim=0).unsqueeze(0).repeat(b, 1, 1, 1)
    return torch.cat([x, coords], dim=1).permute(0, 2, 3, 1).flatten(1, 2)


def book_qkv(trunk: RelationalTrunk, x: Tensor) -> list[Tensor]:
    """The book's three separate projections; our fused layer stacks them as (q, k, v)."""
    att = trunk.relational.attention
    ws, bs = att.qkv.weight.chunk(3), att.qkv.bias.chunk(3)
    return [F.linear(x, w, b) for w, b in zip(ws, bs, strict=True)]


def book_listing_10_3(model: RelationalMNIST, x: Tensor) -> Tensor:
    """Listing 10.2/10.3: single head, LayerNorm over (N, d), scaled dot product."""
    x = book_nodes(model.trunk.stem, x)
    n, d = x.shape[1], 36
    norms = model.trunk.relational.attention.norms
    q, k, v = (
        F.layer_norm(t, (n, d), norm.weight[0], norm.bias[0])
        for t, norm in zip(book_qkv(model.trunk, x), norms, strict=True)
    )
    a = torch.einsum("bfe,bge->bfg", q, k) / np.sqrt(d)
    a = torch.softmax(a, dim=2)
    e = torch.einsum("bfc,bcd->bfd", a, v)
    e = torch.relu(model.trunk.relational.linear(e))
    e = F.layer_norm(e, (n, d))
    return F.log_softmax(model.head(e.max(dim=1)[0]), dim=1)


def book_listing_10_7(model: RelationalDoorKey, x: Tensor) -> Tensor:
    """Listing 10.7: 3 heads, LayerNorm over (heads, N, d), additive attention, final elu."""
    x = book_nodes(model.trunk.stem, x)
    att = model.trunk.relational.attention
    q, k, v = (
        norm(rearrange(t, "b n (head d) -> b head n d", head=3))
        for t, norm in zip(book_qkv(model.trunk, x), att.norms, strict=True)
    )
    a = att.a_lin(F.elu(att.q_lin(q) + att.k_lin(k)))
    a = torch.softmax(a, dim=3)
    e = rearrange(torch.einsum("bhfc,bhcd->bhfd", a, v), "b head n d -> b n (head d)")
    e = torch.relu(model.trunk.relational.linear(e))
    e = F.layer_norm(e, (49, 64))
    return F.elu(model.head(e.max(dim=1)[0]))


# --- sizes ---------------------------------------------------------------------------------


def test_parameter_counts_match_the_book() -> None:
    assert n_params(RelationalMNIST()) == 85_228
    assert n_params(CNNMNIST()) == 88_252
    # Listing 10.7 (no count in the text): convs 64 + 340, K/Q/V 3 * (22 * 192 + 192),
    # q_lin/k_lin 2 * (64 * 49 + 49), a_lin 49 * 49 + 49, Q/K/V LayerNorms 3 * 2 * 3 * 49 * 64,
    # linear1 192 * 64 + 64, linear2 64 * 5 + 5.
    book = 64 + 340 + 3 * 4416 + 2 * 3185 + 2450 + 3 * 2 * 9408 + 12_352 + 325
    assert n_params(RelationalDoorKey()) == book == 91_597


def test_mnist_shapes_and_log_probabilities() -> None:
    torch.manual_seed(0)
    x = torch.rand(5, 1, 28, 28)
    for model in (RelationalMNIST(), CNNMNIST()):
        out = model(x)
        assert out.shape == (5, 10)
        torch.testing.assert_close(out.exp().sum(-1), torch.ones(5))
    assert RelationalMNIST().trunk.n_nodes == 256


def test_module_and_trunk_shapes() -> None:
    torch.manual_seed(0)
    module = RelationalModule(7, node_size=12, n_heads=2, n_nodes=9)
    assert module(torch.randn(3, 9, 7)).shape == (3, 12)
    trunk = RelationalTrunk((2, 10, 12), conv_stem=[(8, 3), (4, 2)], node_size=16, n_heads=2)
    assert trunk.n_nodes == 7 * 9
    assert trunk(torch.rand(3, 2, 10, 12)).shape == (3, 16)
    assert image_to_nodes(torch.zeros(2, 5, 3, 4)).shape == (2, 12, 7)
    assert len(build_conv_stem(3, [])) == 0
    q = RelationalDoorKey()(torch.rand(4, 3, 7, 7))
    assert q.shape == (4, 5) and (q >= -1).all()


def test_nodes_carry_book_coordinates() -> None:
    nodes = image_to_nodes(torch.zeros(1, 1, 3, 4))  # row-major nodes, x = col / W, y = row / H
    torch.testing.assert_close(nodes[0, 6], torch.tensor([0.0, 2 / 4, 1 / 3]))
    torch.testing.assert_close(book_nodes(nn.Sequential(), torch.zeros(1, 1, 3, 4)), nodes)


@pytest.mark.parametrize("capture", [False, True])
def test_mnist_model_is_listing_10_3(capture: bool) -> None:
    torch.manual_seed(0)
    model = perturb_(RelationalMNIST())
    x = torch.rand(4, 1, 28, 28)
    with torch.no_grad(), capture_attention(model) if capture else nullcontext():
        out = model(x)  # outside capture_attention: the SDPA fast path
    torch.testing.assert_close(out, book_listing_10_3(model, x), rtol=1e-4, atol=1e-5)


def test_doorkey_model_is_listing_10_7() -> None:
    torch.manual_seed(0)
    model = perturb_(RelationalDoorKey())
    x = torch.rand(4, 3, 7, 7)
    with torch.no_grad():
        torch.testing.assert_close(model(x), book_listing_10_7(model, x), rtol=1e-4, atol=1e-5)


# --- attention capture ---------------------------------------------------------------------


def test_capture_gives_doorkey_maps() -> None:
    torch.manual_seed(0)
    ext = RelationalExtractor(DOORKEY_SPACE)
    x = torch.rand(6, 3, 7, 7)
    with capture_attention(ext) as maps:
        out = ext(x)
    assert list(maps) == ["trunk.relational.attention"]
    weights = maps["trunk.relational.attention"]
    assert weights.shape == (6, 3, 49, 49)
    torch.testing.assert_close(weights.sum(-1), torch.ones(6, 3, 49))
    torch.testing.assert_close(ext(x), out, rtol=0, atol=0)  # additive: one path only
    assert ext.trunk.relational.attention._attention_store is None


@pytest.mark.parametrize("qkv_norm", ["tokens", "features", None])
def test_capture_path_equals_fast_path(qkv_norm: str | None) -> None:
    torch.manual_seed(0)
    ext = perturb_(RelationalExtractor(MNIST_SPACE, **{**MNIST_KWARGS, "qkv_norm": qkv_norm}))
    x = torch.rand(3, 1, 28, 28)
    with torch.no_grad():
        fast = ext(x)
        with capture_attention(ext) as maps:
            slow = ext(x)
    assert maps["trunk.relational.attention"].shape == (3, 1, 256, 256)
    torch.testing.assert_close(slow, fast, rtol=1e-5, atol=1e-5)


# --- permutation (in)variance ----------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    n_side=st.integers(2, 4),
    n_heads=st.integers(1, 3),
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_features_norm_dot_module_is_node_order_invariant(
    n_side: int, n_heads: int, seed: int, data: st.DataObject
) -> None:
    torch.manual_seed(seed)
    module = perturb_(RelationalModule(5, node_size=8, n_heads=n_heads, qkv_norm="features"))
    # float64: the property is exact; float32 summation order alone moves outputs ~1e-5
    module, nodes = module.double(), image_to_nodes(torch.rand(2, 3, n_side, n_side + 1)).double()
    perm = data.draw(st.permutations(range(nodes.shape[1])))
    with torch.no_grad():
        out = module(nodes)
        shuffled = module(nodes[:, list(perm)])
    torch.testing.assert_close(shuffled, out, rtol=0, atol=1e-5)


def _order_gap(module: nn.Module, nodes: Tensor) -> float:
    """Largest output change when the node list is reversed (float64, no rounding noise)."""
    module, nodes = module.double(), nodes.double()
    with torch.no_grad():
        return (module(nodes.flip(1)) - module(nodes)).abs().max().item()


def test_book_tokens_norm_is_order_invariant_only_at_init() -> None:
    """LayerNorm over (heads, N, d) has per-position affine weights: once they move away from
    1/0 (training), node order matters; the output LayerNorm (no affine) never breaks it."""
    torch.manual_seed(0)
    module = RelationalModule(22, node_size=16, n_heads=3, qkv_norm="tokens", n_nodes=49)
    nodes = image_to_nodes(torch.rand(2, 20, 7, 7))
    assert _order_gap(module, nodes) < 1e-5
    perturb_(module.attention.norms)
    assert _order_gap(module, nodes) > 1e-2


def test_book_additive_attention_depends_on_node_order() -> None:
    """Additive scores index keys by position (q_lin/k_lin output N columns), so even a fresh
    module with per-node norms changes its output when the nodes are reordered."""
    torch.manual_seed(0)
    module = RelationalModule(
        22, node_size=16, n_heads=3, compatibility="additive", qkv_norm="features", n_nodes=49
    )
    nodes = image_to_nodes(torch.rand(2, 20, 7, 7))
    assert _order_gap(module, nodes) > 1e-3
    dot = RelationalModule(22, node_size=16, n_heads=3, qkv_norm="features")
    assert _order_gap(perturb_(dot), nodes) < 1e-5


# --- SB3 -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("space", "kwargs"),
    [
        (DOORKEY_SPACE, {}),
        (DOORKEY_SPACE, {"compatibility": "dot", "qkv_norm": "features", "node_size": 16}),
        (MNIST_SPACE, MNIST_KWARGS),
        (spaces.Box(0.0, 1.0, (2, 9, 8), np.float32), {"conv_stem": [(6, 3)], "node_size": 8}),
    ],
)
def test_extractor_contract(space: spaces.Box, kwargs: dict) -> None:
    ext = assert_extractor_contract(lambda: RelationalExtractor(space, **kwargs))
    assert ext.features_dim == kwargs.get("node_size", 64)


def test_extractor_defaults_are_the_doorkey_trunk() -> None:
    ext = RelationalExtractor(DOORKEY_SPACE)
    assert n_params(ext) == n_params(RelationalDoorKey()) - (64 * 5 + 5)
    assert ext.trunk.n_nodes == 49 and ext.trunk.relational.attention.n_heads == 3
    assert ext.trunk.relational.attention.compatibility == "additive"
    assert [m.kernel_size for m in ext.trunk.stem if isinstance(m, nn.Conv2d)] == [(1, 1)] * 2
    assert STEM_PRESETS["doorkey"] == ((16, 1), (20, 1))


def test_bf16_extractor_is_the_same_function_at_bf16_precision() -> None:
    torch.manual_seed(0)
    ext = RelationalExtractor(DOORKEY_SPACE)
    fast = RelationalExtractor(DOORKEY_SPACE, bf16=True)
    fast.load_state_dict(ext.state_dict())
    x = torch.rand(50, 3, 7, 7)
    ref, out = ext(x), fast(x)
    assert out.dtype == torch.float32 and not ext.bf16
    assert not torch.equal(out, ref)  # it does run in bf16 ...
    torch.testing.assert_close(out, ref, atol=0.05, rtol=0.05)  # ... at bf16's precision
    out.square().sum().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in fast.parameters())


def test_extractor_rejects_bad_spaces_and_stems() -> None:
    with pytest.raises(TypeError, match="Box"):
        RelationalExtractor(spaces.Discrete(3))
    with pytest.raises(ValueError, match=r"\(C, H, W\)"):
        RelationalExtractor(spaces.Box(0, 1, (49,)))
    with pytest.raises(ValueError, match="does not fit"):
        RelationalExtractor(DOORKEY_SPACE, conv_stem="mnist")
    with pytest.raises(ValueError, match="preset"):
        RelationalExtractor(DOORKEY_SPACE, conv_stem="resnet")
    with pytest.raises(ValueError, match="needs n_nodes"):
        RelationalModule(22, compatibility="dot", qkv_norm="tokens")
    with pytest.raises(ValueError, match="expected 49 nodes"):
        RelationalDoorKey().trunk.relational(torch.zeros(1, 50, 22))


SMALL = {"node_size": 16}


@pytest.mark.parametrize(
    ("algo", "extractor_kwargs", "policy", "policy_kwargs"),
    [
        ("ppo", SMALL, None, None),
        ("a2c", SMALL, None, None),
        ("dqn", SMALL, RelationalDQNPolicy, None),  # the book's Q-network, elu head
        ("dqn", {**SMALL, "compatibility": "dot", "qkv_norm": "features"}, None, {"net_arch": []}),
    ],
    ids=["ppo", "a2c", "dqn-book-policy", "dqn-mlp-policy"],
)
def test_sb3_roundtrip(
    algo: str,
    extractor_kwargs: dict,
    policy: type | None,
    policy_kwargs: dict | None,
    tmp_path: Path,
) -> None:
    assert_sb3_roundtrip(
        make_doorkey, RelationalExtractor, extractor_kwargs, algo, tmp_path, n_timesteps=100,
        policy=policy, policy_kwargs=policy_kwargs,
    )  # fmt: skip
    if policy is RelationalDQNPolicy:
        loaded = DQN.load(tmp_path / "dqn.zip", device="cpu")
        assert isinstance(loaded.q_net, ELUQNetwork) and isinstance(loaded.q_net.q_net[-1], nn.ELU)


def test_dqn_policy_is_the_book_q_network() -> None:
    torch.manual_seed(0)
    model = DQN(RelationalDQNPolicy, make_doorkey(), buffer_size=100, seed=0, device="cpu")
    q_net = model.q_net
    book = perturb_(RelationalDoorKey())
    state = {f"features_extractor.trunk.{k}": v for k, v in book.trunk.state_dict().items()}
    state |= {f"q_net.0.{k}": v for k, v in book.head.state_dict().items()}
    q_net.load_state_dict(state)  # strict: same parameters, nothing more
    x = torch.rand(4, 3, 7, 7)
    with torch.no_grad():
        torch.testing.assert_close(q_net(x), book(x))
    assert n_params(q_net) == n_params(book)


# --- learning --------------------------------------------------------------------------------


def synthetic_digits(n: int = 20, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Class ``c`` draws a bright 6x6 square at a class-specific place, plus noise spots."""
    gen = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % 10
    x = (torch.rand(n, 1, 28, 28, generator=gen) > 0.97).float()
    for i, c in enumerate(labels.tolist()):
        r, col = 2 + 5 * (c // 5), 2 + 5 * (c % 5)
        x[i, 0, r : r + 6, col : col + 6] = 1.0
    return x, labels


@pytest.mark.parametrize("model_class", [RelationalMNIST, CNNMNIST])
def test_mnist_models_train(model_class: type[nn.Module]) -> None:
    torch.manual_seed(0)
    model = model_class()
    x, y = synthetic_digits()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(15):
        opt.zero_grad()
        loss = F.nll_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert math.isfinite(losses[-1])
    assert losses[-1] < 0.8 * losses[0], losses
