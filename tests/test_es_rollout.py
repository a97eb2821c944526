"""Tests for zoo.trainers.es_rollout: a flat-parameter policy run's policy and episodes,
built from its config. (What the trainers do with them: test_cmaes_trainer.py,
test_apg_trainer.py, test_dagger_trainer.py.)"""

from __future__ import annotations

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
