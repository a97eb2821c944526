"""Gymnasium wrappers and environments for attention-based RL experiments.

Importing the package registers the ``attn_envs/...`` environment ids (see
:mod:`attn_envs.registration`). Public classes are imported lazily, so ``import attn_envs``
stays cheap and pulls in no simulator until one is used.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from attn_envs.registration import ENV_IDS, register_envs

try:
    __version__ = version("attn-zoo")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

_PUBLIC = {
    "ShuffleObservation": "attn_envs.shuffle",
    "NoiseChannelsObservation": "attn_envs.shuffle",
    "DuplicateObservation": "attn_envs.shuffle",
    "PatchObservation": "attn_envs.patches",
    "OcclusionObservation": "attn_envs.patches",
    "OpenCVGrayscaleObservation": "attn_envs.patches",
    "patchify": "attn_envs.patches",
    "unpatchify": "attn_envs.patches",
    "RamFeatureObservation": "attn_envs.atari_ram",
    "RamFeatureEntryObservation": "attn_envs.atari_ram",
    "DistractorFeatureObservation": "attn_envs.atari_ram",
    "DownsampleCropObservation": "attn_envs.atari_frames",
    "AtariCropWrapper": "attn_envs.atari_frames",
    "FixedNoopReset": "attn_envs.atari_frames",
    "RAM_ANNOTATIONS": "attn_envs.ram_annotations",
    "BackgroundObservation": "attn_envs.background",
    "available_backgrounds": "attn_envs.background",
    "load_background": "attn_envs.background",
    "ClassicCarRacing": "attn_envs.classic_car_racing",
    "EgocentricGridObservation": "attn_envs.grid",
    "ActionSubset": "attn_envs.grid",
    "StepPenalty": "attn_envs.grid",
    "PreviousActionObservation": "attn_envs.feedback",
    "NegativeRewardTruncation": "attn_envs.termination",
    "CartPoleSwingUpEnv": "attn_envs.envs.cartpole_swingup",
    "CartPoleSwingUpVectorEnv": "attn_envs.envs.cartpole_swingup_vector",
    "load_mnist": "attn_envs.mnist",
    "download_mnist": "attn_envs.mnist",
    "read_idx": "attn_envs.mnist",
    "write_idx": "attn_envs.mnist",
    "synthetic_digits": "attn_envs.mnist",
    "transform_mnist": "attn_envs.mnist",
    "MNISTTransform": "attn_envs.mnist",
    "transformed_test_set": "attn_envs.mnist",
}

__all__ = ["ENV_IDS", "__version__", "register_envs", *sorted(_PUBLIC)]


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'attn_envs' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))


register_envs()
