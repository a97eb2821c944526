"""Tests for zoo.factory: the env stack, hyper-parameter resolution and the probe."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import yaml
from gymnasium.utils.env_checker import check_env
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack, VecNormalize
from torch import nn

import zoo
from attn_envs import DuplicateObservation, StepPenalty
from attn_policies.algorithms import OversamplingReplayBuffer
from zoo.config import ConfigError, RunConfig, load_runs
from zoo.factory import (
    check_kwargs,
    make_model,
    make_single_env,
    make_vec_env,
    resolve_policy_kwargs,
    resolve_wrappers,
    wrapper_specs,
)
from zoo.trainers.sb3_trainer import SB3Trainer

PPO_BASE: dict[str, Any] = {
    "algo": "ppo",
    "env": "CartPole-v1",
    "policy": "MlpPolicy",
    "n_timesteps": 64,
    "n_steps": 32,
    "batch_size": 32,
    "n_epochs": 1,
}
DQN_BASE: dict[str, Any] = {
    "algo": "dqn",
    "env": "CartPole-v1",
    "policy": "MlpPolicy",
    "n_timesteps": 64,
    "learning_starts": 1000,
}


def run_of(tmp_path: Path, body: dict[str, Any], name: str = "exp") -> RunConfig:
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump({name: body}))
    (run,) = load_runs(path)
    return run


def wrapper_chain(env: gym.Env) -> list[type]:
    """Types from the outermost wrapper in."""
    chain = []
    while isinstance(env, gym.Wrapper):
        chain.append(type(env))
        env = env.env
    return [*chain, type(env)]


# --- env stack --------------------------------------------------------------------------------

STACKED = {
    **PPO_BASE,
    "env_wrapper": [{"StepPenalty": {"penalty": -0.5}}, {"DuplicateObservation": {"copies": 2}}],
    "frame_stack": 3,
    "normalize": {"norm_obs": True, "norm_reward": False},
}


def test_env_stack_order(tmp_path: Path) -> None:
    run = run_of(tmp_path, STACKED)
    venv = make_vec_env(run, n_envs=2, monitor_dir=tmp_path / "monitor", prefix="train_")
    try:
        assert type(venv) is VecNormalize
        assert type(venv.venv) is VecFrameStack
        assert type(venv.venv.venv) is DummyVecEnv
        assert venv.num_envs == 2
        assert venv.norm_obs and not venv.norm_reward and venv.training
        # CartPole's 4 features, duplicated, 3 frames stacked.
        assert venv.observation_space.shape == (4 * 2 * 3,)
        for env in venv.venv.venv.envs:
            chain = wrapper_chain(env)
            # Wrappers in config order around Monitor, which wraps gym.make's env directly.
            assert chain[:3] == [DuplicateObservation, StepPenalty, Monitor]
            assert not {DuplicateObservation, StepPenalty} & set(chain[3:])
    finally:
        venv.close()
    assert sorted(p.name for p in (tmp_path / "monitor").iterdir()) == [
        "train_0.monitor.csv",
        "train_1.monitor.csv",
    ]


def test_monitor_records_the_env_reward_before_wrappers(tmp_path: Path) -> None:
    wrapper = {"ClipReward": {"min_reward": 0.0, "max_reward": 0.25}}
    env = make_single_env(run_of(tmp_path, {**PPO_BASE, "env_wrapper": [wrapper]}))
    env.reset(seed=0)
    total, info, done = 0.0, {}, False
    while not done:
        _, reward, terminated, truncated, info = env.step(0)
        total += float(reward)
        done = terminated or truncated
    env.close()
    # CartPole pays 1 per step; the agent sees the clipped 0.25, Monitor the true return.
    assert info["episode"]["r"] == info["episode"]["l"] > 0
    assert total == pytest.approx(0.25 * info["episode"]["l"])


def test_evaluation_env_does_not_update_or_normalise_rewards(tmp_path: Path) -> None:
    venv = make_vec_env(run_of(tmp_path, {**STACKED, "normalize": True}), training=False)
    try:
        assert isinstance(venv, VecNormalize)
        assert not venv.training and not venv.norm_reward
        assert venv.num_envs == 1
    finally:
        venv.close()


def test_no_frame_stack_or_normalize_gives_a_plain_dummy_vec_env(tmp_path: Path) -> None:
    run = run_of(tmp_path, {**PPO_BASE, "n_envs": 3, "vec_env": "subproc"})
    venv = make_vec_env(run, n_envs=1)  # one env: no subprocess
    try:
        assert type(venv) is DummyVecEnv and venv.num_envs == 1
    finally:
        venv.close()
    venv = make_vec_env(run_of(tmp_path, {**PPO_BASE, "n_envs": 3}))
    try:
        assert type(venv) is DummyVecEnv and venv.num_envs == 3
    finally:
        venv.close()


def test_doorkey_single_env_passes_gymnasium_check_env() -> None:
    run = load_runs("doorkey", budget="smoke")[0]
    env = make_single_env(run)
    assert isinstance(env, Monitor)
    assert env.observation_space.shape == (3, 7, 7)
    assert env.action_space == gym.spaces.Discrete(5)
    with warnings.catch_warnings():
        # check_env notes that the env is wrapped (Monitor); that is what the run trains on.
        warnings.filterwarnings("ignore", message=".*different from the unwrapped version.*")
        # Monitor cannot be rebuilt from the spec, which the close/render re-make checks need.
        check_env(env, skip_render_check=True, skip_close_check=True)
    env.close()


def test_doorkey_single_env_renders_for_recording() -> None:
    run = load_runs("doorkey", budget="smoke")[0]
    env = make_single_env(run, render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    env.close()
    assert isinstance(frame, np.ndarray) and frame.ndim == 3 and frame.shape[2] == 3


def test_ale_ids_build_in_a_fresh_process() -> None:
    """``ALE/...`` ids must resolve without anyone having imported ale_py first."""
    code = (
        "from zoo.config import load_runs\n"
        "from zoo.trainers.sb3_trainer import SB3Trainer\n"
        "SB3Trainer().probe(load_runs('atari_nonlocal', budget='smoke')[0])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]


# --- wrappers and kwargs ----------------------------------------------------------------------


def test_wrapper_specs_normalise_names_and_mappings() -> None:
    assert wrapper_specs(None) == []
    assert wrapper_specs("StepPenalty") == [("StepPenalty", {})]
    assert wrapper_specs({"StepPenalty": None}) == [("StepPenalty", {})]
    assert wrapper_specs(["A", {"B": {"x": 1}}]) == [("A", {}), ("B", {"x": 1})]


@pytest.mark.parametrize(
    "raw", [[{"A": 1}], [{"A": {}, "B": {}}], [5], [["A"]]], ids=["kwargs", "two", "int", "list"]
)
def test_wrapper_specs_reject_malformed_items(raw: Any) -> None:
    with pytest.raises(ConfigError, match=r"env_wrapper\[0\]"):
        wrapper_specs(raw)


def test_resolve_wrappers_checks_kwargs() -> None:
    ((cls, kwargs),) = resolve_wrappers([("DuplicateObservation", {"copies": 3})])
    assert (cls, kwargs) == (DuplicateObservation, {"copies": 3})
    with pytest.raises(ConfigError, match=r"'copy'.*Did you mean 'copies'"):
        resolve_wrappers([("DuplicateObservation", {"copy": 3})])


def test_check_kwargs_on_functions_and_classes() -> None:
    def fn(env: Any, a: int = 1, *, b: int = 2) -> None: ...

    check_kwargs("where", fn, {"a": 1, "b": 2}, skip=1)
    with pytest.raises(ConfigError, match="where: fn has no argument 'env'"):
        check_kwargs("where", fn, {"env": 1}, skip=1)
    check_kwargs("where", dict, {"anything": 1})  # **kwargs accepts everything


# --- models -----------------------------------------------------------------------------------


def test_lin_schedules(tmp_path: Path) -> None:
    body = {**PPO_BASE, "learning_rate": "lin_1e-3", "clip_range": "lin_0.2"}
    run = run_of(tmp_path, body)
    venv = make_vec_env(run)
    model = make_model(run, venv)
    venv.close()
    assert isinstance(model, PPO)
    # rl-zoo's lin_<x>: x * progress_remaining, from x at the start to 0 at the end.
    for progress in (1.0, 0.5, 0.25, 0.0):
        assert model.lr_schedule(progress) == pytest.approx(1e-3 * progress)
        assert model.clip_range(progress) == pytest.approx(0.2 * progress)


def test_make_model_passes_config(tmp_path: Path) -> None:
    body = {
        **PPO_BASE,
        "seed": 3,
        "gamma": 0.5,
        "policy_kwargs": {"net_arch": [7], "activation_fn": "tanh"},
    }
    run = run_of(tmp_path, body)
    venv = make_vec_env(run)
    model = make_model(run, venv)
    venv.close()
    assert (model.seed, model.gamma, model.n_steps, model.n_epochs) == (3, 0.5, 32, 1)
    assert model.policy_kwargs["activation_fn"] is nn.Tanh
    linears = [m for m in model.policy.mlp_extractor.policy_net if isinstance(m, nn.Linear)]
    assert [m.out_features for m in linears] == [7]
    assert str(model.device) == "cpu"


def test_extractor_activation_is_resolved_by_name(tmp_path: Path) -> None:
    kwargs = {"features_extractor_class": "awrl"}
    extractor = {"features_extractor_kwargs": {"activation_fn": "identity"}}
    body = {**PPO_BASE, "policy_kwargs": {**kwargs, **extractor}}
    resolved = resolve_policy_kwargs(run_of(tmp_path, body), ActorCriticPolicy)
    assert resolved["features_extractor_kwargs"]["activation_fn"] is nn.Identity
    bad_kwargs = {"features_extractor_kwargs": {"activation_fn": "os"}}
    bad = {**PPO_BASE, "policy_kwargs": {**kwargs, **bad_kwargs}}
    with pytest.raises(ConfigError, match=r"features_extractor_kwargs.activation_fn"):
        resolve_policy_kwargs(run_of(tmp_path, bad), ActorCriticPolicy)


def test_make_model_dqn_with_oversampling_and_train_freq_list(tmp_path: Path) -> None:
    body = {
        **DQN_BASE,
        "buffer_size": 5000,
        "train_freq": [2, "episode"],
        "replay_buffer_class": "oversampling",
        "replay_buffer_kwargs": {"copies": 7},
    }
    run = run_of(tmp_path, body)
    venv = make_vec_env(run)
    model = make_model(run, venv)
    probed = make_model(run, venv, probe=True)
    venv.close()
    assert isinstance(model, DQN)
    assert isinstance(model.replay_buffer, OversamplingReplayBuffer)
    assert model.replay_buffer.copies == 7
    assert (model.train_freq.frequency, model.train_freq.unit.value) == (2, "episode")
    assert model.buffer_size == 5000
    assert probed.buffer_size == 1000  # the probe shrinks replay buffers


# --- the probe --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"env_wrapper": ["PatchObservation"]}, "PatchObservation"),
        ({"env_wrapper": [{"ActionSubset": {"actions": [0, 5]}}]}, "ActionSubset"),
        ({"env_wrapper": ["AtariWrapper"]}, "AtariWrapper|get_action_meanings"),
        ({"env": "CartPol-v1"}, "CartPol"),
        ({"policy": "CnnPolicy"}, "exp"),
        (
            {"policy_kwargs": {"features_extractor_class": "nonlocal_nature_cnn"}},
            "exp",
        ),
    ],
    ids=["patch-on-vector", "action-out-of-range", "atari-on-cartpole", "env-typo", "cnn", "ext"],
)
def test_probe_turns_misfits_into_config_errors(
    tmp_path: Path, changes: dict[str, Any], match: str
) -> None:
    run = run_of(tmp_path, {**PPO_BASE, **changes})  # the static checks pass
    with pytest.raises(ConfigError, match=match):
        SB3Trainer().probe(run)


def test_probe_is_quiet_about_its_own_single_env_batch(tmp_path: Path) -> None:
    # 8 envs x 32 steps fill batches of 64; the probe's single env (32 steps) would not.
    run = run_of(tmp_path, {**PPO_BASE, "n_envs": 8, "batch_size": 64})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        SB3Trainer().probe(run)
    assert not [w for w in caught if "mini-batch size" in str(w.message)]
    venv = make_vec_env(run, n_envs=1)
    with pytest.warns(UserWarning, match="mini-batch size"):  # a real run on one env warns
        make_model(run, venv)
    venv.close()


def test_probe_catches_a_refused_hyper_parameter(tmp_path: Path) -> None:
    body = {**DQN_BASE, "algo": "double_dqn", "loss": "l1"}
    path = tmp_path / "dd.yml"
    path.write_text(yaml.safe_dump({"dd": body}))
    run = RunConfig("dd", "", "full", body, zoo.EvalConfig(), str(path))
    with pytest.raises(ConfigError, match="loss"):
        SB3Trainer().probe(run)


def test_train_writes_nothing_when_the_probe_fails(tmp_path: Path) -> None:
    path = tmp_path / "misfit.yml"
    path.write_text(yaml.safe_dump({"misfit": {**PPO_BASE, "env_wrapper": ["PatchObservation"]}}))
    root = tmp_path / "runs"
    with pytest.raises(ConfigError, match="PatchObservation"):
        zoo.train(path, root=root)
    with pytest.raises(ConfigError, match="PatchObservation"):
        zoo.train_all(path, root=root)
    assert not root.exists()


def _orders(venv: Any, seed: int) -> list[bytes]:
    venv.seed(seed)
    venv.reset()
    orders = [p.tobytes() for p in venv.get_attr("feature_permutation")]
    venv.close()
    return orders


def test_a_constructor_refusing_a_config_value_is_a_config_error_naming_it(
    tmp_path: Path,
) -> None:
    # Outside the probe too (evaluate, record and maps build from a run folder's config): an
    # env's, a wrapper's or a model's own TypeError / ValueError on a config value is the
    # user's to fix (attn-zoo's exit 2), named; a ValueError elsewhere stays a bug.
    run = run_of(tmp_path, {**PPO_BASE, "env_kwargs": {"bogus": 1}})
    with pytest.raises(ConfigError, match=r"exp: env 'CartPole-v1' with env_kwargs \{'bogus'"):
        make_single_env(run)
    wrapper = [{"ShuffleObservation": {"reshuffle_every": -1}}]
    run = run_of(tmp_path, {**PPO_BASE, "env_wrapper": wrapper})
    with pytest.raises(ConfigError, match=r"exp: env_wrapper\[0\] ShuffleObservation.*positive"):
        make_single_env(run)
    run = run_of(tmp_path, {**PPO_BASE, "policy_kwargs": {"net_arch": "wide"}})
    with pytest.raises(ConfigError, match=r"exp: the ppo model \(policy, policy_kwargs, hyper"):
        make_model(run, make_vec_env(run, n_envs=1))


def test_per_env_kwargs_merge_over_the_run_env_kwargs(tmp_path: Path) -> None:
    body = {**PPO_BASE, "env": "attn_envs/CartPoleSwingUp-v0", "env_kwargs": {"upright": True}}
    run = run_of(tmp_path, body)
    venv = make_vec_env(run, n_envs=5, env_kwargs=[{}, {"harder": True}])
    assert venv.num_envs == 2  # one env per mapping
    flags = [(env.unwrapped.upright, env.unwrapped.harder) for env in venv.envs]
    assert flags == [(True, False), (True, True)]
    venv.close()


def test_sb3_probe_builds_the_eval_env_kwargs(tmp_path: Path) -> None:
    body = {**PPO_BASE, "eval": {"freq": 32, "n_envs": 2, "env_kwargs": [{}, {"sutton": 1}]}}
    with pytest.raises(ConfigError, match=r"eval.env_kwargs\[1\] = \{'sutton': 1\} does not"):
        SB3Trainer().probe(run_of(tmp_path, body))
    body["eval"]["env_kwargs"] = [{}, {"sutton_barto_reward": True}]
    SB3Trainer().probe(run_of(tmp_path, body))


def test_e7_one_feature_order_per_run(tmp_path: Path) -> None:
    # SB3 seeds actor i with seed + i; the order must still be the run's, not the actor's.
    run = load_runs("atariari", budget="smoke", seed=3)[0]
    train = _orders(make_vec_env(run, n_envs=3), seed=3)
    evaluation = _orders(make_vec_env(run, n_envs=1, training=False), seed=run.eval.seed)
    assert len(set(train + evaluation)) == 1
    single = make_single_env(run)
    single.reset(seed=123)
    assert single.get_wrapper_attr("feature_permutation").tobytes() == train[0]
    single.close()
    # a resumed run rebuilds its envs from the saved config.yml: the same order
    (tmp_path / "config.yml").write_text(run.to_yaml())
    again = load_runs(tmp_path / "config.yml")[0]
    assert set(_orders(make_vec_env(again, n_envs=1), seed=50)) == set(train)
    other = load_runs("atariari", budget="smoke", seed=4)[0]
    assert set(_orders(make_vec_env(other, n_envs=1), seed=3)) != set(train)
    # an explicit env_kwargs.order_seed wins over the run seed
    fixed = load_runs("atariari", budget="smoke", seed=4, overrides={"env_kwargs.order_seed": 3})
    assert set(_orders(make_vec_env(fixed[0], n_envs=1), seed=4)) == set(train)
