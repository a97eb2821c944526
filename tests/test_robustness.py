"""Tests for zoo.robustness (``attn-zoo robustness``: seed 001's robustness tables)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

import zoo
from zoo.cli import main
from zoo.config import ConfigError
from zoo.robustness import parse_sweep, run_sweep, train_ratio, write_table


@pytest.fixture(scope="module")
def pi_run(tmp_path_factory: pytest.TempPathFactory) -> zoo.Run:
    return zoo.train("cartpole_pi", budget="smoke", root=tmp_path_factory.mktemp("pi"))


@pytest.fixture(scope="module")
def fnn_run(tmp_path_factory: pytest.TempPathFactory) -> zoo.Run:
    return zoo.train("cartpole_fnn", budget="smoke", root=tmp_path_factory.mktemp("fnn"))


def by_condition(rows: list[dict]) -> dict[str, dict]:
    return {r["condition"]: r for r in rows}


def test_parse_sweep() -> None:
    assert [c.value for c in parse_sweep("reshuffle=25,50,100").conditions] == [25, 50, 100]
    assert [c.label for c in parse_sweep("channels").conditions][:2] == ["as is", "shuffled"]
    assert [c.value for c in parse_sweep("occlusion=0,0.5").conditions] == [0.0, 0.5]
    names = [c.value for c in parse_sweep("background").conditions]
    assert names == [None, "ds", "kof", "mt_fuji", "ukiyoe"]  # every shipped picture
    with pytest.raises(ConfigError, match="Did you mean 'reshuffle'"):
        parse_sweep("reshufle=5")
    with pytest.raises(ConfigError, match="needs values"):
        parse_sweep("occlusion")
    with pytest.raises(ConfigError, match=r"\[0, 1\)"):
        parse_sweep("occlusion=1.5")
    with pytest.raises(ConfigError, match="cannot read"):
        parse_sweep("reshuffle=a")


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
    assert [(r["experiment"], r["value"]) for r in rows] == [
        ("cartpole_pi", 5),
        ("cartpole_pi", 10),
        ("cartpole_fnn", 5),
        ("cartpole_fnn", 10),
    ]
    csv_file, md_file, png = write_table(rows, "reshuffle", tmp_path)
    with csv_file.open() as fh:
        assert len(list(csv.DictReader(fh))) == 4
    table = md_file.read_text().splitlines()
    assert table[0] == "| agent | reshuffle every 5 | reshuffle every 10 |"
    assert table[2].startswith("| cartpole_pi | ") and "±" in table[2]
    assert png.stat().st_size > 5000


def test_sb3_agent_and_occlusion_heat_map(tmp_path: Path) -> None:
    config = tmp_path / "ppo.yml"
    body = {
        "algo": "ppo",
        "env": "attn_envs/CartPoleSwingUpHarder-v0",
        "env_kwargs": {"max_episode_steps": 20},
        "policy": "MlpPolicy",
        "n_timesteps": 64,
        "n_steps": 32,
        "batch_size": 32,
        "eval": {"final_episodes": 2},
    }
    config.write_text(yaml.safe_dump({"ppo_swingup": body}))
    run = zoo.train(config, root=tmp_path)
    rows = by_condition(run_sweep([run], "shuffle", n_episodes=4, seed=1))
    assert rows["as is"]["n_episodes"] == rows["shuffled"]["n_episodes"] == 4
    assert rows["shuffled"]["mean_reward"] != rows["as is"]["mean_reward"]
    assert train_ratio(run.config) == 0.0
    # Occlusion needs patch tokens: on a vector env the cell is n/a, not a crash.
    (cell,) = run_sweep([run], "occlusion=0.5", n_episodes=2)
    assert cell["note"].startswith("n/a")
    heat = [
        {"experiment": f"pong/{a}", "condition": f"occlusion {b}", "value": b, "train_ratio": a,
         "mean_reward": 21 - 40 * b * (1 - a), "std_reward": 1.0, "n_episodes": 2, "note": ""}
        for a in (0.0, 0.5) for b in (0.0, 0.5, 0.7)
    ]  # fmt: skip
    png = write_table(heat, "occlusion", tmp_path)[2]
    assert png.stat().st_size > 5000


def test_regression_sweep(pi_run: zoo.Run) -> None:
    rows = run_sweep([pi_run], "regression", n_episodes=4)
    assert [r["condition"] for r in rows] == ["x", "x_dot", "cos_theta", "sin_theta", "theta_dot"]
    assert all(0 <= r["r2"] <= 1 for r in rows)


def test_cli(pi_run: zoo.Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tables"
    code = main(["robustness", str(pi_run.path), "--sweep", "shuffle", "--episodes", "2",
                 "--out", str(out)])  # fmt: skip
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == ["shuffle.csv", "shuffle.md", "shuffle.png"]
    assert main(["robustness", str(pi_run.path), "--sweep", "shufle"]) == 2
    assert "Did you mean 'shuffle'" in capsys.readouterr().err
    assert json.loads((pi_run.path / "status.json").read_text())["state"] == "finished"
