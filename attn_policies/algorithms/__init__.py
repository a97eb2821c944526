"""Training algorithms SB3 does not ship: Double DQN with an oversampling replay buffer, an
A2C that reuses its acting forward passes in the update, and the supervised classifier loop
of E1 (:mod:`attn_policies.algorithms.supervised`)."""

from attn_policies.algorithms.a2c import RolloutGraphA2C
from attn_policies.algorithms.double_dqn import DoubleDQN, double_q_target, dqn_target
from attn_policies.algorithms.replay import OversamplingReplayBuffer
from attn_policies.algorithms.supervised import (
    ClassifierConfig,
    evaluate_classifier,
    fixed_test_set,
    train_classifier,
)

__all__ = [
    "ClassifierConfig",
    "DoubleDQN",
    "OversamplingReplayBuffer",
    "RolloutGraphA2C",
    "double_q_target",
    "dqn_target",
    "evaluate_classifier",
    "fixed_test_set",
    "train_classifier",
]
