"""SB3 policies that carry our extractors, for rl-baselines3-zoo's hyper-parameter files.

``python -m rl_zoo3.train -optimize`` *replaces* a file's ``policy_kwargs`` with its sampler's
(``net_arch``, ``activation_fn``), so an extractor named there is silently dropped and every
trial trains SB3's default network. A policy class whose defaults are the extractor (and the
optimizer the file asks for) keeps them under optimisation: the sampler then tunes the head
on top of our extractor. ``zoo/hyperparams/*.yml`` name these classes by import path
(``policy: zoo.rl_zoo3_policies.AWRLPolicy``), which is how rl-zoo3 loads a policy that is
not one of SB3's own (its ``get_class_by_name``); ``policy_kwargs`` still override every
default when given. The DQN file's :class:`~attn_policies.relational.RelationalDQNPolicy`
already carries its extractor.

Example:
    >>> import gymnasium as gym, attn_envs
    >>> from stable_baselines3 import PPO
    >>> env = gym.make("attn_envs/DistractorPong-v0", n_distractors=0)
    >>> sampled = dict(net_arch=dict(pi=[64], vf=[64]))  # what -optimize passes instead
    >>> model = PPO(AWRLPolicy, env, policy_kwargs=sampled, n_steps=64, device="cpu")
    >>> type(model.policy.features_extractor).__name__
    'AWRLExtractor'
    >>> env.close()
"""

from __future__ import annotations

from typing import Any

from stable_baselines3.common.policies import ActorCriticCnnPolicy, ActorCriticPolicy
from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike

from attn_policies.awrl import AWRLExtractor
from attn_policies.nonlocal_cnn import NonLocalNatureCNN

__all__ = ["AWRLPolicy", "NonLocalCnnPolicy"]


class AWRLPolicy(ActorCriticPolicy):
    """``MlpPolicy`` over :class:`~attn_policies.awrl.AWRLExtractor` (g-AWRL, E7), with no
    hidden layer between the extractor and the action / value heads (``net_arch=[]``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("features_extractor_class", AWRLExtractor)
        kwargs.setdefault("net_arch", [])
        super().__init__(*args, **kwargs)


class NonLocalCnnPolicy(ActorCriticCnnPolicy):
    """``CnnPolicy`` over :class:`~attn_policies.nonlocal_cnn.NonLocalNatureCNN` with the
    non-local block before the FC layer (the paper's default, E8), trained with SB3's
    TensorFlow-like RMSprop (``eps=1e-5``) as rl-zoo3's A2C Atari settings are."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if "features_extractor_class" not in kwargs:
            kwargs["features_extractor_class"] = NonLocalNatureCNN
            kwargs.setdefault("features_extractor_kwargs", {"positions": ["fc"]})
        kwargs.setdefault("optimizer_class", RMSpropTFLike)
        kwargs.setdefault("optimizer_kwargs", {"eps": 1e-5})
        super().__init__(*args, **kwargs)
