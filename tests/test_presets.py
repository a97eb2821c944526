from __future__ import annotations

from functools import partial

import cv2
import gymnasium as gym
import numpy as np
import pytest
from _contract import assert_env_contract

import attn_envs
from attn_envs import ShuffleObservation
from attn_envs.patches import OpenCVGrayscaleObservation, unpatchify
from attn_envs.presets import PONG_SCORE_ROWS, make_puzzle_car_racing, make_puzzle_pong


def test_every_registered_id_makes_resets_and_steps() -> None:
    seed_tasks = {
        "CartPoleSwingUp-v0",
        "CartPoleSwingUpHarder-v0",
        "ShuffledCartPoleSwingUp-v0",
        "ShuffledCartPoleSwingUpHarder-v0",
        "PuzzlePong-v0",
        "PuzzleCarRacing-v0",
        "CarRacingBackground-v0",
        "DistractorPong-v0",
        "DistractorDemonAttack-v0",
        "DistractorAsteroids-v0",
        "EgocentricDoorKey-5x5-v0",
        "EgocentricDoorKey-16x16-v0",
    }
    assert {f"attn_envs/{name}" for name in seed_tasks} <= set(attn_envs.ENV_IDS)
    for env_id in attn_envs.ENV_IDS:
        env = gym.make(env_id)
        obs, _ = env.reset(seed=0)
        assert env.observation_space.contains(obs), env_id
        obs, *_ = env.step(env.action_space.sample())
        assert env.observation_space.contains(obs), env_id
        env.close()


def test_register_envs_is_idempotent() -> None:
    before = len(gym.registry)
    attn_envs.register_envs()
    assert len(gym.registry) == before


@pytest.mark.parametrize(
    ("env_id", "kwargs", "shape"),
    [
        ("attn_envs/PuzzlePong-v0", {}, (196, 144)),
        ("attn_envs/PuzzlePong-v0", {"occlusion": 0.7}, (59, 144)),
        ("attn_envs/PuzzlePong-v0", {"flatten": False}, (196, 6, 6, 4)),
        ("attn_envs/PuzzleCarRacing-v0", {}, (256, 144)),
        ("attn_envs/PuzzleCarRacing-v0", {"occlusion": 0.5, "patch_size": 8}, (72, 256)),
        ("attn_envs/ShuffledCartPoleSwingUpHarder-v0", {}, (5,)),
        ("attn_envs/ShuffledCartPoleSwingUpHarder-v0", {"copies": 2}, (10,)),
        ("attn_envs/ShuffledCartPoleSwingUpHarder-v0", {"n_noise": 5}, (10,)),
        ("attn_envs/ShuffledCartPoleSwingUp-v0", {"n_noise": 10}, (15,)),
    ],
)
def test_shapes_of_the_seed_tasks(env_id: str, kwargs: dict, shape: tuple[int, ...]) -> None:
    env = gym.make(env_id, **kwargs)
    assert env.observation_space.shape == shape
    assert env.reset(seed=0)[0].shape == shape
    env.close()


@pytest.mark.parametrize(
    "factory",
    [
        partial(gym.make, "attn_envs/PuzzlePong-v0", occlusion=0.5, reshuffle_every=5),
        partial(gym.make, "attn_envs/ShuffledCartPoleSwingUpHarder-v0", copies=2, n_noise=5),
        partial(gym.make, "attn_envs/PuzzleCarRacing-v0", background="kof"),
    ],
    ids=["puzzle-pong", "cartpole", "puzzle-carracing"],
)
def test_contract(factory) -> None:
    assert_env_contract(factory, n_steps=12)


def test_puzzle_pong_is_shuffled_pong_with_score_blanked() -> None:
    shuffled = gym.make("attn_envs/PuzzlePong-v0")
    plain = gym.make("attn_envs/PuzzlePong-v0", shuffle=False)
    obs, info = shuffled.reset(seed=4)
    ref, _ = plain.reset(seed=4)
    np.testing.assert_array_equal(obs, ref[info["permutation"]])
    image = plain.get_wrapper_attr("unpatchify")(ref)  # (4, 84, 84)
    assert (image[:, :PONG_SCORE_ROWS] == 0).all() and image[:, PONG_SCORE_ROWS:].any()
    for _ in range(20):  # same inner trajectory: the shuffle owns its own generator
        obs, r1, *_, info = shuffled.step(2)
        ref, r2, *_ = plain.step(2)
        np.testing.assert_array_equal(obs, ref[info["permutation"]])
        assert r1 == r2


def test_puzzle_car_racing_blanks_indicator_bar() -> None:
    env = gym.make("attn_envs/PuzzleCarRacing-v0", shuffle=False)
    obs, _ = env.reset(seed=0)
    for _ in range(5):
        obs, *_ = env.step(np.array([0.0, 1.0, 0.0], np.float32))
    image = env.get_wrapper_attr("unpatchify")(obs)
    assert image.shape == (4, 96, 96)
    assert (image[:, -12:] == 0).all() and image[:, :-12].any()
    env.close()


def test_shuffle_is_outermost_so_permutation_is_in_info() -> None:
    env = gym.make("attn_envs/ShuffledCartPoleSwingUpHarder-v0", reshuffle_every=10)
    # under TimeLimit (the spec's 1000 steps), OrderEnforcing and the env checker
    assert isinstance(env.env.env.env, ShuffleObservation)
    assert env.spec.max_episode_steps == 1000
    _, info = env.reset(seed=0)
    assert info["permutation"].shape == (5,)


def test_make_vec_uses_the_numpy_batched_cartpole() -> None:
    venv = gym.make_vec(
        "attn_envs/CartPoleSwingUpHarder-v0", num_envs=256, vectorization_mode="vector_entry_point"
    )
    single = gym.make("attn_envs/CartPoleSwingUpHarder-v0")
    obs, _ = venv.reset(seed=1)
    assert type(venv).__name__ == "CartPoleSwingUpVectorEnv" and obs.shape == (256, 5)
    # copy 0 starts where a single Harder env with the same seed starts
    np.testing.assert_array_equal(obs[0], single.reset(seed=1)[0])
    assert np.ptp(obs[:, 0]) > 3.0, "Harder reset spreads x over most of [-2.4, 2.4]"


def _screen(env: gym.Env, grid: tuple[int, int], seed: int) -> np.ndarray:
    tokens, _ = env.reset(seed=seed)
    env.close()
    return unpatchify(tokens, grid)[..., 0]


def test_e5_e6_grey_uses_the_authors_opencv_weights() -> None:
    # cv2.COLOR_RGB2GRAY (0.299, 0.587, 0.114); gymnasium and ALE greys differ
    flat = {"shuffle": False, "frame_stack": 1, "flatten": False}
    rgb = gym.make("CarRacing-v3").reset(seed=3)[0]
    car = _screen(make_puzzle_car_racing(blank_bottom=0, **flat), (16, 16), seed=3)
    np.testing.assert_array_equal(car, cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY))
    assert not np.array_equal(car, gym.wrappers.GrayscaleObservation(gym.make("CarRacing-v3"))
                              .reset(seed=3)[0])  # fmt: skip
    # Pong: grey at 210x160, then INTER_AREA to 84x84, as the authors' WarpFrame
    pong = _screen(make_puzzle_pong(blank_top=0, noop_max=0, **flat), (14, 14), seed=3)
    pong_rgb = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0).reset(seed=3)[0]
    grey = cv2.cvtColor(pong_rgb, cv2.COLOR_RGB2GRAY)
    np.testing.assert_array_equal(pong, cv2.resize(grey, (84, 84), interpolation=cv2.INTER_AREA))
    with pytest.raises(ValueError, match=r"needs an RGB \(H, W, 3\) uint8 observation"):
        OpenCVGrayscaleObservation(gym.wrappers.GrayscaleObservation(gym.make("CarRacing-v3"),
                                                                     keep_dim=True))  # fmt: skip
    with pytest.raises(TypeError, match="needs a Box observation space"):
        OpenCVGrayscaleObservation(gym.make("FrozenLake-v1"))


def test_specs_tell_the_episode_limits() -> None:
    assert gym.spec("attn_envs/CartPoleSwingUp-v0").max_episode_steps == 1000
    assert gym.spec("attn_envs/CartPoleSwingUpHarder-v0").max_episode_steps == 1000
    for n in (5, 6, 8, 16):
        assert gym.spec(f"attn_envs/EgocentricDoorKey-{n}x{n}-v0").max_episode_steps == 400


def test_doorkey_max_steps_moves_the_time_limit_along() -> None:
    from attn_envs.registration import make_args

    env_id, kwargs = make_args("attn_envs/EgocentricDoorKey-5x5-v0", {"max_steps": 450})
    env = gym.make(env_id, **kwargs)
    assert env.spec.max_episode_steps == 450 and env.unwrapped.max_steps == 450
    env.reset(seed=0)
    for step in range(1, 451):
        _, _, terminated, truncated, _ = env.step(0)  # turning left never ends an episode
        assert not terminated and truncated == (step == 450)
    env.close()


def test_module_prefixed_ids_need_no_import() -> None:
    import subprocess
    import sys

    code = (
        "import gymnasium as gym\n"
        "env = gym.make('attn_envs:attn_envs/CartPoleSwingUpHarder-v0')\n"
        "print(env.spec.max_episode_steps, env.reset(seed=0)[0].shape)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1000", "(5,)"]


def test_puzzle_pong_fixed_noops_are_one_start_of_the_random_ones() -> None:
    # the default Puzzle Pong draws its no-ops at reset; the fixed env given the drawn count
    # starts from the same screen and plays the same game under the same actions
    actions = np.random.default_rng(0).integers(0, 6, size=40)
    drawn = set()
    for seed in range(6):
        random_start = make_puzzle_pong(shuffle=False)
        first, _ = random_start.reset(seed=seed)
        k = random_start.unwrapped.ale.getEpisodeFrameNumber()
        drawn.add(k)
        pair = (random_start, make_puzzle_pong(shuffle=False, noops=k))
        again, _ = pair[1].reset(seed=seed)
        np.testing.assert_array_equal(first, again)
        for a in actions:
            steps = [env.step(int(a)) for env in pair]
            np.testing.assert_array_equal(steps[0][0], steps[1][0])
            assert steps[0][1:3] == steps[1][1:3]
        for env in pair:
            env.close()
    assert len(drawn) > 1  # the random env really drew different starts
