"""Tests for attn_policies.es_policies (AttentionNeuronPolicy, FNNPolicy: seed 001's ES agents)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.func import functional_call, stack_module_state, vmap
from torch.utils._pytree import tree_map

from attn_policies.attention import capture_attention
from attn_policies.attention_neuron import VisionAttentionNeuron
from attn_policies.es_policies import AttentionNeuronPolicy, FNNPolicy


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


# --------------------------------------------------------------------------- agents


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
