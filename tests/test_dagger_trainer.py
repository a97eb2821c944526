"""Tests for zoo.trainers.dagger_trainer (``algo: dagger``: E3 warm start by behaviour cloning)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _metrics import metrics_match_own_table, same_metrics

import zoo
from attn_policies.es_policies import AttentionNeuronPolicy
from zoo.config import ConfigError
from zoo.trainers import dagger_trainer, es_rollout
from zoo.trainers.dagger_trainer import load_teacher


@pytest.fixture(scope="module")
def teacher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return zoo.train("cartpole_fnn", budget="smoke", root=tmp_path_factory.mktemp("fnn")).path


def rounds(path: Path) -> list[dict[str, str]]:
    with (path / "progress.csv").open() as fh:
        return list(csv.DictReader(fh))


def state(file: Path) -> dict[str, torch.Tensor]:
    return torch.load(file, weights_only=True)


def test_smoke_bc_then_warm_cmaes_from_it(teacher: Path, tmp_path: Path) -> None:
    bc = zoo.train(
        "cartpole_pi_dagger", budget="smoke", overrides={"teacher": str(teacher)}, root=tmp_path
    )
    files = {p.name for p in bc.path.iterdir()}
    assert {"model.pt", "best_model.pt", "progress.csv", "evaluations.json", "eval.json"} <= files
    assert [(r["round"], r["beta"]) for r in rounds(bc.path)] == [("1", "1.0"), ("2", "0.5")]
    assert all(r["test_mean"] and float(r["loss"]) > 0 for r in rounds(bc.path))
    assert bc.status["round"] == 2 and bc.status["num_timesteps"] > 0
    metrics_match_own_table(bc.path, ("train/loss", "dagger/beta", "eval/test/mean_reward"))
    student = bc.model()
    assert isinstance(student, AttentionNeuronPolicy) and student.num_parameters == 913
    assert bc.eval["n_episodes"] == 4
    assert zoo.evaluate(bc.path)["policies"] == bc.eval["policies"]

    overrides = {"init": str(bc.path)}
    (warm_config,) = zoo.load_runs("cartpole_pi_warm_search", budget="smoke", overrides=overrides)
    x0 = es_rollout.init_vector(warm_config)
    best = state(bc.path / "best_model.pt")
    flat = torch.cat([best[k].reshape(-1) for k in student.state_dict()]).numpy()
    np.testing.assert_array_equal(x0, flat.astype(np.float64))  # CMA-ES starts at the student
    warm = zoo.train("cartpole_pi_warm_search", budget="smoke", overrides=overrides, root=tmp_path)
    assert warm.status["state"] == "finished" and warm.status["generation"] == 2


class InterruptAt:
    def __init__(self, round_: int) -> None:
        self.round = round_

    def __call__(self, record: dict[str, Any]) -> bool:
        if record["round"] >= self.round:
            raise KeyboardInterrupt
        return True


def test_interrupt_and_resume_continue_bit_for_bit(teacher: Path, tmp_path: Path) -> None:
    overrides = {"teacher": str(teacher), "n_rounds": 3, "keep_rounds": 2}
    straight = zoo.train(
        "cartpole_pi_dagger", budget="smoke", overrides=overrides, root=tmp_path / "a"
    )
    with pytest.raises(KeyboardInterrupt):
        zoo.train(
            "cartpole_pi_dagger",
            budget="smoke",
            overrides=overrides,
            root=tmp_path / "b",
            callbacks=[InterruptAt(2)],
        )
    (path,) = (tmp_path / "b" / "cartpole_pi_dagger").iterdir()
    assert json.loads((path / "status.json").read_text())["state"] == "interrupted"
    assert not (path / "model.pt").exists()
    assert json.loads((path / "checkpoints" / "trainer.json").read_text())["round"] == 2
    seen: list[int] = []
    resumed = zoo.resume(path, callbacks=[lambda record: seen.append(record["round"])])
    assert resumed.status["state"] == "finished"
    assert seen == [3]  # only the round after the checkpoint ran again
    drop = ("seconds",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in rounds(resumed.path)] == [
        {k: v for k, v in r.items() if k not in drop} for r in rounds(straight.path)
    ]
    assert same_metrics(resumed.path, straight.path)
    for name in ("model.pt", "best_model.pt"):
        a, b = state(straight.path / name), state(resumed.path / name)
        assert all(torch.equal(a[k], b[k]) for k in a), name


@pytest.mark.parametrize(
    "folder, message",
    [
        ("nowhere", r"no run folder .*nowhere; train it first"),
        ("pretrained/ant_mlp", r"no run folder .*make it with `attn-zoo import <the authors'"),
        ("empty", r".*empty is not a run folder: it has no config\.yml"),
    ],
)
def test_bad_teacher_is_one_config_error_and_nothing_written(
    tmp_path: Path, folder: str, message: str
) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=rf"cartpole_pi_dagger: 'teacher': {message}") as err:
        zoo.train(
            "cartpole_pi_dagger",
            budget="smoke",
            overrides={"teacher": str(tmp_path / folder)},
            root=tmp_path / "runs",
        )
    assert "\n" not in str(err.value)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "value, message",
    [(-1, r"DAggerConfig\.handover must be an int >= 0, got -1"), ("yes", r"'handover' .*")],
)
def test_bad_handover_is_one_config_error_and_nothing_written(
    teacher: Path, tmp_path: Path, value: object, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        zoo.train(
            "cartpole_pi_dagger",
            budget="smoke",
            overrides={"teacher": str(teacher), "handover": value},
            root=tmp_path / "runs",
        )
    assert "\n" not in str(err.value)
    assert not (tmp_path / "runs").exists()


BC_MODE = {
    "beta": "teacher",
    "collect_rounds": 2,
    "n_rounds": 4,
    "batch_episodes": 3,
    "prev_action_noise": 0.03,
    "collect_steps": 12,
}


def test_bc_mode_collects_then_trains_and_resumes_bit_for_bit(
    teacher: Path, tmp_path: Path
) -> None:
    overrides = {"teacher": str(teacher), **BC_MODE}
    straight = zoo.train(
        "cartpole_pi_dagger", budget="smoke", overrides=overrides, root=tmp_path / "a"
    )
    table = rounds(straight.path)
    assert [(r["beta"], r["loss"], r["test_mean"]) for r in table[:2]] == [("1.0", "nan", "")] * 2
    assert all(float(r["loss"]) > 0 and r["test_mean"] for r in table[2:])
    assert table[1]["env_steps"] == table[3]["env_steps"] == str(2 * 4 * 12)  # 2 x 4 x 12 steps
    assert [e["round"] for e in json.loads((straight.path / "evaluations.json").read_text())] == [
        3,
        4,
    ]
    metrics_match_own_table(straight.path, ("train/loss", "eval/test/mean_reward"))
    for stop in (1, 3):  # mid-collection, mid-training
        with pytest.raises(KeyboardInterrupt):
            zoo.train(
                "cartpole_pi_dagger",
                budget="smoke",
                overrides=overrides,
                root=tmp_path / str(stop),
                callbacks=[InterruptAt(stop)],
            )
        (path,) = (tmp_path / str(stop) / "cartpole_pi_dagger").iterdir()
        resumed = zoo.resume(path)
        drop = ("seconds",)
        assert [{k: v for k, v in r.items() if k not in drop} for r in rounds(resumed.path)] == [
            {k: v for k, v in r.items() if k not in drop} for r in table
        ]
        for name in ("model.pt", "best_model.pt"):
            a, b = state(straight.path / name), state(resumed.path / name)
            assert all(torch.equal(a[k], b[k]) for k in a), (stop, name)


TINY_ANT_TEACHER = """
tiny_ant_teacher:
  description: a one-generation Ant FNN (28-32-8), only a teacher for the smoke test
  algo: cmaes
  env: pybullet_envs_gymnasium:AntBulletEnv-v0
  policy: fnn
  policy_kwargs: {obs_dim: 28, action_dim: 8, hidden: 32}
  n_generations: 1
  population: 2
  repeats: 1
  max_episode_steps: 5
  eval: {freq: 0, n_episodes: 1, final_episodes: 1}
  budgets: {full: {}}
"""


# 2504: the parameter count of the authors' ant_pi (attn-zoo import), whose architecture the
# small student copies
@pytest.mark.parametrize("name, params", [("ant_pi_bc", 2504), ("ant_pi_bc_large", 35240)])
def test_ant_bc_smoke_with_a_tiny_teacher(tmp_path: Path, name: str, params: int) -> None:
    pytest.importorskip("pybullet_envs_gymnasium")
    (tmp_path / "tiny.yml").write_text(TINY_ANT_TEACHER)
    tiny = zoo.train(tmp_path / "tiny.yml", root=tmp_path / "teacher")
    run = zoo.train(name, budget="smoke", overrides={"teacher": str(tiny.path)}, root=tmp_path)
    assert run.status["state"] == "finished" and run.status["round"] == 4
    table = rounds(run.path)
    assert [r["loss"] for r in table[:2]] == ["nan", "nan"] and table[3]["test_mean"]
    student = run.model()
    assert isinstance(student, AttentionNeuronPolicy) and student.num_parameters == params
    assert run.config.body["teacher"] == str(tiny.path)


@pytest.mark.parametrize("name", ["student-1.pt", "round-1.npz", "trainer.json"])
def test_tampered_checkpoint_is_one_config_error(teacher: Path, tmp_path: Path, name: str) -> None:
    with pytest.raises(KeyboardInterrupt):
        zoo.train(
            "cartpole_pi_dagger",
            budget="smoke",
            overrides={"teacher": str(teacher)},
            root=tmp_path,
            callbacks=[InterruptAt(1)],
        )
    (path,) = (tmp_path / "cartpole_pi_dagger").iterdir()
    file = path / "checkpoints" / name
    file.write_bytes(file.read_bytes()[:60])
    with pytest.raises(ConfigError, match="unreadable DAgger checkpoint"):
        zoo.resume(path)
    assert json.loads((path / "status.json").read_text())["state"] == "failed"


def test_teacher_of_another_algo_is_refused_before_loading(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'teacher': .*algo: double_dqn run; a teacher is"):
        zoo.load_runs(
            "cartpole_pi_dagger", budget="smoke", overrides={"teacher": "results/doorkey"}
        )


def test_teacher_temperature_softens_the_teachers_output(teacher: Path) -> None:
    (hard,) = zoo.load_runs(
        "cartpole_pi_dagger", budget="smoke", overrides={"teacher": str(teacher)}
    )
    (soft,) = zoo.load_runs(
        "cartpole_pi_dagger",
        budget="smoke",
        overrides={"teacher": str(teacher), "teacher_temperature": 4},
    )
    obs = torch.randn(32, 5) * 3
    with torch.no_grad():
        hard_net = load_teacher(hard)
        pre = hard_net.net[:-1](obs)  # the FNN's pre-activation
        torch.testing.assert_close(hard_net(obs)[0], torch.tanh(pre))
        torch.testing.assert_close(load_teacher(soft)(obs)[0], torch.tanh(pre / 4))
    for bad, message in ((0, "must be > 0"), (-2.0, "must be > 0")):
        with pytest.raises(ConfigError, match=message):
            zoo.train("cartpole_pi_dagger", budget="smoke",
                      overrides={"teacher": str(teacher), "teacher_temperature": bad})  # fmt: skip


def test_a_teacher_experiment_is_trained_into_the_run_folder_first(tmp_path: Path) -> None:
    run = zoo.train("cartpole_pi_dagger", budget="smoke", run_dir=tmp_path / "run")
    teacher = zoo.load(run.path / "teacher")
    assert teacher.config.experiment == "cartpole_fnn" and teacher.config.budget == "smoke"
    assert teacher.status["state"] == "finished"
    assert run.status["state"] == "finished"
    before = (teacher.path / "best_model.pt").stat().st_mtime_ns
    run_config = run.config  # a finished teacher there is reused, not trained again
    assert Path(dagger_trainer.teacher_folder(run_config, run.path)) == teacher.path
    assert (teacher.path / "best_model.pt").stat().st_mtime_ns == before


def test_a_teacher_experiment_mapping_is_checked_before_anything_is_written(
    tmp_path: Path,
) -> None:
    for teacher, message in (
        ({"budget": "smoke"}, "needs 'experiment'"),
        ({"experiment": "cartpole_fnn", "seed": 3}, "teacher takes"),
        ({"experiment": "no_such_experiment"}, "unknown experiment"),
    ):
        with pytest.raises(ConfigError, match=message):
            zoo.train("cartpole_pi_dagger", budget="smoke", overrides={"teacher": teacher},
                      root=tmp_path)  # fmt: skip
    assert not any(tmp_path.iterdir())
