"""Tests for zoo.trainers.contract (the Trainer protocol and the algo registry) and the lookup
of zoo.trainers.get_trainer over it."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

import pytest

from zoo.config_checks import ConfigError
from zoo.trainers import MODULES, SB3_ALGOS, get_episode_trainer, get_trainer, keys
from zoo.trainers.contract import (
    EpisodeTrainer,
    ResumeChecker,
    Trainer,
    TrustChecker,
    register,
    registered,
    registry,
)

TRAIN = ["self", "handle", "callbacks", "progress_bar", "resume"]
EPISODES = ["self", "path", "run", "wrappers", "n_episodes", "seed", "which", "policy_kwargs"]


def all_registered() -> dict[str, type]:
    for module in set(MODULES.values()):
        importlib.import_module(f"zoo.trainers.{module}")
    return dict(registry())


def test_each_module_registers_exactly_the_algos_listed_for_it() -> None:
    found = all_registered()
    assert set(found) == set(MODULES)
    for algo, module in MODULES.items():
        assert found[algo].__module__ == f"zoo.trainers.{module}", algo
        assert type(get_trainer(algo)) is found[algo]


@pytest.mark.parametrize("algo", sorted(MODULES))
def test_every_trainer_keeps_the_contract(algo: str) -> None:
    trainer = get_trainer(algo)
    assert isinstance(trainer, Trainer)
    assert list(inspect.signature(type(trainer).train).parameters) == TRAIN
    if algo != "classifier":  # robustness sweeps replay episodes of every agent that acts
        assert isinstance(trainer, EpisodeTrainer)
        params = list(inspect.signature(type(trainer).episode_returns).parameters)
        assert params[: len(EPISODES)] == EPISODES


@pytest.mark.parametrize("algo", sorted(MODULES))
def test_a_trainers_keys_are_its_config_models(algo: str) -> None:
    """Validation knows the keys the model declares, in its order (SB3 adds the algorithm's
    hyper-parameters after them)."""
    trainer = get_trainer(algo)
    table = keys.key_types(trainer.config_model)
    accepted = trainer.config_keys({"algo": algo})
    assert list(accepted)[: len(table)] == list(table)
    assert {k: accepted[k] for k in table} == table
    if algo not in SB3_ALGOS:
        assert accepted == table


def test_import_paths_go_to_the_sb3_trainer_and_unknown_algos_are_config_errors() -> None:
    sb3 = type(get_trainer("ppo"))
    assert type(get_trainer("sb3_contrib:TRPO")) is sb3 and registered(SB3_ALGOS[0]) is sb3
    with pytest.raises(ConfigError, match=r"unknown algo 'cmaez'.*Did you mean 'cmaes'"):
        get_trainer("cmaez")


def test_an_algo_cannot_be_registered_twice() -> None:
    all_registered()

    class Other:
        pass

    with pytest.raises(ValueError, match="'cmaes' is registered twice"):
        register("cmaes")(Other)  # type: ignore[type-var]
    assert registered("cmaes") is not Other


def test_the_registry_loads_no_trainer_module() -> None:
    """zoo.config imports it at module level: no trainer, torch or SB3 comes with it."""
    code = (
        "import sys, zoo.config; "
        "print(sorted(m for m in sys.modules if m.startswith('zoo.trainers.') "
        "or m in ('torch', 'stable_baselines3')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['zoo.trainers.contract']"


def test_only_trainers_of_acting_agents_replay_episodes() -> None:
    assert isinstance(get_episode_trainer("cmaes"), EpisodeTrainer)
    with pytest.raises(ConfigError, match="'classifier' trains no agent that acts"):
        get_episode_trainer("classifier")


def test_the_bc_trainer_checks_trusted_files() -> None:
    assert isinstance(get_trainer("bc"), TrustChecker)
    assert not isinstance(get_trainer("cmaes"), TrustChecker)


@pytest.mark.parametrize("algo", ["ppo", "cmaes", "apg", "dagger"])
def test_checkpointing_trainers_check_a_resume_before_writing(algo: str) -> None:
    assert isinstance(get_trainer(algo), ResumeChecker)
