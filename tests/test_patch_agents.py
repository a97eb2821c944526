"""Tests for attn_policies.patch_agents (AttentionAgent, the E6 voting agent, CarRacing actions)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _contract import UniformBoxEnv
from _sb3 import n_params
from gymnasium import spaces
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from torch import Tensor

from attn_envs import PatchObservation
from attn_policies.attention import capture_attention
from attn_policies.attention_neuron import VisionAttentionNeuron
from attn_policies.patch_agents import (
    AttentionAgent,
    AttentionNeuronVotingAgent,
    LSTMState,
    VotingAgentState,
    carracing_action,
)


def small_e6(seed: int = 0, grid: int = 4, code: int = 6) -> AttentionNeuronVotingAgent:
    """The E6 agent at toy size: 2x2 patches of 2 frames (tokens of 8), 4x4 codes of 6."""
    torch.manual_seed(seed)
    neuron = VisionAttentionNeuron.car_racing(
        n_queries=grid**2, qk_dim=4, value_dim=code, patch_size=2, n_frames=2
    )
    return AttentionNeuronVotingAgent(neuron, grid_size=grid, code_dim=code, top_k=3)


# -------------------------------------------------------------------------- AttentionAgent


def test_attention_agent_parameter_count() -> None:
    agent = AttentionAgent()
    assert agent.num_parameters == 3667  # Tang et al. 2020
    sizes = {name: n_params(m) for name, m in agent.named_children()}
    assert sizes == {"voting": 2 * (147 * 4 + 4), "lstm": 4 * 16 * 36 + 2 * 64, "head": 51}
    assert agent.voting.n_patches == 529 and agent.grid_shape == (23, 23)


def test_attention_agent_accepts_hwc_chw_uint8_and_patch_observation_tokens() -> None:
    torch.manual_seed(0)
    agent = AttentionAgent()
    env = PatchObservation(
        UniformBoxEnv(spaces.Box(0, 255, (96, 96, 3), np.uint8)), patch_size=7, stride=4, crop=True
    )
    tokens = [env.reset(seed=seed)[0] for seed in range(2)]
    frames = [env.unwrapped.reset(seed=seed)[0] for seed in range(2)]  # what the wrapper saw
    hwc = torch.from_numpy(np.stack(frames))
    tok = torch.from_numpy(np.stack(tokens)).float() / 255
    assert tok.shape == (2, 529, 147)
    torch.testing.assert_close(agent.tokens(hwc), tok)
    a_uint8, s1 = agent(hwc, agent.initial_state(2))
    a_chw, _ = agent(hwc.permute(0, 3, 1, 2).float() / 255, agent.initial_state(2))
    a_tok, s3 = agent(tok, None)
    torch.testing.assert_close(agent(torch.from_numpy(np.stack(tokens)))[0], a_tok)  # uint8
    torch.testing.assert_close(a_uint8, a_chw)
    torch.testing.assert_close(a_uint8, a_tok)
    torch.testing.assert_close(s1.h, s3.h)
    assert a_uint8.shape == (2, 3) and a_uint8.abs().max() <= 1
    assert agent.last_votes is not None and agent.last_votes.indices.shape == (2, 10)
    with pytest.raises(ValueError, match="frames"):
        agent(torch.rand(2, 3, 64, 64))


def test_attention_agent_capture_shape() -> None:
    agent = AttentionAgent()
    with capture_attention(agent) as maps:
        agent(torch.rand(2, 3, 96, 96))
    assert {k: tuple(v.shape) for k, v in maps.items()} == {"voting": (2, 1, 529, 529)}


def _step_batched_vs_alone(agent, inputs: Tensor, n_steps: int) -> None:
    """``inputs``: (T, B, ...). Stepping B agents together equals stepping each alone."""
    b = inputs.shape[1]
    state = agent.initial_state(b)
    batched, batched_idx = [], []
    for t in range(n_steps):
        action, state = agent(inputs[t], state)
        batched.append(action)
        batched_idx.append(agent.last_votes.indices)
    for i in range(b):
        s = agent.initial_state(1)
        for t in range(n_steps):
            action, s = agent(inputs[t, i : i + 1], s)
            torch.testing.assert_close(action[0], batched[t][i], rtol=1e-5, atol=1e-6)
            assert torch.equal(agent.last_votes.indices[0], batched_idx[t][i])


def test_attention_agent_batched_equals_alone() -> None:
    torch.manual_seed(0)
    agent = AttentionAgent()
    frames = torch.randint(0, 256, (4, 3, 96, 96, 3), dtype=torch.uint8)
    _step_batched_vs_alone(agent, frames, 4)
    # and the state matters: a fresh state gives a different action at the last step
    a_carried, _ = agent(frames[1], agent(frames[0])[1])
    a_fresh, _ = agent(frames[1])
    assert not torch.allclose(a_carried, a_fresh)


def test_flat_parameters_roundtrip() -> None:
    torch.manual_seed(0)
    agent = AttentionAgent()
    flat = agent.get_flat_parameters()
    assert flat.shape == (agent.num_parameters,)
    # layout: registration order, the authors' get_params order
    assert torch.equal(flat[:588], agent.voting.query.weight.reshape(-1))
    assert torch.equal(flat[-3:], agent.head.bias)
    x = torch.rand(2, 96, 96, 3)
    before, _ = agent(x)
    new = torch.from_numpy(np.random.default_rng(0).normal(0, 0.1, agent.num_parameters))
    agent.set_flat_parameters(new)
    torch.testing.assert_close(agent.get_flat_parameters(), new.float())
    assert not torch.allclose(agent(x)[0], before)
    agent.set_flat_parameters(flat.numpy())
    torch.testing.assert_close(agent(x)[0], before, rtol=0, atol=0)
    flat[0] = 123.0  # get_flat_parameters returns a copy
    assert agent.voting.query.weight[0, 0] != 123.0
    with pytest.raises(ValueError, match="3667 parameters"):
        agent.set_flat_parameters(torch.zeros(10))


def test_set_flat_parameters_copies() -> None:
    agent = AttentionAgent()
    vec = np.zeros(agent.num_parameters, dtype=np.float32)
    agent.set_flat_parameters(vec)
    vec[:] = 7.0
    assert not agent.get_flat_parameters().any()


def test_population_vmap_matches_one_member_at_a_time() -> None:
    # An ES trainer can evaluate a population in one call with torch.func.
    torch.manual_seed(0)
    agent = AttentionAgent()
    names = [n for n, _ in agent.named_parameters()]
    shapes = [p.shape for p in agent.parameters()]
    pop = 0.1 * torch.randn(3, agent.num_parameters)

    def unflatten(flat: Tensor) -> dict[str, Tensor]:
        chunks = flat.split([math.prod(s) for s in shapes])
        return {n: c.view(s) for n, c, s in zip(names, chunks, shapes, strict=True)}

    def rollout(flat: Tensor, frames: Tensor) -> Tensor:
        params, state, actions = unflatten(flat), agent.initial_state(len(frames[0])), []
        for x in frames:
            action, state = torch.func.functional_call(agent, params, (x, state))
            actions.append(action)
        return torch.stack(actions)

    frames = torch.rand(3, 2, 96, 96, 3)
    batched = torch.func.vmap(rollout, in_dims=(0, None))(pop, frames)
    for i in range(3):
        agent.set_flat_parameters(pop[i])
        torch.testing.assert_close(batched[i], rollout(pop[i], frames), rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------- AttentionNeuron + voting


def test_e6_agent_parameter_count_and_shapes() -> None:
    torch.manual_seed(0)
    agent = AttentionNeuronVotingAgent()
    sizes = {name: n_params(m) for name, m in agent.named_children()}
    # neuron: W_q 8x16, W_k (108 + 3)x16, W_v 144x16, all with biases; LayerNorms frozen
    neuron = (8 + 1) * 16 + (111 + 1) * 16 + (144 + 1) * 16
    gate = (19 + 1) * 16 + 16 + 1
    assert sizes == {"neuron": neuron, "voting": 136, "lstm": 2432, "head": 51, "gate": gate}
    assert agent.num_parameters == 7212  # the size of the authors' PIAttentionAgent
    tokens = torch.rand(2, 256, 144)
    action, state = agent(tokens, agent.initial_state(2))
    assert action.shape == (2, 3)
    assert isinstance(state, VotingAgentState)
    assert state.m_prev.shape == (2, 1024, 16)
    assert state.alpha.shape == (2, 1) and ((state.alpha > 0) & (state.alpha < 1)).all()
    assert torch.equal(state.a_prev, action)
    assert agent.last_votes.indices.shape == (2, 10)
    assert agent.voting.centres[33].tolist() == [1 / 32, 1 / 32]  # cell (i, j) at (i, j) / 32
    with capture_attention(agent) as maps:
        agent(tokens, state)
    assert {k: tuple(v.shape) for k, v in maps.items()} == {
        "neuron": (2, 1, 1024, 256),
        "voting": (2, 1, 1024, 1024),
    }


def test_e6_smoothing_gate_follows_the_recurrence() -> None:
    agent = small_e6()
    tokens = torch.rand(2, 2, 7, 8)
    s0 = agent.initial_state(2)
    a1, s1 = agent(tokens[0], s0)
    # first step: alpha = 0, m_1 is the neuron's output
    torch.testing.assert_close(s1.m_prev, agent.neuron(tokens[0], s0.a_prev))
    torch.testing.assert_close(s1.alpha, agent.gate(torch.cat([s1.h, a1], -1)))
    assert (s1.alpha > 0).all()
    _, s2 = agent(tokens[1], s1)
    alpha = s1.alpha[:, :, None]
    expected = (1 - alpha) * agent.neuron(tokens[1], a1) + alpha * s1.m_prev
    torch.testing.assert_close(s2.m_prev, expected)
    assert not torch.allclose(s2.m_prev, agent.neuron(tokens[1], a1))
    # the votes are taken on the smoothed code
    torch.testing.assert_close(agent.last_votes.votes, agent.voting(expected).votes)


def test_e6_batched_equals_alone() -> None:
    agent = small_e6(seed=1)
    _step_batched_vs_alone(agent, torch.rand(5, 3, 7, 8), 5)


def _ranking_is_float_noise(votes: Tensor, k: int, tol: float = 1e-5) -> bool:
    """True when two of the top ``k + 1`` votes are closer than ``tol``: their order (and so
    the action) may then depend on summation order, i.e. on the order of the patches."""
    top = votes.sort(dim=-1, descending=True).values[:, : k + 1]
    return bool((top[:, :-1] - top[:, 1:] < tol).any())


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(2, 12))
def test_e6_action_invariant_to_patch_order(seed: int, n: int) -> None:
    agent = small_e6()
    g = torch.Generator().manual_seed(seed)
    agent.set_flat_parameters(0.5 * torch.randn(agent.num_parameters, generator=g))
    tokens = torch.rand(4, 2, n, 8, generator=g)
    s, s_perm = agent.initial_state(2), agent.initial_state(2)
    for t in range(4):
        perm = torch.randperm(n, generator=g)  # a fresh shuffle every step
        a, s = agent(tokens[t], s)
        votes = agent.last_votes
        a_perm, s_perm = agent(tokens[t, :, perm], s_perm)
        assume(not _ranking_is_float_noise(votes.votes, agent.voting.top_k))
        assume(not _ranking_is_float_noise(agent.last_votes.votes, agent.voting.top_k))
        assert torch.equal(agent.last_votes.indices, votes.indices)
        torch.testing.assert_close(a_perm, a, rtol=1e-5, atol=1e-6)


def test_e6_full_size_action_invariant_to_patch_order() -> None:
    torch.manual_seed(0)
    agent = AttentionNeuronVotingAgent()
    tokens = torch.rand(2, 2, 256, 144)
    s, s_perm = agent.initial_state(2), agent.initial_state(2)
    for t in range(2):
        a, s = agent(tokens[t], s)
        idx = agent.last_votes.indices
        a_perm, s_perm = agent(tokens[t][:, torch.randperm(256)], s_perm)
        torch.testing.assert_close(a_perm, a, rtol=1e-5, atol=1e-6)
        assert torch.equal(agent.last_votes.indices, idx)


def test_e6_validation() -> None:
    with pytest.raises(TypeError, match=r"neuron must be an nn\.Module"):
        AttentionNeuronVotingAgent(neuron=lambda tokens, prev: tokens)  # type: ignore[arg-type]
    neuron = VisionAttentionNeuron.car_racing(n_queries=9, value_dim=16)
    agent = AttentionNeuronVotingAgent(neuron, grid_size=4, code_dim=16)
    with pytest.raises(ValueError, match=r"expected \(1, 16, 16\)"):
        agent(torch.rand(1, 5, 144))


# ------------------------------------------------------------------------- action mapping


def test_carracing_action() -> None:
    raw = np.array([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0], [0.25, 0.0, -0.5], [3.0, -2.0, 2.0]])
    expected = np.array([[-1, 0, 0], [1, 1, 1], [0.25, 0.5, 0.25], [1, 0, 1]], dtype=float)
    np.testing.assert_allclose(carracing_action(raw), expected)
    out = carracing_action(torch.tensor(raw, dtype=torch.float32))
    assert isinstance(out, Tensor) and out.dtype == torch.float32
    torch.testing.assert_close(out, torch.tensor(expected, dtype=torch.float32))
    out32 = carracing_action(raw.astype(np.float32))
    assert out32.dtype == np.float32
    with pytest.raises(ValueError, match="3 values"):
        carracing_action(np.zeros(2))


def test_lstm_state_type() -> None:
    state = AttentionAgent().initial_state(5)
    assert isinstance(state, LSTMState) and state.h.shape == state.c.shape == (5, 16)
    assert not state.h.any() and not state.c.any()
