"""zoo.results: collecting finished runs into results/ and averaging seeds."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from zoo.results import (
    collect_runs,
    copy_half,
    final_return,
    finished_runs,
    mean_band,
    plot_band,
    read_run,
    replace_block,
    replace_blocks,
    spread,
)

METRICS_CSV = (
    "step,wall_time,metric,value\n"
    "8,1.0,episode_return,-21\n"
    "8,1.0,time/fps,500\n"
    "16,2.0,train/value_loss,0.5\n"
    "16,2.0,episode_return,-19\n"
)


def write_model(file: Path, weights: int) -> None:
    """An SB3-shaped zip: ``weights`` floats of policy and as many of RMSprop statistics."""
    entries = {
        "policy.pth": {"w": torch.ones(weights)},
        "policy.optimizer.pth": {
            "state": {0: {"step": torch.tensor(3.0), "square_avg": torch.ones(weights)}},
            "param_groups": [{"lr": 7e-4, "alpha": 0.99, "params": [0]}],
        },
    }
    with zipfile.ZipFile(file, "w") as archive:
        archive.writestr("data", "{}")
        for name, value in entries.items():
            buffer = io.BytesIO()
            torch.save(value, buffer)
            archive.writestr(name, buffer.getvalue())


def make_run(
    root: Path,
    tag: str,
    name: str,
    state: str = "finished",
    budget: str = "cpu",
    seed: int = 0,
    weights: int = 10,
) -> Path:
    run = root / tag / name
    (run / "monitor").mkdir(parents=True)
    (run / "monitor" / "train_0.monitor.csv").write_text('#{"t_start": 0}\nr,l,t\n')
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "rl_model_8_steps.zip").write_bytes(b"x")
    status = {"state": state, "budget": budget, "seed": seed}
    (run / "status.json").write_text(json.dumps(status))
    for name_ in ("eval.json", "config.yml", "command.txt", "vecnormalize.npz"):
        (run / name_).write_text(name_)
    write_model(run / "model.zip", weights)
    (run / "metrics.csv").write_text(METRICS_CSV)
    return run


def test_collect_copies_only_finished_runs_of_the_budget(tmp_path: Path) -> None:
    src, dst = tmp_path / "runs", tmp_path / "results"
    make_run(src, "Pong-cnn", "0-a")
    make_run(src, "Pong-cnn", "1-b", state="running")
    make_run(src, "Pong-cnn", "2-c", budget="smoke")
    make_run(src, "Pong-fc", "0-d", state="failed")
    out = collect_runs(src, dst, "cpu", ["episode_return", "train/value_loss"])
    assert [p.relative_to(dst).as_posix() for p in out] == ["Pong-cnn/0-a"]
    files = sorted(p.relative_to(out[0]).as_posix() for p in out[0].rglob("*") if p.is_file())
    assert files == [
        "command.txt",
        "config.yml",
        "eval.json",
        "metrics.csv",
        "monitor/train_0.monitor.csv",
        "status.json",
    ]  # no model without keep_model, no checkpoints
    rows = (out[0] / "metrics.csv").read_text().splitlines()
    assert rows == [
        "step,wall_time,metric,value",
        "8,1.0,episode_return,-21",
        "16,2.0,train/value_loss,0.5",
        "16,2.0,episode_return,-19",
    ]


def test_collect_keeps_models_that_are_asked_for_and_small(tmp_path: Path) -> None:
    src, dst = tmp_path / "runs", tmp_path / "results"
    make_run(src, "Pong-fc", "0-a", seed=0)
    make_run(src, "Pong-fc", "1-b", seed=1)
    make_run(src, "Pong-big", "0-c", seed=0, weights=6_000)  # 24 kB of weights
    make_run(src, "Pong-slim", "0-d", seed=0, weights=4_000)  # 32 kB with its statistics
    out = collect_runs(
        src, dst, "cpu", ["episode_return"], lambda tag, st: st["seed"] == 0, max_model_bytes=20_000
    )
    kept = {p.relative_to(dst).as_posix(): (p / "model.zip").is_file() for p in out}
    assert kept == {
        "Pong-big/0-c": False,
        "Pong-fc/0-a": True,
        "Pong-fc/1-b": False,
        "Pong-slim/0-d": True,
    }
    assert (dst / "Pong-fc/0-a/vecnormalize.npz").is_file()
    assert not (dst / "Pong-big/0-c/vecnormalize.npz").exists()
    with zipfile.ZipFile(dst / "Pong-slim/0-d/model.zip") as archive:
        policy = torch.load(io.BytesIO(archive.read("policy.pth")), weights_only=True)
        optimizer = torch.load(io.BytesIO(archive.read("policy.optimizer.pth")), weights_only=True)
    assert torch.equal(policy["w"], torch.ones(4_000))
    assert optimizer == {"state": {}, "param_groups": [{"lr": 7e-4, "alpha": 0.99, "params": [0]}]}


def test_collect_never_overwrites_what_is_there(tmp_path: Path) -> None:
    src, dst = tmp_path / "runs", tmp_path / "results"
    make_run(src, "Pong-cnn", "0-a")
    (first,) = collect_runs(src, dst, "cpu", ["episode_return"])
    (first / "eval.json").write_text("edited")
    assert collect_runs(src, dst, "cpu", ["episode_return"]) == []
    assert (first / "eval.json").read_text() == "edited"


def test_mean_band_is_sd_over_three_seeds_on_the_shared_range() -> None:
    x = np.array([0.0, 100.0])
    short = np.array([0.0, 50.0])
    curves = [(x, np.array([0.0, 100.0])), (x, np.array([2.0, 102.0])), (short, np.zeros(2))]
    grid, mean, lo, hi = mean_band(curves, points=2)
    assert grid.tolist() == [0.0, 50.0]  # where every seed has data
    ys = np.array([[0.0, 50.0], [2.0, 52.0], [0.0, 0.0]])
    np.testing.assert_allclose(mean, ys.mean(axis=0))
    np.testing.assert_allclose(hi - mean, ys.std(axis=0, ddof=1))
    np.testing.assert_allclose(mean - lo, ys.std(axis=0, ddof=1))


def test_final_return_and_spread() -> None:
    steps = np.arange(1, 101, dtype=float)
    assert final_return(steps, steps) == pytest.approx(np.mean(np.arange(90, 101)))
    assert final_return(steps, steps, fraction=0.5) == pytest.approx(np.mean(np.arange(50, 101)))
    assert spread([1.0, 3.0], digits=2) == "2.00 ± 1.41"
    assert spread([5.0]) == "5.0 (1 seed)"


def test_read_run_reads_episodes_status_and_eval(tmp_path: Path) -> None:
    run = make_run(tmp_path, "Pong-cnn", "2-a", seed=2)
    status = {"state": "finished", "budget": "cpu", "seed": 2}
    status |= {"num_timesteps": 1_000, "wall_seconds": 120.0}
    (run / "status.json").write_text(json.dumps(status))
    (run / "eval.json").write_text(json.dumps({"policies": {"stochastic": {"mean_reward": 3}}}))
    result = read_run(run)
    assert (result.seed, result.num_timesteps) == (2, 1_000)
    assert result.steps_per_s == pytest.approx(1_000 / 120.0)
    assert result.wall_minutes == pytest.approx(2.0)
    assert result.steps.tolist() == [8.0, 16.0]
    assert result.returns.tolist() == [-21.0, -19.0]
    assert result.eval["policies"]["stochastic"]["mean_reward"] == 3
    # a run resumed before its status kept the time: its metrics' wall time spans the parts
    status["wall_seconds"] = 1.5
    (run / "status.json").write_text(json.dumps(status))
    assert read_run(run).wall_minutes == pytest.approx(2.0 / 60)
    assert read_run(run).steps_per_s == pytest.approx(1_000 / 2.0)


def test_plot_band_draws_the_mean_and_returns_its_rows() -> None:
    from attn_policies.canvas import new_figure

    ax = new_figure(3, 3).subplots()
    x = np.array([0.0, 10.0])
    rows = plot_band(ax, [(x, x), (x, x + 2.0)], "C0", "cnn", points=3)
    assert rows == [(0.0, 1.0, 0.0, 2.0), (5.0, 6.0, 5.0, 7.0), (10.0, 11.0, 10.0, 12.0)]
    (line,) = ax.lines
    assert line.get_label() == "cnn"
    assert line.get_ydata().tolist() == [1.0, 6.0, 11.0]


def test_finished_runs_and_run_result_helpers(tmp_path: Path) -> None:
    done = make_run(tmp_path, "Pong-cnn", "0-a")
    unfinished = make_run(tmp_path, "Pong-cnn", "1-b")
    (unfinished / "eval.json").unlink()
    assert finished_runs(tmp_path / "Pong-cnn") == [done]
    assert finished_runs(tmp_path / "missing") == []
    status = {"state": "finished", "budget": "cpu", "seed": 0}
    status |= {"num_timesteps": 16, "wall_seconds": 1.0}
    (done / "status.json").write_text(json.dumps(status))
    (done / "eval.json").write_text("{}")
    result = read_run(done)
    steps, smooth = result.curve(2)
    assert steps.tolist() == [8.0, 16.0] and smooth.tolist() == [-21.0, -20.0]
    assert result.final_return(0.5) == pytest.approx(-20.0)  # ends at 8 >= 0.5 * 16: both
    assert result.final_return(0.4) == pytest.approx(-19.0)  # only the episode at step 16


def test_replace_block_rewrites_only_between_its_markers(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(
        "x\n<!-- e7: cmd -->\n| a |\n| b |\n<!-- /e7 -->\n<!-- e8: c -->\nq\n<!-- /e8 -->\n"
    )
    assert replace_block(readme, "e7", "| new |\n")
    assert readme.read_text() == (
        "x\n<!-- e7: cmd -->\n| new |\n<!-- /e7 -->\n<!-- e8: c -->\nq\n<!-- /e8 -->\n"
    )
    assert not replace_block(readme, "e7", "| new |")  # unchanged: not rewritten
    before = readme.read_text()
    for bad in ("e9", "e"):
        with pytest.raises(ValueError, match=f"<!-- {bad}:"):
            replace_block(readme, bad, "y")
    readme.write_text(before + "<!-- e8: again -->\n<!-- /e8 -->\n")
    with pytest.raises(ValueError, match="one"):
        replace_block(readme, "e8", "y")


def test_replace_block_with_a_multi_line_table_already_there_changes_nothing(
    tmp_path: Path,
) -> None:
    page = tmp_path / "page.md"
    table = "| a | b |\n| --- | --- |\n| 1 | 2 |"
    page.write_text(f"intro\n<!-- report: cmd -->\n{table}\n<!-- /report -->\nend\n")
    inode = page.stat().st_ino
    assert not replace_block(page, "report", table)  # the same rows: unchanged
    assert page.stat().st_ino == inode  # not rewritten (a rewrite is a new file)
    assert replace_block(page, "report", table.replace("2", "3"))
    assert page.stat().st_ino != inode


def test_copy_half_stores_float16_weights_that_load_into_the_float32_module(
    tmp_path: Path,
) -> None:
    import torch

    run = tmp_path / "run"
    run.mkdir()
    (run / "status.json").write_text(json.dumps({"state": "finished", "seed": 0}))
    (run / "progress.csv").write_text("epoch,loss\n1,0.5\n")
    module = torch.nn.Sequential(torch.nn.Linear(256, 128), torch.nn.BatchNorm1d(128))
    torch.save(module.state_dict(), run / "model.pt")
    out = copy_half(run, tmp_path / "out")
    assert (out / "progress.csv").read_text() == "epoch,loss\n1,0.5\n"
    assert not (out / "best_model.pt").exists()  # only what the run has
    half = torch.load(out / "model.pt", weights_only=True)
    assert half["0.weight"].dtype == torch.float16
    assert half["1.num_batches_tracked"].dtype == torch.int64  # integers untouched
    assert (out / "model.pt").stat().st_size < 0.6 * (run / "model.pt").stat().st_size
    loaded = torch.nn.Sequential(torch.nn.Linear(256, 128), torch.nn.BatchNorm1d(128))
    loaded.load_state_dict(half)
    assert loaded[0].weight.dtype == torch.float32
    torch.testing.assert_close(loaded[0].weight, module[0].weight, rtol=1e-3, atol=1e-4)
    with pytest.raises(ValueError, match="exists already"):
        copy_half(run, out)
    (run / "status.json").write_text(json.dumps({"state": "interrupted"}))
    with pytest.raises(ValueError, match="not finished"):
        copy_half(run, tmp_path / "other")


def test_replace_blocks_checks_every_pair_before_it_writes(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    text = "<!-- a: x -->\nold a\n<!-- /a -->\n<!-- b: y -->\nold b\n<!-- /b -->\n"
    page.write_text(text)
    with pytest.raises(ValueError, match="<!-- c:"):
        replace_blocks(page, {"a": "new a", "c": "new c"})
    assert page.read_text() == text  # the first block was not written either
    assert replace_blocks(page, {"a": "new a", "b": "new b"})
    assert page.read_text() == text.replace("old", "new")
    assert not replace_blocks(page, {"b": "new b", "a": "new a"})
