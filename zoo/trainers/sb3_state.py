"""Safe, atomic SB3 artefacts: a run's files are read as tensors and arrays, never unpickled.

SB3's ``Model.load`` unpickles the ``data`` entries of a ``.zip`` (``cloudpickle``), and its
replay buffers and ``VecNormalize`` files are plain pickles: loading a stranger's file can
run any code. The zoo knows each run's config, so it rebuilds the model from ``config.yml``
and loads only

- the ``.pth`` tensors of the SB3 zip (``policy.pth``, ``policy.optimizer.pth``,
  ``pytorch_variables.pth``) with ``torch.load(weights_only=True)``, plus the plain-JSON
  counters of its ``data`` entry (``num_timesteps``, ``_n_updates``, ...); the pickled
  entries are never decoded. The zip stays a standard SB3 file (``PPO.load`` of a file you
  trust still works);
- replay buffers and ``VecNormalize`` statistics as ``.npz`` (``allow_pickle=False``);
- a checkpoint's pending logger values (:data:`LOGGER_ENTRY`, plain JSON numbers).

Every write is atomic (:mod:`attn_policies.atomic`): a kill or a full disk leaves the
previous file intact.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.buffers import BaseBuffer
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.save_util import load_from_zip_file
from stable_baselines3.common.vec_env import VecNormalize

from attn_policies import safe_reads
from attn_policies.atomic import atomic_path
from zoo.config_checks import (
    ConfigError,
    RunConfig,
    check_npz_memory,
    parse_json,
)

# Training counters restored from a checkpoint's JSON ``data`` (plain numbers only).
COUNTERS = (
    "num_timesteps",
    "_total_timesteps",
    "_num_timesteps_at_start",
    "_episode_num",
    "_current_progress_remaining",
    "_n_updates",
    "_n_calls",
    "exploration_rate",
)


class ArtefactError(ConfigError):
    """A run file that cannot be loaded safely: one line naming the file and the problem."""


MAX_RATIO = safe_reads.MAX_RATIO
RATIO_FLOOR = safe_reads.RATIO_FLOOR
MAX_DATA_ENTRY = 64 * 2**20
"""The largest ``data`` entry (plain JSON, with base64 pickles never decoded) an SB3 zip may
declare; the zoo's largest (Atari, its last observations) is well under 1 MiB."""


def check_archive(file: str | Path, limit: float | None = None, what: str = "model") -> None:
    """Refuse, before any entry is read, a zip whose entries inflate past what they could
    hold: an entry declaring more than :data:`MAX_RATIO` times its compressed size (a 1 MB
    file inflating to 1 GB), entries declaring more than ``limit`` bytes together (what the
    run's ``what``, built from its config, can hold) or more than the memory bound
    (:func:`zoo.config.check_memory`). A file that is not a zip (torch's legacy format) is
    left to its reader: it can hold no more than its own size. The check is
    :func:`attn_policies.safe_reads.check_archive`, which the algorithms' own readers use.

    Raises:
        ArtefactError: naming the file, the entry and the sizes.
    """
    safe_reads.check_archive(file, limit, what, ArtefactError)


def state_bytes(module: torch.nn.Module) -> int:
    """The bytes of ``module``'s tensors (parameters and buffers), as its state dict holds."""
    return sum(t.numel() * t.element_size() for t in module.state_dict().values())


def tensor_file_limit(module: torch.nn.Module, copies: int = 2) -> int:
    """The most a tensor file of ``module`` may declare: ``copies`` times its tensors (an
    optimizer keeps two per weight) plus 1 MiB of names and pickle records."""
    return copies * state_bytes(module) + RATIO_FLOOR


LOGGER_ENTRY = "zoo_logger.json"
"""The zip entry of a checkpoint holding the SB3 logger's values not yet dumped (SB3's own
``load`` ignores it)."""


def save_model(
    model: BaseAlgorithm, file: str | Path, logger: dict[str, Any] | None = None
) -> None:
    """``model.save(file)``, atomically; ``logger`` (:func:`logger_state`) goes in with it,
    so the checkpoint and the values it had not logged yet are one file."""
    with atomic_path(file) as tmp:
        model.save(tmp)
        if logger is not None:
            with zipfile.ZipFile(tmp, "a") as archive:
                archive.writestr(LOGGER_ENTRY, json.dumps(logger))


def _plain_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def drop_optimizer_statistics(source: str | Path, target: str | Path) -> int:
    """Copy the SB3 zip ``source`` to ``target`` without its optimizers' running statistics.

    An optimizer entry (``policy.optimizer.pth``) keeps its ``param_groups`` (learning rate,
    betas, ...) but not its ``state``: Adam's moments or RMSprop's square averages, as many
    floats as the policy has weights, which evaluation never reads. Every other entry is
    copied byte for byte (``data`` is not decoded); the optimizer entries are read with
    ``weights_only=True``. An optimizer state without statistics is what a new optimizer
    has, so SB3's ``load`` and :func:`load_model` open the copy as they open ``source``:
    same weights, same actions. Training from the copy (a warm start) restarts the
    optimizer's statistics; checkpoints are never slimmed, so ``--resume`` is unaffected.

    Returns:
        The size of ``target`` in bytes.

    Raises:
        ArtefactError: ``source`` is not a readable SB3 zip or an optimizer entry is not an
            optimizer state.
    """
    source, target = Path(source), Path(target)
    check_archive(source)
    try:
        with zipfile.ZipFile(source) as archive:
            entries = [(info, archive.read(info)) for info in archive.infolist()]
        slim = {}
        for info, raw in entries:
            if not info.filename.endswith(".optimizer.pth"):
                continue
            state = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
            if not isinstance(state, dict) or "param_groups" not in state:
                raise ValueError(f"{info.filename} is not an optimizer state")
            buffer = io.BytesIO()
            torch.save({"state": {}, "param_groups": state["param_groups"]}, buffer)
            slim[info.filename] = buffer.getvalue()
    except Exception as err:  # BadZipFile, refused unpickling, a foreign entry
        raise ArtefactError(f"{source}: not a readable SB3 model file ({err})") from None
    with atomic_path(target) as tmp, zipfile.ZipFile(tmp, "w") as out:
        for info, raw in entries:
            out.writestr(info, slim.get(info.filename, raw))
    return target.stat().st_size


def logger_state(logger: Logger) -> dict[str, Any]:
    """The values an SB3 ``Logger`` recorded since its last ``dump`` (numbers only: text,
    images and videos are not metrics), with their ``record_mean`` counts and exclusions.

    SB3 writes them at its next ``dump``: a checkpoint that leaves them out loses them for
    good (e.g. ``train/loss`` of the update before an evaluation cut by Ctrl-C).
    """
    values = {
        str(k): v.item() if isinstance(v, np.generic) else v
        for k, v in logger.name_to_value.items()
    }
    values = {k: v for k, v in values.items() if _plain_number(v)}
    return {
        "values": values,
        "counts": {k: int(n) for k, n in logger.name_to_count.items() if k in values},
        "excluded": {k: list(logger.name_to_excluded.get(k) or ()) for k in values},
    }


def read_logger_state(file: str | Path) -> dict[str, Any]:
    """:func:`logger_state` as saved in checkpoint ``file`` (empty for a checkpoint without
    it); anything but names mapped to plain numbers and text tuples is refused."""
    file = Path(file)
    empty: dict[str, Any] = {"values": {}, "counts": {}, "excluded": {}}
    check_archive(file)
    try:
        with zipfile.ZipFile(file) as archive:
            if LOGGER_ENTRY not in archive.namelist():
                return empty
            if archive.getinfo(LOGGER_ENTRY).file_size > MAX_DATA_ENTRY:
                raise ArtefactError(f"{file}: its {LOGGER_ENTRY} is larger than a logger's values")
            state = parse_json(archive.read(LOGGER_ENTRY), f"{file}: {LOGGER_ENTRY}")
    except (OSError, zipfile.BadZipFile) as err:
        raise ArtefactError(f"{file}: not a readable SB3 model file ({err})") from None
    ok = isinstance(state, dict) and set(state) == set(empty)
    ok = ok and all(isinstance(state[k], dict) for k in empty)
    ok = ok and all(isinstance(k, str) and _plain_number(v) for k, v in state["values"].items())
    ok = ok and all(k in state["values"] and type(n) is int for k, n in state["counts"].items())
    ok = ok and all(
        k in state["values"] and isinstance(v, list) and all(isinstance(x, str) for x in v)
        for k, v in state["excluded"].items()
    )
    if not ok:
        raise ArtefactError(f"{file}: its {LOGGER_ENTRY} is not a mapping of names to numbers")
    return state


def restore_logger(logger: Logger, state: dict[str, Any]) -> None:
    """Put :func:`logger_state`'s values back into an SB3 ``Logger``: its next ``dump``
    writes them where the interrupted run would have."""
    logger.name_to_value.update(state["values"])
    logger.name_to_count.update(state["counts"])
    for key, excluded in state["excluded"].items():
        logger.name_to_excluded[key] = tuple(excluded)


def read_counters(file: str | Path) -> dict[str, int | float]:
    """The plain-number training counters of an SB3 zip (its pickled entries are skipped)."""
    file = Path(file)
    try:
        with zipfile.ZipFile(file) as archive:
            declared = archive.getinfo("data").file_size
            if declared > MAX_DATA_ENTRY:  # checked before it is inflated
                raise ArtefactError(
                    f"{file}: its 'data' entry declares {declared:,} bytes, more than the "
                    f"{MAX_DATA_ENTRY:,} an SB3 zip's counters take: refused before reading it"
                )
            check_archive(file)
            data = parse_json(archive.read("data"), f"{file}: 'data'")
    except (OSError, KeyError, zipfile.BadZipFile) as err:
        raise ArtefactError(f"{file}: not a readable SB3 model file ({err})") from None
    if not isinstance(data, dict):
        raise ArtefactError(f"{file}: its 'data' entry is not a mapping")
    out: dict[str, int | float] = {}
    for key in COUNTERS:
        value = data.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = value
    return out


def load_model(model: BaseAlgorithm, file: str | Path, counters: bool = True) -> BaseAlgorithm:
    """Load ``file``'s weights (and optimizer state, counters) into ``model``, built from the
    run's config. Only tensors and plain JSON numbers are read.

    Raises:
        ArtefactError: the file is damaged or does not fit the model.
    """
    file = Path(file)
    # policy.pth, the optimizers' (two statistics per weight) and pytorch_variables.pth
    # together hold a few copies of the policy's tensors, plus the JSON data entry
    check_archive(file, tensor_file_limit(model.policy, copies=4) + MAX_DATA_ENTRY)
    try:
        _, params, variables = load_from_zip_file(file, device=model.device, load_data=False)
    except Exception as err:  # BadZipFile, weights-only unpickling refused, truncated tensors
        raise ArtefactError(f"{file}: not a readable SB3 model file ({err})") from None
    try:
        model.set_parameters(params, exact_match=True, device=model.device)
        for name, value in (variables or {}).items():
            if name not in model._get_torch_save_params()[1]:
                raise ValueError(f"unexpected variable {name!r}")
            target: object = model
            for part in name.split("."):
                target = getattr(target, part)
            if not isinstance(target, torch.Tensor):
                raise ValueError(f"variable {name!r} is not a tensor")
            target.data.copy_(value.data)
    except Exception as err:  # missing or misshapen tensors
        raise ArtefactError(f"{file}: does not fit the run's model ({err})") from None
    if counters:
        for key, count in read_counters(file).items():
            if hasattr(model, key):
                setattr(model, key, type(getattr(model, key))(count))
    return model


def _buffer_arrays(buffer: BaseBuffer) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for name, value in vars(buffer).items():
        if isinstance(value, np.ndarray):
            out[name] = value
        elif (
            isinstance(value, dict)
            and value
            and all(isinstance(v, np.ndarray) for v in value.values())
        ):
            out.update({f"{name}/{k}": v for k, v in value.items()})
    return out


def _buffer_scalars(buffer: BaseBuffer) -> dict[str, int | float | np.integer | np.floating]:
    return {
        k: v
        for k, v in vars(buffer).items()
        if isinstance(v, (bool, int, float, np.integer, np.floating)) and not k.startswith("__")
    }


def save_replay_buffer(buffer: BaseBuffer, file: str | Path) -> None:
    """The buffer's arrays and counters (``pos``, ``full``, ...) as ``.npz``, atomically."""
    scalars = {
        k: v.item() if isinstance(v, np.generic) else v for k, v in _buffer_scalars(buffer).items()
    }
    arrays = dict(_buffer_arrays(buffer))
    arrays["__scalars__"] = np.frombuffer(json.dumps(scalars).encode(), dtype=np.uint8)
    with atomic_path(file) as tmp, tmp.open("wb") as fh:
        # numpy's hint lets **arrays fill allow_pickle: bool (the default is kept here)
        np.savez(fh, **arrays)  # type: ignore[arg-type]


def load_replay_buffer(buffer: BaseBuffer, file: str | Path) -> None:
    """Fill ``buffer`` (built from the run's config) from :func:`save_replay_buffer`'s file.

    Every array must match the buffer's own in shape and dtype; only the counters the
    buffer already has are set, with their own types.
    """
    file = Path(file)
    try:
        check_npz_memory(file)  # from the headers, before anything is decompressed
        with np.load(file, allow_pickle=False) as npz:
            stored = {k: npz[k] for k in npz.files}
        scalars = json.loads(stored.pop("__scalars__").tobytes())
    except Exception as err:
        raise ArtefactError(f"{file}: not a readable replay buffer ({err})") from None
    own = _buffer_arrays(buffer)
    if set(stored) != set(own):
        raise ArtefactError(
            f"{file}: holds arrays {sorted(stored)}, the run's buffer {sorted(own)}"
        )
    for name, array in stored.items():
        if array.shape != own[name].shape or array.dtype != own[name].dtype:
            raise ArtefactError(
                f"{file}: {name} is {array.dtype}{array.shape}, the run's buffer has "
                f"{own[name].dtype}{own[name].shape}"
            )
    current = _buffer_scalars(buffer)
    for name, value in scalars.items() if isinstance(scalars, dict) else []:
        if name in current and isinstance(value, (bool, int, float)):
            setattr(buffer, name, type(current[name])(value))
    for name, array in stored.items():
        own[name][...] = array


def check_replay_buffer(buffer: BaseBuffer, file: str | Path) -> None:
    """Refuse a buffer file :func:`load_replay_buffer` would refuse, from the ``.npz``
    headers only (no array is read): its arrays must be ``buffer``'s, with their dtypes and
    shapes past the first axis (``buffer`` may be a shrunk one of the run's)."""
    file = Path(file)
    try:
        headers = check_npz_memory(file)  # zoo.config's one .npz header reader
        headers.pop("__scalars__")
    except Exception as err:
        raise ArtefactError(f"{file}: not a readable replay buffer ({err})") from None
    own = _buffer_arrays(buffer)
    if set(headers) != set(own):
        raise ArtefactError(
            f"{file}: holds arrays {sorted(headers)}, the run's buffer {sorted(own)}"
        )
    for name, (shape, dtype) in headers.items():
        if dtype != own[name].dtype or shape[1:] != own[name].shape[1:]:
            raise ArtefactError(
                f"{file}: {name} is {dtype}{shape}, the run's buffer has "
                f"{own[name].dtype}{own[name].shape}"
            )


def save_vecnormalize(venv: VecNormalize, file: str | Path) -> None:
    """``VecNormalize`` running statistics as ``.npz``, atomically."""
    arrays: dict[str, np.ndarray] = {}
    rms = venv.obs_rms if isinstance(venv.obs_rms, dict) else {"": venv.obs_rms}
    for key, stats in rms.items():
        arrays[f"obs/{key}/mean"], arrays[f"obs/{key}/var"] = stats.mean, stats.var
        arrays[f"obs/{key}/count"] = np.asarray(stats.count, dtype=np.float64)
    arrays["ret/mean"], arrays["ret/var"] = (
        np.asarray(venv.ret_rms.mean),
        np.asarray(venv.ret_rms.var),
    )
    arrays["ret/count"] = np.asarray(venv.ret_rms.count, dtype=np.float64)
    with atomic_path(file) as tmp, tmp.open("wb") as fh:
        np.savez(fh, allow_pickle=False, **arrays)  # float statistics only


def load_vecnormalize(venv: VecNormalize, file: str | Path) -> VecNormalize:
    """Set ``venv``'s statistics (built from the run's config) from :func:`save_vecnormalize`."""
    file = Path(file)
    try:
        check_npz_memory(file)  # from the headers, before anything is decompressed
        with np.load(file, allow_pickle=False) as npz:
            stored = {k: npz[k] for k in npz.files}
    except Exception as err:
        raise ArtefactError(f"{file}: not readable normalisation statistics ({err})") from None
    rms = venv.obs_rms if isinstance(venv.obs_rms, dict) else {"": venv.obs_rms}
    targets = [(f"obs/{k}", s) for k, s in rms.items()] + [("ret", venv.ret_rms)]
    for prefix, stats in targets:
        for field in ("mean", "var", "count"):
            value = stored.get(f"{prefix}/{field}")
            expected = np.shape(getattr(stats, field))
            if value is None or value.shape != expected:
                raise ArtefactError(
                    f"{file}: {prefix}/{field} is missing or not of shape {expected}"
                )
        stats.mean = stored[f"{prefix}/mean"].astype(np.float64)
        stats.var = stored[f"{prefix}/var"].astype(np.float64)
        stats.count = float(stored[f"{prefix}/count"])
    return venv


def normalizer(file: str | Path, run: RunConfig | None) -> Any:
    """``obs -> normalised obs`` with ``file``'s statistics and the run's ``normalize``
    settings (clip, epsilon), for code that steps a single env (maps, BC teachers)."""
    from zoo import factory

    if run is None:  # a bare statistics file: its clip_obs and epsilon, else SB3's defaults
        try:
            with np.load(file, allow_pickle=False) as npz:
                mean, var = npz["obs//mean"], npz["obs//var"]
                clip = float(npz["clip_obs"]) if "clip_obs" in npz.files else 10.0
                eps = float(npz["epsilon"]) if "epsilon" in npz.files else 1e-8
        except Exception as err:  # not an npz, pickled arrays refused, a missing entry
            raise ArtefactError(
                f"{file}: not readable normalisation statistics (arrays obs//mean, obs//var; "
                f"optional clip_obs, epsilon): {err}"
            ) from None
        return lambda obs: np.clip((obs - mean) / np.sqrt(var + eps), -clip, clip).astype(
            np.float32
        )  # as VecNormalize.normalize_obs
    with _global_rng_kept():  # building an env must not move the caller's random streams
        venv = factory.make_vec_env(run, n_envs=1, training=False)
        venv.close()
    if not isinstance(venv, VecNormalize):
        raise ArtefactError(f"{file}: the run does not normalise observations")
    load_vecnormalize(venv, file)
    venv.training = False
    return venv.normalize_obs


@contextlib.contextmanager
def _global_rng_kept() -> Iterator[None]:
    states = (random.getstate(), np.random.get_state(), torch.get_rng_state())  # noqa: NPY002
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])  # noqa: NPY002
        torch.set_rng_state(states[2])


def refuse_pickle(file: str | Path, what: str) -> ArtefactError:
    """The error for an old pickled artefact: it is not loaded."""
    return ArtefactError(
        f"{file}: a pickled {what} (an old or foreign format that can run code); it is not loaded"
    )


def tensors_of(file: str | Path, module: torch.nn.Module | None = None) -> dict[str, Any]:
    """``torch.load(file, weights_only=True)`` with one-line errors, after
    :func:`check_archive` (a deflated entry inflating a thousandfold is refused unread;
    with ``module``, the file may declare no more than :func:`tensor_file_limit` of it)."""
    check_archive(file, None if module is None else tensor_file_limit(module), "tensors")
    try:
        return torch.load(
            io.BytesIO(Path(file).read_bytes()), map_location="cpu", weights_only=True
        )
    except Exception as err:
        raise ArtefactError(
            f"{file}: not a readable tensor file ({type(err).__name__}: {err})"
        ) from None
