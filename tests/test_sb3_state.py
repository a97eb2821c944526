"""Tests for zoo.trainers.sb3_state: SB3 artefacts as tensors and arrays, atomically."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from stable_baselines3 import A2C, DQN
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize

from zoo.config import ConfigError
from zoo.trainers import sb3_state


def _dqn(seed: int = 0, steps: int = 0) -> DQN:
    model = DQN(
        "MlpPolicy",
        make_vec_env("CartPole-v1", n_envs=1, seed=seed),
        buffer_size=300,
        learning_starts=20,
        policy_kwargs={"net_arch": [8]},
        seed=seed,
    )
    if steps:
        model.learn(steps)
    return model


def test_model_buffer_and_counters_round_trip(tmp_path: Path) -> None:
    trained = _dqn(steps=120)
    sb3_state.save_model(trained, tmp_path / "last.zip")
    sb3_state.save_replay_buffer(trained.replay_buffer, tmp_path / "buffer.npz")
    fresh = sb3_state.load_model(_dqn(seed=1), tmp_path / "last.zip")
    sb3_state.load_replay_buffer(fresh.replay_buffer, tmp_path / "buffer.npz")
    assert fresh.num_timesteps == 120 and fresh._n_calls == trained._n_calls
    assert fresh.replay_buffer.pos == trained.replay_buffer.pos
    np.testing.assert_array_equal(
        fresh.replay_buffer.observations, trained.replay_buffer.observations
    )
    for a, b in zip(fresh.policy.parameters(), trained.policy.parameters(), strict=True):
        assert (a == b).all()
    obs = np.zeros((1, 4), np.float32)
    assert fresh.predict(obs)[0] == trained.predict(obs)[0]


def test_a_buffer_of_another_shape_is_refused(tmp_path: Path) -> None:
    sb3_state.save_replay_buffer(_dqn(steps=30).replay_buffer, tmp_path / "buffer.npz")
    other = DQN("MlpPolicy", "CartPole-v1", buffer_size=100, policy_kwargs={"net_arch": [8]})
    with pytest.raises(ConfigError, match=r"buffer\.npz: observations is float32\(300"):
        sb3_state.load_replay_buffer(other.replay_buffer, tmp_path / "buffer.npz")


def test_vecnormalize_statistics_round_trip(tmp_path: Path) -> None:
    venv = VecNormalize(make_vec_env("CartPole-v1", n_envs=2, seed=0))
    venv.reset()
    for _ in range(20):
        venv.step(np.array([0, 1]))
    sb3_state.save_vecnormalize(venv, tmp_path / "norm.npz")
    other = sb3_state.load_vecnormalize(
        VecNormalize(make_vec_env("CartPole-v1", n_envs=1)), tmp_path / "norm.npz"
    )
    obs = np.ones((1, 4), np.float32)
    np.testing.assert_array_equal(other.normalize_obs(obs), venv.normalize_obs(obs))
    assert other.obs_rms.count == venv.obs_rms.count


def test_a_buffer_is_checked_from_its_headers_against_a_shrunk_buffer(tmp_path: Path) -> None:
    """``check_replay_buffer`` (a resume's check before it writes) reads no array: a shrunk
    buffer of the same run passes, one of another env is refused, as is an object array."""
    sb3_state.save_replay_buffer(_dqn(steps=30).replay_buffer, tmp_path / "buffer.npz")
    shrunk = DQN("MlpPolicy", "CartPole-v1", buffer_size=10, policy_kwargs={"net_arch": [8]})
    sb3_state.check_replay_buffer(shrunk.replay_buffer, tmp_path / "buffer.npz")
    other = DQN("MlpPolicy", "Acrobot-v1", buffer_size=10, policy_kwargs={"net_arch": [8]})
    with pytest.raises(ConfigError, match=r"buffer\.npz: observations is float32\(300, 1, 4\)"):
        sb3_state.check_replay_buffer(other.replay_buffer, tmp_path / "buffer.npz")
    with np.load(tmp_path / "buffer.npz") as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["actions"] = np.empty(arrays["actions"].shape, dtype=object)
    np.savez(tmp_path / "objects.npz", **arrays)
    with pytest.raises(ConfigError, match="actions is object"):
        sb3_state.check_replay_buffer(shrunk.replay_buffer, tmp_path / "objects.npz")


def _a2c(seed: int = 0, steps: int = 0) -> A2C:
    model = A2C(
        "MlpPolicy",
        make_vec_env("CartPole-v1", n_envs=2, seed=seed),
        n_steps=5,
        policy_kwargs={"net_arch": [64, 64]},
        seed=seed,
    )
    if steps:
        model.learn(steps)
    return model


def test_a_copy_without_optimizer_statistics_acts_as_the_model(tmp_path: Path) -> None:
    """The slim copy keeps every weight and the optimizer's hyperparameters; RMSprop's
    square averages go, the file shrinks, and both loaders (ours and SB3's own) open it."""
    trained = _a2c(steps=100)
    sb3_state.save_model(trained, tmp_path / "model.zip")
    size = sb3_state.drop_optimizer_statistics(tmp_path / "model.zip", tmp_path / "slim.zip")
    assert size == (tmp_path / "slim.zip").stat().st_size
    assert size < 0.75 * (tmp_path / "model.zip").stat().st_size
    with (
        zipfile.ZipFile(tmp_path / "model.zip") as full,
        zipfile.ZipFile(tmp_path / "slim.zip") as slim,
    ):
        assert full.namelist() == slim.namelist()
        for name in full.namelist():
            if name != "policy.optimizer.pth":
                assert full.read(name) == slim.read(name), name
        state = torch.load(io.BytesIO(slim.read("policy.optimizer.pth")), weights_only=True)
    assert state["state"] == {}
    assert state["param_groups"] == trained.policy.optimizer.state_dict()["param_groups"]

    ours = sb3_state.load_model(_a2c(seed=1), tmp_path / "slim.zip")
    theirs = A2C.load(tmp_path / "slim.zip")
    assert ours.num_timesteps == trained.num_timesteps
    for model in (ours, theirs):
        for a, b in zip(model.policy.parameters(), trained.policy.parameters(), strict=True):
            assert torch.equal(a, b)
        assert model.policy.optimizer.state_dict()["state"] == {}
    obs = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
    expected = trained.predict(obs, deterministic=True)[0]
    np.testing.assert_array_equal(ours.predict(obs, deterministic=True)[0], expected)
    np.testing.assert_array_equal(theirs.predict(obs, deterministic=True)[0], expected)


def test_dropping_statistics_from_a_foreign_file_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "model.zip").write_bytes(b"not a zip")
    with pytest.raises(ConfigError, match=r"model\.zip: not a readable SB3 model file"):
        sb3_state.drop_optimizer_statistics(tmp_path / "model.zip", tmp_path / "slim.zip")
    with zipfile.ZipFile(tmp_path / "odd.zip", "w") as archive:
        archive.writestr("policy.optimizer.pth", b"\x80\x02K\x01.")  # a pickled int
    with pytest.raises(ConfigError, match=r"odd\.zip: not a readable SB3 model file"):
        sb3_state.drop_optimizer_statistics(tmp_path / "odd.zip", tmp_path / "slim.zip")
    assert not (tmp_path / "slim.zip").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.zip", "odd.zip"]


def deflated(file: Path, entries: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(file, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, raw in entries.items():
            archive.writestr(name, raw)
    return file


def test_a_checkpoint_whose_data_entry_inflates_is_refused_unread(tmp_path: Path) -> None:
    # issue 68, item 7: a 1 MB checkpoints/last.zip whose data entry inflated to 1 GB peaked
    # at 2.45 GB and exited 0; here 32 MB of padding deflate to about 32 kB
    data = b'{"num_timesteps": 5, "pad": "' + b" " * (32 * 2**20) + b'"}'
    bomb = deflated(tmp_path / "last.zip", {"data": data})
    assert bomb.stat().st_size < 100_000
    with pytest.raises(ConfigError, match="refused as a zip bomb"):
        sb3_state.read_counters(bomb)
    with pytest.raises(ConfigError, match="refused as a zip bomb"):
        sb3_state.read_logger_state(bomb)


def test_an_sb3_zip_whose_tensors_inflate_is_refused_before_sb3_reads_it(tmp_path: Path) -> None:
    model = _dqn()
    model.save(tmp_path / "model.zip")
    with zipfile.ZipFile(tmp_path / "model.zip") as archive:
        entries = {n: archive.read(n) for n in archive.namelist()}
    buffer = io.BytesIO()
    torch.save({"weight": torch.zeros(8 * 2**20)}, buffer)  # 32 MB of zeros
    entries["policy.pth"] = buffer.getvalue()
    bomb = deflated(tmp_path / "bomb.zip", entries)
    with pytest.raises(ConfigError, match="refused as a zip bomb"):
        sb3_state.load_model(_dqn(), bomb)


def torch_file(file: Path, tensors: dict[str, torch.Tensor], compress: bool) -> Path:
    buffer = io.BytesIO()
    torch.save(tensors, buffer)
    if not compress:
        file.write_bytes(buffer.getvalue())
        return file
    with zipfile.ZipFile(buffer) as archive:
        entries = {n: archive.read(n) for n in archive.namelist()}
    return deflated(file, entries)


def test_a_tensor_file_is_checked_against_the_module_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 68, item 7: a 1 MB deflated best_model.pt made `attn-zoo show` peak at 1.48 GB
    from zoo.trainers.base import load_state_dict

    module = torch.nn.Linear(4, 2)
    big = {"weight": torch.zeros(8 * 2**20), "bias": torch.zeros(2)}
    bomb = torch_file(tmp_path / "best_model.pt", big, compress=True)
    assert bomb.stat().st_size < 200_000
    plain = torch_file(tmp_path / "model.pt", big, compress=False)  # 32 MB, stored
    read: list[object] = []
    monkeypatch.setattr(torch, "load", lambda *a, **k: read.append(a))
    with pytest.raises(ConfigError, match="refused as a zip bomb"):
        load_state_dict(module, bomb, "policy")
    with pytest.raises(ConfigError, match="more than the run's tensors can hold"):
        load_state_dict(module, plain, "policy")
    assert read == []  # neither was read
    monkeypatch.undo()
    fits = torch_file(tmp_path / "fits.pt", module.state_dict(), compress=True)
    assert torch.equal(load_state_dict(torch.nn.Linear(4, 2), fits, "policy").weight, module.weight)
