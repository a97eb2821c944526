"""Tests for attn_policies.algorithms.bc_student (the BC student and the agent acting with it)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3.common.torch_layers import FlattenExtractor

from attn_policies.algorithms.bc_student import BCStudent, StudentAgent


def test_the_head_outputs_logits_or_an_action_and_needs_a_shaped_space() -> None:
    obs_space = spaces.Box(-1, 1, (3,))
    logits = BCStudent(obs_space, spaces.Discrete(5), FlattenExtractor, net_arch=[8, 4])
    assert logits(torch.zeros(2, 3)).shape == (2, 5)
    assert [m.out_features for m in logits.head if isinstance(m, torch.nn.Linear)] == [8, 4, 5]
    action = BCStudent(obs_space, spaces.Box(-1, 1, (2, 3)), FlattenExtractor)
    assert action(torch.zeros(2, 3)).shape == (2, 6)
    with pytest.raises(ValueError, match="Discrete or a shaped action space"):
        BCStudent(obs_space, spaces.Dict({"a": spaces.Discrete(2)}), FlattenExtractor)


def test_stochastic_student_actions_follow_the_softmax_of_its_logits() -> None:
    logits = torch.tensor([[2.0, 0.0, -1.0, 1.0]])
    student = torch.nn.Linear(1, 4)
    with torch.no_grad():
        student.weight.zero_()
        student.bias.copy_(logits[0])
    agent = StudentAgent(student, spaces.Discrete(4), seed=3)
    obs = np.zeros((20000, 1), np.float32)
    draws, _ = agent.predict(obs, deterministic=False)
    counts = np.bincount(draws, minlength=4) / len(draws)
    np.testing.assert_allclose(counts, torch.softmax(logits, -1)[0].numpy(), atol=0.015)
    assert set(agent.predict(obs[:5])[0].tolist()) == {0}  # deterministic: the argmax
    agent.seed(3)
    np.testing.assert_array_equal(agent.predict(obs, deterministic=False)[0], draws)
    box = StudentAgent(torch.nn.Linear(1, 2), spaces.Box(-1, 1, (2,)))
    with pytest.raises(ValueError, match="stochastic actions need a Discrete action space"):
        box.predict(obs[:2], deterministic=False)
