"""Tests for attn_policies.neuron_extractors (AttentionNeuron SB3 extractors, seed 001)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from _contract import UniformBoxEnv
from _sb3 import assert_extractor_contract, assert_sb3_roundtrip, sample_batch
from gymnasium import spaces
from gymnasium.wrappers import FrameStackObservation
from sb3_contrib import RecurrentPPO

from attn_envs import PreviousActionObservation
from attn_policies.attention import capture_attention
from attn_policies.neuron_extractors import AttentionNeuronExtractor, AttentionNeuronVectorExtractor

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


# --------------------------------------------------------------------------- extractors


# the VisionAttentionNeuron (see tests/test_es_policies.py) and the student CNN after it
PONG_AN = (8 * 32 + 32) + (114 * 32 + 32) + (144 * 32 + 32) + 2 * 36 + 2 * 32
PONG_CNN = (32 * 64 * 16 + 64) + (64 * 64 * 9 + 64) + (3136 * 512 + 512)


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


def test_vision_extractor_takes_uint8_tokens_unconverted_bit_for_bit() -> None:
    """uint8 tokens go to the neuron as they are (scaled while converted): the same features
    and gradients as the float tokens SB3 hands over, and as the float formula before."""
    torch.manual_seed(0)
    ext = AttentionNeuronExtractor(_pong_space())
    obs = sample_batch(_pong_space(), 3)  # floats in [0, 255]
    raw = {**obs, "observation": obs["observation"].to(torch.uint8)}
    before = ext.neuron(obs["observation"].float() * ext.input_scale, obs["prev_action"])
    grid = before.view(3, 20, 20, 32).permute(0, 3, 1, 2)
    runs = {
        "uint8": lambda: ext(raw),
        "float": lambda: ext(obs),
        "before": lambda: ext.linear(ext.cnn(torch.relu(grid))),
    }
    outputs, grads = {}, {}
    for name, run in runs.items():
        ext.zero_grad(set_to_none=True)
        outputs[name] = out = run()
        out.square().sum().backward(retain_graph=True)
        grads[name] = [p.grad.clone() for p in ext.parameters()]
    for name in runs:
        assert torch.equal(outputs[name], outputs["before"]), name
        assert all(map(torch.equal, grads[name], grads["before"])), name


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
