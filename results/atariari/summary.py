"""E7 at the cpu budget: the thesis-form figure and the summary table, from the run folders here.

``python results/atariari/summary.py`` reads ``<tag>/<seed>-<time>/`` beside this file (tags
``Pong-4L-g_awrl``, ``Pong-L-fc``, ...: the cells of ``attn-zoo train atariari --budget cpu``)
and writes:

- ``curves.png`` / ``curves.csv``: one panel per condition, one line per model: the mean over
  seeds of the training episodes' return (rolling mean over :data:`SMOOTH` episodes,
  interpolated onto a common step grid) with a band of ± one standard deviation over seeds
  (the min-max band where only two seeds ran);
- ``summary.md``: per cell, the final return (training episodes that end in the last
  :data:`FINAL_FRACTION` of the steps, mean ± sd over seeds), the test return of the final
  model (``eval.json``: 10 episodes each), steps/s and wall time per run, and one row per run.

``python results/atariari/summary.py --collect runs/atariari`` first copies finished runs of
the cpu budget here, skipping folders already here: the small files, ``metrics.csv`` cut to the
rows of :data:`METRICS` (episodes and PPO's training statistics; SB3's timers and rollout
means are left out), and the model with its ``vecnormalize.npz`` for every seed of the
attention models (for ``attn-zoo maps``) and seed 0 of the baselines, each under
:data:`MAX_MODEL_BYTES` (FC at 4L is 6.5 MB: 541k weights and Adam's state); checkpoints and
TensorBoard logs stay in ``runs/``.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import statistics
from pathlib import Path

import numpy as np

from attn_policies.canvas import new_figure, save_figure
from zoo.metrics import read_metrics, series
from zoo.plots import rolling_mean

HERE = Path(__file__).parent
SMOOTH = 20
FINAL_FRACTION = 0.1
GRID_POINTS = 200
CONDITIONS = ("L", "4L")
MODELS = ("g_awrl", "d_awrl", "content", "address", "fc", "cnn", "acnn")
ATTENTION = ("g_awrl", "d_awrl", "content", "address")
LABELS = {
    "g_awrl": "g-AWRL",
    "d_awrl": "d-AWRL",
    "content": "g-AWRL content-only",
    "address": "g-AWRL address-only",
    "fc": "FC",
    "cnn": "CNN",
    "acnn": "a-CNN",
}
KEEP = ("command.txt", "config.yml", "eval.json", "status.json")
MODEL_FILES = ("model.zip", "vecnormalize.npz")
MAX_MODEL_BYTES = 5_000_000
METRICS = (
    "episode_return",
    "episode_length",
    "train/loss",
    "train/value_loss",
    "train/policy_gradient_loss",
    "train/entropy_loss",
    "train/approx_kl",
    "train/clip_fraction",
    "train/explained_variance",
)


def collect(source: Path) -> list[Path]:
    """Copy the finished cpu-budget runs under ``source`` (``runs/atariari``) here."""
    copied = []
    for status_file in sorted(source.glob("*/*/status.json")):
        run = status_file.parent
        status = json.loads(status_file.read_text())
        target = HERE / run.parent.name / run.name
        if status.get("state") != "finished" or status.get("budget") != "cpu" or target.exists():
            continue
        target.mkdir(parents=True)
        attention = run.parent.name.split("-")[-1] in ATTENTION
        small = (run / "model.zip").stat().st_size < MAX_MODEL_BYTES
        keep_model = small and (attention or status.get("seed") == 0)
        for name in KEEP + (MODEL_FILES if keep_model else ()):
            if (run / name).is_file():
                shutil.copy2(run / name, target / name)
        with (run / "metrics.csv").open(newline="") as src:
            rows = csv.reader(src)
            header = next(rows)
            with (target / "metrics.csv").open("w", newline="") as dst:
                out = csv.writer(dst)
                out.writerow(header)
                out.writerows(row for row in rows if row[2] in METRICS)
        shutil.copytree(run / "monitor", target / "monitor")
        copied.append(target)
    return copied


def runs_of(tag: str) -> list[Path]:
    return sorted(p for p in (HERE / tag).glob("*-*") if (p / "eval.json").is_file())


def final_return(steps: np.ndarray, returns: np.ndarray) -> float:
    last = steps >= (1.0 - FINAL_FRACTION) * float(steps.max())
    return float(np.mean(returns[last]))


def mean_band(curves: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, ...]:
    """Mean and band over seeds on the step range every seed covers."""
    start, end = max(x[0] for x, _ in curves), min(x[-1] for x, _ in curves)
    grid = np.linspace(start, end, GRID_POINTS)
    ys = np.stack([np.interp(grid, x, y) for x, y in curves])
    mean = ys.mean(axis=0)
    if len(curves) >= 3:
        sd = ys.std(axis=0, ddof=1)
        return grid, mean, mean - sd, mean + sd
    return grid, mean, ys.min(axis=0), ys.max(axis=0)


def spread(values: list[float], digits: int = 1) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f} (1 seed)"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collect", type=Path, help="copy finished cpu runs from this folder")
    args = parser.parse_args()
    if args.collect is not None:
        for target in collect(args.collect):
            print(f"collected {target.relative_to(HERE)}")

    fig = new_figure(6.0 * len(CONDITIONS), 4.5)
    axes = fig.subplots(1, len(CONDITIONS), sharey=True, squeeze=False)[0]
    csv_rows = [("condition", "model", "step", "mean", "lo", "hi", "n_seeds")]
    means = [
        "| Pong | model | seeds | final return (last 10% of steps) | test return (final model) "
        "| steps/s | wall time per run |",
        "| --- | --- | ---: | --- | --- | ---: | ---: |",
    ]
    rows = [
        "| cell | seed | steps | final return | test return (10 episodes) | steps/s | wall time |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for ax, condition in zip(axes, CONDITIONS, strict=True):
        for model in MODELS:
            tag = f"Pong-{condition}-{model}"
            runs = runs_of(tag)
            if not runs:
                continue
            finals, tests, rates, walls, curves = [], [], [], [], []
            for run in runs:
                steps, returns = (
                    np.asarray(a, float) for a in series(read_metrics(run), "episode_return")
                )
                curves.append((steps, rolling_mean(returns, SMOOTH)))
                status = json.loads((run / "status.json").read_text())
                result = json.loads((run / "eval.json").read_text())
                test = result["policies"]["stochastic"]
                finals.append(final_return(steps, returns))
                tests.append(test["mean_reward"])
                rates.append(status["num_timesteps"] / status["wall_seconds"])
                walls.append(status["wall_seconds"] / 60)
                rows.append(
                    f"| {tag} | {status['seed']} | {status['num_timesteps']:,} | "
                    f"{finals[-1]:.1f} | {test['mean_reward']:.1f} ± {test['std_reward']:.1f} | "
                    f"{rates[-1]:,.0f} | {walls[-1]:.0f} min |"
                )
            means.append(
                f"| {condition} | {LABELS[model]} | {len(runs)} | {spread(finals)} | "
                f"{spread(tests)} | {statistics.mean(rates):,.0f} | "
                f"{statistics.mean(walls):.0f} min |"
            )
            grid, mean, lo, hi = mean_band(curves)
            color = f"C{MODELS.index(model)}"  # one colour per model in every panel
            ax.plot(grid, mean, color=color, label=f"{LABELS[model]} ({len(runs)})")
            ax.fill_between(grid, lo, hi, color=color, alpha=0.2, linewidth=0)
            csv_rows += [
                (condition, model, f"{s:.0f}", f"{m:.3f}", f"{a:.3f}", f"{b:.3f}", len(runs))
                for s, m, a, b in zip(grid, mean, lo, hi, strict=True)
            ]
        ax.set_title(f"Pong {condition}")
        ax.set_xlabel("steps")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(loc="upper left", fontsize=8)
    axes[0].set_ylabel(f"episode return (rolling mean of {SMOOTH}; band ± sd over seeds)")
    fig.suptitle("E7 at the cpu budget: PPO on AtariARI Pong features with distractors")
    save_figure(fig, HERE / "curves.png")
    with (HERE / "curves.csv").open("w", newline="") as fh:
        csv.writer(fh).writerows(csv_rows)
    text = "\n".join(["# E7 at the cpu budget", "", *means, "", *rows, ""])
    (HERE / "summary.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
