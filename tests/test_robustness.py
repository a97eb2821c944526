"""Tests for zoo.robustness (``attn-zoo robustness``: seed 001's robustness tables)."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from _zoo import TINY_DOORKEY, trained
from matplotlib import pyplot as plt

import zoo
import zoo.cli
from zoo import factory, robustness
from zoo.config import ConfigError
from zoo.robustness import check_sweep, run_sweep
from zoo.robustness_conditions import parse_sweep, prepare_condition, train_ratio
from zoo.robustness_tables import write_table


# CMA-ES smoke runs trained once per session (xdist workers share them).
@pytest.fixture(scope="module")
def pi_run(tmp_path_factory: pytest.TempPathFactory) -> zoo.Run:
    return zoo.load(trained(tmp_path_factory, "cartpole_pi_smoke", "cartpole_pi_x0"))


@pytest.fixture(scope="module")
def fnn_run(tmp_path_factory: pytest.TempPathFactory) -> zoo.Run:
    return zoo.load(trained(tmp_path_factory, "cartpole_fnn_smoke", "cartpole_fnn"))


def by_condition(rows: list[dict]) -> dict[str, dict]:
    return {r["condition"]: r for r in rows}


@pytest.mark.parametrize("n_episodes", [0, True, 2.5])
def test_episodes_per_cell_must_be_a_positive_integer(n_episodes: object) -> None:
    # checked before any run folder is read (2.5 used to be cut to 2 episodes silently)
    with pytest.raises(ConfigError, match="episodes per cell must be a positive integer"):
        run_sweep("no/such/run", "shuffle", n_episodes=n_episodes)


def test_channels_table_of_a_permutation_invariant_agent(pi_run: zoo.Run) -> None:
    rows = by_condition(run_sweep([pi_run], "channels"))
    as_is = rows["as is"]
    # Defaults are the run's test episodes: the unperturbed cell is eval.json's figure.
    assert as_is["mean_reward"] == pytest.approx(
        pi_run.eval["policies"]["deterministic"]["mean_reward"]
    )
    assert as_is["n_episodes"] == pi_run.config.body["eval"]["final_episodes"]
    # Shuffled or duplicated (output x0.5), the PI agent plays the same episodes.
    assert rows["shuffled"]["mean_reward"] == pytest.approx(as_is["mean_reward"], rel=1e-4)
    duplicated = rows["duplicated x2, shuffled"]
    assert duplicated["mean_reward"] == pytest.approx(as_is["mean_reward"], rel=1e-4)
    assert duplicated["note"] == "output_scale=0.5"
    noisy = rows["+ noise channels (sigma 0.1), shuffled"]
    assert noisy["n_episodes"] and noisy["mean_reward"] != as_is["mean_reward"]
    unscaled = by_condition(run_sweep([pi_run], "channels", rescale=False))
    assert unscaled["duplicated x2, shuffled"]["mean_reward"] != pytest.approx(
        as_is["mean_reward"], rel=1e-4
    )


def test_fixed_order_agent_breaks_when_shuffled_and_cannot_take_extra_inputs(
    fnn_run: zoo.Run,
) -> None:
    rows = by_condition(run_sweep([fnn_run], "channels", n_episodes=6, seed=3))
    assert rows["shuffled"]["mean_reward"] != pytest.approx(rows["as is"]["mean_reward"])
    assert rows["duplicated x2, shuffled"]["note"].startswith("n/a")
    assert np.isnan(rows["duplicated x2, shuffled"]["mean_reward"])
    again = by_condition(run_sweep([fnn_run], "channels", n_episodes=6, seed=3))
    assert again["shuffled"]["mean_reward"] == rows["shuffled"]["mean_reward"]  # seeded


def test_reshuffle_rows_and_the_files(pi_run: zoo.Run, fnn_run: zoo.Run, tmp_path: Path) -> None:
    rows = run_sweep([pi_run, fnn_run], "reshuffle=5,10", n_episodes=3)
    pi, fnn = robustness.run_labels([pi_run.path, fnn_run.path])  # the folders' names
    assert pi.endswith(pi_run.path.name) and fnn.endswith(fnn_run.path.name)
    assert [(r["experiment"], r["value"]) for r in rows] == [
        (pi, 5),
        (pi, 10),
        (fnn, 5),
        (fnn, 10),
    ]
    csv_file, md_file, png = write_table(rows, "reshuffle", tmp_path)
    with csv_file.open() as fh:
        assert len(list(csv.DictReader(fh))) == 4
    table = md_file.read_text().splitlines()
    assert table[0] == "| agent | reshuffle every 5 | reshuffle every 10 |"
    assert table[2].startswith(f"| {pi} | ") and "±" in table[2]
    assert png.stat().st_size > 5000


def swingup_ppo(tmp_path: Path, name: str, **extra: object) -> zoo.Run:
    """A 64-step PPO MLP on 20-step CartPoleSwingUpHarder episodes."""
    body = {
        "algo": "ppo",
        "env": "attn_envs/CartPoleSwingUpHarder-v0",
        "env_kwargs": {"max_episode_steps": 20},
        "policy": "MlpPolicy",
        "n_timesteps": 64,
        "n_steps": 32,
        "batch_size": 32,
        "eval": {"final_episodes": 2},
        **extra,
    }
    config = tmp_path / f"{name}.yml"
    config.write_text(yaml.safe_dump({name: body}))
    return zoo.train(config, root=tmp_path)


def test_sb3_agent(tmp_path: Path) -> None:
    run = swingup_ppo(tmp_path, "ppo_swingup")
    rows = by_condition(run_sweep([run], "shuffle", n_episodes=4, seed=1))
    assert rows["as is"]["n_episodes"] == rows["shuffled"]["n_episodes"] == 4
    assert rows["shuffled"]["mean_reward"] != rows["as is"]["mean_reward"]
    assert rows == by_condition(run_sweep([run], "shuffle", n_episodes=4, seed=1))
    assert train_ratio(run.config) == 0.0
    # Occlusion drops inputs: the MLP cannot take 3 of 5, so the cell is n/a, not a crash.
    (cell,) = run_sweep([run], "occlusion=0.5", n_episodes=2)
    assert cell["note"].startswith("n/a")
    # SB3 policies have no output scale: the extra-channel cells are n/a with the reason.
    rows = by_condition(run_sweep([run], "channels", n_episodes=2))
    assert "no test-time settings" in rows["duplicated x2, shuffled"]["note"]


def test_occlusion_heat_map_from_two_runs(tmp_path: Path) -> None:
    occluded = [[{"OcclusionObservation": {"ratio": r, "fill": 0.0}}] for r in (0.0, 0.4)]
    runs = [swingup_ppo(tmp_path, f"occluded_{k}", env_wrapper=w) for k, w in enumerate(occluded)]
    rows = run_sweep(runs, "occlusion=0,0.4,0.6")  # eval.test_seed, eval.final_episodes (2)
    assert [(r["train_ratio"], r["value"]) for r in rows] == [
        (a, b) for a in (0.0, 0.4) for b in (0.0, 0.4, 0.6)
    ]
    assert all(r["n_episodes"] == 2 for r in rows)
    # The test ratio replaces the training one: tested at 0, nothing is occluded.
    changed, extra, _ = prepare_condition(
        runs[1].config, parse_sweep("occlusion=0").conditions[0], True
    )
    assert not extra
    env = factory.make_env_fn(changed)()
    obs, _ = env.reset(seed=0)
    assert np.count_nonzero(obs) == 5
    # ... and tested at 0.4 like it was trained, the cell is its eval.json figure
    trained_like = rows[4]
    assert trained_like["value"] == 0.4
    assert trained_like["mean_reward"] == pytest.approx(
        runs[1].eval["policies"]["deterministic"]["mean_reward"]
    )
    png = write_table(rows, "occlusion", tmp_path / "tables")[2]
    assert png.stat().st_size > 5000
    pixels = plt.imread(png)
    assert pixels.std() > 0.05  # a drawn heat map, not a blank canvas


def test_rows_are_named_by_run_folder(pi_run: zoo.Run, tmp_path: Path) -> None:
    # results/cartpole_pi/pi is "pi", not its config's name; same names get their parents
    copies = [tmp_path / "results" / "cartpole_pi" / "pi", tmp_path / "old" / "cartpole_pi" / "pi"]
    for copy in copies:
        shutil.copytree(pi_run.path, copy)
    rows = run_sweep(copies[:1], "shuffle", n_episodes=1)
    assert {r["experiment"] for r in rows} == {"pi"}
    assert robustness.run_labels(copies) == ["results/cartpole_pi/pi", "old/cartpole_pi/pi"]


def test_grid_runs_play_every_cell_and_the_notes_say_what_moved(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # how the cells are moved or masked: test_robustness_conditions.py
    run = zoo.load(trained(tmp_path_factory, "doorkey_tiny_s0", "doorkey", **TINY_DOORKEY))
    rows = by_condition(run_sweep([run], "shuffle", n_episodes=1))
    rows.update(by_condition(run_sweep([run], "occlusion=0.5", n_episodes=1)))
    assert all(r["n_episodes"] == 1 for r in rows.values())
    assert rows["shuffled"]["note"] == "shuffled: the 49 cells of the 7x7 view, whole"
    assert rows["occlusion 0.5"]["note"].startswith("masked as unseen (0): the 49 cells")
    assert rows["as is"]["note"] == ""


def test_regression_sweep(pi_run: zoo.Run) -> None:
    rows = run_sweep([pi_run], "regression", n_episodes=4)
    assert [r["condition"] for r in rows] == ["x", "x_dot", "cos_theta", "sin_theta", "theta_dot"]
    assert all(0 <= r["r2"] <= 1 for r in rows)


def test_robustness_sweep_writes_into_the_run_folder(pi_run: zoo.Run) -> None:
    rows = zoo.robustness_sweep(pi_run.path, "reshuffle=3", n_episodes=2, seed=5)
    folder = pi_run.path / "robustness"
    assert sorted(p.name for p in folder.iterdir()) == [
        "cells",
        "reshuffle.csv",
        "reshuffle.md",
        "reshuffle.png",
    ]
    with (folder / "reshuffle.csv").open() as fh:
        (saved,) = list(csv.DictReader(fh))
    assert float(saved["mean_reward"]) == pytest.approx(rows[0]["mean_reward"])
    assert saved["n_episodes"] == "2"
    # zoo.config.require_int's wording of the old ">= 1"
    with pytest.raises(ConfigError, match="must be a positive integer, got 0"):
        run_sweep([pi_run], "shuffle", n_episodes=0)


def count_cells_played(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the episodes of every cell the sweep plays (rather than reads back)."""
    played: list[int] = []
    real = robustness.get_episode_trainer

    def counting(algo: str) -> object:
        trainer = real(algo)
        episode_returns = trainer.episode_returns

        def counted(*args: object, **kwargs: object) -> object:
            played.append(int(kwargs["n_episodes"]))
            return episode_returns(*args, **kwargs)

        trainer.episode_returns = counted
        return trainer

    monkeypatch.setattr(robustness, "get_episode_trainer", counting)
    return played


def test_finished_cells_are_kept_and_a_rerun_plays_only_the_missing_ones(
    pi_run: zoo.Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    played = count_cells_played(monkeypatch)
    out = tmp_path / "tables"

    def sweep(run: object = pi_run.path, n: int = 2, **kw: object) -> list[dict]:
        return zoo.robustness_sweep(run, "reshuffle=3,4", n_episodes=n, seed=5, out=out, **kw)

    first = sweep()
    cells = out / "cells" / "reshuffle"
    assert played == [2, 2] and len(list(cells.glob("*.json"))) == 2
    again = sweep()
    assert played == [2, 2] and again == first  # read back, nothing played
    sorted(cells.glob("*.json"))[0].unlink()  # a sweep killed before its last cell
    assert sweep() == first and played == [2, 2, 2]
    sorted(cells.glob("*.json"))[0].write_text("{not json")  # a torn or foreign file
    assert sweep() == first and played == [2, 2, 2, 2]
    sweep(n=3)  # other episodes, other cells
    assert played == [2, 2, 2, 2, 3, 3]
    sweep(fresh=True)
    assert played == [2, 2, 2, 2, 3, 3, 2, 2]
    # a copy of the run (same files) reuses the cells under its own name ...
    copy = tmp_path / "copy"
    shutil.copytree(pi_run.path, copy, ignore=shutil.ignore_patterns("robustness"))
    rows = sweep(copy)
    assert len(played) == 8 and {r["run"] for r in rows} == {str(copy)}
    assert [r["mean_reward"] for r in rows] == [r["mean_reward"] for r in first]
    # ... until its model changes
    model = copy / "best_model.pt"
    weights = torch.load(model, weights_only=True)
    name = next(iter(weights))
    weights[name] = weights[name] + 0.5
    torch.save(weights, model)
    sweep(copy)
    assert played[8:] == [2, 2]


def test_perturbations_the_env_cannot_take_are_refused(tmp_path: Path) -> None:
    body = {"algo": "ppo", "env": "CarRacing-v3", "policy": "CnnPolicy", "n_timesteps": 64}
    (tmp_path / "config.yml").write_text(yaml.safe_dump({"car": body}))
    assert [c.label for c in check_sweep(tmp_path, "shuffle").conditions] == ["as is", "shuffled"]
    with pytest.raises(ConfigError, match=r"CarRacing-v3 cannot take .*DuplicateObservation"):
        check_sweep(tmp_path, "channels")
    with pytest.raises(ConfigError, match="at least one run"):
        check_sweep([], "shuffle")


def test_the_cli_replaces_a_linked_robustness_folder(
    pi_run: zoo.Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # issue 68, item 5: `attn-zoo robustness RUN` (no --out) handed the sweep its default
    # folder as if the user had named it, so a linked robustness/ was written through
    run = tmp_path / "run"
    shutil.copytree(pi_run.path, run, ignore=shutil.ignore_patterns("robustness"))
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "shuffle.md").write_text("precious")
    (run / "robustness").symlink_to(victim)
    code = zoo.cli.main(["robustness", str(run), "--sweep", "shuffle", "--episodes", "1"])
    capsys.readouterr()
    assert code == 0
    assert [p.name for p in victim.iterdir()] == ["shuffle.md"]
    assert (victim / "shuffle.md").read_text() == "precious"
    assert not (run / "robustness").is_symlink() and (run / "robustness" / "shuffle.md").is_file()
