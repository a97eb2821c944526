"""Tests of zoo.plots: learning curves of run folders, grouped over seeds, PNG + CSV."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from _metrics import metrics_match_own_table
from _zoo import TINY_DOORKEY, trained
from PIL import Image

from zoo.metrics import read_monitor, read_progress
from zoo.plots import SMOOTH_EPISODES, find_run_dirs, group_colours, plot_runs


def write_run(
    path: Path,
    name: str = "exp/cell",
    monitors: dict[int, tuple[float, list[tuple[float, int, float]]]] | None = None,
    progress: list[list[dict[str, float]]] | None = None,
    evaluations: list[dict] | None = None,
    algo: str = "dqn",
    budget: str = "smoke",
) -> Path:
    """A run folder as training leaves it: config.yml, Monitor CSVs, progress parts, evals.

    ``monitors``: rank -> (t_start, [(r, l, t), ...]); ``progress``: one row list per part.
    """
    path.mkdir(parents=True)
    experiment = name.split("/")[0]
    header = f"# {name} (budget {budget}), resolved by attn-zoo from test\n"
    (path / "config.yml").write_text(header + yaml.safe_dump({experiment: {"algo": algo}}))
    for rank, (t_start, rows) in (monitors or {}).items():
        (path / "monitor").mkdir(exist_ok=True)
        lines = [f'#{{"t_start": {t_start}, "env_id": "X-v0"}}', "r,l,t"]
        lines += [f"{r},{length},{t}" for r, length, t in rows]
        (path / "monitor" / f"train_{rank}.monitor.csv").write_text("\n".join(lines) + "\n")
    for k, rows in enumerate(progress or []):
        part = path / "logs" / f"part{k}"
        part.mkdir(parents=True)
        columns = list(dict.fromkeys(c for row in rows for c in row))
        with (part / "progress.csv").open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
    if evaluations is not None:
        (path / "evaluations.json").write_text(json.dumps(evaluations))
    return path


def read_csv(path: Path) -> list[dict[str, str]]:
    """The CSV written next to a plot (``path`` may be the PNG)."""
    with path.with_suffix(".csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


def rows_of(table: list[dict[str, str]], group: str, metric: str) -> dict[str, np.ndarray]:
    rows = [r for r in table if r["group"] == group and r["metric"] == metric]
    return {k: np.array([float(r[k]) for r in rows]) for k in ("x", "mean", "lo", "hi", "n")}


def smoothed(values: np.ndarray, window: int = SMOOTH_EPISODES) -> np.ndarray:
    """Trailing mean, computed independently of zoo.plots (loop, not cumsum)."""
    return np.array([values[max(0, i - window + 1) : i + 1].mean() for i in range(len(values))])


def episodes(rng: np.random.Generator, n: int, t_start: float = 0.0) -> list:
    lengths = rng.integers(5, 40, n)
    returns = rng.normal(size=n).round(3)
    times = np.cumsum(rng.uniform(0.1, 1.0, n)).round(4)
    return [
        (float(r), int(length), float(t))
        for r, length, t in zip(returns, lengths, times, strict=True)
    ]


def test_group_mean_lo_hi_match_the_seeds_monitor_data(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    data = {seed: episodes(rng, 60 + 15 * seed) for seed in (0, 1)}
    for seed, rows in data.items():
        write_run(tmp_path / "exp" / "cell" / f"{seed}-x", monitors={0: (100.0, rows)})
    out = plot_runs([tmp_path / "exp"], out=tmp_path / "plot" / "c.png")
    assert out == tmp_path / "plot" / "c.png" and out.stat().st_size > 10_000
    table = read_csv(out.with_suffix(".csv"))
    got = rows_of(table, "exp/cell", "episode_return")
    assert len(got["x"]) > 10 and (got["n"] == 2).all()
    per_seed = []
    for rows in data.values():
        r, length, _ = (np.array(c, dtype=float) for c in zip(*rows, strict=True))
        per_seed.append(np.interp(got["x"], np.cumsum(length), smoothed(r)))
    per_seed = np.stack(per_seed)
    np.testing.assert_allclose(got["mean"], per_seed.mean(axis=0), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got["lo"], per_seed.min(axis=0), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got["hi"], per_seed.max(axis=0), rtol=1e-9, atol=1e-12)
    # The grid spans only the steps both seeds reached.
    ends = [np.cumsum([length for _, length, _ in rows])[[0, -1]] for rows in data.values()]
    assert got["x"][0] == max(e[0] for e in ends) and got["x"][-1] == min(e[1] for e in ends)


def test_single_run_is_its_own_smoothed_curve(tmp_path: Path) -> None:
    rows = episodes(np.random.default_rng(1), 30)
    run = write_run(tmp_path / "r", name="solo", monitors={0: (0.0, rows)})
    out = plot_runs([run])
    assert out == run / "curves.png"
    got = rows_of(read_csv(run / "curves.csv"), "solo", "episode_length")
    lengths = np.array([length for _, length, _ in rows], dtype=float)
    np.testing.assert_allclose(got["x"], np.cumsum(lengths))
    np.testing.assert_allclose(got["mean"], smoothed(lengths))
    assert (got["lo"] == got["mean"]).all() and (got["n"] == 1).all()


def test_monitor_files_are_merged_by_end_time(tmp_path: Path) -> None:
    # env 0 started at t=10, env 1 at t=12: absolute end times 11, 13.5, 14, 20.
    run = write_run(
        tmp_path / "r",
        monitors={
            0: (10.0, [(1.0, 5, 1.0), (2.0, 7, 4.0)]),
            1: (12.0, [(3.0, 4, 1.5), (4.0, 6, 8.0)]),
        },
    )
    episodes_ = read_monitor(run)
    assert episodes_["r"].tolist() == [1.0, 3.0, 2.0, 4.0]
    assert episodes_["step"].tolist() == [5, 9, 16, 22]
    np.testing.assert_allclose(episodes_["time"], [1.0, 3.5, 4.0, 10.0])
    table = read_csv(plot_runs([run], x="time"))
    got = rows_of(table, "exp/cell", "episode_return")
    np.testing.assert_allclose(got["x"], [1.0, 3.5, 4.0, 10.0])
    np.testing.assert_allclose(got["mean"], smoothed(np.array([1.0, 3.0, 2.0, 4.0])))


def test_progress_parts_of_a_resumed_run_are_concatenated(tmp_path: Path) -> None:
    parts = [
        [
            {"train/loss": 4.0, "time/total_timesteps": 100, "time/time_elapsed": 5},
            {"train/loss": "", "time/total_timesteps": 150, "time/time_elapsed": 7},
            {"train/loss": 2.0, "time/total_timesteps": 200, "time/time_elapsed": 10},
        ],
        [{"train/loss": 1.0, "time/total_timesteps": 300, "time/time_elapsed": 3}],
    ] + [
        [{"train/loss": 0.5 / k, "time/total_timesteps": 300 + 100 * k, "time/time_elapsed": 2}]
        for k in range(1, 10)
    ]
    run = write_run(tmp_path / "r", progress=parts)  # part0 ... part10
    progress = read_progress(run)
    assert progress["time/total_timesteps"][:5].tolist() == [100, 150, 200, 300, 400]
    assert progress["time/total_timesteps"][-1] == 1200  # part10 after part9, not after part1
    table = read_csv(plot_runs([run]))
    got = rows_of(table, "exp/cell", "train/loss")
    assert got["x"][:3].tolist() == [100.0, 200.0, 300.0]  # the empty cell is dropped
    assert got["mean"][:3].tolist() == [4.0, 2.0, 1.0]
    got_time = rows_of(read_csv(plot_runs([run], x="time")), "exp/cell", "train/loss")
    assert got_time["x"][:4].tolist() == [5.0, 10.0, 13.0, 15.0]  # elapsed summed over parts


def test_a2c_value_loss_stands_in_for_the_missing_total_loss(tmp_path: Path) -> None:
    rows = [{"train/value_loss": v, "time/total_timesteps": s} for s, v in ((5, 2.0), (10, 1.0))]
    run = write_run(tmp_path / "r", algo="a2c", progress=[rows])
    got = rows_of(read_csv(plot_runs([run])), "exp/cell", "train/value_loss")
    assert got["mean"].tolist() == [2.0, 1.0]


def test_evaluations_are_plotted_per_policy(tmp_path: Path) -> None:
    evals = [
        {
            "step": s,
            "score": 0.0,
            "greedy": {"mean_reward": -s / 100, "success_rate": f},
            "eps": {"mean_reward": 1.0, "success_rate": None},
        }
        for s, f in ((100, 0.0), (200, 0.5), (300, 1.0))
    ]
    for seed in (0, 1):
        write_run(tmp_path / "exp" / f"{seed}", name="exp", evaluations=evals)
    table = read_csv(plot_runs([tmp_path / "exp"]))
    success = rows_of(table, "exp", "eval/greedy/success_rate")
    assert success["x"].tolist() == [100.0, 200.0, 300.0]
    assert success["mean"].tolist() == [0.0, 0.5, 1.0] and (success["n"] == 2).all()
    assert rows_of(table, "exp", "eval/eps/mean_reward")["mean"].tolist() == [1.0, 1.0, 1.0]
    assert not rows_of(table, "exp", "eval/eps/success_rate")["x"].size  # all None


def test_runs_are_grouped_by_cell_and_budget(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    for cell in ("Pong-fc", "Pong-cnn"):
        for seed in (0, 1, 2):
            write_run(
                tmp_path / "runs" / "atari" / cell / f"{seed}-t",
                name=f"atari/{cell}",
                monitors={0: (0.0, episodes(rng, 25))},
            )
    write_run(
        tmp_path / "runs" / "atari" / "Pong-fc" / "9-cpu",
        name="atari/Pong-fc",
        budget="cpu",
        monitors={0: (0.0, episodes(rng, 25))},
    )
    assert len(find_run_dirs([tmp_path / "runs"])) == 7
    table = read_csv(plot_runs([tmp_path / "runs"], out=tmp_path / "all.png"))
    n_runs = {r["group"]: int(r["n"]) for r in table if r["metric"] == "episode_return"}
    # The budget joins the label only where one cell ran with several budgets.
    assert n_runs == {"atari/Pong-fc (smoke)": 3, "atari/Pong-cnn": 3, "atari/Pong-fc (cpu)": 1}


def test_up_to_twenty_groups_never_share_a_colour(tmp_path: Path) -> None:
    for n in (1, 10, 11, 20):
        labels = [f"ablation/cell_{i}" for i in range(n)]
        assert len(set(group_colours(labels).values())) == n
    rng = np.random.default_rng(3)
    cells = [f"cell_{i}" for i in range(12)]
    for cell in cells:
        write_run(tmp_path / "runs" / cell / "0-t", name=f"ablation/{cell}",
                  monitors={0: (0.0, episodes(rng, 5))})  # fmt: skip
    plot_runs([tmp_path / "runs"], out=tmp_path / "twelve.png")
    with Image.open(tmp_path / "twelve.png") as image:
        width, height = image.size
    plot_runs([tmp_path / "runs" / "cell_0"], out=tmp_path / "one.png")
    with Image.open(tmp_path / "one.png") as image:
        assert image.size[0] == width and height > image.size[1]  # room for the legend rows


def test_classifier_history_against_iterations(tmp_path: Path) -> None:
    run = tmp_path / "mnist" / "0-t"
    write_run(run, name="mnist/relational", algo="classifier")
    (run / "history.csv").write_text(
        "iteration,loss,train_accuracy,test_accuracy\n10,2.0,0.3,0.25\n20,1.0,0.6,0.5\n"
    )
    table = read_csv(plot_runs([run]))
    assert rows_of(table, "mnist/relational", "classifier/loss")["mean"].tolist() == [2.0, 1.0]
    accuracy = rows_of(table, "mnist/relational", "classifier/test_accuracy")
    assert accuracy["x"].tolist() == [10.0, 20.0] and accuracy["mean"].tolist() == [0.25, 0.5]


def test_cmaes_fitness_and_test_returns(tmp_path: Path) -> None:
    run = tmp_path / "es" / "0-t"
    write_run(run, name="cartpole_pi", algo="cmaes")
    header = "generation,env_steps,fitness_best,fitness_mean,fitness_worst,best_ever,sigma,"
    (run / "progress.csv").write_text(
        header + "time_ask_tell,time_evaluate,test_mean,test_std\n"
        "1,100,5.0,3.0,1.0,5.0,0.1,0.5,1.5,,\n"
        "2,250,9.0,6.0,2.0,9.0,0.1,0.5,2.5,7.5,1.0\n"
    )
    table = read_csv(plot_runs([run]))
    best = rows_of(table, "cartpole_pi", "fitness/best")
    assert best["x"].tolist() == [100.0, 250.0] and best["mean"].tolist() == [5.0, 9.0]
    assert rows_of(table, "cartpole_pi", "fitness/worst")["mean"].tolist() == [1.0, 2.0]
    tested = rows_of(table, "cartpole_pi", "eval/test/mean_reward")
    assert tested["x"].tolist() == [250.0] and tested["mean"].tolist() == [7.5]
    timed = read_csv(plot_runs([run], out=tmp_path / "t.png", x="time"))
    assert rows_of(timed, "cartpole_pi", "fitness/mean")["x"].tolist() == [2.0, 5.0]


def test_dagger_loss_and_test_returns(tmp_path: Path) -> None:
    run = tmp_path / "bc" / "0-t"
    write_run(run, name="cartpole_pi_bc", algo="dagger")
    (run / "progress.csv").write_text(
        "round,env_steps,beta,loss,seconds,test_mean,test_std\n"
        "1,100,1.0,0.9,1.5,,\n"
        "2,250,0.5,0.4,2.5,7.5,1.0\n"
    )
    table = read_csv(plot_runs([run]))
    loss = rows_of(table, "cartpole_pi_bc", "train/loss")
    assert loss["x"].tolist() == [100.0, 250.0] and loss["mean"].tolist() == [0.9, 0.4]
    tested = rows_of(table, "cartpole_pi_bc", "eval/test/mean_reward")
    assert tested["x"].tolist() == [250.0] and tested["mean"].tolist() == [7.5]
    timed = read_csv(plot_runs([run], out=tmp_path / "t.png", x="time"))
    assert rows_of(timed, "cartpole_pi_bc", "train/loss")["x"].tolist() == [1.5, 4.0]


def test_errors(tmp_path: Path) -> None:
    run = write_run(tmp_path / "r")
    with pytest.raises(ValueError, match="steps"):
        plot_runs([run], x="episodes")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        plot_runs([tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no run folder"):
        plot_runs([tmp_path / "empty"])
    out = plot_runs([run])  # a run without any logs yet still gives a figure
    assert Image.open(out).size[0] > 300 and read_csv(out.with_suffix(".csv")) == []


def test_trained_doorkey_seeds(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    runs = [
        trained(tmp_path_factory, f"doorkey_tiny_s{s}", "doorkey", seed=s, **TINY_DOORKEY)
        for s in (0, 1)
    ]
    for run in runs:  # SB3 runs log episodes and evaluations to metrics.csv
        metrics_match_own_table(
            run, ("episode_return", "episode_length", "eval/greedy/success_rate")
        )
    out = plot_runs(runs, out=tmp_path / "doorkey.png")
    image = Image.open(out)
    assert image.size[0] > 800 and out.stat().st_size > 30_000
    table = read_csv(out.with_suffix(".csv"))
    assert {r["group"] for r in table} == {"doorkey"}
    metrics = {r["metric"] for r in table}
    assert {"episode_return", "episode_length", "train/loss"} <= metrics
    assert {"eval/greedy/success_rate", "eval/eps0.05/mean_reward"} <= metrics
    got = rows_of(table, "doorkey", "episode_length")
    assert (got["n"] == 2).all()
    curves = []
    for run in runs:
        with (run / "monitor" / "train_p0_0.monitor.csv").open() as fh:
            rows = list(csv.DictReader(fh.readlines()[1:]))
        lengths = np.array([float(r["l"]) for r in rows])
        curves.append(np.interp(got["x"], np.cumsum(lengths), smoothed(lengths)))
    np.testing.assert_allclose(got["mean"], np.mean(curves, axis=0))


def test_labels_given_split_runs_the_config_cannot_tell_apart(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    runs = [
        write_run(
            tmp_path / folder / f"{seed}-t",
            name="atari/Pong-fc",
            monitors={0: (0.0, episodes(rng, 25))},
        )
        for folder in ("before", "after")
        for seed in (0, 1)
    ]
    merged = read_csv(plot_runs(runs, out=tmp_path / "merged.png"))
    assert {r["group"] for r in merged} == {"atari/Pong-fc"}
    labels = {run: run.parent.name for run in runs[2:]}  # the first two keep their default
    table = read_csv(plot_runs(runs, out=tmp_path / "ab.png", labels=labels))
    n_runs = {r["group"]: int(r["n"]) for r in table if r["metric"] == "episode_return"}
    assert n_runs == {"atari/Pong-fc": 2, "after": 2}
