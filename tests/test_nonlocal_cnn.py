"""Tests for attn_policies.nonlocal_cnn (seed 003 non-local self-attention, experiment E8)."""

from __future__ import annotations

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
from stable_baselines3.common.torch_layers import NatureCNN
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from attn_policies.attention import capture_attention
from attn_policies.nonlocal_cnn import (
    POSITIONS,
    ROW_KERNEL_MAX_WIDTH,
    NonLocalBlock,
    NonLocalNatureCNN,
    row_attention,
)

ATARI = spaces.Box(0, 255, (4, 84, 84), np.uint8)
SMALL = spaces.Box(0, 255, (4, 36, 36), np.uint8)  # smallest the Nature CNN takes: 1x1 at conv3


class TinyImageEnv(gym.Env):
    """Random (4, 84, 84) uint8 frames; reward 1 when the action matches the step index mod 4."""

    observation_space = ATARI
    action_space = spaces.Discrete(4)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def _obs(self) -> np.ndarray:
        return self.np_random.integers(0, 256, ATARI.shape, dtype=np.uint8)

    def step(self, action: int):
        reward = float(action == self._t % 4)
        self._t += 1
        return self._obs(), reward, self._t >= 16, False, {}


def set_beta_(module: nn.Module, value: float = 0.7) -> nn.Module:
    """Move every block's beta off 0 so the attention output matters."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, NonLocalBlock):
                m.beta.fill_(value)
    return module


def conv1x1(conv: nn.Conv2d, x: Tensor) -> Tensor:
    return torch.einsum("oc,bchw->bohw", conv.weight[:, :, 0, 0], x) + conv.bias[:, None, None]


def naive_row(block: NonLocalBlock, x: Tensor) -> tuple[Tensor, Tensor]:
    """Seed 003 with the softmax restricted to each row of each channel, one element at a time.

    Returns the block output and the weights as ``(B, C, H, W_query, W_key)``.
    """
    q, k, v = conv1x1(block.query, x), conv1x1(block.key, x), conv1x1(block.value, x)
    b_, c_, h_, w_ = x.shape
    y = torch.zeros_like(x)
    weights = torch.zeros(b_, c_, h_, w_, w_)
    for b in range(b_):
        for c in range(c_):
            for h in range(h_):
                for j in range(w_):
                    scores = torch.stack([q[b, c, h, j] * k[b, c, h, i] for i in range(w_)])
                    a = torch.exp(scores - scores.max())
                    a = a / a.sum()
                    weights[b, c, h, j] = a
                    y[b, c, h, j] = sum(a[i] * v[b, c, h, i] for i in range(w_))
    return block.beta * y + x, weights


def naive_full(block: NonLocalBlock, x: Tensor) -> tuple[Tensor, Tensor]:
    """SAGAN: every spatial position attends to all others with unscaled q.k scores."""
    q, k, v = conv1x1(block.query, x), conv1x1(block.key, x), conv1x1(block.value, x)
    b_, c_, h_, w_ = x.shape
    n = h_ * w_
    y = torch.zeros(b_, c_, n)
    weights = torch.zeros(b_, n, n)
    for b in range(b_):
        qf, kf, vf = q[b].reshape(-1, n), k[b].reshape(-1, n), v[b].reshape(-1, n)
        for j in range(n):
            scores = torch.stack([qf[:, j] @ kf[:, i] for i in range(n)])
            a = torch.softmax(scores, dim=0)
            weights[b, j] = a
            y[b, :, j] = vf @ a
    return block.beta * y.reshape(x.shape) + x, weights


# ---------------------------------------------------------------- the block


def test_row_form_matches_naive_reference() -> None:
    torch.manual_seed(0)
    block = set_beta_(NonLocalBlock(3, form="row"))
    x = torch.randn(2, 3, 3, 4) * 2
    expected, weights = naive_row(block, x)
    torch.testing.assert_close(block(x), expected, rtol=1e-5, atol=1e-5)
    with capture_attention(block) as maps:
        captured = block(x)
    torch.testing.assert_close(captured, expected, rtol=1e-5, atol=1e-5)
    # documented layout: head c * H + h is row h of channel c
    assert maps["self"].shape == (2, 3 * 3, 4, 4)
    torch.testing.assert_close(maps["self"].reshape(2, 3, 3, 4, 4), weights)


def test_full_form_matches_naive_reference() -> None:
    torch.manual_seed(1)
    block = set_beta_(NonLocalBlock(16, form="full"))
    assert block.qk_channels == 2  # SAGAN's C / 8
    x = torch.randn(2, 16, 3, 4)
    expected, weights = naive_full(block, x)
    torch.testing.assert_close(block(x), expected, rtol=1e-5, atol=1e-5)
    with capture_attention(block) as maps:
        torch.testing.assert_close(block(x), expected, rtol=1e-5, atol=1e-5)
    assert maps["self"].shape == (2, 1, 12, 12)
    torch.testing.assert_close(maps["self"][:, 0], weights)


@pytest.mark.parametrize("form", ["row", "full"])
@pytest.mark.parametrize("channels", [1, 4, 32, 64])
def test_fast_path_equals_capture_path(form: str, channels: int) -> None:
    torch.manual_seed(channels)
    block = set_beta_(NonLocalBlock(channels, form=form))  # type: ignore[arg-type]
    x = torch.randn(3, channels, 9, 7) * 3
    fast = block(x)
    with capture_attention(block) as maps:
        slow = block(x)
    torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-5)
    assert torch.allclose(maps["self"].sum(-1), torch.ones(()))


def test_row_attention_backward_is_the_softmax_gradient() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 7, dtype=torch.double, requires_grad=True) for _ in range(3))
    assert torch.autograd.gradcheck(row_attention, (q * 3, k * 3, v))
    with torch.no_grad():  # large scores: the row maximum keeps exp finite
        big = row_attention(q * 400, k * 400, v)
    assert torch.isfinite(big).all()


def test_row_attention_keeps_bf16_inputs_bf16() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(4, 9) for _ in range(3))
    half = row_attention(q.bfloat16(), k.bfloat16(), v.bfloat16())
    assert half.dtype == torch.bfloat16
    torch.testing.assert_close(half.float(), row_attention(q, k, v), rtol=0.02, atol=0.02)


@pytest.mark.parametrize("width", [7, ROW_KERNEL_MAX_WIDTH + 1])
def test_row_form_gradients_equal_the_capture_path(width: int) -> None:
    """Short rows take row_attention, wider ones SDPA; both train like explicit weights."""
    torch.manual_seed(width)
    block = set_beta_(NonLocalBlock(8, form="row", fast_rows=True))
    x = torch.randn(3, 8, 5, width) * 2
    grads = []
    for capture in (False, True):
        block.zero_grad()
        inp = x.clone().requires_grad_()
        if capture:
            with capture_attention(block):
                block(inp).square().sum().backward()
        else:
            block(inp).square().sum().backward()
        grads.append([inp.grad, *(p.grad for p in block.parameters())])
    for fast, slow in zip(*grads, strict=True):
        torch.testing.assert_close(fast, slow, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("fast", "width", "sdpa"),
    [(True, 7, 0), (True, ROW_KERNEL_MAX_WIDTH, 0), (True, 17, 1), (False, 7, 1)],
)
def test_fast_rows_take_sdpa_only_for_wide_rows(
    fast: bool, width: int, sdpa: int, monkeypatch
) -> None:
    calls = []
    real = torch.nn.functional.scaled_dot_product_attention

    def counting(*args: Any, **kwargs: Any) -> Tensor:
        calls.append(args[0].shape)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counting)
    block = set_beta_(NonLocalBlock(4, form="row", fast_rows=fast))
    block(torch.randn(2, 4, 3, width))
    assert len(calls) == sdpa
    assert ("fast_rows=True" in repr(block)) == fast


def test_extractor_with_fast_rows_is_the_same_function() -> None:
    torch.manual_seed(0)
    plain = set_beta_(NonLocalNatureCNN(ATARI, positions=("conv3", "fc")))
    fast = NonLocalNatureCNN(ATARI, positions=("conv3", "fc"), fast_rows=True)
    fast.load_state_dict(plain.state_dict())
    obs = torch.randint(0, 256, (3, *ATARI.shape)).float()
    torch.testing.assert_close(fast(obs), plain(obs), rtol=1e-5, atol=1e-5)
    assert all(m.fast_rows for m in fast.modules() if isinstance(m, NonLocalBlock))


@pytest.mark.parametrize("form", ["row", "full"])
def test_fast_path_runs_on_the_flash_kernel(form: str) -> None:
    """Only the flash kernel is allowed: it raises if the fast path would need the math
    fallback, which materialises the (H*W)^2 weights."""
    torch.manual_seed(0)
    block = set_beta_(NonLocalBlock(4, form=form))  # type: ignore[arg-type]
    x = torch.randn(2, 4, 20, 20, requires_grad=True)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        block(x).square().sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in block.parameters())


@pytest.mark.parametrize("form", ["row", "full"])
def test_block_is_identity_at_init_and_beta_gets_gradient(form: str) -> None:
    torch.manual_seed(0)
    block = NonLocalBlock(8, form=form)  # type: ignore[arg-type]
    assert block.beta.shape == () and block.beta.item() == 0.0
    x = torch.randn(2, 8, 6, 5, requires_grad=True)
    out = block(x)
    assert torch.equal(out, x)
    out.square().sum().backward()
    assert block.beta.grad is not None and block.beta.grad.abs() > 0
    assert torch.equal(x.grad, 2 * x.detach())  # beta = 0: the input gradient is untouched


def test_capture_refuses_oversized_weights() -> None:
    torch.manual_seed(0)
    block = set_beta_(NonLocalBlock(4, form="full", max_capture_bytes=1000))
    x = torch.randn(1, 4, 6, 6)  # 36 x 36 float weights = 5184 bytes
    with pytest.warns(UserWarning, match="not recording"), capture_attention(block) as maps:
        out = block(x)
    assert maps == {}
    torch.testing.assert_close(out, block(x))
    small = torch.randn(1, 4, 3, 3)  # 324 bytes: recorded
    with capture_attention(block) as maps:
        block(small)
    assert maps["self"].shape == (1, 1, 9, 9)


def test_block_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="form"):
        NonLocalBlock(4, form="column")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="channels"):
        NonLocalBlock(0)
    with pytest.raises(ValueError, match=r"\(B, 4, H, W\)"):
        NonLocalBlock(4)(torch.zeros(1, 3, 5, 5))


def test_block_parameter_counts() -> None:
    # full (SAGAN): q, k 32 -> 4, v 32 -> 32, beta; row: q, k, v all 32 -> 32, beta
    assert n_params(NonLocalBlock(32, form="full")) == 2 * (32 * 4 + 4) + (32 * 32 + 32) + 1
    assert n_params(NonLocalBlock(32, form="full")) == 1321
    assert n_params(NonLocalBlock(32, form="row")) == 3 * (32 * 32 + 32) + 1 == 3169
    assert NonLocalBlock(4, form="full").qk_channels == 1  # C / 8 rounds up to one channel
    assert NonLocalBlock(64, form="full", qk_reduction=2).qk_channels == 32


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    c=st.integers(1, 4),
    h=st.integers(1, 6),
    w=st.integers(1, 6),
    data=st.data(),
)
def test_row_form_is_row_local_and_permutation_equivariant(
    seed: int, c: int, h: int, w: int, data: st.DataObject
) -> None:
    torch.manual_seed(seed)
    block = set_beta_(NonLocalBlock(c, form="row"), 1.3)
    x = torch.randn(2, c, h, w) * 2
    out = block(x)
    row = data.draw(st.integers(0, h - 1))
    torch.testing.assert_close(out[:, :, row : row + 1], block(x[:, :, row : row + 1]))
    ph = torch.tensor(data.draw(st.permutations(range(h))))
    pw = torch.tensor(data.draw(st.permutations(range(w))))
    torch.testing.assert_close(block(x[:, :, ph][..., pw]), out[:, :, ph][..., pw])


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), h=st.integers(1, 5), w=st.integers(1, 5), data=st.data())
def test_full_form_is_equivariant_to_any_position_permutation(
    seed: int, h: int, w: int, data: st.DataObject
) -> None:
    torch.manual_seed(seed)
    block = set_beta_(NonLocalBlock(8, form="full"), 1.3)
    x = torch.randn(2, 8, h, w) * 2
    perm = torch.tensor(data.draw(st.permutations(range(h * w))))

    def shuffle(t: Tensor) -> Tensor:
        return t.flatten(2)[..., perm].reshape(t.shape)

    torch.testing.assert_close(block(shuffle(x)), shuffle(block(x)))


# ---------------------------------------------------------------- the extractor

VARIANTS: list[dict[str, Any]] = [
    *({"positions": (p,)} for p in POSITIONS),
    {"positions": "all"},
    {"positions": ()},
    {"replacement": "conv1x1"},
    {"replacement": "conv3x3"},
    {"replacement": "conv3x3", "positions": "all"},
]


@pytest.mark.parametrize("form", ["row", "full"])
@pytest.mark.parametrize("kwargs", VARIANTS, ids=str)
def test_output_shapes(form: str, kwargs: dict[str, Any]) -> None:
    # full attention on 84x84 is slow on CPU; the 3x3 ablation at conv3 needs more than 36x36
    space = ATARI if form == "row" or "replacement" in kwargs else SMALL
    torch.manual_seed(0)
    ext = set_beta_(NonLocalNatureCNN(space, features_dim=64, form=form, **kwargs))
    obs = sample_batch(space, 2)
    with torch.no_grad():
        out = ext(obs)
    assert out.shape == (2, 64) == (2, ext.features_dim)
    positions = POSITIONS if kwargs.get("positions") == "all" else kwargs.get("positions", ("fc",))
    replacement = kwargs.get("replacement")
    prefix = "replace" if replacement else "attn"
    blocks = [n for n, _ in ext.cnn.named_children() if n.startswith(("attn", "replace"))]
    assert blocks == [f"{prefix}_{p}" for p in positions]
    assert ext.positions == tuple(positions)


def test_full_form_on_84x84_input() -> None:
    torch.manual_seed(0)
    ext = set_beta_(NonLocalNatureCNN(ATARI, positions=("conv1",), form="full"))
    with torch.no_grad():
        out = ext(sample_batch(ATARI, 2))
    assert out.shape == (2, 512)
    with capture_attention(ext) as maps, pytest.warns(UserWarning, match="not recording"):
        ext(sample_batch(ATARI, 2))  # 2 x 7056^2 floats = 398 MB > 256 MiB
    assert maps == {}


@pytest.mark.parametrize("form", ["row", "full"])
def test_identity_at_init_equals_sb3_nature_cnn(form: str) -> None:
    """beta = 0: with SB3's conv3 width, every block is the identity and the extractor is
    SB3's NatureCNN with the same conv and FC weights, bit for bit."""
    space = ATARI if form == "row" else SMALL
    torch.manual_seed(0)
    ext = NonLocalNatureCNN(space, positions="all", form=form, conv3_channels=64)  # type: ignore[arg-type]
    nature = NatureCNN(space)
    with torch.no_grad():
        for i, name in zip((0, 2, 4), ("conv1", "conv2", "conv3"), strict=True):
            nature.cnn[i].load_state_dict(getattr(ext.cnn, name).state_dict())
        nature.linear.load_state_dict(ext.linear.state_dict())
    obs = sample_batch(space, 3)
    torch.testing.assert_close(ext(obs), nature(obs), rtol=0, atol=0)
    set_beta_(ext, 0.1)
    assert not torch.allclose(ext(obs), nature(obs))


@pytest.mark.parametrize("form", ["row", "full"])
def test_gradient_reaches_every_beta(form: str) -> None:
    torch.manual_seed(0)
    ext = NonLocalNatureCNN(SMALL, positions="all", form=form)  # type: ignore[arg-type]
    ext(sample_batch(SMALL, 2)).square().sum().backward()
    betas = {n: p.grad for n, p in ext.named_parameters() if n.endswith("beta")}
    assert len(betas) == 4
    assert all(g is not None and g.abs() > 0 for g in betas.values()), betas


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"positions": "all", "form": "full"},
        {"positions": ("conv2", "fc"), "features_dim": 32},
        {"replacement": "conv3x3", "positions": ("conv1", "fc")},
    ],
    ids=str,
)
def test_extractor_contract(kwargs: dict[str, Any]) -> None:
    space = SMALL if kwargs.get("form") == "full" else ATARI

    def make() -> NonLocalNatureCNN:
        return set_beta_(NonLocalNatureCNN(space, **kwargs))  # type: ignore[return-value]

    assert_extractor_contract(make)


@pytest.mark.parametrize(
    ("algo", "kwargs"),
    [
        ("a2c", {"positions": "all", "features_dim": 64}),  # the seed's algorithm
        ("ppo", {"features_dim": 64}),
        ("dqn", {"form": "full", "features_dim": 64}),
    ],
)
def test_sb3_roundtrip(algo: str, kwargs: dict[str, Any], tmp_path: Path) -> None:
    n_timesteps = 64 if algo == "a2c" else 128  # A2C: 8 updates; a conv1 block costs 10 ms/step
    model = assert_sb3_roundtrip(
        TinyImageEnv, NonLocalNatureCNN, kwargs, algo, tmp_path, n_timesteps=n_timesteps
    )
    ext = (
        model.policy.q_net.features_extractor if algo == "dqn" else model.policy.features_extractor
    )
    assert isinstance(ext, NonLocalNatureCNN)
    assert any(p.item() != 0 for n, p in ext.named_parameters() if n.endswith("beta"))


@pytest.mark.parametrize("form", ["row", "full"])
def test_capture_through_the_extractor(form: str) -> None:
    torch.manual_seed(0)
    ext = NonLocalNatureCNN(SMALL, positions="all", form=form)  # type: ignore[arg-type]
    with capture_attention(ext) as maps:
        ext(sample_batch(SMALL, 2))
    # maps before conv1 (4x36x36), conv2 (32x8x8), conv3 (64x3x3), fc (32x1x1)
    maps_shape = {k: tuple(v.shape) for k, v in maps.items()}
    if form == "row":
        expected = [(2, 4 * 36, 36, 36), (2, 32 * 8, 8, 8), (2, 64 * 3, 3, 3), (2, 32, 1, 1)]
    else:
        expected = [(2, 1, 36**2, 36**2), (2, 1, 64, 64), (2, 1, 9, 9), (2, 1, 1, 1)]
    assert maps_shape == {f"cnn.attn_{p}": s for p, s in zip(POSITIONS, expected, strict=True)}


def test_parameter_counts() -> None:
    """Seed 003: conv3 has 32 filters, so the FC input is 32x7x7, or 32x5x5 behind the
    3x3 ablation. Its claim that the 1x1 ablation (1056 parameters) matches the attention
    layer holds for neither form (row 3169, SAGAN 1321)."""
    sb3 = NonLocalNatureCNN(ATARI, positions=(), conv3_channels=64)
    assert n_params(sb3) == n_params(NatureCNN(ATARI)) == 1_684_128
    plain = NonLocalNatureCNN(ATARI, positions=())
    assert plain.linear[0].in_features == 32 * 7 * 7
    assert n_params(plain) == 862_848
    for form, block in (("row", 3169), ("full", 1321)):
        ext = NonLocalNatureCNN(ATARI, form=form)  # type: ignore[arg-type]
        assert n_params(ext) - n_params(plain) == block
    conv1x1 = NonLocalNatureCNN(ATARI, replacement="conv1x1")
    assert n_params(conv1x1) - n_params(plain) == 32 * 32 + 32
    conv3x3 = NonLocalNatureCNN(ATARI, replacement="conv3x3")
    assert conv3x3.linear[0].in_features == 32 * 5 * 5
    assert (
        n_params(conv3x3) - n_params(plain) == (32 * 32 * 9 + 32) - (32 * 7 * 7 - 32 * 5 * 5) * 512
    )
    # all four row blocks: C = 4, 32, 64, 32 before conv1, conv2, conv3, fc
    every = NonLocalNatureCNN(ATARI, positions="all")
    assert n_params(every) - n_params(plain) == sum(3 * (c * c + c) + 1 for c in (4, 32, 64, 32))


def test_extractor_validates_its_arguments() -> None:
    with pytest.raises(TypeError, match="Box image space"):
        NonLocalNatureCNN(spaces.Discrete(4))
    with pytest.raises(TypeError, match="Box image space"):
        NonLocalNatureCNN(spaces.Box(0, 255, (84, 84), np.uint8))
    with pytest.raises(ValueError, match="channel-first"):
        NonLocalNatureCNN(spaces.Box(0, 255, (84, 84, 4), np.uint8))
    with pytest.raises(ValueError, match="normalized_image"):
        NonLocalNatureCNN(spaces.Box(0.0, 1.0, (4, 84, 84), np.float32))
    float_ok = NonLocalNatureCNN(
        spaces.Box(0.0, 1.0, (4, 84, 84), np.float32), normalized_image=True
    )
    assert float_ok.features_dim == 512
    with pytest.raises(ValueError, match="too small"):
        NonLocalNatureCNN(spaces.Box(0, 255, (4, 35, 35), np.uint8))
    with pytest.raises(ValueError, match="too small"):
        NonLocalNatureCNN(SMALL, replacement="conv3x3", positions=("conv1",))
    for bad in (("conv4",), ("fc", "fc"), "everywhere"):
        with pytest.raises(ValueError, match="positions"):
            NonLocalNatureCNN(ATARI, positions=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="form"):
        NonLocalNatureCNN(ATARI, form="col")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="replacement"):
        NonLocalNatureCNN(ATARI, replacement="conv5x5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one position"):
        NonLocalNatureCNN(ATARI, positions=(), replacement="conv1x1")
    assert NonLocalNatureCNN(ATARI, positions="conv2").positions == ("conv2",)  # type: ignore[arg-type]
    assert NonLocalNatureCNN(ATARI, positions=("fc", "conv1")).positions == ("conv1", "fc")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"features_dim": 0},
        {"features_dim": 2.5},
        {"conv3_channels": -3},
        {"replacement_channels": 0},
        {"qk_reduction": 0},
    ],
)
def test_non_positive_sizes_are_refused_at_construction(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="must be a positive integer"):
        NonLocalNatureCNN(ATARI, **kwargs)


@pytest.mark.parametrize("positions", [(), ("fc",), ("conv3", "fc")])
def test_channels_last_is_the_same_network_in_another_layout(positions: tuple[str, ...]) -> None:
    space = spaces.Box(0, 255, (4, 84, 84), dtype=np.uint8)
    torch.manual_seed(0)
    plain = NonLocalNatureCNN(space, positions=positions)
    fast = NonLocalNatureCNN(space, positions=positions, channels_last=True)
    fast.load_state_dict(plain.state_dict())
    for block in fast.modules():  # beta = 0 at init would hide the blocks: make them count
        if isinstance(block, NonLocalBlock):
            block.beta.data.fill_(0.5)
    for block in plain.modules():
        if isinstance(block, NonLocalBlock):
            block.beta.data.fill_(0.5)
    x = torch.rand(5, 4, 84, 84)
    out_plain, out_fast = plain(x), fast(x)
    assert fast.cnn.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(out_fast, out_plain, rtol=1e-4, atol=1e-5)
    out_plain.square().sum().backward()
    out_fast.square().sum().backward()
    for (name, a), b in zip(plain.named_parameters(), fast.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-3, atol=1e-5, msg=name)


def test_bf16_autocast_returns_float32_features_close_to_fp32() -> None:
    space = spaces.Box(0, 255, (4, 84, 84), dtype=np.uint8)
    torch.manual_seed(1)
    plain = NonLocalNatureCNN(space)
    half = NonLocalNatureCNN(space, bf16=True)
    half.load_state_dict(plain.state_dict())
    x = torch.rand(3, 4, 84, 84)
    out = half(x)
    assert out.dtype == torch.float32
    scale = float(plain(x).detach().abs().max())
    assert float((out - plain(x)).abs().max()) < 0.05 * scale  # bf16: ~3 significant digits
    out.sum().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in half.parameters())


def test_channels_last_extractor_builds_trains_and_reloads_in_sb3(tmp_path: Path) -> None:
    import ale_py
    from stable_baselines3 import A2C

    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", obs_type="grayscale")  # a small real image env
    env = gym.wrappers.ResizeObservation(env, (84, 84))
    env = gym.wrappers.FrameStackObservation(env, 4)
    kwargs = {"features_extractor_class": NonLocalNatureCNN,
              "features_extractor_kwargs": {"channels_last": True}}  # fmt: skip
    model = A2C("CnnPolicy", env, n_steps=4, policy_kwargs=kwargs, seed=0, device="cpu")
    model.learn(8)
    weight = model.policy.features_extractor.cnn.conv1.weight
    assert weight.is_contiguous(memory_format=torch.channels_last)
    obs, _ = env.reset(seed=0)
    action, _ = model.predict(obs, deterministic=True)
    model.save(tmp_path / "m.zip")
    again = A2C.load(tmp_path / "m.zip", device="cpu")
    assert again.predict(obs, deterministic=True)[0] == action
    env.close()
