"""Tests for zoo.trainers.cmaes_trainer (``algo: cmaes``: E3 CartPoleSwingUpHarder, E6
CarRacing)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from _metrics import metrics_match_own_table, same_metrics

import zoo
from attn_envs import DuplicateObservation
from attn_policies.es_policies import AttentionNeuronPolicy, FNNPolicy
from zoo.config import ConfigError
from zoo.trainers import cmaes_trainer, get_trainer

ROOT = Path(__file__).resolve().parents[1]
FITNESS = ("generation", "env_steps", "fitness_best", "fitness_mean", "fitness_worst", "sigma")


def progress(path: Path) -> list[dict[str, str]]:
    with (path / "progress.csv").open() as fh:
        return [{k: row[k] for k in (*FITNESS, "test_mean")} for row in csv.DictReader(fh)]


def test_cartpole_pi_smoke_run_folder_and_evaluation(tmp_path: Path) -> None:
    run = zoo.train("cartpole_pi_x0", budget="smoke", root=tmp_path)
    body = run.config.body
    files = {p.name for p in run.path.iterdir()}
    assert {"model.pt", "best_model.pt", "progress.csv", "evaluations.json", "eval.json"} <= files
    assert {p.name for p in (run.path / "checkpoints").iterdir()} == {
        "cma_state-2.npz",
        "solutions-2.pt",
        "trainer.json",
    }  # only the last generation's files are kept
    rows = progress(run.path)
    assert [int(r["generation"]) for r in rows] == [1, 2]
    assert all(r["test_mean"] for r in rows)  # eval.freq 1: tested every generation
    metrics_match_own_table(run.path, ("fitness/best", "cmaes/sigma", "eval/test/mean_reward"))
    assert run.status["generation"] == body["n_generations"]
    assert run.status["num_timesteps"] == int(rows[-1]["env_steps"]) > 0
    assert list((run.path / "logs").glob("events.out.tfevents.*"))

    policy = run.model()
    assert isinstance(policy, AttentionNeuronPolicy) and policy.num_parameters == 913
    state = torch.load(run.path / "model.pt", weights_only=True)
    assert set(state) == set(policy.state_dict())

    result = run.eval
    assert result["n_episodes"] == body["eval"]["final_episodes"] == 4
    lengths = result["episodes"]["deterministic"]["lengths"]
    assert len(lengths) == 4 and max(lengths) <= body["max_episode_steps"]
    again = zoo.evaluate(run.path)  # `attn-zoo evaluate` reproduces eval.json
    assert again["policies"] == result["policies"]


def test_keep_best_checks_and_the_test_play_disjoint_seeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The favourite is checked on eval.seed, eval.seed + 1, ...; eval.json's test plays
    eval.test_seed, ...; the two never meet (a check on the test seeds fails here)."""
    from attn_policies.algorithms.es_eval import BatchedEvaluator

    played: list[list[int]] = []
    evaluate = BatchedEvaluator.evaluate

    def spy(self: BatchedEvaluator, solutions: np.ndarray, seeds: Any, **kw: Any) -> np.ndarray:
        if self.spec.max_steps != 1 and len(solutions) == 1:  # a check or the test (not the
            played.append([int(s) for s in seeds])  # one-step probe, not a generation)
        return evaluate(self, solutions, seeds, **kw)

    monkeypatch.setattr(BatchedEvaluator, "evaluate", spy)
    run = zoo.train("cartpole_pi_article", budget="smoke", root=tmp_path)
    cfg = run.config.eval
    checks = [s for seeds in played[:-2] for s in seeds]
    assert played[:-2] and set(checks) == set(range(cfg.seed, cfg.seed + cfg.n_episodes))
    tests = range(cfg.test_seed, cfg.test_seed + cfg.final_episodes)
    assert played[-2:] == [list(tests)] * 2  # the best and the last model
    assert set(checks).isdisjoint(tests)


class InterruptAt:
    """A generation callback that raises KeyboardInterrupt (as Ctrl-C would)."""

    def __init__(self, generation: int) -> None:
        self.generation = generation

    def __call__(self, record: dict[str, Any]) -> bool:
        if record["generation"] >= self.generation:
            raise KeyboardInterrupt
        return True


LONGER = {"n_generations": 4, "eval.freq": 2}


def test_interrupt_and_resume_continue_bit_for_bit(tmp_path: Path) -> None:
    straight = zoo.train("cartpole_pi_x0", budget="smoke", overrides=LONGER, root=tmp_path / "a")
    with pytest.raises(KeyboardInterrupt):
        zoo.train(
            "cartpole_pi_x0",
            budget="smoke",
            overrides=LONGER,
            root=tmp_path / "b",
            callbacks=[InterruptAt(3)],
        )
    (path,) = (tmp_path / "b" / "cartpole_pi_x0").iterdir()
    status = json.loads((path / "status.json").read_text())
    assert (status["state"], status["generation"]) == ("interrupted", 3)
    assert not (path / "model.pt").exists()

    resumed = zoo.resume(path)
    assert resumed.status["state"] == "finished"
    assert progress(resumed.path) == progress(straight.path)
    assert same_metrics(resumed.path, straight.path)
    for name in ("model.pt", "best_model.pt"):
        a = torch.load(straight.path / name, weights_only=True)
        b = torch.load(resumed.path / name, weights_only=True)
        assert all(torch.equal(a[k], b[k]) for k in a), name
    assert resumed.eval["policies"] == straight.eval["policies"]


def test_pgpe_run_from_a_warm_start_resumes_bit_for_bit(tmp_path: Path) -> None:
    # E3's PGPE config: the same loop as CMA-ES, started at the committed CMA-ES agent
    warm = {**LONGER, "init": str(ROOT / "results/cartpole_pi/pi_warm_T300")}
    straight = zoo.train("cartpole_pi_pgpe", budget="smoke", overrides=warm, root=tmp_path / "a")
    assert straight.config.body["es"] == "pgpe"
    assert {p.name for p in (straight.path / "checkpoints").iterdir()} == {
        "pgpe_state-4.npz",
        "solutions-4.pt",
        "trainer.json",
    }
    with pytest.raises(KeyboardInterrupt):
        zoo.train("cartpole_pi_pgpe", budget="smoke", overrides=warm, root=tmp_path / "b",
                  callbacks=[InterruptAt(3)])  # fmt: skip
    (path,) = (tmp_path / "b" / "cartpole_pi_pgpe").iterdir()
    resumed = zoo.resume(path)
    assert progress(resumed.path) == progress(straight.path)
    a = torch.load(straight.path / "model.pt", weights_only=True)
    b = torch.load(resumed.path / "model.pt", weights_only=True)
    assert all(torch.equal(a[k], b[k]) for k in a)
    start = torch.load(ROOT / "results/cartpole_pi/pi_warm_T300/best_model.pt", weights_only=True)
    moved = [float((a[k] - start[k]).abs().max()) for k in a]
    assert 0 < max(moved) < 1.0  # it searched around the warm start, not from zeros


def test_killed_before_the_first_checkpoint_resumes_from_generation_zero(tmp_path: Path) -> None:
    straight = zoo.train("cartpole_fnn", budget="smoke", root=tmp_path / "a")
    with pytest.raises(KeyboardInterrupt):
        zoo.train("cartpole_fnn", budget="smoke", root=tmp_path / "b", callbacks=[InterruptAt(1)])
    (path,) = (tmp_path / "b" / "cartpole_fnn").iterdir()
    for file in (path / "checkpoints").iterdir():  # as if killed before any checkpoint
        file.unlink()
    resumed = zoo.resume(path)
    assert resumed.status["state"] == "finished"
    a = torch.load(straight.path / "model.pt", weights_only=True)
    b = torch.load(resumed.path / "model.pt", weights_only=True)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_resume_reports_the_checkpoint_generation_when_the_status_lags(tmp_path: Path) -> None:
    # A stop between saving the checkpoint and writing the status leaves the status one
    # generation behind; resuming a run that has nothing left must still say where it is.
    with pytest.raises(KeyboardInterrupt):
        zoo.train("cartpole_fnn", budget="smoke", overrides=LONGER, root=tmp_path,
                  callbacks=[InterruptAt(2)])  # fmt: skip
    (path,) = (tmp_path / "cartpole_fnn").iterdir()
    status_file = path / "status.json"
    status = json.loads(status_file.read_text())
    status_file.write_text(json.dumps({**status, "generation": 1}))
    config = path / "config.yml"
    body = yaml.safe_load(config.read_text())
    body["cartpole_fnn"]["n_generations"] = 2
    config.write_text(yaml.safe_dump(body))
    resumed = zoo.resume(path)
    assert (resumed.status["state"], resumed.status["generation"]) == ("finished", 2)


def test_tampered_checkpoint_is_one_config_error(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        zoo.train("cartpole_fnn", budget="smoke", root=tmp_path, callbacks=[InterruptAt(1)])
    (path,) = (tmp_path / "cartpole_fnn").iterdir()
    (state,) = (path / "checkpoints").glob("cma_state-*.npz")
    state.write_bytes(state.read_bytes()[:100])
    status = (path / "status.json").read_bytes()
    with pytest.raises(ConfigError, match=r"cma_state-1\.npz: not a readable CMA-ES state"):
        zoo.resume(path)
    assert (path / "status.json").read_bytes() == status  # refused before any write


def test_process_pool_run_matches_batched_run(tmp_path: Path) -> None:
    batched = zoo.train("cartpole_fnn", budget="smoke", root=tmp_path / "a")
    pool = zoo.train(
        "cartpole_fnn",
        budget="smoke",
        overrides={"evaluator": "processes", "n_workers": 2},
        root=tmp_path / "b",
    )
    assert isinstance(pool.model(), FNNPolicy)
    assert progress(pool.path) == progress(batched.path)


def test_duplicated_inputs_with_half_output_scale_reproduce_the_agent(tmp_path: Path) -> None:
    run = zoo.train("cartpole_pi_x0", budget="smoke", root=tmp_path)
    trainer = get_trainer("cmaes")
    kwargs: dict[str, Any] = {"n_episodes": 3, "seed": 7}
    plain = trainer.episode_returns(run.path, run.config, **kwargs)
    doubled = [lambda env: DuplicateObservation(env, copies=2)]
    scaled = trainer.episode_returns(
        run.path, run.config, wrappers=doubled, policy_kwargs={"output_scale": 0.5}, **kwargs
    )
    unscaled = trainer.episode_returns(run.path, run.config, wrappers=doubled, **kwargs)
    np.testing.assert_allclose(scaled["rewards"], plain["rewards"], rtol=1e-4)
    assert not np.allclose(unscaled["rewards"], plain["rewards"], rtol=1e-4)
    with pytest.raises(ValueError, match="no test-time setting 'temperature'"):
        trainer.episode_returns(run.path, run.config, policy_kwargs={"temperature": 2}, **kwargs)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"policy": "attention_nueron"}, "Did you mean 'attention_neuron'"),
        ({"evaluator": "thread"}, "evaluator must be one of"),
        ({"population": 1}, "population.* >= 2"),
        ({"action_fn": "numpy:nope"}, "'action_fn'"),
        ({"n_generations": None}, "missing required key 'n_generations'"),
        ({"es": "pgp"}, "es must be one of cmaes, pgpe, got 'pgp'. Did you mean 'pgpe'"),
        ({"es": "pgpe", "pgpe": {"center_lr": 0.1}}, "Did you mean 'center_learning_rate'"),
        ({"es": "pgpe", "cma_options": {"CMA_diagonal": True}}, "'cma_options' are pycma's"),
        ({"pgpe": {"momentum": 0.5}}, "'pgpe' settings need es: pgpe"),
        ({"es": "pgpe", "population": 5}, "pgpe: .*population must be even"),
        ({"es": "pgpe", "pgpe": {"optimizer": "sgd"}}, "optimizer must be 'adam' or 'clipup'"),
    ],
)
def test_config_errors(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    body = {
        "algo": "cmaes",
        "env": "attn_envs/CartPoleSwingUpHarder-v0",
        "policy": "fnn",
        "n_generations": 1,
        "population": 4,
        "repeats": 1,
        **change,
    }
    body = {k: v for k, v in body.items() if v is not None}
    config = tmp_path / "es.yml"
    config.write_text(yaml.safe_dump({"es": body}))
    with pytest.raises(ConfigError, match=message):
        zoo.train(config, root=tmp_path)


def test_policy_that_does_not_fit_the_env_is_caught_before_training(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not fit the env"):
        zoo.train(
            "cartpole_fnn",
            budget="smoke",
            overrides={"policy_kwargs": {"hidden": 16, "obs_dim": 7}},
            root=tmp_path,
        )
    assert not (tmp_path / "cartpole_fnn").exists()


def test_train_env_wrapper_applies_to_fitness_rollouts_only(tmp_path: Path) -> None:
    run = zoo.train(
        "cartpole_fnn",
        budget="smoke",
        overrides={"train_env_wrapper": [{"TimeLimit": {"max_episode_steps": 5}}]},
        root=tmp_path,
    )
    body = run.config.body
    assert run.status["num_timesteps"] <= 2 * body["population"] * body["repeats"] * 5
    assert max(run.eval["episodes"]["deterministic"]["lengths"]) > 5


def test_init_warm_starts_from_a_run_and_refuses_a_misfit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attn_policies.algorithms import cmaes as cma_module

    teacher = zoo.train("cartpole_fnn", budget="smoke", root=tmp_path / "a")
    x0 = teacher.model().get_flat_parameters().detach().numpy().astype(np.float64)
    means: list[np.ndarray] = []
    real_init = cma_module.CMAES.__init__

    def spy(self: Any, dim: int, config: Any) -> None:
        real_init(self, dim, config)
        means.append(np.asarray(self.es.mean).copy())

    monkeypatch.setattr(cma_module.CMAES, "__init__", spy)
    zoo.train(
        "cartpole_fnn",
        budget="smoke",
        overrides={"init": str(teacher.path), "sigma0": 0.01},
        root=tmp_path / "b",
        callbacks=[lambda record: False],  # one generation is enough
    )
    np.testing.assert_array_equal(means[-1], x0)  # the search starts at the given model

    with pytest.raises(ConfigError, match=r"'init'.*does not exist"):
        zoo.train(
            "cartpole_fnn",
            budget="smoke",
            overrides={"init": str(tmp_path / "x")},
            root=tmp_path / "d",
        )
    with pytest.raises(ConfigError, match=r"'init'.*does not fit the run's policy"):
        zoo.train(
            "cartpole_fnn",
            budget="smoke",
            overrides={"init": str(teacher.path), "policy_kwargs": {"hidden": 8}},
            root=tmp_path / "c",
        )
    assert not (tmp_path / "c").exists() and not (tmp_path / "d").exists()


def test_warm_start_is_tested_before_the_search(tmp_path: Path) -> None:
    teacher = zoo.train("cartpole_fnn", budget="smoke", root=tmp_path / "a")
    x0 = teacher.model().get_flat_parameters().detach().numpy()
    run = zoo.train(
        "cartpole_fnn",
        budget="smoke",
        overrides={"init": str(teacher.path), "sigma0": 3.0},
        root=tmp_path / "b",
    )
    evaluations = json.loads((run.path / "evaluations.json").read_text())
    assert [e["generation"] for e in evaluations] == [0, 1, 2]
    assert evaluations[0]["env_steps"] == 0
    start = cmaes_trainer.CMAESZooTrainer().episode_returns(
        teacher.path,
        teacher.config,
        n_episodes=run.config.eval.n_episodes,
        seed=run.config.eval.seed,
    )
    assert evaluations[0]["test_mean"] == pytest.approx(np.mean(start["rewards"]))
    best = run.model().get_flat_parameters().detach().numpy()
    start_wins = evaluations[0]["test_mean"] >= max(e["test_mean"] for e in evaluations[1:])
    assert np.array_equal(best, x0) == start_wins

    with pytest.raises(KeyboardInterrupt):  # stopped after generation 1's test
        zoo.train(
            "cartpole_fnn",
            budget="smoke",
            overrides={"init": str(teacher.path), "sigma0": 3.0},
            root=tmp_path / "c",
            callbacks=[InterruptAt(1)],
        )
    (path,) = (tmp_path / "c" / "cartpole_fnn").iterdir()
    resumed = zoo.resume(path)  # no second start test
    assert json.loads((resumed.path / "evaluations.json").read_text()) == evaluations


def test_interrupted_run_with_only_a_best_model_evaluates(tmp_path: Path) -> None:
    run = zoo.train("cartpole_fnn", budget="smoke", root=tmp_path)
    (run.path / "model.pt").unlink()  # as after Ctrl-C: periodic tests kept best_model.pt only
    result = zoo.evaluate(run.path, n_episodes=2)
    assert result["model"] == "best_model.pt" and "last_model" not in result


def test_train_env_kwargs_apply_to_fitness_rollouts_only(tmp_path: Path) -> None:
    """The fitness rollouts start upright (their spec: test_es_rollout.py), so they score
    above the tests, which start hanging below."""
    overrides = {"train_env_kwargs": {"upright_share": 1.0}}
    run = zoo.train("cartpole_fnn", budget="smoke", overrides=overrides, root=tmp_path)
    assert run.config.body["train_env_kwargs"] == {"upright_share": 1.0}
    fitness = [float(r["fitness_best"]) for r in progress(run.path)]
    assert min(fitness) > run.eval["policies"]["deterministic"]["mean_reward"]


def test_resume_through_a_linked_logs_folder_writes_only_inside_the_run(tmp_path: Path) -> None:
    # issue 68, item 2: tensorboard(path / "logs") wrote its events through a linked logs/
    with pytest.raises(KeyboardInterrupt):
        zoo.train("cartpole_fnn", budget="smoke", root=tmp_path, callbacks=[InterruptAt(1)])
    (path,) = (tmp_path / "cartpole_fnn").iterdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "notes.txt").write_text("precious\n")
    shutil.rmtree(path / "logs", ignore_errors=True)
    (path / "logs").symlink_to(victim)
    zoo.resume(path)
    assert sorted(p.name for p in victim.iterdir()) == ["notes.txt"]
    assert not (path / "logs").is_symlink() and list((path / "logs").glob("events.out.*"))
