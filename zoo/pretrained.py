"""Import the seed 001 authors' published agents as ordinary zoo run folders.

google/brain-tokyo-workshop (Apache-2.0) ships trained agents as folders holding
``config.gin`` (the authors' settings) and ``model.npz`` (key ``params``: one flat float
vector). :func:`import_checkpoint` reads such a folder without running any of its code (the
gin file is parsed line by line with :func:`ast.literal_eval`, the npz is loaded with
``allow_pickle=False``), recognises the solution and the task, maps the vector onto this
project's module and writes a CMA-ES-style run folder:

- ``config.yml``: our env id, env kwargs and policy with the authors' settings
  (``algo: cmaes``; ``n_generations: 1`` only satisfies the config check: nothing was
  trained here);
- ``model.pt``: the policy's state dict, loaded by ``zoo.load(run).model()``;
- ``status.json`` (``state: finished``), ``command.txt`` and ``provenance.json`` (source
  folder, sha256 of both files, the solution and task settings, the authors' logged test
  score from ``test_log*.txt`` when present).

``attn-zoo evaluate``, ``robustness``, ``record``, ``maps`` and ``plot`` then work on it as on
any trained run. The authors' weights are reference data, not this project's to ship: a
committed import keeps everything but ``model.pt``, and :func:`restore_weights` (``attn-zoo
import SOURCE --restore FOLDER``) writes it back from the authors' folder after checking that
its files are the ones imported (sha256 in ``provenance.json``).

Supported folders (``AttentionNeuron/pretrained/...`` unless noted):

=========================  =======================================  ===========================
folder                     solution / task                          our policy / env
=========================  =======================================  ===========================
``cartpole_pi``            ``PIFCSolution`` / CartPoleSwingUpTask    ``AttentionNeuronPolicy`` /
                                                                    CartPoleSwingUpHarder
``ant_pi``                 ``PIFCSolution`` / PyBulletTask (Ant)     ``AttentionNeuronPolicy`` /
                                                                    AntBulletEnv-v0
``ant_mlp``                ``MLPSolution`` / PyBulletTask (Ant)      ``FNNPolicy``
``carracing_pi``           ``PIAttentionAgent`` / CarRacingTask      ``AttentionNeuronVotingAgent``
                                                                    / PuzzleCarRacing (classic)
``carracing``              ``AttentionAgent`` / CarRacingTask        ``AttentionAgent`` /
                                                                    ClassicCarRacing
``AttentionAgent/...``     ``VisionTaskSolution`` (2020) /           ``AttentionAgent``
``/CarRacing``             gym_task.CarRacingTask                   (scores / sqrt(147))
=========================  =======================================  ===========================

Layouts: the AttentionNeuron repository's vector is ``torch.nn.Module.parameters()`` of its
modules in order, which is our registration order too, except that ``PIAttentionAgent``'s
key projection takes its frame differences pixel-major (column ``pix * 3 + d``) where ours
are frame-major (``d * 36 + pix``), so those columns are permuted. The 2020 AttentionAgent
lists each layer's ``state_dict`` keys sorted (bias before weight) and divides the voting
scores by ``sqrt(147)``, the patch size.

The run's env is the unperturbed task (CarRacing on the classic screen, which these agents
were trained on); the authors' own perturbations (shuffling on reset, noise channels) are
recorded in ``provenance.json`` and measured with ``attn-zoo robustness``. Only
``PuzzleCarRacing`` shuffles by itself, as the authors' ``permute_obs`` did.

Reading a folder (:func:`~zoo.pretrained_files.read_checkpoint`,
:func:`~zoo.pretrained_files.parse_gin`) is :mod:`zoo.pretrained_files`; mapping a solution
onto our modules is :mod:`zoo.pretrained_recipes`.
"""

from __future__ import annotations

import io
import json
import shlex
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from attn_policies._es_support import FlatParameters
from attn_policies.atomic import atomic_write, new_folder
from zoo.config import ConfigError, RunConfig, load_runs
from zoo.config_checks import read_json
from zoo.pretrained_files import Checkpoint, read_checkpoint
from zoo.pretrained_recipes import Converter, recipe_of

if TYPE_CHECKING:
    from zoo.runs import Run

__all__ = ["import_checkpoint", "restore_weights"]

REPOSITORY = "google/brain-tokyo-workshop"


def import_checkpoint(
    path: str | Path, out: str | Path | None = None, root: str | Path = "runs"
) -> Run:
    """Import one authors' folder as a run folder and return it as a :class:`zoo.Run`.

    Args:
        path: the authors' folder (``config.gin`` + ``model.npz``).
        out: the run folder to write; it must not exist or be empty. Default
            ``<root>/<experiment>/imported-<time>`` (``pretrained_cartpole_pi``, ...).
        root: where the default run folder goes.

    Raises:
        ConfigError: missing files, an unknown solution or task, settings our modules do not
            implement, a vector of the wrong length, a file that is not a plain npz; nothing
            is written then.
    """
    from zoo.runs import Run

    ckpt = read_checkpoint(path)
    experiment, body, convert = recipe_of(ckpt)
    folder = Path(out) if out is not None else _default_out(root, experiment)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ConfigError(f"run folder {folder} exists and is not empty")
    (config,) = _validated(experiment, body)
    policy = _converted_policy(ckpt, config, convert)
    with new_folder(folder) as tmp:  # a cut import (a kill, a full disk) leaves no half folder
        atomic_write(tmp / "config.yml", config.to_yaml())
        atomic_write(tmp / "model.pt", tensor_bytes(policy.state_dict()))
        atomic_write(tmp / "command.txt", shlex.join(["attn-zoo", *sys.argv[1:]]) + "\n")
        provenance = {
            "repository": REPOSITORY,
            "licence": "Apache-2.0",
            "source": str(ckpt.folder.resolve()),
            "sha256": ckpt.sha256,
            "solution": ckpt.solution,
            "solution_args": ckpt.solution_args,
            "task": ckpt.task,
            "task_args": ckpt.task_args,
            "n_parameters": ckpt.n_params,  # the policy's count: _converted_policy checked it
            "authors_logs": ckpt.logs,
            "imported": datetime.now().isoformat(timespec="seconds"),
        }
        atomic_write(tmp / "provenance.json", json.dumps(provenance, indent=1, default=str))
        Run(tmp, config).write_status(
            experiment=experiment, tag="", budget=config.budget, seed=config.seed,
            state="finished", num_timesteps=0, generation=0, wall_seconds=0.0,
        )  # fmt: skip
    handle = Run(folder, config)
    return handle


def _converted_policy(ckpt: Checkpoint, config: RunConfig, convert: Converter) -> torch.nn.Module:
    """The policy ``config`` builds, holding the checkpoint's vector."""
    from zoo.trainers.es_rollout import policy_factory

    policy = policy_factory(config)()
    expected = sum(p.numel() for p in policy.parameters())
    if ckpt.n_params != expected:  # before decompressing: the header says how many
        raise ConfigError(
            f"{ckpt.folder / 'model.npz'}: {ckpt.n_params} parameters, but "
            f"{ckpt.solution} with these settings has {expected}"
        )
    vector = convert(ckpt.params.astype(np.float64), policy).astype(np.float32)
    assert isinstance(policy, FlatParameters)  # every ES policy mixes it in
    policy.set_flat_parameters(vector)
    return policy


def restore_weights(path: str | Path, folder: str | Path) -> Path:
    """Write an imported agent's ``model.pt`` back into its (committed) run folder.

    Args:
        path: the authors' folder the agent was imported from (``config.gin`` +
            ``model.npz``).
        folder: the run folder ``attn-zoo import`` wrote, without its ``model.pt``.

    Returns:
        The ``model.pt`` written.

    Raises:
        ConfigError: ``folder`` is no imported agent or already holds its weights, or
            ``path``'s files are not those imported (their sha256 differs from
            ``provenance.json``'s); nothing is written then.
    """
    from zoo.runs import load

    folder = Path(folder)
    provenance_file = folder / "provenance.json"
    if not provenance_file.is_file():
        raise ConfigError(f"{folder} is not an imported agent: it has no provenance.json")
    if (folder / "model.pt").exists():
        raise ConfigError(f"{folder} already holds model.pt")
    provenance = read_json(provenance_file)  # damaged or nested 100k deep: one line
    ckpt = read_checkpoint(path)
    if not isinstance(provenance, dict) or ckpt.sha256 != provenance.get("sha256"):
        raise ConfigError(
            f"{ckpt.folder}: its files are not the ones {folder} was imported from"
            f" (sha256 in {provenance_file})"
        )
    try:
        config = load(folder).config
    except FileNotFoundError as err:
        raise ConfigError(str(err)) from None
    policy = _converted_policy(ckpt, config, recipe_of(ckpt)[2])
    atomic_write(folder / "model.pt", tensor_bytes(policy.state_dict()))
    return folder / "model.pt"


def tensor_bytes(state: dict[str, Any]) -> bytes:
    """``torch.save`` of ``state`` into memory: the file is then written by our own
    ``write``, so a full disk is an ``OSError`` naming the cause (torch's writer reports it
    as a ``RuntimeError`` of its zip container)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def _default_out(root: str | Path, experiment: str) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(root) / experiment / f"imported-{stamp}"


def _validated(experiment: str, body: dict[str, Any]) -> list[Any]:
    """The body as a validated RunConfig (through a temporary YAML file)."""
    import tempfile

    import yaml

    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / f"{experiment}.yml"
        file.write_text(yaml.safe_dump({experiment: body}, sort_keys=False))
        runs = load_runs(file, budget="full")
    for run in runs:
        run.budget = "pretrained"
        run.source = f"{REPOSITORY} (attn-zoo import)"
    return runs
