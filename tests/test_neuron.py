"""Tests for attn_policies.neuron (AttentionNeuron layers, agents and extractors, seed 001)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from _contract import UniformBoxEnv
from _sb3 import assert_extractor_contract, assert_sb3_roundtrip, sample_batch
from gymnasium import spaces
from gymnasium.wrappers import FrameStackObservation
from hypothesis import given, settings
from hypothesis import strategies as st
from sb3_contrib import RecurrentPPO
from torch.func import functional_call, stack_module_state, vmap
from torch.utils._pytree import tree_map

from attn_envs import PreviousActionObservation
from attn_policies.attention import capture_attention
from attn_policies.neuron import (
    AttentionNeuron,
    AttentionNeuronExtractor,
    AttentionNeuronPolicy,
    AttentionNeuronVectorExtractor,
    FNNPolicy,
    NeuronState,
    VisionAttentionNeuron,
)

# Small sizes for the SB3 tests: 2x2 patches of 3 frames (token 12), an 8x8 code grid.
SMALL_VISION = {
    "n_queries": 64,
    "conv_channels": (4, 4),
    "features_dim": 16,
    "qk_dim": 8,
    "value_dim": 4,
    "patch_size": 2,
}
TOKEN_SPACE = spaces.Box(0, 255, (9, 12), np.uint8)


def _tokens_env() -> gym.Env:
    """Uniform uint8 patch tokens, Discrete(2) actions, with a_{t-1} in a Dict."""
    return PreviousActionObservation(UniformBoxEnv(TOKEN_SPACE))


def _vector_uniform_env() -> gym.Env:
    """Discrete-action vector env (for DQN), 3-step window of obs and a_{t-1}."""
    env = UniformBoxEnv(spaces.Box(-1.0, 1.0, (5,), np.float32))
    return FrameStackObservation(PreviousActionObservation(env), 3)


def _cartpole_env(stack: int = 4) -> gym.Env:
    env = PreviousActionObservation(gym.make("attn_envs/ShuffledCartPoleSwingUpHarder-v0"))
    return FrameStackObservation(env, stack) if stack > 1 else env


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


def test_batched_state_equals_one_by_one() -> None:
    """1000 rollouts in one call == each rollout alone, including per-row resets."""
    torch.manual_seed(0)
    policy = AttentionNeuronPolicy.cartpole()
    b, steps = 1000, 3
    gen = torch.Generator().manual_seed(1)
    obs = torch.randn(steps, b, 5, generator=gen)
    done = torch.rand(steps, b, generator=gen) < 0.3
    with torch.no_grad():
        state = policy.initial_state(b, 5)
        batched = []
        for t in range(steps):
            state = policy.reset_state(state, done[t])
            action, state = policy(obs[t], state)
            batched.append(action)
        batched_actions = torch.stack(batched)
        for i in range(b):
            s = policy.initial_state(1, 5)
            for t in range(steps):
                s = policy.reset_state(s, done[t, i : i + 1])
                a, s = policy(obs[t, i : i + 1], s)
                assert _max_diff(a[0], batched_actions[t, i]) < 1e-6


def test_reset_state_zeroes_only_done_rows() -> None:
    torch.manual_seed(0)
    policy = AttentionNeuronPolicy.cartpole()
    _, state = policy(torch.randn(4, 5))
    _, state = policy(torch.randn(4, 5), state)
    done = torch.tensor([True, False, True, False])
    reset = policy.reset_state(state, done)
    for new, old in ((reset.keys.h, state.keys.h), (reset.prev_action, state.prev_action)):
        assert (new[done] == 0).all()
        assert torch.equal(new[~done], old[~done]) and (old[~done] != 0).any()


def test_policy_feeds_back_its_action() -> None:
    torch.manual_seed(0)
    policy = AttentionNeuronPolicy.ant()
    obs = torch.randn(2, 28)
    action, state = policy(obs)
    assert action.shape == (2, 8) and (action.abs() < 1).all()
    assert torch.equal(state.prev_action, action)
    expected, _ = policy.neuron(obs, action, policy.initial_state(2, 28).keys)
    m, _ = policy.neuron(obs, state.prev_action, policy.initial_state(2, 28).keys)
    torch.testing.assert_close(m, expected)


def test_population_vmap_matches_loop() -> None:
    """An ES trainer can vmap one batched rollout over a population of parameter sets."""
    torch.manual_seed(0)
    pop = [AttentionNeuronPolicy.cartpole() for _ in range(4)]
    params, buffers = stack_module_state(pop)  # type: ignore[arg-type]
    base = AttentionNeuronPolicy.cartpole()
    obs = torch.randn(3, 4, 6, 5)  # (steps, population, repeats, N)
    state = tree_map(lambda x: x.expand(4, *x.shape).clone(), base.initial_state(6, 5))

    def step(p, b, o, s):
        return functional_call(base, (p, b), (o, s))

    with torch.no_grad():
        for t in range(3):
            actions, state = vmap(step)(params, buffers, obs[t], state)
        for i, member in enumerate(pop):
            s = None
            for t in range(3):
                a, s = member(obs[t, i], s)
            assert _max_diff(actions[i], a) < 1e-6


# --------------------------------------------------------------------------- flat parameters


E3_AN = 4 * 8 * (2 + 8) + 2 * 4 * 8 + 2 * 8 * 32  # LSTMCell(2->8), W_q, W_k without bias
E4_AN = 4 * 8 * (9 + 8) + 2 * 4 * 8 + 2 * (8 * 32 + 32)  # LSTMCell(9->8), W_q, W_k with bias
PONG_AN = (8 * 32 + 32) + (114 * 32 + 32) + (144 * 32 + 32) + 2 * 36 + 2 * 32
CARRACING_AN = (8 * 16 + 16) + (111 * 16 + 16) + (144 * 16 + 16)  # LayerNorms without params
PONG_CNN = (32 * 64 * 16 + 64) + (64 * 64 * 9 + 64) + (3136 * 512 + 512)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (AttentionNeuronPolicy.cartpole, E3_AN + 16 + 1),  # 896 + Linear(16->1) = 913
        (lambda: FNNPolicy(5, 1, hidden=16), 5 * 16 + 16 + 16 + 1),  # 113
        (AttentionNeuronPolicy.ant, E4_AN + (32 * 32 + 32) + (32 * 8 + 8)),  # 2504
        (VisionAttentionNeuron.puzzle_pong, PONG_AN),  # 8744
        (VisionAttentionNeuron.car_racing, CARRACING_AN),  # 4256
    ],
)
def test_parameter_counts(make, expected: int) -> None:
    """Counts of the authors' configs (the article states none): E3 913, E4 2504."""
    module = make()
    assert sum(p.numel() for p in module.parameters()) == expected
    assert (E3_AN, E3_AN + 17, E4_AN, PONG_AN) == (896, 913, 1184, 8744)


def test_flat_parameter_roundtrip() -> None:
    torch.manual_seed(0)
    for policy in (AttentionNeuronPolicy.cartpole(), FNNPolicy(5, 1)):
        obs = torch.randn(2, 5)
        state = policy.initial_state(2, 5)
        flat = policy.get_flat_parameters()
        assert flat.shape == (policy.num_parameters,)
        before, _ = policy(obs, state)
        policy.set_flat_parameters(np.zeros(policy.num_parameters))
        assert torch.equal(policy(obs, state)[0], torch.zeros(2, 1))
        policy.set_flat_parameters(flat)
        assert torch.equal(policy(obs, state)[0], before)
        flat += 1.0  # the parameters hold a copy, not a view of the vector
        assert torch.equal(policy(obs, state)[0], before)
        with pytest.raises(ValueError, match="parameters"):
            policy.set_flat_parameters(torch.zeros(policy.num_parameters + 1))


@pytest.mark.parametrize(
    "make",
    [
        AttentionNeuronPolicy.cartpole,
        AttentionNeuronPolicy.ant,
        lambda: AttentionNeuronPolicy.cartpole(attention="softmax", bias=True, output_scale=0.5),
    ],
    ids=["cartpole", "ant", "softmax_bias"],
)
def test_population_step_equals_forward(make) -> None:
    """Each row with its own individual's weights steps exactly like forward (to rounding)."""
    torch.manual_seed(0)
    policies = [make() for _ in range(3)]
    for p in policies:  # larger than the default init so the gates and scores saturate a bit
        p.set_flat_parameters(torch.randn(p.num_parameters) * 0.5)
    params, _ = stack_module_state(policies)
    owner = torch.tensor([0, 0, 1, 2, 2])
    weights = tuple(w[owner] for w in policies[0].population_weights(params))
    n = 7
    obs = torch.randn(6, len(owner), n) * 2
    states = [None] * len(owner)
    state = None
    with torch.no_grad():
        for t in range(6):
            out, state = policies[0].population_step(weights, obs[t], state)
            for row, p in enumerate(owner.tolist()):
                ref, states[row] = policies[p](obs[t][row : row + 1], states[row])
                assert _max_diff(out[row : row + 1], ref) < 1e-5
                assert _max_diff(state[0][row], states[row].keys.h[0]) < 1e-5


def test_population_step_is_permutation_equivariant() -> None:
    """Permuting the inputs permutes the keys' state and leaves the action (to rounding)."""
    torch.manual_seed(1)
    policy = AttentionNeuronPolicy.cartpole()
    policy.set_flat_parameters(torch.randn(policy.num_parameters) * 0.5)
    params = {k: v[None] for k, v in dict(policy.named_parameters()).items()}
    weights = tuple(w.expand(4, *w.shape[1:]) for w in policy.population_weights(params))
    obs, perm = torch.randn(5, 4, 5), torch.randperm(5)
    sa = sb = None
    with torch.no_grad():
        for t in range(5):
            a, sa = policy.population_step(weights, obs[t], sa)
            b, sb = policy.population_step(weights, obs[t][:, perm], sb)
            assert _max_diff(sb[0], sa[0][:, perm]) < 1e-6 and _max_diff(a, b) < 1e-5


def test_population_weights_refuse_capture() -> None:
    policy = AttentionNeuronPolicy.cartpole()
    params = {k: v[None] for k, v in dict(policy.named_parameters()).items()}
    with capture_attention(policy), pytest.raises(RuntimeError, match="attention maps"):
        policy.population_weights(params)


def test_fnn_is_not_permutation_invariant() -> None:
    torch.manual_seed(0)
    fnn = FNNPolicy(5, 1)
    obs = torch.randn(8, 5)
    assert _max_diff(fnn(obs)[0], fnn(obs[:, [4, 3, 2, 1, 0]])[0]) > 1e-4
    with pytest.raises(ValueError, match="5 inputs"):
        fnn.initial_state(1, 10)


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


def test_vision_validates_sizes() -> None:
    with pytest.raises(ValueError, match="n_frames"):
        VisionAttentionNeuron(action_dim=6, n_frames=1)
    layer = VisionAttentionNeuron(action_dim=6, n_queries=4)
    with pytest.raises(ValueError, match="144"):
        layer(torch.rand(1, 10, 108))
    with pytest.raises(ValueError, match="prev_action"):
        layer(torch.rand(1, 10, 144), torch.zeros(1, 3))


# --------------------------------------------------------------------------- extractors


def _pong_space(dtype: type = np.uint8) -> spaces.Dict:
    return spaces.Dict(
        {
            "observation": spaces.Box(0, 255, (196, 144), dtype),
            "prev_action": spaces.Box(0.0, 1.0, (6,), np.float32),
        }
    )


@pytest.mark.parametrize(
    "space",
    [
        PreviousActionObservation(UniformBoxEnv(TOKEN_SPACE)).observation_space,
        TOKEN_SPACE,
    ],
    ids=["dict", "box"],
)
def test_vision_extractor_contract(space: spaces.Space) -> None:
    ext = assert_extractor_contract(lambda: AttentionNeuronExtractor(space, **SMALL_VISION))
    assert ext.features_dim == 16
    obs = sample_batch(space, 2)
    with capture_attention(ext) as maps:
        ext(obs)
    assert maps["neuron"].shape == (2, 1, 64, 9)


def test_vision_extractor_paper_sizes_and_uint8_scaling() -> None:
    torch.manual_seed(0)
    ext = AttentionNeuronExtractor(_pong_space())
    assert ext.neuron.key_dim == 114 and ext.grid_side == 20
    assert sum(p.numel() for p in ext.parameters()) == PONG_AN + PONG_CNN  # 1684648
    torch.manual_seed(0)
    ext_float = AttentionNeuronExtractor(_pong_space(np.float32))
    obs = sample_batch(_pong_space(), 2)  # what SB3 hands over: floats in [0, 255]
    scaled = {**obs, "observation": obs["observation"] / 255.0}
    with torch.no_grad():
        torch.testing.assert_close(ext(obs), ext_float(scaled), rtol=0, atol=1e-6)
        assert _max_diff(ext(obs), ext_float(obs)) > 1e-3
        # permutation invariant end to end
        perm = torch.randperm(196)
        shuffled = {**obs, "observation": obs["observation"][:, perm]}
        assert _max_diff(ext(obs), ext(shuffled)) < 1e-5


def test_vision_extractor_validates_space() -> None:
    with pytest.raises(ValueError, match="perfect square"):
        AttentionNeuronExtractor(_pong_space(), n_queries=399)
    with pytest.raises(ValueError, match="too small"):
        AttentionNeuronExtractor(_pong_space(), n_queries=16)
    with pytest.raises(ValueError, match="multiple of patch_size"):
        AttentionNeuronExtractor(spaces.Box(0, 255, (10, 100), np.uint8))
    with pytest.raises(ValueError, match="patch tokens"):
        AttentionNeuronExtractor(spaces.Box(0, 255, (84, 84, 4), np.uint8))
    with pytest.raises(ValueError, match="prev_action"):
        AttentionNeuronExtractor(spaces.Dict({"observation": TOKEN_SPACE}))
    with pytest.raises(ValueError, match="contradicts"):
        AttentionNeuronExtractor(_pong_space(), action_dim=3)
    with pytest.raises(TypeError, match="Discrete"):
        AttentionNeuronExtractor(spaces.Discrete(4))


@pytest.mark.parametrize("algo", ["ppo", "a2c", "dqn"])
def test_vision_extractor_sb3_roundtrip(algo: str, tmp_path) -> None:
    assert_sb3_roundtrip(
        _tokens_env, AttentionNeuronExtractor, SMALL_VISION, algo, tmp_path, n_timesteps=128
    )


def test_vision_extractor_real_puzzle_pong_ppo(tmp_path) -> None:
    """Paper-size student on the real env; with net_arch=[] action_net is the FC(512->6)."""
    model = assert_sb3_roundtrip(
        lambda: PreviousActionObservation(gym.make("attn_envs/PuzzlePong-v0")),
        AttentionNeuronExtractor,
        {},
        "ppo",
        tmp_path,
        n_timesteps=64,
        policy_kwargs={"net_arch": []},
    )
    policy = model.policy
    assert sum(p.numel() for p in policy.features_extractor.parameters()) == 1684648
    assert sum(p.numel() for p in policy.action_net.parameters()) == 512 * 6 + 6


@pytest.mark.parametrize(
    "make_env",
    [_cartpole_env, lambda: _cartpole_env(stack=1), _vector_uniform_env],
    ids=["stacked", "unstacked", "uniform"],
)
def test_vector_extractor_contract(make_env) -> None:
    space = make_env().observation_space
    ext = assert_extractor_contract(lambda: AttentionNeuronVectorExtractor(space))
    assert ext.features_dim == 16
    obs = sample_batch(space, 4)
    with capture_attention(ext) as maps:
        out = ext(obs)
    n = space["observation"].shape[-1]
    assert maps["neuron"].shape == (4, 1, 16, n)
    perm = torch.randperm(n)
    shuffled = {**obs, "observation": obs["observation"][..., perm]}
    with torch.no_grad():
        assert _max_diff(out, ext(shuffled)) < 1e-5


def test_vector_extractor_plain_box_and_validation() -> None:
    space = spaces.Box(-1.0, 1.0, (3, 7), np.float32)
    ext = assert_extractor_contract(lambda: AttentionNeuronVectorExtractor(space, n_queries=4))
    assert ext.neuron.action_dim == 0
    stacked = FrameStackObservation(PreviousActionObservation(UniformBoxEnv(space)), 2)
    with pytest.raises(ValueError, match="stacked window"):
        AttentionNeuronVectorExtractor(stacked.observation_space)
    bad = spaces.Dict(
        {"observation": spaces.Box(-1, 1, (4, 5)), "prev_action": spaces.Box(-1, 1, (1,))}
    )
    with pytest.raises(ValueError, match="prev_action"):
        AttentionNeuronVectorExtractor(bad)


@pytest.mark.parametrize("algo", ["ppo", "a2c", "dqn"])
def test_vector_extractor_sb3_roundtrip(algo: str, tmp_path) -> None:
    make_env = _vector_uniform_env if algo == "dqn" else _cartpole_env
    assert_sb3_roundtrip(make_env, AttentionNeuronVectorExtractor, {}, algo, tmp_path, 128)


def test_vector_extractor_under_recurrent_ppo(tmp_path) -> None:
    env = _cartpole_env(stack=1)
    model = RecurrentPPO(
        "MultiInputLstmPolicy",
        env,
        n_steps=32,
        batch_size=32,
        n_epochs=1,
        seed=0,
        device="cpu",
        policy_kwargs={
            "features_extractor_class": AttentionNeuronVectorExtractor,
            "lstm_hidden_size": 8,
            "net_arch": [],
        },
    )
    before = {k: v.clone() for k, v in model.policy.state_dict().items()}
    model.learn(64)
    after = model.policy.state_dict()
    assert any(not torch.equal(after[k], v) for k, v in before.items() if "neuron" in k)
    model.save(tmp_path / "rppo.zip")
    loaded = RecurrentPPO.load(tmp_path / "rppo.zip", device="cpu")
    obs, _ = env.reset(seed=1)
    state_a = state_b = None
    start = np.ones((1,), dtype=bool)
    for _ in range(5):
        a, state_a = model.predict(obs, state_a, start, deterministic=True)
        b, state_b = loaded.predict(obs, state_b, start, deterministic=True)
        np.testing.assert_array_equal(a, b)
        obs, *_ = env.step(a)
        start = np.zeros((1,), dtype=bool)


@pytest.mark.parametrize("key", ["n_queries", "query_dim", "msg_dim"])
def test_zero_or_negative_sizes_are_refused(key: str) -> None:
    from attn_policies.neuron import AttentionNeuron

    with pytest.raises(ValueError, match=f"{key} must be a positive integer, got 0"):
        AttentionNeuron(1, **{key: 0})
    with pytest.raises(ValueError, match="action_dim must be a non-negative integer, got -1"):
        AttentionNeuron(-1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"conv_channels": (0, 64)}, "conv_channels_0 must be a positive integer"),
        ({"conv_channels": (64, -1)}, "conv_channels_1 must be a positive integer"),
        ({"conv_channels": (64,)}, "conv_channels must be two sizes"),
        ({"features_dim": 0}, "features_dim must be a positive integer"),
        ({"n_queries": 0}, "n_queries must be a positive integer"),
    ],
)
def test_extractor_refuses_bad_sizes_at_construction(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AttentionNeuronExtractor(_pong_space(), **kwargs)
