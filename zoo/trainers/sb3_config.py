"""An SB3 run's config read before anything is built: its keys, its curriculum stages and
the memory its buffers and batches need.

:class:`~zoo.trainers.sb3_trainer.SB3Trainer` validates and probes a run with these, and
trains it stage by stage (:func:`stages`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, cast

import gymnasium as gym
import numpy as np

from zoo.config_checks import ConfigError, RunConfig, check_memory, nearest
from zoo.config_merge import deep_merge
from zoo.trainers.contract import KeyTypes
from zoo.trainers.keys import key, key_types


@dataclass(frozen=True)
class SB3Keys:
    """The keys of SB3 runs besides the algorithm's own hyper-parameters (those of its
    class's ``__init__``: ``learning_rate``, ``n_steps``, ``buffer_size``, ...)."""

    env: str = key(doc="a Gymnasium env id", required=True)
    env_kwargs: dict[str, Any] = key({}, "kwargs of the env")
    env_wrapper: list[Any] | str | dict[str, Any] = key(
        [], "Gymnasium wrappers: a name, `{name: kwargs}` or a list of them"
    )
    n_envs: int = key(1, "envs side by side")
    vec_env: Literal["dummy", "subproc"] = key("dummy", "subproc: one process per env")
    frame_stack: int | None = key(None, "frames stacked by VecFrameStack (null: none)")
    normalize: bool | dict[str, Any] = key(
        False, "VecNormalize the observations and rewards (a dict: its kwargs)"
    )
    policy: str = key(doc="an SB3 policy name or an import path", required=True)
    policy_kwargs: dict[str, Any] = key({}, "the policy's kwargs (extractor, net_arch, ...)")
    n_timesteps: int = key(doc="env steps to train (all envs together)", required=True)
    torch_threads: int | None = key(None, "torch threads (null: one)")
    curriculum: list[Any] | None = key(
        None, "stages, each overriding env, env_kwargs, env_wrapper and n_timesteps"
    )
    init: str | None = key(None, "warm start: a run folder of the same algorithm and policy")


RL_KEYS: KeyTypes = key_types(SB3Keys)

CURRICULUM_KEYS = ("env", "env_kwargs", "env_wrapper", "n_timesteps")


def stages(run: RunConfig) -> list[tuple[RunConfig, int]]:
    """``(stage config, cumulative step count at its end)`` for each curriculum stage.

    A config without ``curriculum`` is one stage of ``n_timesteps``. With it, each stage
    overrides the env keys (:data:`CURRICULUM_KEYS`) and trains its own ``n_timesteps``,
    starting from the previous stage's model (same observation and action spaces).
    """
    plan = run.body.get("curriculum")
    if not plan:
        return [(run, int(run.body["n_timesteps"]))]
    base = {k: v for k, v in run.body.items() if k != "curriculum"}
    out, end = [], 0
    for stage in plan:
        end += int(stage["n_timesteps"])
        out.append((dataclasses.replace(run, body=deep_merge(base, stage)), end))
    return out


def check_curriculum(run: RunConfig) -> None:
    """Refuse a ``curriculum`` that is no list of stage mappings, a stage key other than
    :data:`CURRICULUM_KEYS`, or stage ``n_timesteps`` that do not add up to the run's."""
    plan = run.body.get("curriculum")
    if plan is None:
        return
    if not isinstance(plan, list) or not plan or not all(isinstance(s, dict) for s in plan):
        raise ConfigError(f"{run.name}: 'curriculum' must be a non-empty list of stage mappings")
    for i, stage in enumerate(plan):
        for entry in stage:
            if entry not in CURRICULUM_KEYS:
                raise ConfigError(
                    f"{run.name}: curriculum[{i}] may set {', '.join(CURRICULUM_KEYS)}, not "
                    f"{entry!r}.{nearest(entry, CURRICULUM_KEYS)}"
                )
        if not isinstance(stage.get("n_timesteps"), int) or isinstance(stage["n_timesteps"], bool):
            raise ConfigError(f"{run.name}: curriculum[{i}] needs an integer 'n_timesteps'")
    total = sum(stage["n_timesteps"] for stage in plan)
    if run.body.get("n_timesteps") != total:
        raise ConfigError(
            f"{run.name}: n_timesteps ({run.body.get('n_timesteps')}) must equal the sum of "
            f"the curriculum stages' n_timesteps ({total})"
        )


def _net_widths(net_arch: object) -> int:
    """The summed layer widths of an SB3 ``net_arch`` (64 + 64, SB3's default, when unset)."""
    if net_arch is None:
        return 128
    if isinstance(net_arch, dict):
        return sum(_net_widths(v) for v in net_arch.values())
    if isinstance(net_arch, (list, tuple)):
        return sum(_net_widths(v) if not isinstance(v, int) else v for v in net_arch)
    return 0


def check_memory_of(run: RunConfig, obs_space: gym.Space, action_space: gym.Space) -> None:
    """Refuse buffers and batches that cannot fit in memory, before the run folder exists
    (:func:`zoo.config.check_memory`, the one bound).

    Per transition, SB3's layout: observations and next observations (one copy with
    ``optimize_memory_usage``), actions, rewards, dones and timeouts. A replay buffer holds
    ``buffer_size`` of them, a rollout buffer ``n_steps x n_envs``; each gradient step
    gathers ``batch_size`` of them (at most the rollout for on-policy algorithms) and runs
    the network on them: float32 activations of every layer, kept for the backward pass.
    """

    def count(key: str) -> int:
        value = run.body.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    parts = obs_space.spaces.values() if isinstance(obs_space, gym.spaces.Dict) else [obs_space]
    # SB3 buffers only spaces with a shape and dtype (Box, Discrete, MultiBinary, ...)
    sizes = [int(np.prod(cast("tuple[int, ...]", s.shape))) for s in parts]
    itemsizes = [cast("np.dtype[Any]", s.dtype).itemsize for s in parts]
    obs = sum(n * size for n, size in zip(sizes, itemsizes, strict=True))
    obs_values = sum(sizes)
    copies = 1 if run.body.get("optimize_memory_usage") else 2
    per = copies * obs + max(int(np.prod(action_space.shape or (1,))), 1) * 8 + 3 * 4
    replay, rollout = count("buffer_size"), count("n_steps") * max(count("n_envs"), 1)
    batch = min(count("batch_size"), rollout) if rollout else count("batch_size")
    net_arch = (run.body.get("policy_kwargs") or {}).get("net_arch")
    activations = batch * (obs_values + _net_widths(net_arch)) * 4 * 3  # forward, grads
    for need, what, fix in (
        (replay * per, f"a replay buffer of {replay:,} transitions", "lower buffer_size"),
        (rollout * per, f"a rollout buffer of {rollout:,} steps", "lower n_steps or n_envs"),
        (
            (replay + rollout + batch) * per + activations,
            f"a batch of {batch:,} transitions with its buffer",
            "lower batch_size",
        ),
    ):
        check_memory(run.name, need, what, fix)
