"""Tests for zoo.trainers.es_rollout: a flat-parameter policy run's policy and episodes,
built from its config. (What the trainers do with them: test_cmaes_trainer.py,
test_apg_trainer.py, test_dagger_trainer.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

import zoo
from zoo.trainers.es_rollout import rollout_spec


def test_train_env_kwargs_go_to_the_training_rollouts_only() -> None:
    overrides = {"train_env_kwargs": {"upright_share": 1.0}}
    (config,) = zoo.load_runs("cartpole_fnn", budget="smoke", overrides=overrides)
    train_env = rollout_spec(config, training=True).make_vector_env(64)
    test_env = rollout_spec(config).make_vector_env(64)
    cos_train = train_env.reset(seed=list(range(64)))[0][:, 2]
    cos_test = test_env.reset(seed=list(range(64)))[0][:, 2]
    assert (cos_train >= 0).all() and (cos_test <= 0).all()  # Harder starts hang below


def test_a_policy_whose_own_check_refuses_its_sizes_is_a_config_error(tmp_path: Path) -> None:
    # issue 68, item 8: `hidden: [1000000, 1000000]` was a ValueError from the policy, built
    # for real after the meta-device count gave up: exit 1 with a traceback file
    import yaml

    from zoo.config import ConfigError, load_runs
    from zoo.trainers.es_rollout import count_parameters

    body = {"algo": "cmaes", "env": "attn_envs/CartPoleSwingUpHarder-v0", "policy": "fnn",
            "n_generations": 2, "population": 4,
            "policy_kwargs": {"hidden": [1_000_000, 1_000_000]}}  # fmt: skip
    (tmp_path / "es.yml").write_text(yaml.safe_dump({"es": body}))
    with pytest.raises(ConfigError, match="the policy does not build from its config: hidden"):
        count_parameters(load_runs(tmp_path / "es.yml")[0])
