"""Screens as lists of patch tokens, and occlusion of those tokens (seed 001).

``PatchObservation`` cuts an image or frame stack into a row-major grid of square patches,
the "sensory inputs" of Puzzle Pong and shuffled CarRacing. ``OcclusionObservation`` keeps a
random subset of tokens: one mask per episode (the article's test protocol) or a fresh mask
every step (training augmentation).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, SupportsFloat

import cv2
import gymnasium as gym
import numpy as np
from gymnasium import spaces
from numpy.lib.stride_tricks import sliding_window_view

from attn_envs._seeding import SeededWrapperMixin
from attn_envs._spaces import require_box, require_integral
from attn_envs.shuffle import token_space

_CV2_DTYPES = frozenset(
    np.dtype(t) for t in (np.uint8, np.int8, np.uint16, np.int16, np.int32, np.float32, np.float64)
)
_CV2_MAX_CHANNELS = 512

__all__ = [
    "OcclusionObservation",
    "OpenCVGrayscaleObservation",
    "PatchObservation",
    "patchify",
    "unpatchify",
]


def patchify(image: np.ndarray, patch_size: int, stride: int | None = None) -> np.ndarray:
    """Cut an (H, W, C) image into row-major patches of shape (N, P, P, C).

    With ``stride`` smaller than ``patch_size`` the patches overlap (AttentionAgent's 7x7
    patches at stride 4). H and W must already fit the grid exactly.
    """
    p, s = patch_size, stride or patch_size
    if s == p:
        h, w, c = image.shape
        grid = image.reshape(h // p, p, w // p, p, c).swapaxes(1, 2)
        return grid.reshape(-1, p, p, c)
    windows = sliding_window_view(image, (p, p), axis=(0, 1))[::s, ::s]  # (nh, nw, C, P, P)
    return np.ascontiguousarray(windows.transpose(0, 1, 3, 4, 2)).reshape(-1, p, p, image.shape[2])


def unpatchify(patches: np.ndarray, grid_shape: tuple[int, int]) -> np.ndarray:
    """Inverse of :func:`patchify` for non-overlapping patches: (N, P, P, C) -> (H, W, C)."""
    nh, nw = grid_shape
    _, p, _, c = patches.shape
    return patches.reshape(nh, nw, p, p, c).swapaxes(1, 2).reshape(nh * p, nw * p, c)


class OpenCVGrayscaleObservation(
    gym.ObservationWrapper[np.ndarray, Any, np.ndarray], gym.utils.RecordConstructorArgs
):
    """Convert an RGB ``(H, W, 3)`` uint8 screen to grey ``(H, W)`` with OpenCV's weights.

    ``Y = 0.299 R + 0.587 G + 0.114 B`` rounded, i.e. ``cv2.cvtColor(obs, COLOR_RGB2GRAY)``,
    the conversion of the seed 001 authors' code (and of SB3's ``WarpFrame``). gymnasium's
    ``GrayscaleObservation`` uses ``0.2125, 0.7154, 0.0721`` and ALE's grey screen its own
    palette luminance; both give other grey levels for the same frame.

    Args:
        env: Env with a ``(H, W, 3)`` uint8 Box observation (RGB).

    Example:
        >>> import gymnasium as gym
        >>> env = OpenCVGrayscaleObservation(gym.make("CarRacing-v3"))
        >>> obs, _ = env.reset(seed=0)
        >>> obs.shape, obs.dtype
        ((96, 96), dtype('uint8'))
        >>> OpenCVGrayscaleObservation.convert(np.array([[[102, 204, 102]]], np.uint8))
        array([[162]], dtype=uint8)
        >>> env.close()
    """

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        name = type(self).__name__
        space = require_box(env.observation_space, name, ndim=(3,))
        if space.shape[2] != 3 or space.dtype != np.uint8:
            raise ValueError(
                f"{name} needs an RGB (H, W, 3) uint8 observation, got shape {space.shape} "
                f"and dtype {space.dtype}"
            )
        self.observation_space = spaces.Box(0, 255, space.shape[:2], dtype=np.uint8)

    @staticmethod
    def convert(rgb: np.ndarray) -> np.ndarray:
        """``(H, W, 3)`` uint8 RGB -> ``(H, W)`` uint8 grey, OpenCV's rounding."""
        return cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2GRAY)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return self.convert(observation)


class PatchObservation(
    gym.ObservationWrapper[np.ndarray, Any, np.ndarray], gym.utils.RecordConstructorArgs
):
    """Turn an image or frame stack into a row-major array of square patch tokens.

    Accepts (H, W), (H, W, C) or a channels-first frame stack (C, H, W) such as
    ``FrameStackObservation`` of grey frames produces. Every patch is laid out (P, P, C), so a
    flattened token of a 4-frame grey stack is 6*6*4 = 144 values with the frame axis last.
    Rows ``[0, blank_top)`` and ``[H - blank_bottom, H)`` are set to ``blank_value`` first
    (Pong's score, CarRacing's indicator bar), keeping the image size.

    Args:
        env: Env with a 2-D or 3-D Box observation.
        patch_size: Side P of each square patch.
        stride: Step between patch origins; ``None`` means ``patch_size`` (no overlap).
        blank_top: Rows blanked at the top.
        blank_bottom: Rows blanked at the bottom.
        blank_value: Value written into blanked rows.
        flatten: Tokens of shape (N, P*P*C) if True, else (N, P, P, C).
        crop: Drop the bottom/right remainder when the grid does not fit the image exactly;
            if False such a size is an error.
        channels_first: Layout of a 3-D input; ``None`` guesses channels-first when the first
            axis is the smallest (a frame stack), channels-last otherwise.

    Attributes:
        grid_shape: (rows, cols) of the patch grid; N = rows * cols.
        patch_origins: (N, 2) pixel (row, col) of each patch's top-left corner.

    Example:
        >>> import gymnasium as gym
        >>> from attn_envs import PatchObservation
        >>> env = PatchObservation(gym.make("CarRacing-v3"), patch_size=6, blank_bottom=12)
        >>> env.observation_space.shape, env.grid_shape
        ((256, 108), (16, 16))
        >>> obs, _ = env.reset(seed=0)
        >>> obs.shape, obs.dtype
        ((256, 108), dtype('uint8'))
        >>> env.close()
    """

    def __init__(
        self,
        env: gym.Env,
        patch_size: int = 6,
        stride: int | None = None,
        blank_top: int = 0,
        blank_bottom: int = 0,
        blank_value: float = 0,
        flatten: bool = True,
        crop: bool = False,
        channels_first: bool | None = None,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            patch_size=patch_size,
            stride=stride,
            blank_top=blank_top,
            blank_bottom=blank_bottom,
            blank_value=blank_value,
            flatten=flatten,
            crop=crop,
            channels_first=channels_first,
        )
        gym.ObservationWrapper.__init__(self, env)
        space = require_box(env.observation_space, "PatchObservation", ndim=(2, 3))
        if len(space.shape) == 2:
            channels_first = False
        elif channels_first is None:
            channels_first = space.shape[0] < min(space.shape[1:])
        self.channels_first = bool(channels_first)
        self._input_ndim = len(space.shape)
        h, w = space.shape[-2:] if self.channels_first else space.shape[:2]

        stride = patch_size if stride is None else stride
        patch_size = require_integral(patch_size, "patch_size")
        stride = require_integral(stride, "stride")
        if patch_size > min(h, w):
            raise ValueError(f"patch_size {patch_size} exceeds the image size {(h, w)}")
        blank_top = require_integral(blank_top, "blank_top", minimum=0)
        blank_bottom = require_integral(blank_bottom, "blank_bottom", minimum=0)
        if blank_top + blank_bottom > h:
            raise ValueError(
                f"blank_top={blank_top} and blank_bottom={blank_bottom} must together be at "
                f"most the image height {h}"
            )
        rem_h, rem_w = (h - patch_size) % stride, (w - patch_size) % stride
        if (rem_h or rem_w) and not crop:
            raise ValueError(
                f"a {h}x{w} image does not split into {patch_size}x{patch_size} patches at "
                f"stride {stride} ({rem_h} rows, {rem_w} cols left over); pass crop=True to "
                f"drop the bottom/right remainder"
            )
        self.patch_size, self.stride = int(patch_size), int(stride)
        self.blank_top, self.blank_bottom, self.blank_value = blank_top, blank_bottom, blank_value
        self.flatten = flatten
        # blanked row ranges of the full image, empty ones left out
        self._blank_rows = [
            rows for rows in (slice(0, blank_top), slice(h - blank_bottom, h))
            if rows.start < rows.stop
        ]  # fmt: skip
        self._h, self._w = h - rem_h, w - rem_w
        self.grid_shape = (
            (self._h - patch_size) // stride + 1,
            (self._w - patch_size) // stride + 1,
        )
        rows, cols = np.meshgrid(
            np.arange(self.grid_shape[0]) * stride,
            np.arange(self.grid_shape[1]) * stride,
            indexing="ij",
        )
        self.patch_origins = np.stack([rows.ravel(), cols.ravel()], axis=1)

        # blanked pixels hold blank_value, so the bounds there must admit it
        self.observation_space = spaces.Box(
            low=self._tokens(
                self._blank(self._hwc(space.low).copy(), lambda x: np.minimum(x, blank_value))
            ),
            high=self._tokens(
                self._blank(self._hwc(space.high).copy(), lambda x: np.maximum(x, blank_value))
            ),
            dtype=space.dtype,
        )

    def _hwc(self, observation: np.ndarray) -> np.ndarray:
        """The observation as (H, W, C): a view, or a fresh array for channels-first input."""
        if observation.ndim == 2:
            return observation[..., None]
        if not self.channels_first:
            return observation
        if observation.dtype in _CV2_DTYPES and 1 < observation.shape[0] <= _CV2_MAX_CHANNELS:
            # cv2.merge interleaves with SIMD: ~10x faster than numpy's strided transpose copy
            return cv2.merge(tuple(observation))
        return np.ascontiguousarray(np.moveaxis(observation, 0, -1))

    def _blank(self, image: np.ndarray, fill: Callable[[np.ndarray], Any]) -> np.ndarray:
        """Replace the blanked rows of an (H, W, C) image by ``fill(rows)``, in place."""
        for rows in self._blank_rows:
            image[rows] = fill(image[rows])
        return image

    def _tokens(self, image: np.ndarray) -> np.ndarray:
        tokens = patchify(image[: self._h, : self._w], self.patch_size, self.stride)
        return tokens.reshape(len(tokens), -1) if self.flatten else tokens

    def observation(self, observation: np.ndarray) -> np.ndarray:
        observation = np.asarray(observation)
        image = self._hwc(observation)
        if self._blank_rows:
            if np.may_share_memory(image, observation):
                image = image.copy()  # never write into the inner env's buffer
            self._blank(image, lambda _: self.blank_value)
        return self._tokens(image)

    def unpatchify(self, tokens: np.ndarray) -> np.ndarray:
        """Reassemble non-overlapping tokens into the (cropped) image, in the input layout."""
        if self.stride != self.patch_size:
            raise ValueError("overlapping patches (stride < patch_size) cannot be reassembled")
        p = self.patch_size
        image = unpatchify(tokens.reshape(len(tokens), p, p, -1), self.grid_shape)
        if self._input_ndim == 2:
            return image[..., 0]
        return np.moveaxis(image, -1, 0) if self.channels_first else image


def _check_fill(fill: Any, dtype: np.dtype) -> Any:
    """``fill`` if the observation dtype holds it exactly (no wrap-around, no truncation)."""
    if isinstance(fill, bool) or not isinstance(fill, (int, float, np.number)):
        raise ValueError(f"fill must be a number or None, got {fill!r}")
    if not np.isfinite(fill):
        raise ValueError(f"fill must be finite, got {fill!r}")
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        if float(fill) != int(fill) or not info.min <= int(fill) <= info.max:
            raise ValueError(
                f"fill={fill!r} is not a {np.dtype(dtype).name} value "
                f"(integers {info.min}..{info.max})"
            )
    return fill


class OcclusionObservation(
    SeededWrapperMixin,
    gym.ObservationWrapper[np.ndarray, Any, np.ndarray],
    gym.utils.RecordConstructorArgs,
):
    """Keep a random ``round((1 - ratio) * N)`` of the N tokens on the first axis.

    Kept tokens stay in their original order; ``info["kept"]`` holds their indices. With
    ``mode="episode"`` the mask is drawn at reset and kept all episode (the article's test
    protocol); ``mode="step"`` draws a new mask every step (training augmentation). With
    ``fill=None`` occluded tokens are dropped, so the observation shrinks to the kept tokens
    (for set-input models such as AttentionNeuron); with a number they are overwritten by it
    and the shape is kept (for grid models such as CNNs).

    Args:
        env: Env with a Box observation whose first axis lists tokens.
        ratio: Fraction of tokens to occlude, in [0, 1); at least one token is always kept.
        mode: "episode" or "step".
        fill: ``None`` to drop occluded tokens, or the value to overwrite them with.

    Example:
        >>> import gymnasium as gym
        >>> from attn_envs import OcclusionObservation, PatchObservation
        >>> env = PatchObservation(gym.make("CarRacing-v3"), patch_size=6)
        >>> env = OcclusionObservation(env, ratio=0.7)
        >>> obs, info = env.reset(seed=0)
        >>> obs.shape, info["kept"].shape
        ((77, 108), (77,))
        >>> env.close()
    """

    def __init__(
        self,
        env: gym.Env,
        ratio: float,
        mode: Literal["episode", "step"] = "episode",
        fill: float | None = None,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, ratio=ratio, mode=mode, fill=fill)
        gym.ObservationWrapper.__init__(self, env)
        space = require_box(env.observation_space, "OcclusionObservation")
        if len(space.shape) == 0:
            raise ValueError("OcclusionObservation needs an observation with a token axis")
        if not 0.0 <= ratio < 1.0:
            raise ValueError(f"ratio must lie in [0, 1), got {ratio!r}")
        if mode not in ("episode", "step"):
            raise ValueError(f"mode must be 'episode' or 'step', got {mode!r}")
        self.ratio, self.mode, self.fill = float(ratio), mode, fill
        self.n_tokens = space.shape[0]
        self.n_kept = max(1, round((1.0 - self.ratio) * self.n_tokens))
        if fill is None:
            self.observation_space = token_space(space, self.n_kept)
        else:
            fill_arr = np.asarray(_check_fill(fill, space.dtype), dtype=space.dtype)
            self.observation_space = spaces.Box(
                low=np.minimum(space.low, fill_arr),
                high=np.maximum(space.high, fill_arr),
                dtype=space.dtype,
            )
        self.kept = np.arange(self.n_kept)

    def _draw(self) -> None:
        self.kept = np.sort(self.rng.choice(self.n_tokens, self.n_kept, replace=False))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        self._reseed(seed)
        self._draw()
        obs, info = self.env.reset(seed=seed, options=options)
        info["kept"] = self.kept.copy()
        return self.observation(obs), info

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        if self.mode == "step":
            self._draw()
        obs, reward, terminated, truncated, info = self.env.step(action)
        info["kept"] = self.kept.copy()
        return self.observation(obs), reward, terminated, truncated, info

    def observation(self, observation: np.ndarray) -> np.ndarray:
        if self.fill is None:
            return observation[self.kept]
        out = np.full_like(observation, self.fill)
        out[self.kept] = observation[self.kept]
        return out
