"""Tests for zoo.trainers.bc_trainer (``algo: bc``: E4 Ant and E5 Puzzle Pong students)."""

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
from _metrics import metrics_match_own_table

import zoo
from attn_envs import CartPoleSwingUpVectorEnv
from attn_policies.algorithms.bc_data import BCDataset
from attn_policies.algorithms.bc_student import BCStudent, StudentAgent
from attn_policies.algorithms.frame_store import FrameStore
from zoo import factory
from zoo.config import ConfigError
from zoo.registry import ALLOW_IMPORT_ENV
from zoo.trainers import get_trainer
from zoo.trainers.bc_collection import collect_run
from zoo.trainers.bc_teacher import load_teacher


@pytest.fixture(autouse=True)
def allow_this_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """The configs below name this module's scripted teachers: allowed as ``--allow-import
    test_bc_trainer`` would (a config alone may not import it)."""
    monkeypatch.setenv(ALLOW_IMPORT_ENV, "test_bc_trainer")


def scripted_teacher(obs: Any) -> tuple[np.ndarray, np.ndarray]:
    """Push against the pole's angular velocity: a fixed, learnable target."""
    target = np.clip(-0.2 * obs[:, 4:5] + 0.5 * obs[:, 3:4], -1, 1).astype(np.float32)
    return target, target


SWINGUP: dict[str, Any] = {
    "algo": "bc",
    "env": "attn_envs/CartPoleSwingUpHarder-v0",
    "env_kwargs": {"max_episode_steps": 50},
    "n_envs": 2,
    "teacher": "test_bc_trainer:scripted_teacher",
    "n_timesteps": 400,
    "policy_kwargs": {"net_arch": [16]},
    "epochs": 8,
    "batch_size": 32,
    "learning_rate": 0.01,
    "eval": {"freq": 4, "n_episodes": 2, "final_episodes": 3},
}


def write(tmp_path: Path, body: dict[str, Any]) -> Path:
    path = tmp_path / "bc.yml"
    path.write_text(yaml.safe_dump({"swingup_bc": body}))
    return path


def read_progress(path: Path) -> list[dict[str, str]]:
    with (path / "progress.csv").open() as fh:
        return list(csv.DictReader(fh))


def test_callable_teacher_run_learns_and_evaluates(tmp_path: Path) -> None:
    run = zoo.train(write(tmp_path, SWINGUP), root=tmp_path)
    rows = read_progress(run.path)
    assert [int(float(r["epoch"])) for r in rows] == list(range(1, 9))
    assert float(rows[-1]["loss"]) < 0.2 * float(rows[0]["loss"])  # the student learns
    assert [bool(r["test_mean"]) for r in rows] == [False] * 3 + [True] + [False] * 3 + [True]
    assert run.status["num_timesteps"] == 400  # 200 steps x 2 envs of teacher data
    metrics_match_own_table(run.path, ("bc/loss", "bc/test_mean_reward"))
    agent = run.model()
    assert isinstance(agent, StudentAgent) and isinstance(agent.student, BCStudent)
    obs, _ = CartPoleSwingUpVectorEnv(64, harder=True).reset(seed=11)  # states it was taught on
    action, _ = agent.predict(obs)
    assert np.abs(action - scripted_teacher(obs)[0]).mean() < 0.15
    assert run.eval["n_episodes"] == 3
    assert zoo.evaluate(run.path)["policies"] == run.eval["policies"]
    returns = get_trainer("bc").episode_returns(run.path, run.config, n_episodes=2, seed=5)
    assert len(returns["rewards"]) == 2
    (run.path / "model.pt").unlink()  # a folder committed with its best model alone
    alone = zoo.evaluate(run.path)
    assert alone["policies"] == run.eval["policies"] and "last_model" not in alone


def test_training_checks_play_the_eval_env_kwargs_and_the_test_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import zoo.trainers.bc_trainer as bc_trainer

    seen: list[list[int]] = []
    original = bc_trainer.evaluate_policy

    def spy(agent: Any, env: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append([e.get_wrapper_attr("_max_episode_steps") for e in env.envs])
        return original(agent, env, *args, **kwargs)

    monkeypatch.setattr(bc_trainer, "evaluate_policy", spy)
    fixed = [{"max_episode_steps": 7}, {"max_episode_steps": 9}]
    body = {**SWINGUP, "epochs": 4, "eval": {**SWINGUP["eval"], "n_envs": 2, "env_kwargs": fixed}}
    run = zoo.train(write(tmp_path, body), root=tmp_path)
    assert seen[0] == [7, 9]  # the epoch-4 check
    assert seen[-1] == [50, 50]  # the final test: the run's own envs
    assert run.config.eval.env_kwargs == fixed


def test_ant_smoke_normalised_teacher_windowed_student_and_reused_teachers(
    tmp_path: Path,
) -> None:
    run = zoo.train("ant_bc", budget="smoke", root=tmp_path)
    teacher_dir = run.path / "teacher"
    assert (teacher_dir / "eval.json").is_file()  # the zoo trained the teacher first
    state = torch.load(run.path / "model.pt", weights_only=True)
    assert any(k.startswith("extractor.neuron.key_net") for k in state)  # AttentionNeuron
    assert state["head.2.weight"].shape == (8, 32)  # M=32 -> 32 tanh -> 8 actions
    assert run.config.body["prev_action_noise"] == 0.03
    assert len(read_progress(run.path)) == run.config.body["epochs"]
    assert zoo.evaluate(run.path)["policies"] == run.eval["policies"]
    assert "last_model" in run.eval  # best_model.pt was kept, the last one is tested too

    # The teacher acts on the newest step of the student's 8-step window, normalised.
    _, view = load_teacher(run.config, run.path)
    env = factory.make_vec_env(run.config, training=False)
    obs = env.reset()
    env.close()
    assert obs["observation"].shape == (1, 8, 28) and obs["prev_action"].shape == (1, 8, 8)
    stats = np.load(teacher_dir / "vecnormalize.npz", allow_pickle=False)
    newest = obs["observation"][:, -1]
    assert view is not None
    expected = np.clip((newest - stats["obs//mean"]) / np.sqrt(stats["obs//var"] + 1e-8), -10, 10)
    np.testing.assert_allclose(view(obs), expected, rtol=1e-5)
    assert not np.allclose(view(obs), newest)

    # The same teacher as a run folder, or as its .zip with its statistics: same data, same
    # student; the .zip without the statistics acts differently.
    def loss_with(**changes: Any) -> list[str]:
        other = zoo.train(
            "ant_bc", budget="smoke", overrides=changes, root=tmp_path / "o", trust_teacher=trusted
        )
        return [r["loss"] for r in read_progress(other.path)]

    losses = [r["loss"] for r in read_progress(run.path)]
    trusted = [teacher_dir / "model.zip"]  # an SB3 .zip is a pickle: --trust-teacher
    assert loss_with(teacher=str(teacher_dir)) == losses
    zip_teacher = {"teacher": str(teacher_dir / "model.zip"), "teacher_algo": "ppo"}
    stats = str(teacher_dir / "vecnormalize.npz")
    assert loss_with(**zip_teacher, teacher_vecnormalize=stats) == losses
    assert loss_with(**zip_teacher) != losses


def test_puzzle_pong_smoke_occluded_cnn_student_round_trip(tmp_path: Path) -> None:
    run = zoo.train("puzzle_pong_bc", budget="smoke", root=tmp_path)
    assert run.config.tag == "0.5" and run.config.body["occlusion"] == 0.5
    assert (run.path / "teacher" / "eval.json").is_file()
    state = torch.load(run.path / "best_model.pt", weights_only=True)
    assert state["extractor.cnn.0.weight"].shape == (64, 32, 4, 4)  # 20x20x32 grid -> conv
    assert state["head.0.weight"].shape == (6, 512)  # FC 512 -> 6 logits
    rows = read_progress(run.path)
    assert len(rows) == 2 and all(r["test_mean"] for r in rows)
    trainer = get_trainer("bc")
    agent = trainer.load(run.path, run.config, "last")
    obs = {"observation": np.zeros((3, 98, 144), np.uint8), "prev_action": np.zeros((3, 6))}
    action, _ = agent.predict(obs)  # half the patches still work: N is free
    assert action.shape == (3,) and set(action.tolist()) <= set(range(6))
    again = trainer.evaluate(run.path, run.config)
    assert again["policies"] == run.eval["policies"] and again["model"] == "best_model.pt"
    assert list(again["policies"]) == ["deterministic"]
    # `attn-zoo evaluate --policy stochastic` plays the student's softmax, not its argmax
    sampled = zoo.evaluate(run.path, n_episodes=1, policies=["stochastic", "deterministic"])
    assert list(sampled["policies"]) == ["stochastic", "deterministic"]
    assert sampled["policies"]["stochastic"]["mode"] == "stochastic"
    plain = zoo.evaluate(run.path, n_episodes=1)["policies"]["deterministic"]
    assert sampled["policies"]["deterministic"] == plain  # the order of modes changes nothing
    assert (
        zoo.evaluate(run.path, n_episodes=1, policies=["stochastic"])["policies"]["stochastic"]
        == sampled["policies"]["stochastic"]
    )  # seeded: the same draws again
    returns = trainer.episode_returns(run.path, run.config, n_episodes=1, seed=3)
    assert returns["lengths"][0] > 0

    # A teacher cut short (interrupted, no eval.json) continues from its own checkpoint ...
    teacher_dir = run.path / "teacher"
    (teacher_dir / "eval.json").unlink()
    zoo.load(teacher_dir).write_status(state="interrupted")
    load_teacher(run.config, run.path)
    assert zoo.load(teacher_dir).status["state"] == "finished"
    assert sorted(p.name for p in (teacher_dir / "logs").glob("part*")) == ["part0", "part1"]
    # ... and one killed before its status was written is trained afresh.
    for entry in teacher_dir.iterdir():
        if entry.name != "config.yml":
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    load_teacher(run.config, run.path)
    assert (teacher_dir / "eval.json").is_file()
    assert [p.name for p in (teacher_dir / "logs").glob("part*")] == ["part0"]


def test_a_frame_store_run_is_the_plain_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Holding the tokens as distinct frames changes memory only: the same batches, losses,
    tests and weights, DAgger rounds included."""
    stored_parts: list[int] = []
    append = FrameStore.append

    def counted(self: FrameStore, tokens: np.ndarray) -> None:
        stored_parts.append(len(tokens))
        append(self, tokens)

    monkeypatch.setattr(FrameStore, "append", counted)
    changes: dict[str, Any] = {"dagger_rounds": 1, "dagger_steps": 16, "frame_store": None}
    plain = zoo.train("puzzle_pong_bc", budget="smoke", overrides=changes, root=tmp_path / "p")
    assert stored_parts == []
    changes |= {"teacher": str(plain.path / "teacher"), "frame_store": {"observation": 4}}
    stored = zoo.train("puzzle_pong_bc", budget="smoke", overrides=changes, root=tmp_path / "s")
    assert sum(stored_parts) == stored.status["num_timesteps"]  # every sample went through it
    assert len(read_progress(stored.path)) == 4  # 2 epochs + 1 round of 2
    assert read_progress(stored.path) == read_progress(plain.path)
    for name in ("model.pt", "best_model.pt"):
        torch.testing.assert_close(
            torch.load(stored.path / name, weights_only=True),
            torch.load(plain.path / name, weights_only=True),
            rtol=0,
            atol=0,
        )


def test_sampled_teacher_and_student_actions_visit_other_states_with_greedy_labels(
    tmp_path: Path,
) -> None:
    changes: dict[str, Any] = {"dagger_rounds": 1, "dagger_steps": 16}
    greedy = zoo.train("puzzle_pong_bc", budget="smoke", overrides=changes, root=tmp_path / "g")
    changes |= {"teacher": str(greedy.path / "teacher"), "teacher_actions": "stochastic",
                "dagger_actions": "stochastic"}  # fmt: skip
    sampled = zoo.train("puzzle_pong_bc", budget="smoke", overrides=changes, root=tmp_path / "s")
    for name in ("part-000.npz", "dagger-01.npz"):
        a, b = (BCDataset.load(run.path / "data" / name) for run in (greedy, sampled))
        for data in (a, b):  # the labels are the teacher's argmax either way
            np.testing.assert_array_equal(data.actions, data.targets.argmax(axis=1))
        assert not np.array_equal(a.obs["observation"], b.obs["observation"]), name
    # the same seed, the same draws: a second sampled run records the same steps
    again = zoo.train("puzzle_pong_bc", budget="smoke", overrides=changes, root=tmp_path / "a")
    for name in ("part-000.npz", "dagger-01.npz"):
        a, b = (BCDataset.load(run.path / "data" / name) for run in (sampled, again))
        np.testing.assert_array_equal(a.obs["observation"], b.obs["observation"])


def test_a_best_model_equal_to_the_last_is_tested_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = zoo.train(write(tmp_path, SWINGUP), root=tmp_path)
    shutil.copy(run.path / "model.pt", run.path / "best_model.pt")
    trainer = get_trainer("bc")
    calls: list[str] = []
    test = type(trainer)._test

    def counted(self: Any, path: Path, config: Any, which: str, *args: Any) -> Any:
        calls.append(which)
        return test(self, path, config, which, *args)

    monkeypatch.setattr(type(trainer), "_test", counted)
    same = zoo.evaluate(run.path)
    assert calls == ["best"] and same["last_model"]["policies"] == same["policies"]
    state = torch.load(run.path / "best_model.pt", weights_only=True)
    torch.save({k: v + 0.5 for k, v in state.items()}, run.path / "best_model.pt")
    calls.clear()
    other = zoo.evaluate(run.path)
    assert calls == ["best", "last"]
    assert other["last_model"]["policies"] == same["policies"]  # model.pt, the same episodes


def test_puzzle_pong_student_cloned_from_a_ram_feature_teacher(tmp_path: Path) -> None:
    # The cpu budget's route: E7's FC on Pong's RAM features acts on the same emulator's
    # features, read beside the student's tokens; the student's data holds only its own view.
    ram_teacher = {"experiment": "atariari", "budget": "smoke", "overrides": {"model": "fc"}}
    collect = {"shuffle": False, "ram_features": {"order_seed": "{seed}"}}
    overrides = {"teacher": ram_teacher, "teacher_obs": "ram_features",
                 "collect_env_kwargs": collect, "loss": "cross_entropy",
                 "dagger_rounds": 1, "dagger_steps": 12, "dagger_epochs": 1}  # fmt: skip
    run = zoo.train("puzzle_pong_bc", budget="smoke", overrides=overrides, seed=2, root=tmp_path)
    played = BCDataset.load(run.path / "data" / "dagger-01.npz")  # the student played these
    assert sorted(played.obs) == ["observation", "prev_action"] and len(played) == 12
    assert run.status["num_timesteps"] == 16 + 12
    assert run.config.body["collect_env_kwargs"]["ram_features"] == {"order_seed": 2}
    teacher_run = zoo.load(run.path / "teacher")
    assert teacher_run.config.body["env_kwargs"]["order_seed"] == 2  # one order for both
    data = BCDataset.load(run.path / "data" / "part-000.npz")
    assert sorted(data.obs) == ["observation", "prev_action"]
    assert data.obs["observation"].shape[1:] == (196, 144) and data.targets.shape[1:] == (6,)

    _, view = load_teacher(run.config, run.path)  # the teacher sees its normalised features
    env = factory.make_vec_env(collect_run(run.config), n_envs=1, training=False)
    env.seed(0)
    obs = env.reset()
    seen = view(obs)
    stats = np.load(run.path / "teacher" / "vecnormalize.npz")
    features = obs["ram_features"]
    expected = (features - stats["obs//mean"]) / np.sqrt(stats["obs//var"] + 1e-8)
    np.testing.assert_allclose(seen, expected, rtol=1e-5, atol=1e-5)
    env.close()
    assert run.eval["policies"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"teacher": None}, "missing required key 'teacher'"),
        ({"loss": "l1"}, "loss must be"),
        ({"policy_kwargs": {"net_arch": [4], "activation_fn": "tanh"}}, "policy_kwargs of a BC"),
        ({"teacher": {"budget": "smoke"}}, "needs 'experiment'"),
        ({"teacher": {"experiment": "ant_teacher", "budgt": "smoke"}}, "teacher takes"),
        ({"policy_kwargs": {"features_extractor_kwargs": {"n_querys": 4}}}, "n_querys"),
        ({"policy_kwargs": {"features_extractor_class": "relationl"}}, "Did you mean"),
        ({"dagger_rounds": -1}, "dagger_rounds must be >= 0"),
        ({"dagger_rounds": 1, "dagger_steps": 0}, "dagger_steps must be >= 1"),
        ({"dagger_rounds": "2"}, "dagger_rounds"),
        ({"epoch_samples": -5}, "epoch_samples must be >= 0"),
        ({"epoch_samples": 1.5}, "epoch_samples"),
        ({"frame_store": {"observation": 0}}, "frame_store.observation must be"),
        ({"frame_store": [4]}, "frame_store"),
        ({"teacher_actions": "greedy"}, "teacher_actions must be one of"),
        ({"lr_schedule": "step"}, "lr_schedule must be one of"),
        ({"lr_epochs": -1}, "lr_epochs must be >= 0"),
        ({"init": "no/such/run"}, "'init': no/such/run does not exist"),
        ({"dagger_actions": "stochastic"}, "dagger_actions: stochastic needs a Discrete"),
        ({"loss": "kl"}, "loss: kl needs a Discrete action space"),
        ({"loss": "kl", "temperature": 0}, "temperature must be > 0"),
        ({"temperature": "hot"}, "temperature"),
        (
            {"eval": {"n_envs": 2, "env_kwargs": [{}, {"max_episode_step": 9}]}},
            r"eval.env_kwargs\[1\] = \{'max_episode_step': 9\} does not build",
        ),
    ],
)
def test_config_errors(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    body = {k: v for k, v in {**SWINGUP, **change}.items() if v is not None}
    with pytest.raises(ConfigError, match=message):
        zoo.train(write(tmp_path, body), root=tmp_path)


def run_folder(root: Path) -> Path:
    (status,) = root.rglob("status.json")
    return status.parent


def test_a_run_killed_while_training_the_student_resumes_bit_for_bit(tmp_path: Path) -> None:
    straight = zoo.train(write(tmp_path, SWINGUP), root=tmp_path / "straight")

    def kill_in_epoch_5(row: dict[str, float]) -> None:
        if row["epoch"] == 5:
            raise KeyboardInterrupt  # as a kill during epoch 5's callback

    with pytest.raises(KeyboardInterrupt):
        zoo.train(write(tmp_path, SWINGUP), root=tmp_path / "killed", callbacks=[kill_in_epoch_5])
    folder = run_folder(tmp_path / "killed")
    assert zoo.load(folder).status["state"] == "interrupted"
    # epoch 5's row was written before the kill, its checkpoint was not: resuming drops the
    # row and redoes epoch 5 from the epoch-4 checkpoint
    assert len(read_progress(folder)) == 5
    ckpt = torch.load(folder / "checkpoints" / "bc_last.pt", weights_only=True)
    assert len(json.loads(ckpt["history"])) == 4
    resumed = zoo.resume(folder)
    assert read_progress(resumed.path) == read_progress(straight.path)
    for name in ("model.pt", "best_model.pt"):
        after = torch.load(resumed.path / name, weights_only=True)
        torch.testing.assert_close(after, torch.load(straight.path / name, weights_only=True))
    assert resumed.eval["policies"] == straight.eval["policies"]
    metrics_match_own_table(resumed.path, ("bc/loss", "bc/test_mean_reward"))
    with pytest.raises(ConfigError, match="already finished"):
        zoo.resume(folder)


KILL = {"after_calls": -1}  # the teacher below raises KeyboardInterrupt once this reaches 0


def killed_teacher(obs: Any) -> tuple[np.ndarray, np.ndarray]:
    if KILL["after_calls"] == 0:
        raise KeyboardInterrupt
    KILL["after_calls"] -= 1
    return scripted_teacher(obs)


def test_a_run_killed_while_recording_keeps_the_saved_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = {**SWINGUP, "teacher": "test_bc_trainer:killed_teacher", "epochs": 2}
    straight = zoo.train(write(tmp_path, body), root=tmp_path / "straight")
    # 200 steps per env in 10 parts of 20: killed at step 50, in the third part
    monkeypatch.setitem(KILL, "after_calls", 50)
    with pytest.raises(KeyboardInterrupt):
        zoo.train(write(tmp_path, body), root=tmp_path / "killed")
    folder = run_folder(tmp_path / "killed")
    saved = {f.name: f.read_bytes() for f in (folder / "data").glob("part-*.npz")}
    assert sorted(saved) == ["part-000.npz", "part-001.npz"]
    assert not (folder / "progress.csv").exists()
    monkeypatch.setitem(KILL, "after_calls", -1)
    resumed = zoo.resume(folder)
    assert resumed.status["num_timesteps"] == 400 and len(read_progress(resumed.path)) == 2
    parts = sorted((folder / "data").glob("part-*.npz"))
    assert [len(BCDataset.load(f)) for f in parts] == [40] * 10
    assert all(saved[f.name] == f.read_bytes() for f in parts[:2])  # kept, not re-recorded
    same = [
        np.array_equal(BCDataset.load(f).obs, BCDataset.load(g).obs)
        for f, g in zip(parts, sorted((straight.path / "data").glob("part-*.npz")), strict=True)
    ]
    assert same == [True, True] + [False] * 8  # from part 2 on: a fresh reset, seeded seed + 2


DAGGER = {
    **SWINGUP,
    "epochs": 4,
    "dagger_rounds": 2,
    "dagger_steps": 100,
    "dagger_epochs": 2,
    "epoch_samples": 300,  # fewer than the 400 teacher samples: every epoch draws a subset
}


def test_dagger_rounds_add_the_students_own_states_labelled_by_the_teacher(
    tmp_path: Path,
) -> None:
    run = zoo.train(write(tmp_path, DAGGER), root=tmp_path)
    assert [int(float(r["epoch"])) for r in read_progress(run.path)] == list(range(1, 9))
    assert run.status["num_timesteps"] == 400 + 2 * 100
    assert run.eval["num_timesteps"] == 600
    rounds = [BCDataset.load(run.path / "data" / f"dagger-{r:02d}.npz") for r in (1, 2)]
    teacher = BCDataset.concatenate(
        [BCDataset.load(f) for f in sorted((run.path / "data").glob("part-*.npz"))]
    )
    for data in rounds:
        assert len(data) == 100  # 50 steps x 2 envs
        np.testing.assert_allclose(data.targets, scripted_teacher(data.obs)[1], rtol=1e-6)
    # the student played these steps: its states are not the teacher's (another seed and
    # another policy), and the two rounds' students differ
    assert not np.isin(rounds[0].obs[:, 0], teacher.obs[:, 0]).any()
    assert not np.array_equal(rounds[0].obs, rounds[1].obs)


def test_a_dagger_run_killed_between_rounds_resumes_bit_for_bit(tmp_path: Path) -> None:
    straight = zoo.train(write(tmp_path, DAGGER), root=tmp_path / "straight")

    def kill_in_epoch_6(row: dict[str, float]) -> None:
        if row["epoch"] == 6:  # the last epoch of round 1, before round 2 is recorded
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        zoo.train(write(tmp_path, DAGGER), root=tmp_path / "killed", callbacks=[kill_in_epoch_6])
    folder = run_folder(tmp_path / "killed")
    assert (folder / "data" / "dagger-01.npz").exists()
    assert not (folder / "data" / "dagger-02.npz").exists()
    resumed = zoo.resume(folder)
    assert read_progress(resumed.path) == read_progress(straight.path)
    for name in ("model.pt", "best_model.pt"):
        after = torch.load(resumed.path / name, weights_only=True)
        torch.testing.assert_close(after, torch.load(straight.path / name, weights_only=True))
    for name in ("dagger-01.npz", "dagger-02.npz"):
        ours, theirs = (BCDataset.load(p / "data" / name) for p in (folder, straight.path))
        np.testing.assert_array_equal(ours.obs, theirs.obs)


def test_a_warm_started_run_begins_where_its_init_ended_and_a_misfit_is_refused(
    tmp_path: Path,
) -> None:
    first = zoo.train(write(tmp_path, SWINGUP), root=tmp_path / "first")
    body = {**SWINGUP, "epochs": 2, "init": str(first.path), "lr_schedule": "cosine"}
    warm = zoo.train(write(tmp_path, body), root=tmp_path / "warm")
    cold = zoo.train(write(tmp_path, {**body, "init": None}), root=tmp_path / "cold")
    first_rows, warm_rows, cold_rows = (read_progress(r.path) for r in (first, warm, cold))
    # the same data (same seed): the warm student continues from the first run's best model
    # (epoch 4's, the better of its two checks) and fits the data better than it did there,
    # far better than a fresh student's first epoch
    assert [r["test_mean"] != "" for r in first_rows].index(True) == 3
    assert float(first_rows[3]["test_mean"]) > float(first_rows[7]["test_mean"])
    assert float(warm_rows[0]["loss"]) < float(first_rows[3]["loss"])
    assert float(warm_rows[0]["loss"]) < 0.3 * float(cold_rows[0]["loss"])
    assert yaml.safe_load((warm.path / "config.yml").read_text())["swingup_bc"]["init"] == str(
        first.path
    )
    # a state dict file names the weights directly; one of another student is refused
    file_run = zoo.train(
        write(tmp_path, {**body, "init": str(first.path / "model.pt")}), root=tmp_path / "file"
    )
    assert read_progress(file_run.path)[0]["loss"] != cold_rows[0]["loss"]
    wide = {**SWINGUP, "policy_kwargs": {"net_arch": [32]}, "epochs": 1}
    with pytest.raises(ConfigError, match=r"'init'.*does not fit"):
        zoo.train(write(tmp_path, {**wide, "init": str(first.path)}), root=tmp_path / "wide")
    assert not (tmp_path / "wide").exists() or not any((tmp_path / "wide").rglob("*.pt"))
