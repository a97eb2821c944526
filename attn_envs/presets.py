"""Wrapper stacks of the seed experiments, composed from the single-concern wrappers.

Each factory is the entry point of a registered ``attn_envs/...`` id and returns the stack
outermost-last, so ``env.unwrapped`` is always the simulator.
"""

from __future__ import annotations

from typing import Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation, ResizeObservation

from attn_envs.patches import OcclusionObservation, OpenCVGrayscaleObservation, PatchObservation
from attn_envs.shuffle import DuplicateObservation, NoiseChannelsObservation, ShuffleObservation

__all__ = [
    "PONG_SCORE_ROWS",
    "make_puzzle_car_racing",
    "make_puzzle_pong",
    "make_shuffled_cartpole",
    "puzzle_pong_teacher_view",
]

# Rows 0-8 of the 84x84 grey Pong frame hold the score (measured on ALE Pong); the wall
# below it is static and carries no information either way.
PONG_SCORE_ROWS = 9
# CarRacing's indicator bar (speed, ABS, steering, gyro) fills the bottom 12 of 96 rows.
CAR_RACING_BAR_ROWS = 12


def make_shuffled_cartpole(
    harder: bool = True,
    reshuffle_every: int | None = None,
    copies: int = 1,
    n_noise: int = 0,
    noise_std: float = 0.1,
    shuffle: bool = True,
    **env_kwargs: Any,
) -> gym.Env:
    """CartPoleSwingUp(Harder) with optional duplicated/noise channels, then shuffled (E3).

    Example:
        >>> import gymnasium as gym
        >>> import attn_envs
        >>> env = gym.make("attn_envs/ShuffledCartPoleSwingUpHarder-v0", n_noise=5)
        >>> obs, info = env.reset(seed=0)
        >>> obs.shape, info["permutation"].shape
        ((10,), (10,))
    """
    from attn_envs.envs.cartpole_swingup import CartPoleSwingUpEnv

    env: gym.Env = CartPoleSwingUpEnv(harder=harder, **env_kwargs)
    if copies != 1:
        env = DuplicateObservation(env, copies=copies)
    if n_noise:
        env = NoiseChannelsObservation(env, n=n_noise, std=noise_std)
    if shuffle:
        env = ShuffleObservation(env, reshuffle_every=reshuffle_every)
    return env


def make_puzzle_pong(
    patch_size: int = 6,
    occlusion: float = 0.0,
    occlusion_mode: Literal["episode", "step"] = "episode",
    reshuffle_every: int | None = None,
    shuffle: bool = True,
    flatten: bool = True,
    frame_stack: int = 4,
    blank_top: int = PONG_SCORE_ROWS,
    game: str = "Pong",
    noop_max: int = 30,
    noops: int | None = None,
    ram_features: dict[str, Any] | None = None,
    **ale_kwargs: Any,
) -> gym.Env:
    """Puzzle Pong (E5): 84x84 grey, 4 frames, 6x6 patches, score blanked, shuffled.

    Each reset takes 1 to ``noop_max`` no-op frames, drawn, or exactly ``noops`` of them
    (:class:`~attn_envs.atari_frames.FixedNoopReset`; ``noop_max`` is then unused).

    ``ram_features`` (keyword arguments of
    :class:`~attn_envs.atari_ram.RamFeatureEntryObservation`, e.g. ``{"order_seed": 0}``)
    adds the game's RAM features as the Dict entry ``"ram_features"`` beside the tokens
    (``"observation"``): what a teacher trained on E7's features acts on while its student's
    data is recorded.

    Sticky actions are off by default (``repeat_action_probability=0``), matching the
    ``NoFrameskip-v4`` games the article's PPO teacher was trained on. Frames are made as
    the authors' (baselines) ``WarpFrame``: max of the last two RGB frames of each skip, grey
    with OpenCV's weights, then ``INTER_AREA`` resize to 84x84.

    Example:
        >>> import gymnasium as gym
        >>> import attn_envs
        >>> env = gym.make("attn_envs/PuzzlePong-v0", occlusion=0.5)
        >>> obs, info = env.reset(seed=0)
        >>> obs.shape, obs.dtype
        ((98, 144), dtype('uint8'))
        >>> env.close()
    """
    import ale_py

    gym.register_envs(ale_py)
    ale_kwargs.setdefault("repeat_action_probability", 0.0)
    env: gym.Env = gym.make(f"ALE/{game}-v5", frameskip=1, **ale_kwargs)
    shape = env.observation_space.shape
    assert shape is not None  # ALE's RGB frames are a Box
    height, width, _ = shape
    if noops is not None:
        from attn_envs.atari_frames import FixedNoopReset

        env, noop_max = FixedNoopReset(env, noops), 0
    # RGB at full size (the resize to the same size is a copy), grey, then 84x84
    env = AtariPreprocessing(
        env, noop_max=noop_max, frame_skip=4, screen_size=(width, height), grayscale_obs=False
    )
    env = ResizeObservation(OpenCVGrayscaleObservation(env), (84, 84))
    env = _shuffled_patches(
        env, frame_stack, occlusion, occlusion_mode, shuffle, reshuffle_every,
        patch_size=patch_size, blank_top=blank_top, flatten=flatten,
    )  # fmt: skip
    if ram_features is not None:
        from attn_envs.atari_ram import RamFeatureEntryObservation

        env = RamFeatureEntryObservation(env, **ram_features)
    return env


def make_puzzle_car_racing(
    patch_size: int = 6,
    background: str | None = None,
    occlusion: float = 0.0,
    occlusion_mode: Literal["episode", "step"] = "episode",
    reshuffle_every: int | None = None,
    shuffle: bool = True,
    flatten: bool = True,
    frame_stack: int = 4,
    blank_bottom: int = CAR_RACING_BAR_ROWS,
    screen: str = "gymnasium",
    **car_racing_kwargs: Any,
) -> gym.Env:
    """Shuffled-screen CarRacing (E6): grey 96x96 4-frame stack, bar blanked, 6x6 patches.

    ``background`` names a shipped image (or a path) that replaces the grass first.
    ``screen="classic"`` draws the state as gym <= 0.21 did (the screen seed 001's agents
    were trained on; see :mod:`attn_envs.classic_car_racing`).

    Example:
        >>> import gymnasium as gym
        >>> import attn_envs
        >>> env = gym.make("attn_envs/PuzzleCarRacing-v0")
        >>> obs, _ = env.reset(seed=0)
        >>> obs.shape
        (256, 144)
        >>> env.close()
    """
    from attn_envs.classic_car_racing import make_car_racing

    env: gym.Env = make_car_racing(screen, **car_racing_kwargs)
    if background is not None:
        from attn_envs.background import BackgroundObservation

        env = BackgroundObservation(env, background)
    return _shuffled_patches(
        OpenCVGrayscaleObservation(env), frame_stack, occlusion, occlusion_mode, shuffle,
        reshuffle_every, patch_size=patch_size, blank_bottom=blank_bottom, flatten=flatten,
    )  # fmt: skip


def _shuffled_patches(
    env: gym.Env,
    frame_stack: int,
    occlusion: float,
    occlusion_mode: Literal["episode", "step"],
    shuffle: bool,
    reshuffle_every: int | None,
    **patch_kwargs: Any,
) -> gym.Env:
    """Frame stack -> patch tokens -> occlusion -> shuffle, the screen pipeline of seed 001.

    Occlusion comes before shuffling, so ``mode="episode"`` hides the same *screen positions*
    all episode. Seed 001's code shuffles each screen before stacking it; shuffling the
    stacked tokens with ``stacked_frames`` gives the same observations, reshuffles included
    (the frames seen before a reshuffle keep the old order until they leave the stack).
    """
    env = FrameStackObservation(env, frame_stack)
    env = PatchObservation(env, **patch_kwargs)
    if occlusion:
        env = OcclusionObservation(env, ratio=occlusion, mode=occlusion_mode)
    if shuffle:  # each frame keeps the permutation it was seen under, as in seed 001's code
        env = ShuffleObservation(env, reshuffle_every=reshuffle_every, stacked_frames=frame_stack)
    return env


def puzzle_pong_teacher_view(
    obs: np.ndarray | dict[str, np.ndarray], grid: int = 14, patch_size: int = 6
) -> np.ndarray:
    """Frames ``(B, 84, 84, 4)`` from batched *unshuffled* Puzzle Pong tokens ``(B, 196, 144)``.

    A Dict observation (``PreviousActionObservation``) is read at ``"observation"``. This is
    how a teacher trained on the 84x84x4 frame stack (SB3's Atari preprocessing) acts while
    its student's data is recorded from the patch tokens of the same steps (E5 BC; collect
    with ``shuffle=False`` so the tokens are in raster order).

    Example:
        >>> tokens = np.arange(2 * 196 * 144, dtype=np.uint8).reshape(2, 196, 144)
        >>> puzzle_pong_teacher_view({"observation": tokens}).shape
        (2, 84, 84, 4)
    """
    tokens = np.asarray(obs["observation"] if isinstance(obs, dict) else obs)
    b, _, dim = tokens.shape
    channels = dim // patch_size**2
    patches = tokens.reshape(b, grid, grid, patch_size, patch_size, channels)
    return patches.swapaxes(2, 3).reshape(b, grid * patch_size, grid * patch_size, channels)
