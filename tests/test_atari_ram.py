"""Tests for attn_envs.atari_ram: AtariARI RAM features and distractor games (E7)."""

from __future__ import annotations

from functools import partial

import ale_py
import gymnasium as gym
import numpy as np
import pytest
from _contract import assert_deterministic, assert_env_contract
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_envs.atari_ram import (
    DistractorFeatureObservation,
    RamFeatureEntryObservation,
    RamFeatureObservation,
    make_distractor_env,
    make_ram_feature_env,
)
from attn_envs.ram_annotations import RAM_ANNOTATIONS, feature_indices

gym.register_envs(ale_py)

E7_COUNTS = {"Pong": 8, "DemonAttack": 10, "Asteroids": 41}


def _pong_ram(**kwargs: object) -> gym.Env:
    return gym.make("ALE/Pong-v5", obs_type="ram", **kwargs)


def _emulator_features(env: DistractorFeatureObservation) -> dict[str, float]:
    """Unshuffled features read straight from every emulator, keyed by feature name."""
    names, idx = feature_indices(env.game)
    ales = [env.unwrapped.ale] + [d.ale for d in env._distractors]
    prefixes = ["player"] + [f"distractor{j}" for j in range(1, len(ales))]
    return {
        f"{p}/{n}": float(v)
        for p, ale in zip(prefixes, ales, strict=True)
        for n, v in zip(names, ale.getRAM()[idx], strict=True)
    }


def _own_block(obs_row: np.ndarray, env: DistractorFeatureObservation, who: str) -> np.ndarray:
    """The features of one emulator ("player", "distractor1", ...) in annotation order."""
    cols = [i for i, n in enumerate(env.feature_names) if n.split("/")[0] == who]
    order = np.argsort([env.feature_permutation[c] for c in cols])
    return obs_row[np.asarray(cols)[order]]


# --- annotation table ------------------------------------------------------------------------


@pytest.mark.parametrize("game", sorted(RAM_ANNOTATIONS))
def test_every_annotated_game_builds_and_reads(game: str) -> None:
    table = RAM_ANNOTATIONS[game]
    assert all(0 <= i < 128 for i in table.values())
    assert len(set(table.values())) == len(table), "duplicate RAM index"
    env = make_ram_feature_env(game)
    assert env.unwrapped.spec.id == f"ALE/{game}-v5"
    obs, _ = env.reset(seed=0)
    for _ in range(3):
        obs, *_ = env.step(env.action_space.sample())
    assert obs.shape == (len(table),) and env.observation_space.contains(obs)
    np.testing.assert_array_equal(obs, env.unwrapped.ale.getRAM()[list(table.values())])
    env.close()


# --- RamFeatureObservation -------------------------------------------------------------------


@pytest.mark.parametrize("obs_type", ["ram", "grayscale"])
def test_ram_features_equal_ram_bytes(obs_type: str) -> None:
    env = RamFeatureObservation(gym.make("ALE/Pong-v5", obs_type=obs_type))
    assert env.game == "Pong" and env.feature_names == list(RAM_ANNOTATIONS["Pong"])
    idx = list(RAM_ANNOTATIONS["Pong"].values())
    obs, _ = env.reset(seed=1)
    env.action_space.seed(1)
    seen = [obs]
    for _ in range(60):
        obs, *_ = env.step(env.action_space.sample())
        np.testing.assert_array_equal(obs, env.unwrapped.ale.getRAM()[idx].astype(np.float32))
        seen.append(obs)
    assert obs.dtype == np.float32 and env.observation_space.shape == (8,)
    assert len({s.tobytes() for s in seen}) > 1, "features never changed"


def test_ram_features_dtype_and_game_override() -> None:
    env = RamFeatureObservation(_pong_ram(), dtype=np.uint8)
    obs, _ = env.reset(seed=0)
    assert obs.dtype == np.uint8 and env.observation_space.dtype == np.uint8
    # an explicit game reads that game's addresses, whatever ROM runs
    other = RamFeatureObservation(_pong_ram(), game="breakout")
    assert other.game == "Breakout" and other.observation_space.shape == (35,)


def test_ram_feature_contract() -> None:
    assert_env_contract(partial(make_ram_feature_env, "Pong"), n_steps=20)


# --- DistractorFeatureObservation ------------------------------------------------------------


def test_distractor_contract() -> None:
    assert_env_contract(partial(make_distractor_env, "Pong", n_distractors=1, stack=2), n_steps=20)


def test_distractor_deterministic_k3_through_resets() -> None:
    # 40 frames = 10 agent steps per episode, so the rollout crosses several resets.
    make = partial(make_distractor_env, "Pong", n_distractors=3, max_num_frames_per_episode=40)
    assert_deterministic(make, n_steps=25)


@pytest.mark.parametrize("game", sorted(E7_COUNTS))
def test_feature_counts_l_2l_4l(game: str) -> None:
    f = E7_COUNTS[game]
    for k, factor in [(0, 1), (1, 2), (3, 4)]:
        env = make_distractor_env(game, n_distractors=k, stack=4)
        assert env.observation_space.shape == (4, f * factor)
        assert len(env.feature_names) == f * factor == len(set(env.feature_names))
        if k == 3:
            obs, _ = env.reset(seed=0)
            assert obs.shape == (4, f * 4) and env.observation_space.contains(obs)
        env.close()


def test_permutation_fixed_per_seed() -> None:
    env = make_distractor_env("Pong", n_distractors=1)
    perms = {}
    for seed in range(4):
        _, info = env.reset(seed=seed)
        perms[seed] = info["feature_permutation"]
        np.testing.assert_array_equal(perms[seed], env.feature_permutation)
        for _ in range(2):  # later resets without a seed keep it
            env.step(0)
            _, info = env.reset()
            np.testing.assert_array_equal(info["feature_permutation"], perms[seed])
    assert len({p.tobytes() for p in perms.values()}) == 4, "seeds gave the same permutation"
    _, info = env.reset(seed=2)
    np.testing.assert_array_equal(info["feature_permutation"], perms[2])
    assert sorted(perms[0].tolist()) == list(range(16))
    # a fresh wrapper with the same seed draws the same permutation
    other = make_distractor_env("Pong", n_distractors=1)
    _, info = other.reset(seed=3)
    np.testing.assert_array_equal(info["feature_permutation"], perms[3])
    assert other.feature_names == [other.unshuffled_feature_names[i] for i in perms[3]]
    env.close()
    other.close()


def test_order_seed_fixes_one_order_for_the_env_lifetime() -> None:
    # E7: the thesis shuffles once per run; reset seeds (seed + i per SB3 actor) must not move it
    env = make_distractor_env("Pong", n_distractors=0, order_seed=5)
    before_reset = env.feature_permutation.copy()
    for seed in (0, 1, None):
        _, info = env.reset(seed=seed)
        np.testing.assert_array_equal(info["feature_permutation"], before_reset)
        env.step(0)
        np.testing.assert_array_equal(env.feature_permutation, before_reset)
    assert not np.array_equal(before_reset, np.arange(8)), "order_seed left the order unshuffled"
    # the observation follows the order: column i holds feature_names[i]
    obs, _ = env.reset(seed=3)
    names, idx = feature_indices("Pong")
    ram = env.unwrapped.ale.getRAM()
    expected = [ram[idx[names.index(n.split("/")[1])]] for n in env.feature_names]
    np.testing.assert_array_equal(obs[-1], expected)
    same = make_distractor_env("Pong", n_distractors=0, order_seed=5)
    other = make_distractor_env("Pong", n_distractors=0, order_seed=6)
    np.testing.assert_array_equal(same.feature_permutation, before_reset)
    assert not np.array_equal(other.feature_permutation, before_reset)
    with pytest.raises(ValueError, match="order_seed must be a non-negative integer, got -1"):
        DistractorFeatureObservation(env.env, n_distractors=0, order_seed=-1)
    for e in (env, same, other):
        e.close()


_SHARED: dict[str, DistractorFeatureObservation] = {}


@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n_steps=st.integers(0, 12))
def test_names_follow_values(seed: int, n_steps: int) -> None:
    if "env" not in _SHARED:
        _SHARED["env"] = make_distractor_env("Pong", n_distractors=2, stack=3)
    env = _SHARED["env"]
    obs, info = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    for _ in range(n_steps):
        obs, *_ = env.step(int(rng.integers(6)))
    truth = _emulator_features(env)
    np.testing.assert_array_equal(obs[-1], [truth[n] for n in env.feature_names])
    assert env.feature_names == [
        env.unshuffled_feature_names[i] for i in info["feature_permutation"]
    ]


def test_distractors_independent_and_uncontrolled() -> None:
    runs = {}
    for action in (0, 2):  # NOOP vs UP for the agent, same seed
        env = make_distractor_env("Pong", n_distractors=3, stack=1)
        obs, _ = env.reset(seed=5)
        rows = [obs[-1]]
        for _ in range(80):
            obs, *_ = env.step(action)
            rows.append(obs[-1])
        runs[action] = (np.stack(rows), env)
    env = runs[0][1]
    blocks = {
        who: {a: np.stack([_own_block(r, env, who) for r in rows]) for a, (rows, _) in runs.items()}
        for who in ["player", "distractor1", "distractor2", "distractor3"]
    }
    # the agent's action moves its own paddle...
    assert not np.array_equal(blocks["player"][0], blocks["player"][2])
    # ...and reaches no distractor
    for j in (1, 2, 3):
        np.testing.assert_array_equal(blocks[f"distractor{j}"][0], blocks[f"distractor{j}"][2])
    # distractors are separate instances: they part from the played game and from each other
    trajectories = [blocks[w][0] for w in blocks]
    for a in range(4):
        for b in range(a + 1, 4):
            assert not np.array_equal(trajectories[a], trajectories[b])
    for _, e in runs.values():
        e.close()


def test_stack_shifts() -> None:
    env = make_distractor_env("Pong", n_distractors=1, stack=4)
    obs, _ = env.reset(seed=0)
    assert (obs == obs[0]).all(), "reset must fill the stack with the first frame"
    for _ in range(10):
        prev = obs
        obs, *_ = env.step(env.action_space.sample())
        np.testing.assert_array_equal(obs[:-1], prev[1:])
        truth = _emulator_features(env)
        np.testing.assert_array_equal(obs[-1], [truth[n] for n in env.feature_names])
    prev[:] = -1  # returned stacks do not alias the ring buffer
    assert (obs >= 0).all()
    env.close()


def test_identity_setting_matches_ram_features() -> None:
    """k = 0, stack = 1 is the played game's RAM features, only reordered."""
    plain = make_ram_feature_env("Pong")
    dist = make_distractor_env("Pong", n_distractors=0, stack=1)
    a, _ = plain.reset(seed=4)
    b, info = dist.reset(seed=4)
    inverse = np.argsort(info["feature_permutation"])
    for t in range(30):
        np.testing.assert_array_equal(b[0][inverse], a, err_msg=f"step {t}")
        a, ra, *_ = plain.step(t % 6)
        b, rb, *_ = dist.step(t % 6)
        assert ra == rb


def test_distractor_episode_end_resets_only_the_distractor() -> None:
    env = make_distractor_env("Pong", n_distractors=1, max_num_frames_per_episode=200)
    env.reset(seed=0)
    distractor = env._distractors[0]
    for _ in range(45):  # 180 of its 200 frames, outside the wrapper
        distractor.step(0)
    for _ in range(10):
        _, _, term, trunc, _ = env.step(0)
        assert not (term or trunc)
    # it was reset on its own truncation and kept going, the played game did not end
    assert distractor.ale.getEpisodeFrameNumber() < 60
    assert env.unwrapped.ale.getEpisodeFrameNumber() == 40
    env.close()


def test_callable_and_noop_policies() -> None:
    seen: list[np.ndarray] = []

    def policy(features: np.ndarray) -> int:
        seen.append(features.copy())
        return 0

    envs = {
        "noop": make_distractor_env("Pong", n_distractors=2, distractor_policy="noop"),
        "call": make_distractor_env("Pong", n_distractors=2, distractor_policy=policy),
    }
    obs = {name: e.reset(seed=9)[0] for name, e in envs.items()}
    for _ in range(15):
        truth = [_own_block(obs["call"][-1], envs["call"], f"distractor{j}") for j in (1, 2)]
        n = len(seen)
        obs = {name: e.step(3)[0] for name, e in envs.items()}
        assert len(seen) == n + 2 and seen[-1].shape == (8,) and seen[-1].dtype == np.float32
        np.testing.assert_array_equal(seen[-2:], truth)
        np.testing.assert_array_equal(obs["noop"], obs["call"])


def test_env_id_string_and_settings_copied() -> None:
    env = DistractorFeatureObservation("ALE/Pong-v5", n_distractors=1)
    assert env.unwrapped.spec.kwargs["obs_type"] == "ram"
    env.close()
    played = gym.make("ALE/Pong-v5", obs_type="rgb", frameskip=3, repeat_action_probability=0.0)
    env = DistractorFeatureObservation(played, n_distractors=2)
    for d in env._distractors:
        kw = d._ezpickle_kwargs
        assert (kw["frameskip"], kw["repeat_action_probability"], kw["obs_type"]) == (3, 0.0, "ram")
    env.reset(seed=0)
    env.step(0)
    assert [d.ale.getEpisodeFrameNumber() for d in env._distractors] == [3, 3]
    env.close()
    assert env._distractors == []


# --- RamFeatureEntryObservation --------------------------------------------------------------


def _pong_with_entry(**kwargs: object) -> gym.Env:
    return RamFeatureEntryObservation(gym.make("ALE/Pong-v5", frameskip=4), **kwargs)


def test_entry_contract() -> None:
    assert_env_contract(partial(_pong_with_entry, order_seed=3), n_steps=20)


@pytest.mark.parametrize("order_seed", [0, 5])
def test_entry_equals_the_teacher_env_through_a_pixel_stack(order_seed: int) -> None:
    # Puzzle Pong steps the emulator 4 frames per step through AtariPreprocessing; the E7
    # teacher's env lets ALE skip 4 frames. Same seed, same actions: the entry must be the
    # teacher's observation, in the teacher's feature order, at every step and reset.
    from attn_envs.presets import make_puzzle_pong

    frames = {"max_num_frames_per_episode": 400}
    student = make_puzzle_pong(
        noop_max=0, shuffle=False, ram_features={"order_seed": order_seed}, **frames
    )
    teacher = make_distractor_env(
        "Pong", n_distractors=0, order_seed=order_seed, frameskip=4,
        repeat_action_probability=0.0, **frames,
    )  # fmt: skip
    assert student.observation_space["ram_features"] == teacher.observation_space
    rng = np.random.default_rng(order_seed)
    obs, _ = student.reset(seed=11)
    expected, _ = teacher.reset(seed=11)
    resets = 0
    for _ in range(130):  # 100 steps per episode: crosses a reset
        np.testing.assert_array_equal(obs["ram_features"], expected)
        assert obs["observation"].shape == (196, 144)
        action = int(rng.integers(6))
        obs, reward, term, trunc, _ = student.step(action)
        expected, t_reward, t_term, t_trunc, _ = teacher.step(action)
        assert (reward, term, trunc) == (t_reward, t_term, t_trunc)
        if term or trunc:
            resets += 1
            obs, _ = student.reset()
            expected, _ = teacher.reset()
    assert resets == 1
    entry = student
    while not isinstance(entry, RamFeatureEntryObservation):
        entry = entry.env
    assert entry.feature_names == teacher.feature_names
    student.close(), teacher.close()


def test_entry_keeps_a_dict_observation_and_names_a_box_one() -> None:
    from attn_envs import PreviousActionObservation

    inner = PreviousActionObservation(gym.make("ALE/Pong-v5", obs_type="ram"))
    env = RamFeatureEntryObservation(inner, key="teacher", stack=2)
    assert list(env.observation_space.spaces) == [*inner.observation_space.spaces, "teacher"]
    obs, _ = env.reset(seed=0)
    assert obs["teacher"].shape == (2, 8) and env.observation_space.contains(obs)
    boxed = RamFeatureEntryObservation(gym.make("ALE/Pong-v5", obs_type="ram"), obs_key="ram")
    obs, _ = boxed.reset(seed=0)
    assert sorted(obs) == ["ram", "ram_features"] and obs["ram"].shape == (128,)


def test_entry_bad_inputs() -> None:
    from attn_envs import PreviousActionObservation

    with pytest.raises(TypeError, match=r"needs an ALE env.*got CartPoleEnv"):
        RamFeatureEntryObservation(gym.make("CartPole-v1"))
    with pytest.raises(TypeError, match="wraps an env, got str"):
        RamFeatureEntryObservation("ALE/Pong-v5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="already has a 'prev_action' entry"):
        RamFeatureEntryObservation(
            PreviousActionObservation(gym.make("ALE/Pong-v5", obs_type="ram")), key="prev_action"
        )
    with pytest.raises(ValueError, match="key and obs_key are both 'x'"):
        RamFeatureEntryObservation(gym.make("ALE/Pong-v5"), key="x", obs_key="x")


# --- bad inputs ------------------------------------------------------------------------------


def test_bad_inputs() -> None:
    with pytest.raises(TypeError, match=r"needs an ALE env.*got CartPoleEnv"):
        RamFeatureObservation(gym.make("CartPole-v1"))
    with pytest.raises(TypeError, match=r"needs an ALE env.*got CartPoleEnv"):
        DistractorFeatureObservation(gym.make("CartPole-v1"), n_distractors=1)
    with pytest.raises(ValueError, match="no RAM annotation for game 'alien'"):
        RamFeatureObservation(gym.make("ALE/Alien-v5", obs_type="ram"))
    with pytest.raises(ValueError, match=r"known games: .*DemonAttack"):
        RamFeatureObservation(_pong_ram(), game="NoSuchGame")
    with pytest.raises(ValueError, match="no RAM annotation"):
        make_distractor_env("NoSuchGame")
    with pytest.raises(ValueError, match=r"holds 0\.\.255, got int8"):
        RamFeatureObservation(_pong_ram(), dtype=np.int8)
    with pytest.raises(ValueError, match="n_distractors must be a non-negative integer, got -1"):
        DistractorFeatureObservation(_pong_ram(), n_distractors=-1)
    with pytest.raises(ValueError, match="stack must be a positive integer, got 0"):
        DistractorFeatureObservation(_pong_ram(), n_distractors=1, stack=0)
    with pytest.raises(ValueError, match="distractor_policy must be"):
        DistractorFeatureObservation(_pong_ram(), n_distractors=1, distractor_policy="greedy")
