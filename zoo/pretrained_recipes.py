"""How each published solution class of seed 001 maps onto this project's modules.

A recipe takes a parsed checkpoint (:class:`~zoo.pretrained_files.Checkpoint`) and returns
the zoo experiment name, the config body our modules need for the authors' settings, and a
converter from the authors' flat parameter vector to ours (:data:`Converter`).
:func:`recipe_of` picks the recipe by solution class; :mod:`zoo.pretrained` writes the run
folder. Settings the authors' files may hold but our modules do not implement are refused
with a :class:`~zoo.config.ConfigError` naming the file and key.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from attn_policies.attention_neuron import VisionAttentionNeuron
from attn_policies.patch_agents import AttentionNeuronVotingAgent
from zoo.config import ConfigError
from zoo.pretrained_files import Checkpoint

__all__ = ["MAX_GIN_INT", "RECIPES", "Converter", "recipe_of"]


Converter = Callable[[np.ndarray, torch.nn.Module], np.ndarray]


def _identity(vector: np.ndarray, policy: torch.nn.Module) -> np.ndarray:
    return vector


def _require(ckpt: Checkpoint, args: dict[str, Any], key: str, allowed: tuple[Any, ...]) -> None:
    if key in args and args[key] not in allowed:
        raise ConfigError(
            f"{ckpt.folder}: {ckpt.solution}/{ckpt.task} with {key} = {args[key]!r} is not "
            f"supported (supported: {', '.join(map(repr, allowed))})"
        )


# Integer settings of an imported config.gin: the published agents' largest is 96; past
# this bound a value is a typo or a trap (hidden_dim = 1000000000 asked for 32 GB).
MAX_GIN_INT = 10**6


def _checked_int(ckpt: Checkpoint, key: str, value: Any, minimum: int = 1) -> int:
    """``value`` of ``key`` in the checkpoint's ``config.gin`` as an integer in
    [``minimum``, :data:`MAX_GIN_INT`]; else a :class:`ConfigError` naming the file and key."""
    integral = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not integral or not minimum <= value <= MAX_GIN_INT:
        raise ConfigError(
            f"{ckpt.folder / 'config.gin'}: {ckpt.solution}.{key} = {value!r} must be an "
            f"integer from {minimum} to {MAX_GIN_INT:,}"
        )
    return int(value)


def _int(ckpt: Checkpoint, key: str, default: int | None = None, minimum: int = 1) -> int:
    """The solution's integer setting ``key`` (``default`` when the file has none; without
    a default a missing key is a ``KeyError``, reported by :func:`_recipe`)."""
    if key not in ckpt.solution_args and default is not None:
        return default
    return _checked_int(ckpt, key, ckpt.solution_args[key], minimum)


def _cmaes_body(
    description: str,
    env: str,
    policy: str,
    policy_kwargs: dict[str, Any],
    env_kwargs: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "description": description,
        "algo": "cmaes",
        "env": env,
    }
    if env_kwargs:
        body["env_kwargs"] = env_kwargs
    body.update(policy=policy, policy_kwargs=policy_kwargs, **extra)
    body.update(n_generations=1, population=256, repeats=16, sigma0=0.1, torch_threads=1)
    body.setdefault("eval", {"freq": 0, "n_episodes": 100, "final_episodes": 100})
    return body


def _pi_fc(ckpt: Checkpoint) -> tuple[str, dict[str, Any], Converter]:
    a = ckpt.solution_args
    policy_kwargs = {
        "action_dim": _int(ckpt, "act_dim"),
        "n_queries": _int(ckpt, "hidden_dim"),
        "hidden_layers": _int(ckpt, "num_hidden_layers", 1, minimum=0),
        "query_dim": _int(ckpt, "pos_em_dim"),
        "key_hidden": _int(ckpt, "pos_em_dim"),
        "msg_dim": _int(ckpt, "msg_dim"),
        "bias": bool(a.get("pi_layer_bias", True)),
        "scale": bool(a.get("pi_layer_scale", True)),
    }
    if ckpt.task == "CartPoleSwingUpTask":
        body = _cmaes_body(
            "The authors' AttentionNeuron agent on CartPoleSwingUpHarder (imported)",
            "attn_envs/CartPoleSwingUpHarder-v0",
            "attention_neuron",
            policy_kwargs,
            evaluator="batched",
            eval={"freq": 0, "n_episodes": 100, "final_episodes": 1000},
        )
        return "pretrained_cartpole_pi", body, _identity
    env = _pybullet_env(ckpt)
    body = _cmaes_body(
        "The authors' AttentionNeuron agent on PyBullet Ant (imported)",
        env, "attention_neuron", policy_kwargs, evaluator="batched",
    )  # fmt: skip
    return "pretrained_ant_pi", body, _identity


def _pybullet_env(ckpt: Checkpoint) -> str:
    if ckpt.task != "PyBulletTask":
        raise ConfigError(f"{ckpt.folder}: {ckpt.solution} on task {ckpt.task} is not supported")
    name = ckpt.task_args.get("env_name")
    if name != "AntBulletEnv-v0":
        raise ConfigError(
            f"{ckpt.folder}: PyBullet env {name!r} is not supported (only AntBulletEnv-v0)"
        )
    return f"pybullet_envs_gymnasium:{name}"


def _mlp(ckpt: Checkpoint) -> tuple[str, dict[str, Any], Converter]:
    env = _pybullet_env(ckpt)
    policy_kwargs = {
        "obs_dim": _int(ckpt, "obs_dim"),
        "action_dim": _int(ckpt, "act_dim"),
        "hidden": _int(ckpt, "hidden_dim"),
        "hidden_layers": _int(ckpt, "num_hidden_layers", 0, minimum=0),
    }
    body = _cmaes_body(
        "The authors' FNN (MLPSolution) on PyBullet Ant, the BC teacher (imported)",
        env, "fnn", policy_kwargs, evaluator="batched",
    )  # fmt: skip
    return "pretrained_ant_mlp", body, _identity


def _car_racing_task(ckpt: Checkpoint, stacked: bool) -> None:
    t = ckpt.task_args
    if ckpt.task != "CarRacingTask":
        raise ConfigError(f"{ckpt.folder}: {ckpt.solution} on task {ckpt.task} is not supported")
    if t.get("bkg") is not None:
        raise ConfigError(
            f"{ckpt.folder}: bkg = {t['bkg']!r} is not supported; import the agent trained on "
            "the plain track and test backgrounds with `attn-zoo robustness --sweep background`"
        )
    _require(ckpt, t, "modification", ("original",))
    if stacked:
        _require(ckpt, t, "permute_obs", (True,))
        _require(ckpt, t, "stack_k_frames", (4,))
        _require(ckpt, t, "patch_size", (6,))
    else:
        _require(ckpt, t, "permute_obs", (False,))
        _require(ckpt, t, "stack_k_frames", (0,))


_CAR_ACTION = "attn_policies.patch_agents:carracing_action"
_CAR_TRAIN = [{"NegativeRewardTruncation": {"patience": 20}}]


def _pi_attention_agent(ckpt: Checkpoint) -> tuple[str, dict[str, Any], Converter]:
    _car_racing_task(ckpt, stacked=True)
    a = ckpt.solution_args
    for key, value in (("pos_em_dim", 8), ("patch_size", 6), ("stack_k", 4), ("msg_dim", 16)):
        _require(ckpt, a, key, (value,))
    policy_kwargs = {
        "grid_size": _int(ckpt, "aa_image_size", 32),
        "code_dim": _int(ckpt, "msg_dim", 16),
        "action_dim": _int(ckpt, "act_dim", 3),
        "query_dim": _int(ckpt, "aa_query_dim", 4),
        "top_k": _int(ckpt, "aa_top_k", 10),
        "hidden_size": _int(ckpt, "aa_hidden_dim", 16),
        "scale": 1.0,
    }
    body = _cmaes_body(
        "The authors' AttentionNeuron + AttentionAgent on shuffled CarRacing (imported)",
        "attn_envs/PuzzleCarRacing-v0",
        "attention_neuron_voting",
        policy_kwargs,
        env_kwargs={"screen": "classic"},
        action_fn=_CAR_ACTION,
        train_env_wrapper=_CAR_TRAIN,
        evaluator="processes",
        n_workers=2,
    )

    def convert(vector: np.ndarray, policy: torch.nn.Module) -> np.ndarray:
        # Key projection columns: theirs pixel-major (pix * (C-1) + d), ours frame-major.
        assert isinstance(policy, AttentionNeuronVotingAgent)  # the recipe's policy
        neuron = policy.neuron
        assert isinstance(neuron, VisionAttentionNeuron)  # its default neuron, as built here
        key = neuron.key_proj.weight
        n_out, n_in = key.shape
        p2 = neuron.patch_size**2
        n_diff = neuron.n_frames - 1
        start = sum(p.numel() for p in neuron.query_proj.parameters())
        perm = np.arange(n_in)
        d, pix = np.divmod(np.arange(p2 * n_diff), p2)  # our column d * p2 + pix
        perm[: p2 * n_diff] = pix * n_diff + d
        out = vector.copy()
        theirs = vector[start : start + n_out * n_in].reshape(n_out, n_in)
        out[start : start + n_out * n_in] = theirs[:, perm].reshape(-1)
        return out

    return "pretrained_carracing_pi", body, convert


def _attention_agent(ckpt: Checkpoint) -> tuple[str, dict[str, Any], Converter]:
    _car_racing_task(ckpt, stacked=False)
    policy_kwargs = {
        "image_size": _int(ckpt, "image_size", 96),
        "patch_size": _int(ckpt, "patch_size", 7),
        "stride": _int(ckpt, "patch_stride", 4),
        "query_dim": _int(ckpt, "query_dim", 4),
        "top_k": _int(ckpt, "top_k", 10),
        "hidden_size": _int(ckpt, "hidden_dim", 16),
    }
    body = _cmaes_body(
        "The authors' AttentionAgent on CarRacing, AttentionNeuron repository (imported)",
        "attn_envs/ClassicCarRacing-v0", "attention_agent", policy_kwargs,
        action_fn=_CAR_ACTION, train_env_wrapper=_CAR_TRAIN, evaluator="processes", n_workers=2,
    )  # fmt: skip
    return "pretrained_carracing", body, _identity


def _vision_task_2020(ckpt: Checkpoint) -> tuple[str, dict[str, Any], Converter]:
    if ckpt.task != "CarRacingTask":
        raise ConfigError(f"{ckpt.folder}: {ckpt.solution} on task {ckpt.task} is not supported")
    _require(ckpt, ckpt.task_args, "modification", ("original",))
    a = ckpt.solution_args
    for key, allowed in (
        ("use_lstm_controller", (True,)),
        ("output_activation", ("tanh",)),
        ("normalize_positions", (True,)),
        ("output_dim", (3,)),
    ):
        if a.get(key) not in allowed:
            raise ConfigError(
                f"{ckpt.folder}: VisionTaskSolution with {key} = {a.get(key)!r} is not "
                f"supported (needs {allowed[0]!r})"
            )
    hiddens = list(a.get("num_hiddens") or [])
    if len(hiddens) != 1:
        raise ConfigError(
            f"{ckpt.folder}: VisionTaskSolution needs one LSTM layer (num_hiddens = [H]), "
            f"got {hiddens!r}"
        )
    data_dim = _int(ckpt, "data_dim", 3)
    patch = _int(ckpt, "patch_size", 7)
    policy_kwargs = {
        "image_size": _int(ckpt, "image_size", 96),
        "patch_size": patch,
        "stride": _int(ckpt, "patch_stride", 4),
        "in_channels": data_dim,
        "query_dim": _int(ckpt, "query_dim", 4),
        "top_k": _int(ckpt, "top_k", 10),
        "hidden_size": _checked_int(ckpt, "num_hiddens[0]", hiddens[0]),
        "action_dim": _int(ckpt, "output_dim"),
        "scale": 1.0 / math.sqrt(data_dim * patch**2),
    }
    body = _cmaes_body(
        "The authors' AttentionAgent on CarRacing, 2020 AttentionAgent code (imported)",
        "attn_envs/ClassicCarRacing-v0", "attention_agent", policy_kwargs,
        action_fn=_CAR_ACTION, train_env_wrapper=_CAR_TRAIN, evaluator="processes", n_workers=2,
    )  # fmt: skip

    def convert(vector: np.ndarray, policy: torch.nn.Module) -> np.ndarray:
        # Theirs: per layer (fc_q, fc_k, LSTM, fc) the state_dict keys sorted.
        named = dict(policy.named_parameters())
        layers = [
            {"bias": "voting.query.bias", "weight": "voting.query.weight"},
            {"bias": "voting.key.bias", "weight": "voting.key.weight"},
            {"bias_hh_l0": "lstm.bias_hh", "bias_ih_l0": "lstm.bias_ih",
             "weight_hh_l0": "lstm.weight_hh", "weight_ih_l0": "lstm.weight_ih"},
            {"bias": "head.bias", "weight": "head.weight"},
        ]  # fmt: skip
        values: dict[str, np.ndarray] = {}
        offset = 0
        for layer in layers:
            for key in sorted(layer):
                n = named[layer[key]].numel()
                values[layer[key]] = vector[offset : offset + n]
                offset += n
        return np.concatenate([values[name].reshape(-1) for name in named])

    return "pretrained_attention_agent", body, convert


RECIPES: dict[str, Callable[[Checkpoint], tuple[str, dict[str, Any], Converter]]] = {
    "PIFCSolution": _pi_fc,
    "MLPSolution": _mlp,
    "PIAttentionAgent": _pi_attention_agent,
    "AttentionAgent": _attention_agent,
    "VisionTaskSolution": _vision_task_2020,
}


def recipe_of(ckpt: Checkpoint) -> tuple[str, dict[str, Any], Converter]:
    recipe = RECIPES.get(ckpt.solution)
    if recipe is None:
        raise ConfigError(
            f"{ckpt.folder}: unknown solution class {ckpt.solution!r} (known: "
            f"{', '.join(RECIPES)}); PuzzlePongSolution has no published weights"
        )
    if ckpt.solution in ("PIFCSolution",) and ckpt.task not in (
        "CartPoleSwingUpTask",
        "PyBulletTask",
    ):
        raise ConfigError(f"{ckpt.folder}: {ckpt.solution} on task {ckpt.task} is not supported")
    try:
        return recipe(ckpt)
    except KeyError as err:
        raise ConfigError(
            f"{ckpt.folder}: config.gin lacks {ckpt.solution}.{err.args[0]}"
        ) from None
