"""Videos of trained runs, with the attention the model pays beside each frame.

:func:`record` rolls a run's model out deterministically in one env built like the
training env (gym wrappers, frame stacking, the run's saved ``VecNormalize`` statistics) and
writes an MP4 (OpenCV's ``mp4v``; an animated GIF where that codec is missing). When the
model has attention layers each frame gets a side panel: the attention every key token
receives, averaged over heads and queries (:func:`~attn_policies.saliency.attention_saliency`),
drawn as a grid when the keys are one (DoorKey's 7x7 view, upright over the view; a
non-local layer's feature map over the newest observation frame) and as a bar strip
otherwise. Colours are scaled per frame from the smallest to the largest weight.

The helpers :func:`open_env`, :func:`grab_frame`, :func:`current_info` and
:func:`key_saliency` are shared with :mod:`zoo.run_maps`; drawing and encoding the frames is
:mod:`zoo.video`'s.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.vec_env import VecEnv, VecNormalize
from stable_baselines3.common.vec_env.base_vec_env import VecEnvObs
from torch import nn

from attn_policies.agents import Agent, PolicyAgent
from attn_policies.attention import AttentionCapture
from attn_policies.attention_plots import doorkey_frame
from attn_policies.capture import attention_maps
from attn_policies.nonlocal_cnn import NonLocalBlock
from attn_policies.saliency import attention_saliency
from zoo import factory
from zoo.config import ConfigError, require_int
from zoo.outputs import make_output_folder
from zoo.runs import Run, load
from zoo.video import (
    TITLE_BAND,
    VideoWriter,
    as_rgb,
    caption,
    even_crop,
    fit_frame,
    render_panel,
)

FPS = 15


def ensure_registered(env_id: str) -> None:
    """Register the env family an id needs beyond ``attn_envs`` (ALE's ``ALE/...`` ids)."""
    if env_id.startswith("ALE/"):
        import ale_py

        gym.register_envs(ale_py)


def vecnormalize_file(path: Path, which: str) -> Path:
    """The ``VecNormalize`` statistics saved with the model ``which`` picks (may not exist)."""
    from zoo.trainers.sb3_trainer import SB3Trainer

    return SB3Trainer().model_file(Path(path), which)[1]


def open_env(run: Run, which: str = "best", render: bool = True) -> VecEnv:
    """One env of the run as a 1-env VecEnv, wrapped like training, for evaluation.

    Frame stacking applies as configured; ``VecNormalize`` (if the run uses it) is loaded
    from the statistics saved with the model ``which`` picks, frozen, rewards raw. With
    ``render`` the env renders ``rgb_array`` frames (:func:`grab_frame`); an env whose
    factory does not take ``render_mode`` is built without and switched afterwards.
    """
    ensure_registered(str(run.config.body.get("env", "")))
    try:
        venv = factory.make_vec_env(
            run.config, n_envs=1, training=False, render_mode="rgb_array" if render else None
        )
    except TypeError:
        if not render:
            raise
        # e.g. attn_envs' DoorKey factory has no render_mode argument; MiniGrid reads the
        # attribute at render time, so setting it on the base env is enough.
        venv = factory.make_vec_env(run.config, n_envs=1, training=False)
        for env in getattr(venv.unwrapped, "envs", []):
            env.unwrapped.render_mode = "rgb_array"
    if isinstance(venv, VecNormalize):
        stats = vecnormalize_file(run.path, which)
        if stats.exists():
            from zoo.trainers.sb3_state import load_vecnormalize

            venv = load_vecnormalize(venv, stats)  # statistics only: nothing is unpickled
        venv.training, venv.norm_reward = False, False
    return venv


def egocentric(env: gym.Env | VecEnv) -> bool:
    """Whether the (first) env's wrapper chain holds an ``EgocentricGridObservation``: its
    observations are MiniGrid's egocentric view, with the raw grid in ``info``."""
    from attn_envs.grid import EgocentricGridObservation

    envs = getattr(getattr(env, "unwrapped", None), "envs", None)
    current: Any = envs[0] if isinstance(env, VecEnv) and envs else env
    while current is not None:
        if isinstance(current, EgocentricGridObservation):
            return True
        inner = getattr(current, "env", None)
        current = inner if inner is not current else None
    return False


def grab_frame(venv: VecEnv) -> np.ndarray | None:
    """The first env's rendered RGB frame ``(H, W, 3)`` uint8, or None if it renders none."""
    envs = getattr(venv.unwrapped, "envs", None)
    try:
        frame = envs[0].render() if envs else venv.get_images()[0]
    except Exception:  # an env that cannot render is still recorded, from its observations
        return None
    if frame is None:
        return None
    frame = np.asarray(frame)
    if frame.ndim == 2:
        frame = np.repeat(frame[..., None], 3, axis=-1)
    return np.ascontiguousarray(frame[..., :3]).astype(np.uint8)


def policy_module(model: Agent | nn.Module) -> nn.Module:
    """The ``nn.Module`` whose forward pass :func:`attention_maps` runs for ``model``: an SB3
    model's policy, a BC student's network, or the module itself.

    Raises:
        TypeError: for an agent with no network (none of the above).
    """
    if isinstance(model, BaseAlgorithm):
        return model.policy
    student = getattr(model, "student", None)
    if isinstance(student, nn.Module):
        return student
    if isinstance(model, nn.Module):
        return model
    raise TypeError(f"{type(model).__name__} has no network to record attention from")


def model_attention(
    model: Agent | nn.Module,
    obs: VecEnvObs,
    state: Any = None,
    episode_start: np.ndarray | None = None,
) -> dict[str, torch.Tensor]:
    """:func:`attention_maps` of ``model`` on ``obs``; a
    :class:`~attn_policies.agents.PolicyAgent` runs from
    ``state`` (zeroed where ``episode_start``), the state it acts from on ``obs``."""
    if isinstance(model, PolicyAgent):
        model.observe(obs, state, episode_start)
    return attention_maps(attention_model(model), obs)


def attention_model(model: Agent | nn.Module) -> nn.Module | BaseAlgorithm:
    """What the figures of :mod:`attn_policies.attention_rollouts` take for ``model``: an SB3
    model itself (its policy preprocesses the observations), otherwise
    :func:`policy_module`."""
    return model if isinstance(model, BaseAlgorithm) else policy_module(model)


def model_name(model: Agent | nn.Module) -> str:
    """The class name of the network behind ``model`` (an ES agent's policy, not the agent)."""
    module = model.policy if isinstance(model, PolicyAgent) else policy_module(model)
    return type(module).__name__


def has_attention(model: Agent | nn.Module) -> bool:
    """Whether the model has a layer that records attention (an ``AttentionCapture``)."""
    module = policy_module(model)
    return isinstance(module, nn.Module) and any(
        isinstance(m, AttentionCapture) for m in module.modules()
    )


def pick_layer(maps: dict[str, torch.Tensor]) -> str | None:
    """The layer a panel shows: the last recorded one, preferring the actor's over a
    separate critic extractor's (SB3's ``vf_features_extractor``)."""
    names = [n for n in maps if "vf_features_extractor" not in n] or list(maps)
    return names[-1] if names else None


def layer_module(model: Agent | nn.Module, layer: str) -> nn.Module | None:
    """The submodule behind a recorded layer name (``name[i]`` for repeated calls)."""
    name = re.sub(r"\[\d+\]$", "", layer)
    try:
        return policy_module(model).get_submodule("" if name == "self" else name)
    except AttributeError:
        return None


def layer_rows(model: Agent | nn.Module, layer: str, weights: torch.Tensor) -> int | None:
    """Rows of a row-form ``NonLocalBlock``'s feature map (its heads are (channel, row)
    pairs), None for any other layer."""
    module = layer_module(model, layer)
    if isinstance(module, NonLocalBlock) and module.form == "row":
        return weights.shape[1] // int(module.channels)
    return None


def key_saliency(model: Agent | nn.Module, maps: dict[str, torch.Tensor], layer: str) -> np.ndarray:
    """Attention each key receives in ``layer`` (mean over heads and queries), sample 0.

    Returns ``(rows, cols)`` when the keys form a grid: a row-form ``NonLocalBlock``'s
    feature map, or a square number of keys read row-major; otherwise ``(K,)``.

    Example:
        >>> w = {"a": torch.full((1, 2, 9, 9), 1 / 9)}
        >>> key_saliency(nn.Identity(), w, "a").shape
        (3, 3)
    """
    weights = maps[layer]
    rows = layer_rows(model, layer, weights)
    if rows is not None:
        return attention_saliency(weights, rows=rows)[0].float().numpy()
    saliency = attention_saliency(weights)[0].float().numpy()
    side = math.isqrt(saliency.size)
    return saliency.reshape(side, side) if side * side == saliency.size else saliency


def first_observation(obs: VecEnvObs) -> np.ndarray:
    """Env 0's observation of a VecEnv batch (a Dict's ``"observation"`` or first entry)."""
    if isinstance(obs, dict):
        obs = obs["observation"] if "observation" in obs else next(iter(obs.values()))
    return np.asarray(obs)[0]


def current_info(
    venv: VecEnv, infos: list[dict[str, Any]] | None = None, dones: np.ndarray | None = None
) -> dict[str, Any]:
    """Env 0's ``info`` for its current observation: the reset's after :meth:`reset` or an
    episode end (SB3 keeps it in ``reset_infos``; the step's ``info`` then belongs to the
    terminal observation), otherwise the step's."""
    if infos is None or (dones is not None and dones[0]):
        reset_infos = getattr(venv.unwrapped, "reset_infos", None) or [{}]
        return dict(reset_infos[0])
    return infos[0]


def _panel_background(
    obs: VecEnvObs, info: dict[str, Any], saliency: np.ndarray, doorkey: bool
) -> np.ndarray | None:
    """What a grid panel is drawn over: the upright DoorKey view (from the raw grid in
    ``info``), or the newest frame of an image observation when the grid is a feature map of
    it; None otherwise."""
    single = first_observation(obs)
    if doorkey and single.ndim == 3 and saliency.shape == single.shape[1:]:
        try:
            return doorkey_frame(info)
        except ValueError:  # no raw grid in info: not an EgocentricGridObservation env
            return None
    if single.ndim == 3 and min(single.shape[0], single.shape[-1]) <= 4:
        channels_last = single.shape[-1] <= 4
        newest = single[..., -1] if channels_last else single[-1]
        return newest if min(newest.shape) >= 16 else None
    return None


def _observation_image(obs: VecEnvObs, info: dict[str, Any], doorkey: bool) -> np.ndarray:
    """A stand-in frame for envs that render nothing: the observation itself (DoorKey: the
    view drawn from the raw grid in ``info``)."""
    single = first_observation(obs)
    if doorkey:
        try:
            return doorkey_frame(info)
        except ValueError:
            pass
    if single.ndim == 3 and min(single.shape[0], single.shape[-1]) <= 4:
        single = single[..., -1] if single.shape[-1] <= 4 else single[-1]
    if single.ndim != 2:
        single = single.reshape(1, -1)
    return as_rgb(single)


def record(
    run: str | Path,
    out: str | Path | None = None,
    n_steps: int = 300,
    which: str = "best",
    seed: int = 0,
    overlay: bool = True,
) -> Path:
    """Record ``n_steps`` frames of the run's model acting deterministically.

    Episodes reset automatically, so the video runs across episode ends; each frame is the
    state the model acts on, captioned with its episode and step.

    Args:
        run: a run folder.
        out: the video file; default ``video.mp4`` in :func:`zoo.outputs.output_folder`
            (the run folder, or ``runs/...`` for a run under version control). A ``.gif``
            suffix writes a GIF.
        n_steps: frames (env steps) to record.
        which: ``"best"`` or ``"last"`` model.
        seed: seed of the env resets.
        overlay: draw the attention panel when the model has attention (ignored otherwise).

    Returns:
        The file written: ``out``, or the same path with ``.gif`` where OpenCV cannot write
        ``mp4v``.

    Raises:
        ConfigError: for a classifier run (no env to record) or ``n_steps < 1``.
        FileNotFoundError: if the folder is not a run or holds no trained model.
    """
    handle = load(run).acting()
    if handle.config.algo == "classifier":
        raise ConfigError(
            f"{handle.path} is a classifier run (algo: classifier): there is no environment "
            "to record; `attn-zoo maps` draws its attention"
        )
    require_int(n_steps, "n_steps", minimum=1)
    model = handle.agent(which)
    overlay = overlay and has_attention(model)
    out_path = Path(out) if out is not None else make_output_folder(handle.path) / "video.mp4"
    out_path.parent.mkdir(parents=True, exist_ok=True)

    venv = open_env(handle, which)
    doorkey = egocentric(venv)  # any MiniGrid egocentric view is drawn upright, from its grid
    writer: VideoWriter | None = None
    shape: tuple[int, int] | None = None
    try:
        venv.seed(seed)
        obs = venv.reset()
        info = current_info(venv)
        metadata: dict[str, Any] = venv.metadata or {}
        fps = int(min(FPS, metadata.get("render_fps") or FPS))
        state, starts = None, np.ones(1, dtype=bool)
        episode, step_in_episode = 1, 0
        for _ in range(n_steps):
            raw = grab_frame(venv)
            if raw is None:
                raw = _observation_image(obs, info, doorkey)
            frame = fit_frame(raw, shape)
            shape = frame.shape[:2]
            frame = frame.copy()
            caption(frame, f"episode {episode}  step {step_in_episode}", (6, 18))
            if overlay:
                frame = np.concatenate(
                    [frame, _attention_panel(model, obs, info, doorkey, shape, state, starts)],
                    axis=1,
                )
            frame = even_crop(frame)
            if writer is None:
                writer = VideoWriter(out_path, fps, (frame.shape[1], frame.shape[0]))
            writer.write(frame)
            action, state = model.predict(
                obs, state=state, episode_start=starts, deterministic=True
            )
            obs, _, dones, infos = venv.step(action)
            info = current_info(venv, infos, dones)
            starts = dones
            step_in_episode += 1
            # Monitor's "episode" marks a true end (Atari's life-loss resets do not count).
            if dones[0] and "episode" in infos[0]:
                episode, step_in_episode = episode + 1, 0
    finally:
        venv.close()
        path = writer.close() if writer is not None else out_path
    return path


def _attention_panel(
    model: Agent,
    obs: VecEnvObs,
    info: dict[str, Any],
    doorkey: bool,
    shape: tuple[int, int],
    state: Any = None,
    starts: np.ndarray | None = None,
) -> np.ndarray:
    """The side panel for one observation, ``shape[0]`` rows high and as wide."""
    size = shape[0] - TITLE_BAND
    maps = model_attention(model, obs, state, starts)
    layer = pick_layer(maps)
    if layer is None:  # e.g. a layer that declined to record an oversized map
        return render_panel(None, size, title="attention")
    saliency = key_saliency(model, maps, layer)
    if doorkey and saliency.ndim == 2:
        saliency = saliency.T  # MiniGrid views are [x, y]: show them upright
    background = _panel_background(obs, info, saliency, doorkey) if saliency.ndim == 2 else None
    short = re.sub(r"^(policy\.)?(q_net\.)?(pi_)?(features_extractor\.|extractor\.)?", "", layer)
    short = short if len(short) <= 30 else "..." + short[-27:]
    return render_panel(saliency, size, background, title=f"{short}: attention received")
