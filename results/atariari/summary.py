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
``--readme README.md`` puts the first table of ``summary.md`` between the README's
``<!-- e7-table: ... -->`` markers.
"""

from __future__ import annotations

import argparse
import csv
import statistics
from pathlib import Path

from attn_policies.canvas import new_figure, save_figure
from zoo.results import collect_runs, finished_runs, plot_band, read_run, replace_block, spread

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


def keep_model(tag: str, status: dict) -> bool:
    return tag.split("-")[-1] in ATTENTION or status.get("seed") == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collect", type=Path, help="copy finished cpu runs from this folder")
    parser.add_argument("--readme", type=Path, help="refill its e7-table block with the table")
    args = parser.parse_args()
    if args.collect is not None:
        found = collect_runs(args.collect, HERE, "cpu", METRICS, keep_model, MAX_MODEL_BYTES)
        for target in found:
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
            results = [read_run(run) for run in finished_runs(HERE / tag)]
            if not results:
                continue
            curves = [r.curve(SMOOTH) for r in results]
            finals = [r.final_return(FINAL_FRACTION) for r in results]
            tests = [r.eval["policies"]["stochastic"] for r in results]
            for r, final, test in zip(results, finals, tests, strict=True):
                rows.append(
                    f"| {tag} | {r.seed} | {r.num_timesteps:,} | {final:.1f} | "
                    f"{test['mean_reward']:.1f} ± {test['std_reward']:.1f} | "
                    f"{r.steps_per_s:,.0f} | {r.wall_minutes:.0f} min |"
                )
            means.append(
                f"| {condition} | {LABELS[model]} | {len(results)} | {spread(finals)} | "
                f"{spread([t['mean_reward'] for t in tests])} | "
                f"{statistics.mean(r.steps_per_s for r in results):,.0f} | "
                f"{statistics.mean(r.wall_minutes for r in results):.0f} min |"
            )
            color = f"C{MODELS.index(model)}"  # one colour per model in every panel
            label = f"{LABELS[model]} ({len(results)})"
            csv_rows += [
                (condition, model, f"{s:.0f}", f"{m:.3f}", f"{a:.3f}", f"{b:.3f}", len(results))
                for s, m, a, b in plot_band(ax, curves, color, label, GRID_POINTS)
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
    if args.readme is not None and replace_block(args.readme, "e7-table", "\n".join(means)):
        print(f"updated {args.readme}")
    print(text)


if __name__ == "__main__":
    main()
