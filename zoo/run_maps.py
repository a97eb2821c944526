"""The attention figures of a trained run, chosen by its env (``attn-zoo maps``).

- MiniGrid's egocentric view (an ``EgocentricGridObservation`` in the env's wrapper chain,
  whatever the env id): book fig. 10.24, the attention of the agent node and of the first
  cell of each kind of object in view (key, door, goal, ...) per head over the upright view,
  ``attention_egocentric.png`` (DoorKey runs also keep the book's name,
  ``attention_doorkey.png``), on an observation with as many of them in view as can be found
  (read from the raw grid in the env's ``info``): the model acts from seeded resets until
  :data:`EGOCENTRIC_NODES` show up.
- Distractor feature envs (``Distractor`` in ``env``): thesis fig. 4.4.2, feature-by-feature
  maps over a short rollout
  (:func:`~attn_policies.attention_rollouts.feature_attention_figure`).
- Image envs: per attention layer whose keys are a feature map, the attention each position
  receives over the rendered frame (book fig. 10.25,
  :func:`~attn_policies.attention_rollouts.saliency_figure`); for patch-token observations
  (``PatchObservation`` without overlap) the most attended patches boxed on the screen the
  model saw (:func:`~attn_policies.attention_rollouts.top_patches_figure`).
- Classifier runs with attention (``relational_mnist``): transformed test digits with the
  attention each node receives, and per digit the attention of a few query nodes
  (:func:`~attn_policies.attention_plots.plot_grid_attention`)."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium.wrappers import TransformObservation
from matplotlib.figure import Figure
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvObs

from attn_policies.agents import Agent
from attn_policies.attention_plots import (
    doorkey_frame,
    doorkey_nodes,
    plot_feature_attention,
    plot_grid_attention,
)
from attn_policies.attention_rollouts import (
    feature_attention_figure,
    saliency_figure,
    top_patches_figure,
)
from attn_policies.canvas import new_figure, save_figure
from attn_policies.capture import attention_maps
from attn_policies.saliency import attention_saliency
from zoo import factory
from zoo.config_checks import ConfigError
from zoo.outputs import make_output_folder
from zoo.plots import run_identity
from zoo.record import (
    attention_model,
    current_info,
    egocentric,
    first_observation,
    grab_frame,
    has_attention,
    layer_module,
    layer_rows,
    model_attention,
    model_name,
    open_env,
    pick_layer,
    vecnormalize_file,
)
from zoo.runs import Run, load

DOORKEY_ATTEMPTS = 20
"""Seeded resets tried (``seed``, ``seed + 1``, ...) to find objects in an egocentric view."""
DOORKEY_STEPS = 40
"""Steps the model acts from each reset while looking for them."""
EGOCENTRIC_NODES = 3
"""Nodes of an egocentric figure (the agent and objects in view) the search stops at."""
IGNORED_CELLS = ("unseen", "empty", "wall", "floor", "agent")
"""Object kinds that get no row of their own in an egocentric figure."""
IMAGE_WARMUP = 30
"""Steps the model acts before an image env's snapshot (the first frames are often empty)."""
FEATURE_STEPS = 4
"""Panels (rollout steps) of a feature attention figure."""
MNIST_DIGITS = 6
"""Test digits in a classifier run's summary figure (the first two also get node figures)."""
DPI = 120


def run_maps(
    run: str | Path,
    out_dir: str | Path | None = None,
    which: str = "best",
    seed: int = 0,
) -> list[Path]:
    """Write the attention figures of a trained run (see the module docstring) as PNGs.

    Args:
        run: a run folder.
        out_dir: where the PNGs go; default :func:`zoo.outputs.output_folder` (the run
            folder, or ``runs/...`` for a run under version control).
        which: ``"best"`` or ``"last"`` model (classifier runs have one).
        seed: seed of the env resets (or of the test digits drawn).

    Returns:
        The PNG paths.

    Raises:
        ConfigError: if the model has no attention layer, or none of its layers fits a figure.
        FileNotFoundError: if the folder is not a run or holds no trained model.
    """
    handle = load(run).acting()
    # a default folder is made by the one helper (links below the run replaced); --out is the
    # user's own path
    out = Path(out_dir) if out_dir is not None else make_output_folder(handle.path)
    out.mkdir(parents=True, exist_ok=True)
    classifier = handle.config.algo == "classifier"  # a model that does not act in an env
    agent = None if classifier else handle.agent(which)
    model = handle.model(which) if agent is None else agent
    if not has_attention(model):
        raise ConfigError(
            f"{handle.path}: the model ({model_name(model)}) has no attention layer, so there "
            "are no attention maps to draw"
        )
    if agent is None:
        return _classifier_maps(handle, model, out, seed)
    env_id = str(handle.config.body.get("env", ""))
    probe = factory.make_single_env(handle.config)
    try:
        grid_view = egocentric(probe)
    finally:
        probe.close()
    if grid_view:
        return _egocentric_maps(handle, agent, out, which, seed, doorkey="DoorKey" in env_id)
    if "Distractor" in env_id:
        return [_feature_map(handle, agent, out, which, seed)]
    return _image_maps(handle, agent, out, which, seed)


def _save(fig: Figure, path: Path, title: str) -> Path:
    fig.suptitle(title, fontsize=10)
    return save_figure(fig, path, DPI, bbox_inches="tight")  # long tick labels stay in view


def _name(handle: Run) -> str:
    """``experiment/tag`` of the run (``zoo.load`` keeps only the experiment)."""
    return run_identity(handle.path)[0]


def _slug(layer: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", layer).strip("_") or "layer"


def view_nodes(grid: Any, limit: int = EGOCENTRIC_NODES) -> dict[str, int]:
    """The agent's node and the first cell of each kind of object in an egocentric view
    (DoorKey's key and door first, then MiniGrid's other objects: goal, ball, ...), at most
    ``limit``; node indices as :func:`~attn_policies.attention_plots.doorkey_nodes` counts.

    Example:
        >>> import gymnasium as gym, attn_envs
        >>> _, info = gym.make("attn_envs/EgocentricDoorKey-5x5-v0").reset(seed=2)
        >>> view_nodes(info)
        {'agent': 27, 'key': 41, 'door': 26}
    """
    from minigrid.core.constants import OBJECT_TO_IDX

    from attn_policies.attention_plots import doorkey_grid

    cells = doorkey_grid(grid)
    found = doorkey_nodes(cells)
    objects = cells[0].ravel().copy()
    objects[found["agent"]] = OBJECT_TO_IDX["empty"]  # the agent's cell shows what it carries
    for name, index in OBJECT_TO_IDX.items():
        hits = np.flatnonzero(objects == index)
        if name not in found and name not in IGNORED_CELLS and hits.size:
            found[name] = int(hits[0])
    return dict(list(found.items())[:limit])


def _egocentric_maps(
    handle: Run, model: Agent, out: Path, which: str, seed: int, doorkey: bool
) -> list[Path]:
    """Book fig. 10.24 on the first observation with :data:`EGOCENTRIC_NODES` nodes in view
    (found in the raw grid ``EgocentricGridObservation`` reports in ``info``), else the one
    with the most."""
    venv = open_env(handle, which, render=False)
    best, best_grid, best_nodes, where = None, None, {}, ""
    try:
        for attempt in range(DOORKEY_ATTEMPTS):
            venv.seed(seed + attempt)
            obs = venv.reset()
            info = current_info(venv)
            state, starts = None, np.ones(1, dtype=bool)
            for step in range(DOORKEY_STEPS):
                nodes = view_nodes(info)
                if best is None or len(nodes) > len(best_nodes):
                    assert isinstance(obs, np.ndarray)  # DoorKey's egocentric view: a Box
                    best, best_grid, best_nodes = obs[0].copy(), info["raw_grid"], nodes
                    where = f"reset seed {seed + attempt}, step {step}"
                if len(best_nodes) == EGOCENTRIC_NODES:
                    break
                action, state = model.predict(
                    obs, state=state, episode_start=starts, deterministic=True
                )
                obs, _, starts, infos = venv.step(action)
                info = current_info(venv, infos, starts)
            if len(best_nodes) == EGOCENTRIC_NODES:
                break
    finally:
        venv.close()
    cells = np.asarray(best_grid)
    assert best is not None  # the first step of the first attempt sets it
    maps = model_attention(model, best[None])
    layer = pick_layer({k: v for k, v in maps.items() if v.shape[-1] == cells[0].size})
    if layer is None:
        raise ConfigError(
            f"{handle.path}: no attention layer has the view's {cells[0].size} cells as keys"
        )
    fig = plot_grid_attention(
        maps[layer][0],
        best_nodes,
        grid_shape=cells.shape[1:],
        frame=doorkey_frame(cells),
        transpose=True,
    )
    missing = sorted({"agent", "key", "door"} - set(best_nodes)) if doorkey else []
    note = f"; not in view: {', '.join(missing)}" if missing else ""
    title = f"{_name(handle)}: {layer}, attention per head ({where}{note})"
    paths = [_save(fig, out / "attention_egocentric.png", title)]
    if doorkey:  # the book's figure keeps its name (README, results/doorkey)
        paths.append(_save(fig, out / "attention_doorkey.png", title))
    return paths


def _feature_map(handle: Run, model: Agent, out: Path, which: str, seed: int) -> Path:
    """Thesis fig. 4.4.2 over a short rollout of one env (normalised as in training)."""
    if handle.config.body.get("frame_stack"):
        raise ConfigError(
            f"{handle.path}: feature maps need the env's own observations, but frame_stack "
            "stacks them outside the env; stack inside the env (its 'stack' argument) instead"
        )
    env = factory.make_single_env(handle.config)
    stats = vecnormalize_file(handle.path, which)
    if handle.config.body.get("normalize") and stats.exists():
        from zoo.trainers.sb3_state import normalizer

        normalize = normalizer(stats, handle.config)  # saved statistics only, never unpickled
        env = TransformObservation(
            env, lambda o: normalize(o).astype(np.float32), env.observation_space
        )
    try:
        fig = feature_attention_figure(
            attention_model(model), env, n_steps=FEATURE_STEPS, seed=seed
        )
    finally:
        env.close()
    return _save(
        fig,
        out / "attention_features.png",
        f"{_name(handle)}: feature attention over {FEATURE_STEPS} steps "
        f"(mean over heads; run seed {handle.config.seed}, episode seed {seed})",
    )


def _patch_view(
    venv: VecEnv, obs: VecEnvObs, n_keys: int
) -> tuple[np.ndarray, int, np.ndarray] | None:
    """``(screen, patch_size, origins)`` when the keys are non-overlapping patch tokens.

    The screen is reassembled from the tokens themselves (newest stacked frame), so the
    boxes land on the patches as the model saw them, shuffled or not.
    """
    base = venv.unwrapped
    assert isinstance(base, DummyVecEnv)  # open_env's one env is never a subprocess
    env = base.envs[0]
    try:
        origins = np.asarray(env.get_wrapper_attr("patch_origins"))
        size = int(env.get_wrapper_attr("patch_size"))
        stride = int(env.get_wrapper_attr("stride"))
        grid = tuple(env.get_wrapper_attr("grid_shape"))
    except AttributeError:
        return None
    tokens = first_observation(obs)
    if stride != size or len(origins) != n_keys or tokens.shape[0] != n_keys:
        return None
    if tokens.size % (n_keys * size * size):
        return None
    from attn_envs.patches import unpatchify

    image = unpatchify(tokens.reshape(n_keys, size, size, -1), grid)
    screen = image if image.shape[-1] in (1, 3) else image[..., -1]
    return screen, size, origins


def _image_maps(handle: Run, model: Agent, out: Path, which: str, seed: int) -> list[Path]:
    """Saliency (feature-map keys) or top patches (patch keys) per attention layer."""
    venv = open_env(handle, which, render=True)
    try:
        venv.seed(seed)
        obs = venv.reset()
        state, starts = None, np.ones(1, dtype=bool)
        for _ in range(IMAGE_WARMUP):
            action, state = model.predict(
                obs, state=state, episode_start=starts, deterministic=True
            )
            obs, _, starts, _ = venv.step(action)
        frame = grab_frame(venv)
        if len(venv.observation_space.shape or ()) == 1:
            return [_vector_map(handle, model, out, venv, seed)]
        maps = model_attention(model, obs, state, starts)  # an ES agent keeps this state
        paths, skipped = [], []
        for layer, weights in maps.items():
            name = f"{_name(handle)}: {layer} (step {IMAGE_WARMUP}, seed {seed})"
            path = out / f"attention_{_slug(layer)}.png"
            patches = _patch_view(venv, obs, weights.shape[-1])
            if patches is not None:
                screen, size, origins = patches
                neuron = "Neuron" in type(layer_module(model, layer)).__name__
                fig = top_patches_figure(
                    attention_model(model),
                    obs,
                    screen,
                    patch_size=size,
                    origins=origins,
                    layer=layer,
                    method="argmax" if neuron else "votes",
                )
                paths.append(_save(fig, path, name))
                continue
            rows = layer_rows(model, layer, weights)
            n_keys = weights.shape[-1]
            if rows is None and math.isqrt(n_keys) ** 2 != n_keys:
                skipped.append(f"{layer} ({n_keys} keys)")
                continue
            background = frame if frame is not None else _newest_frame(obs)
            fig = saliency_figure(attention_model(model), obs, background, layer=layer, rows=rows)
            paths.append(_save(fig, path, name))
    finally:
        venv.close()
    if not paths:
        raise ConfigError(
            f"{handle.path}: no attention layer has keys that are image positions or patches: "
            f"{', '.join(skipped)}"
        )
    return paths


def _vector_map(handle: Run, model: Agent, out: Path, venv: VecEnv, seed: int) -> Path:
    """Vector observations (E3/E4's AttentionNeuron): queries x observation entries over
    ``FEATURE_STEPS`` steps of a seeded episode, as the model acts."""
    venv.seed(seed)
    obs = venv.reset()
    state, starts = None, np.ones(1, dtype=bool)
    panels, layer = [], None
    for t in range(FEATURE_STEPS):
        maps = model_attention(model, obs, state, starts)
        layer = layer or pick_layer(maps)
        if layer is None:
            raise ConfigError(f"{handle.path}: the forward pass recorded no attention")
        panels.append(maps[layer][0])  # (heads, queries, keys)
        if t < FEATURE_STEPS - 1:
            action, state = model.predict(
                obs, state=state, episode_start=starts, deterministic=True
            )
            obs, _, starts, _ = venv.step(action)
    assert layer is not None  # set on the first of the FEATURE_STEPS (>= 1) steps
    n_queries, n_keys = panels[0].shape[-2:]
    fig = plot_feature_attention(
        torch.stack(panels),
        [f"obs[{i}]" for i in range(n_keys)],
        query_names=[f"q{j}" for j in range(n_queries)],
    )
    return _save(
        fig,
        out / f"attention_{_slug(layer)}.png",
        f"{_name(handle)}: {layer}, queries x observation entries over {FEATURE_STEPS} "
        f"steps (seed {seed})",
    )


def _newest_frame(obs: VecEnvObs) -> np.ndarray:
    single = first_observation(obs)
    if single.ndim == 3:
        return single[..., -1] if single.shape[-1] <= 4 else single[-1]
    return single


def _classifier_maps(handle: Run, model: Any, out: Path, seed: int) -> list[Path]:
    """Transformed test digits with attention received, and node maps of the first two."""
    from attn_policies.algorithms.supervised import fixed_test_set
    from zoo.trainers.classifier_trainer import classifier_config, load_data, make_transform

    _, _, test_images, test_labels = load_data(handle.config)
    config = dataclasses.replace(
        classifier_config(handle.config), seed=seed, test_size=MNIST_DIGITS
    )
    x, y = fixed_test_set(test_images, test_labels, config, make_transform(handle.config))
    maps = attention_maps(model, x)
    layer = next(iter(maps))
    weights = maps[layer]  # (B, heads, N, N)
    with torch.no_grad():
        predicted = model(x).argmax(dim=-1)
    stem = getattr(getattr(model, "trunk", None), "stem", None)
    if stem is not None:
        with torch.no_grad():
            grid = tuple(stem(x[:1]).shape[-2:])
    else:
        side = math.isqrt(weights.shape[-1])
        grid = (side, side)
    if grid[0] * grid[1] != weights.shape[-1]:
        raise ConfigError(f"{handle.path}: {weights.shape[-1]} attention keys are not a grid")
    images = x[:, 0].numpy()
    # Nodes of a stride-1 valid-conv stem sit at the centres of their receptive fields: the
    # grid covers the image's middle, (H - rows) / 2 pixels in from each side.
    off = ((images.shape[1] - grid[0]) / 2, (images.shape[2] - grid[1]) / 2)
    received = attention_saliency(weights).numpy().reshape(-1, *grid)

    fig = new_figure(2.0 * len(images), 4.4)
    axes = fig.subplots(2, len(images), squeeze=False)
    extent = (off[1] - 0.5, off[1] + grid[1] - 0.5, off[0] + grid[0] - 0.5, off[0] - 0.5)
    for k, image in enumerate(images):
        axes[0, k].imshow(image, cmap="gray", vmin=0, vmax=1)
        axes[0, k].set_title(f"label {int(y[k])}, predicted {int(predicted[k])}", fontsize=8)
        axes[1, k].imshow(image, cmap="gray", vmin=0, vmax=1)
        axes[1, k].imshow(
            received[k], cmap="viridis", alpha=0.6, extent=extent, interpolation="nearest"
        )
        axes[1, k].set_xlim(-0.5, image.shape[1] - 0.5)
        axes[1, k].set_ylim(image.shape[0] - 0.5, -0.5)
    for ax in axes.ravel():
        ax.set_xticks([])
        ax.set_yticks([])
    axes[0, 0].set_ylabel("transformed digit")
    axes[1, 0].set_ylabel("attention received")
    paths = [
        _save(
            fig,
            out / "attention_mnist.png",
            f"{_name(handle)}: {layer}, mean over heads and queries",
        )
    ]

    r0, c0 = int(off[0]), int(off[1])
    for k in range(min(2, len(images))):
        crop = images[k, r0 : r0 + grid[0], c0 : c0 + grid[1]]
        ink = crop.sum()
        rows, cols = np.indices(grid)
        centre = (
            (round(float((rows * crop).sum() / ink)), round(float((cols * crop).sum() / ink)))
            if ink > 0
            else (grid[0] // 2, grid[1] // 2)
        )
        nodes = {
            "ink centre": centre,
            "most attended": int(received[k].argmax()),
            "corner": (0, 0),
        }
        fig = plot_grid_attention(weights, nodes, grid_shape=grid, batch_index=k, frame=crop)
        paths.append(
            _save(
                fig,
                out / f"attention_mnist_digit{k}.png",
                f"digit {k} (label {int(y[k])}): query nodes' attention",
            )
        )
    return paths
