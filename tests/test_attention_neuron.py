"""Tests for attn_policies.attention_neuron (AttentionNeuron, VisionAttentionNeuron; seed 001)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_policies.attention import capture_attention
from attn_policies.attention_neuron import AttentionNeuron, NeuronState, VisionAttentionNeuron


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


# --------------------------------------------------------------------------- AttentionNeuron


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 300),
    batch=st.integers(1, 3),
    steps=st.integers(1, 5),
    switch=st.integers(0, 4),
    attention=st.sampled_from(["tanh", "softmax"]),
    seed=st.integers(0, 2**16),
)
def test_neuron_rollout_is_permutation_invariant(
    n: int, batch: int, steps: int, switch: int, attention: str, seed: int
) -> None:
    """Reshuffle the inputs (and, consistently, the state) mid-rollout: same m_t every step."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    layer = AttentionNeuron(action_dim=2, n_queries=16, attention=attention)  # type: ignore[arg-type]
    obs = torch.randn(steps, batch, n, generator=gen) * 3
    actions = torch.rand(steps, batch, 2, generator=gen) * 2 - 1
    perm = torch.randperm(n, generator=gen)
    state_a = state_b = None
    with torch.no_grad():
        for t in range(steps):
            m_a, state_a = layer(obs[t], actions[t], state_a)
            if t < switch:
                m_b, state_b = layer(obs[t], actions[t], state_b)
                continue
            if t == switch and state_b is not None:
                state_b = NeuronState(state_b.h[:, perm], state_b.c[:, perm])
            m_b, state_b = layer(obs[t][:, perm], actions[t], state_b)
            assert _max_diff(state_b.h, state_a.h[:, perm]) == 0.0
            assert _max_diff(m_a, m_b) < 1e-5


def test_neuron_is_not_trivially_constant() -> None:
    """The invariance test above would pass for a constant; the output must depend on obs."""
    torch.manual_seed(0)
    layer = AttentionNeuron(action_dim=1)
    m1, _ = layer(torch.randn(2, 5), torch.zeros(2, 1))
    m2, _ = layer(torch.randn(2, 5), torch.zeros(2, 1))
    assert _max_diff(m1, m2) > 1e-3


@pytest.mark.parametrize("attention", ["tanh", "softmax"])
def test_neuron_any_n_same_weights(attention: str) -> None:
    """N = 1 .. 300 with one set of weights; duplicated inputs act like the originals.

    tanh weights are unnormalised, so each duplicate doubles the sum and ``output_scale=0.5``
    (the article's trick for 10 inputs) restores it exactly; softmax needs no correction.
    """
    torch.manual_seed(0)
    layer = AttentionNeuron(action_dim=1, attention=attention)  # type: ignore[arg-type]
    for n in (1, 5, 10, 300):
        m, state = layer(torch.randn(3, n), torch.zeros(3, 1))
        assert m.shape == (3, 16) and state.h.shape == (3, n, 8) and torch.isfinite(m).all()
    obs, actions = torch.randn(4, 2, 5), torch.rand(4, 2, 1)
    s1 = s2 = None
    with torch.no_grad():
        for t in range(4):
            layer.output_scale = 1.0
            m1, s1 = layer(obs[t], actions[t], s1)
            layer.output_scale = 0.5 if attention == "tanh" else 1.0
            m2, s2 = layer(obs[t].repeat(1, 2), actions[t], s2)
            assert _max_diff(m1, m2) < 1e-5
    layer.output_scale = 1.0
    if attention == "tanh":  # without the correction duplicates do change the output
        assert _max_diff(layer(obs[0])[0], layer(obs[0].repeat(1, 2))[0]) > 1e-3


def test_key_network_is_the_lstm_cell() -> None:
    """The vmap-friendly written-out cell computes exactly ``nn.LSTMCell`` on [o_i, a_{t-1}]."""
    torch.manual_seed(0)
    layer = AttentionNeuron(action_dim=2)
    obs, act = torch.randn(3, 4), torch.randn(3, 2)
    state = NeuronState(torch.randn(3, 4, 8), torch.randn(3, 4, 8))
    new = layer.step_keys(obs, act, state)
    inputs = torch.cat([obs.reshape(12, 1), act.repeat_interleave(4, dim=0)], dim=1)
    h, c = layer.key_net(inputs, (state.h.reshape(12, 8), state.c.reshape(12, 8)))
    torch.testing.assert_close(new.h.reshape(12, 8), h, rtol=0, atol=1e-6)
    torch.testing.assert_close(new.c.reshape(12, 8), c, rtol=0, atol=1e-6)


def test_neuron_sdpa_matches_capture_path_and_capture_shape() -> None:
    torch.manual_seed(0)
    obs, act = torch.randn(3, 7), torch.randn(3, 2)
    for attention in ("softmax", "tanh"):
        layer = AttentionNeuron(action_dim=2, n_queries=16, attention=attention)  # type: ignore[arg-type]
        fast, _ = layer(obs, act)
        with capture_attention(layer) as maps:
            slow, _ = layer(obs, act)
        torch.testing.assert_close(fast, slow, rtol=0, atol=1e-6)
        assert maps["self"].shape == (3, 1, 16, 7)
        if attention == "softmax":
            torch.testing.assert_close(maps["self"].sum(-1), torch.ones(3, 1, 16))
        else:
            assert (maps["self"].abs() <= 1).all() and (maps["self"] < 0).any()


def test_forward_sequence_equals_stepping_and_captures_once() -> None:
    torch.manual_seed(0)
    layer = AttentionNeuron(action_dim=3, n_queries=8)
    obs, act = torch.randn(2, 6, 11), torch.randn(2, 6, 3)
    state = None
    for t in range(6):
        m, state = layer(obs[:, t], act[:, t], state)
    with capture_attention(layer) as maps:
        m_seq = layer.forward_sequence(obs, act)
    torch.testing.assert_close(m_seq, m, rtol=0, atol=0)
    assert list(maps) == ["self"] and maps["self"].shape == (2, 1, 8, 11)
    # the window matters: the last step alone gives other keys
    assert _max_diff(layer.forward_sequence(obs[:, -1:], act[:, -1:]), m) > 1e-4


# --------------------------------------------------------------------------- vision


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 300), batch=st.integers(1, 2), seed=st.integers(0, 2**16))
def test_vision_is_permutation_invariant(n: int, batch: int, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    layer = VisionAttentionNeuron.puzzle_pong()
    tokens = torch.rand(batch, n, 144, generator=gen)
    action = torch.nn.functional.one_hot(torch.randint(6, (batch,), generator=gen), 6).float()
    perm = torch.randperm(n, generator=gen)
    with torch.no_grad():
        out = layer(tokens, action)
        assert out.shape == (batch, 400, 32)
        assert _max_diff(out, layer(tokens[:, perm], action)) < 1e-5


def test_vision_depends_on_tokens_and_takes_any_n() -> None:
    torch.manual_seed(0)
    layer = VisionAttentionNeuron.car_racing()
    tokens, action = torch.rand(2, 50, 144), torch.rand(2, 3)
    out = layer(tokens, action)
    assert out.shape == (2, 1024, 16)
    assert _max_diff(out, layer(torch.rand(2, 50, 144), action)) > 1e-3
    # duplicated patches leave the softmax average unchanged
    assert _max_diff(out, layer(tokens.repeat(1, 3, 1), action)) < 1e-5
    for n in (1, 256, 300):
        assert torch.isfinite(layer(torch.rand(1, n, 144), action[:1])).all()


def test_vision_keys_are_frame_differences() -> None:
    """Shifting all frames of a patch alike changes neither its key nor its (normed) value."""
    torch.manual_seed(0)
    layer = VisionAttentionNeuron.puzzle_pong()
    tokens, action = torch.rand(2, 30, 144) * 0.5, torch.zeros(2, 6)
    shifted = tokens + torch.rand(2, 30, 1) * 0.5  # one shift for all 36 pixels x 4 frames
    assert _max_diff(layer(tokens, action), layer(shifted, action)) < 1e-4
    # brightening the newest frame (frame axis last: every 4th value) of a few patches changes
    # their frame differences, hence their keys and the attention
    changed = tokens.clone()
    changed[:, :5, 3::4] += 0.3
    assert _max_diff(layer(tokens, action), layer(changed, action)) > 1e-3


def test_vision_previous_action_cannot_change_the_output() -> None:
    """A property of the article's design, documented in the class: a_{t-1} enters every key
    through the same linear map, adding one constant per query to all scores, which the
    softmax over patches cancels. Fails (deliberately) if the key network changes."""
    torch.manual_seed(0)
    layer = VisionAttentionNeuron.puzzle_pong()
    tokens = torch.rand(2, 40, 144)
    a, b = torch.eye(6)[[0, 1]], torch.eye(6)[[5, 3]]
    assert _max_diff(layer(tokens, a), layer(tokens, b)) < 1e-5
    layer(tokens, a).square().sum().backward()
    assert layer.key_proj.weight.grad[:, 108:].abs().max() < 1e-6
    assert layer.key_proj.weight.grad[:, :108].abs().max() > 1e-4


def test_vision_sdpa_matches_capture_path() -> None:
    torch.manual_seed(0)
    layer = VisionAttentionNeuron.puzzle_pong()
    tokens, action = torch.rand(2, 196, 144), torch.rand(2, 6)
    fast = layer(tokens, action)
    with capture_attention(layer) as maps:
        slow = layer(tokens, action)
    torch.testing.assert_close(fast, slow, rtol=0, atol=1e-5)
    assert maps["self"].shape == (2, 1, 400, 196)
    torch.testing.assert_close(maps["self"].sum(-1), torch.ones(2, 1, 400))


def _vision_forward_before_uint8(layer: VisionAttentionNeuron, tokens, prev_action):
    """The layer's forward as first written: float tokens, frames as a strided view."""
    b, n, _ = tokens.shape
    frames = tokens.view(b, n, -1, layer.n_frames).transpose(2, 3)  # "b n (p c) -> b n c p"
    diffs = (frames[:, :, 1:] - frames[:, :, :-1]).flatten(2)
    key_in = torch.cat([diffs, prev_action.unsqueeze(1).expand(b, n, -1)], dim=-1)
    k = layer.key_proj(key_in).unsqueeze(1)
    v = layer.value_proj(layer.input_norm(frames).flatten(2)).unsqueeze(1)
    q = layer.query_proj(layer.queries).expand(b, 1, layer.n_queries, -1)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=layer.score_scale)
    return layer.output_norm(torch.relu(out[:, 0]))


@pytest.mark.parametrize("n", [1, 98, 196])
def test_vision_uint8_tokens_with_scale_equal_the_float_path_exactly(n: int) -> None:
    """Contiguous frames and the uint8 -> float conversion after the reordering change no bit
    of the output or of the gradients."""
    gen = torch.Generator().manual_seed(n)
    torch.manual_seed(0)
    layer = VisionAttentionNeuron.puzzle_pong()
    tokens = torch.randint(0, 256, (3, n, 144), generator=gen, dtype=torch.uint8)
    action = torch.eye(6)[[0, 4, 2]]
    runs = {
        "uint8": lambda: layer(tokens, action, scale=1 / 255),
        "float": lambda: layer(tokens.float() * (1 / 255), action),
        "float scaled": lambda: layer(tokens.float(), action, scale=1 / 255),
        "before": lambda: _vision_forward_before_uint8(layer, tokens.float() * (1 / 255), action),
    }
    outputs, grads = {}, {}
    for name, run in runs.items():
        layer.zero_grad(set_to_none=True)
        outputs[name] = out = run()
        out.square().sum().backward()
        grads[name] = [p.grad.clone() for p in layer.parameters()]
    for name in runs:
        assert torch.equal(outputs[name], outputs["before"]), name
        assert all(map(torch.equal, grads[name], grads["before"])), name
    frames = layer.frames(tokens, 1 / 255)
    assert frames.shape == (3, n, 4, 36) and frames.dtype == torch.float32
    assert frames.is_contiguous()
    assert torch.equal(frames[:, :, 1], tokens[:, :, 1::4].float() * (1 / 255))  # frame 1


def test_vision_validates_sizes() -> None:
    with pytest.raises(ValueError, match="n_frames"):
        VisionAttentionNeuron(action_dim=6, n_frames=1)
    with pytest.raises(ValueError, match=r"n_frames .* must be an integer >= 2, got 2\.5"):
        VisionAttentionNeuron(action_dim=6, n_frames=2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="patch_size must be a positive integer, got 0"):
        VisionAttentionNeuron(action_dim=6, patch_size=0)
    layer = VisionAttentionNeuron(action_dim=6, n_queries=4)
    with pytest.raises(ValueError, match="144"):
        layer(torch.rand(1, 10, 108))
    with pytest.raises(ValueError, match="prev_action"):
        layer(torch.rand(1, 10, 144), torch.zeros(1, 3))


@pytest.mark.parametrize("key", ["n_queries", "query_dim", "msg_dim"])
def test_zero_or_negative_sizes_are_refused(key: str) -> None:
    with pytest.raises(ValueError, match=f"{key} must be a positive integer, got 0"):
        AttentionNeuron(1, **{key: 0})
    with pytest.raises(ValueError, match="action_dim must be a non-negative integer, got -1"):
        AttentionNeuron(-1)
