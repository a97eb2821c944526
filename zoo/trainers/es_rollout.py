"""The policy and episodes of a flat-parameter policy run, built from its config: the ES
policies' short names, the policy recipe (``obs_dim`` / ``action_dim`` from the env), how its
episodes are played (:class:`~attn_policies.algorithms.es_eval.RolloutSpec`: vector env,
wrappers, action map, step cap), its size and warm start.

Shared by the trainers of such policies (``algo: cmaes``, ``apg``, ``dagger``) and by what
replays them (:mod:`zoo.record`, :mod:`zoo.analysis`, :mod:`zoo.pretrained`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from attn_policies.algorithms.es_eval import PolicyFactory, RolloutSpec
from zoo import factory
from zoo.config_checks import ConfigError, RunConfig, check_memory, nearest
from zoo.registry import resolve_function, resolve_module_builder
from zoo.trainers import base

ES_POLICIES: dict[str, str] = {
    "attention_neuron": "attn_policies.es_policies:AttentionNeuronPolicy",
    "attention_neuron_cartpole": "attn_policies.es_policies:AttentionNeuronPolicy.cartpole",
    "attention_neuron_ant": "attn_policies.es_policies:AttentionNeuronPolicy.ant",
    "fnn": "attn_policies.es_policies:FNNPolicy",
    "attention_agent": "attn_policies.patch_agents:AttentionAgent",
    "attention_neuron_voting": "attn_policies.patch_agents:AttentionNeuronVotingAgent",
}


class WrappedVectorEnv:
    """Picklable ``n -> SyncVectorEnv`` of ``gym.make(env_id) + wrappers`` (for workers)."""

    def __init__(
        self,
        env_id: str,
        env_kwargs: dict[str, Any],
        wrappers: list[tuple[str, dict[str, Any]]],
        extra: Sequence[Callable[[gym.Env], gym.Env]] = (),
    ) -> None:
        self.env_id, self.env_kwargs, self.wrappers, self.extra = (
            env_id,
            env_kwargs,
            wrappers,
            extra,
        )

    def _one(self) -> gym.Env:
        if self.env_id.startswith("ALE/"):
            import ale_py

            gym.register_envs(ale_py)
        from attn_envs.registration import make_args  # "attn_envs:" ids: spawned workers too

        make_id, make_kwargs = make_args(self.env_id, self.env_kwargs)
        env = gym.make(make_id, **make_kwargs)
        for cls, kwargs in factory.resolve_wrappers(self.wrappers):
            env = cls(env, **kwargs)
        for wrap in self.extra:
            env = wrap(env)
        return env

    def __call__(self, n: int) -> gym.vector.VectorEnv:
        return gym.vector.SyncVectorEnv([self._one for _ in range(n)])


def _policy_target(run: RunConfig) -> str:
    name = run.body.get("policy", "")
    if name in ES_POLICIES:
        return ES_POLICIES[name]
    if "." in name or ":" in name:
        return name
    raise ConfigError(
        f"{run.name}: unknown ES policy {name!r}.{nearest(name, ES_POLICIES)} Known: "
        f"{', '.join(ES_POLICIES)}, or an import path"
    )


def run_spaces(run: RunConfig) -> tuple[gym.Space, gym.Space]:
    """Observation and action spaces of the run's env with its wrappers."""
    env = WrappedVectorEnv(
        run.body["env"],
        dict(run.body.get("env_kwargs") or {}),
        factory.wrapper_specs(run.body.get("env_wrapper")),
    )._one()
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def policy_builder(run: RunConfig) -> Callable[..., nn.Module]:
    """The policy class or classmethod preset; anything but a torch module is refused
    before it is called (``policy: os:system`` never runs)."""
    try:
        return resolve_module_builder(_policy_target(run), "policy", ES_POLICIES.values())
    except ValueError as err:
        raise ConfigError(f"{run.name}: 'policy': {err}") from None


def policy_factory(run: RunConfig) -> PolicyFactory:
    """The run's policy recipe; ``obs_dim``/``action_dim`` come from the env when accepted."""
    target = _policy_target(run)
    builder = policy_builder(run)
    kwargs = dict(run.body.get("policy_kwargs") or {})
    params = inspect.signature(builder).parameters
    if {"obs_dim", "action_dim"} & set(params) - set(kwargs):
        obs_space, action_space = run_spaces(run)
        if "obs_dim" in params and "obs_dim" not in kwargs:
            kwargs["obs_dim"] = int(np.prod(cast("tuple[int, ...]", obs_space.shape)))
        if "action_dim" in params and "action_dim" not in kwargs:
            n = action_space.n if isinstance(action_space, gym.spaces.Discrete) else None
            kwargs["action_dim"] = int(n or np.prod(cast("tuple[int, ...]", action_space.shape)))
    return PolicyFactory(target, kwargs)


def rollout_spec(
    run: RunConfig,
    extra_wrappers: Sequence[Callable[[gym.Env], gym.Env]] = (),
    training: bool = False,
) -> RolloutSpec:
    """How the run's episodes are played: policy, (vector) env, action map, step cap.

    ``training`` adds ``train_env_wrapper`` (e.g. E6's early end of hopeless episodes) and
    ``train_env_kwargs`` (over ``env_kwargs``).
    """
    env_id = run.body["env"]
    wrappers = factory.wrapper_specs(run.body.get("env_wrapper"))
    if training:
        wrappers += factory.wrapper_specs(run.body.get("train_env_wrapper"), "train_env_wrapper")
    env_kwargs = dict(run.body.get("env_kwargs") or {})
    if training:
        env_kwargs |= run.body.get("train_env_kwargs") or {}
    action_fn = run.body.get("action_fn")
    common: dict[str, Any] = {
        "policy_fn": policy_factory(run),
        "max_steps": run.body.get("max_episode_steps"),
        "action_fn": resolve_function(action_fn, "action_fn") if action_fn else None,
        "torch_threads": 1,
    }
    if not wrappers and not extra_wrappers and factory.env_spec(env_id).vector_entry_point:
        return RolloutSpec(env_id=f"attn_envs:{env_id}", env_kwargs=env_kwargs, **common)
    return RolloutSpec(
        vector_env_fn=WrappedVectorEnv(env_id, env_kwargs, wrappers, tuple(extra_wrappers)),
        **common,
    )


def count_parameters(run: RunConfig) -> int | None:
    """The run's policy size, built on torch's ``meta`` device (shapes only, no memory: a
    ``hidden_dim`` of 10**9 costs nothing here); ``None`` for a policy that cannot be built
    there (it is then built for real, and checked, by the steps that follow)."""
    try:
        with torch.device("meta"):
            policy = policy_factory(run)()
    except ConfigError:
        raise
    except (TypeError, ValueError) as err:  # the policy's own check of the config's values
        text = " ".join(str(err).split())[:200]
        raise ConfigError(f"{run.name}: the policy does not build from its config: {text}") from err
    except Exception:
        return None
    return sum(p.numel() for p in policy.parameters())


def check_policy_memory(run: RunConfig, copies: int = 4) -> None:
    """Refuse a policy too large for memory before it is built (gradient trainers, APG and
    DAgger): ``copies`` float32 copies of its parameters (weights, gradients, Adam's two
    moments)."""
    n = count_parameters(run)
    if n is not None:
        what = f"a policy of {n:,} parameters"
        check_memory(run.name, n * 4 * copies, what, "lower the policy's size")


def init_vector(run: RunConfig) -> np.ndarray | None:
    """The flat parameters ``init`` names (a run folder's best model, or a state dict file of
    the run's policy), read as tensors only; ``None`` without ``init``."""
    if not run.body.get("init"):
        return None
    policy = base.load_init(policy_factory(run)(), run.body["init"], run.name, "policy")
    flat = cast(Any, policy).get_flat_parameters()  # ES policies mix in FlatParameters
    return flat.detach().numpy().astype(np.float64)


def apply_policy_kwargs(policy: nn.Module, settings: dict[str, Any] | None) -> None:
    """Set test-time attributes (e.g. ``output_scale``) on every submodule that has them."""
    for key, value in (settings or {}).items():
        owners = [m for m in policy.modules() if key in vars(m)]
        if not owners:
            raise ValueError(f"{type(policy).__name__} has no test-time setting {key!r}")
        for module in owners:
            setattr(module, key, value)
