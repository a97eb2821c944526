"""RolloutGraphA2C: SB3's A2C update from the acting forward passes' graphs."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from stable_baselines3 import A2C
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from torch import nn

from attn_policies.algorithms import RolloutGraphA2C
from attn_policies.nonlocal_cnn import NonLocalNatureCNN
from zoo.registry import resolve


def params(model: A2C) -> list[th.Tensor]:
    return [p.detach().clone() for p in model.policy.parameters()]


def trained(cls: type[A2C], steps: int, policy="MlpPolicy", env_fn="CartPole-v1", **kwargs) -> A2C:
    """A model made and trained at once (each construction reseeds torch's global RNG)."""
    callback = kwargs.pop("callback", None)
    env = make_vec_env(env_fn, n_envs=4, seed=3)
    model = cls(policy, env, n_steps=5, seed=0, **kwargs)
    return model.learn(steps, callback=callback)


def update_gradient(model: A2C, update) -> list[th.Tensor]:
    """The (clipped) gradient an update applies; the optimizer step is skipped."""
    seen: list[list[th.Tensor]] = []
    optimizer = model.policy.optimizer
    optimizer.step = lambda *a, **k: seen.append(  # type: ignore[method-assign]
        [p.grad.clone() for p in model.policy.parameters()]
    )
    try:
        update()
    finally:
        del optimizer.step
    return seen[0]


def assert_same_gradient(model: RolloutGraphA2C) -> None:
    """Collect one more rollout, then the update's gradient both ways, on the same weights."""
    _, callback = model._setup_learn(20, reset_num_timesteps=False)
    assert model.collect_rollouts(model.env, callback, model.rollout_buffer, model.n_steps)
    reused_before = model.reused_updates
    reused = update_gradient(model, model.train)
    assert model.reused_updates == reused_before + 1
    plain = update_gradient(model, lambda: A2C.train(model))  # SB3's second forward pass
    scale = max(float(g.abs().max()) for g in plain)
    assert scale > 0
    for a, b in zip(reused, plain, strict=True):
        th.testing.assert_close(a, b, rtol=1e-4, atol=1e-6 * scale)


@pytest.mark.parametrize("normalize_advantage", [False, True])
def test_gradient_is_sb3_a2c_gradient(normalize_advantage: bool) -> None:
    model = trained(RolloutGraphA2C, 40, normalize_advantage=normalize_advantage)
    assert model.reused_updates == 2  # trained weights, not the initial ones
    assert_same_gradient(model)


def test_first_rollout_and_returns_are_a2c_ones() -> None:
    plain, graph = (trained(cls, 20) for cls in (A2C, RolloutGraphA2C))
    flat = graph.rollout_buffer.swap_and_flatten  # SB3's update flattens its buffer in place
    np.testing.assert_array_equal(plain.rollout_buffer.actions, flat(graph.rollout_buffer.actions))
    np.testing.assert_allclose(
        plain.rollout_buffer.returns, flat(graph.rollout_buffer.returns), rtol=1e-6
    )


class _CallsForward(BaseCallback):
    """A callback that runs the policy's forward during the rollout."""

    def _on_step(self) -> bool:
        obs = th.zeros(1, *self.model.observation_space.shape)
        self.model.policy(obs)
        return True


def test_forward_calls_from_callbacks_fall_back_to_the_second_forward() -> None:
    plain = trained(A2C, 40, callback=_CallsForward())
    graph = trained(RolloutGraphA2C, 40, callback=_CallsForward())
    assert graph.reused_updates == 0 and graph._n_updates == 2
    for a, b in zip(params(plain), params(graph), strict=True):
        assert th.equal(a, b)  # SB3's update itself, bit for bit
    assert "forward" not in vars(graph.policy)  # the class's forward is back


class _SavesMidRollout(BaseCallback):
    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def _on_step(self) -> bool:
        if self.n_calls == 3:
            self.model.save(self.path)
        return True


def test_a_checkpoint_saved_mid_rollout_loads_as_either_class(tmp_path: Path) -> None:
    trained(RolloutGraphA2C, 40, callback=_SavesMidRollout(tmp_path / "mid.zip"))
    for cls in (A2C, RolloutGraphA2C):
        loaded = cls.load(tmp_path / "mid.zip")
        assert loaded.n_steps == 5 and not getattr(loaded, "_graphs", [])


def test_graphs_are_freed_after_the_update() -> None:
    graph = trained(RolloutGraphA2C, 20)
    assert graph._graphs == [] and graph.reused_updates == 1


def test_policies_with_mode_dependent_layers_are_refused() -> None:
    kwargs = {"net_arch": [8], "activation_fn": nn.ReLU}

    class DropoutPolicy(A2C.policy_aliases["MlpPolicy"]):  # type: ignore[misc,valid-type]
        def _build_mlp_extractor(self) -> None:
            super()._build_mlp_extractor()
            self.mlp_extractor.policy_net.append(nn.Dropout(0.1))

    with pytest.raises(ValueError, match="Dropout"):
        RolloutGraphA2C(DropoutPolicy, gym.make("CartPole-v1"), policy_kwargs=kwargs)


def test_nonlocal_cnn_on_images_same_gradient() -> None:
    space = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
    kwargs = {
        "features_extractor_class": NonLocalNatureCNN,
        "features_extractor_kwargs": {"positions": ["fc"]},
    }
    model = trained(
        RolloutGraphA2C,
        20,
        policy="CnnPolicy",
        env_fn=lambda: _ImageObs(gym.make("CartPole-v1"), space),
        policy_kwargs=kwargs,
    )
    assert model.reused_updates == 1
    assert_same_gradient(model)


class _ImageObs(gym.ObservationWrapper):
    """CartPole's state drawn as a deterministic uint8 image (a cheap image env)."""

    def __init__(self, env: gym.Env, space: gym.spaces.Box) -> None:
        super().__init__(env)
        self.observation_space = space
        self._pattern = np.random.default_rng(0).integers(0, 255, space.shape, np.uint8)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        shift = int(abs(observation[0]) * 40) % 84
        return np.roll(self._pattern, shift, axis=0)


def test_registered_as_a2c_graph() -> None:
    assert resolve("algo", "a2c_graph") is RolloutGraphA2C
