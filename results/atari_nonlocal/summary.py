"""E8 at the cpu budget: learning curves and the table-1 comparison, from the run folders here.

``python results/atari_nonlocal/summary.py`` reads ``<game>-<variant>/<seed>-<time>/`` beside
this file (the cells of ``attn-zoo train atari_nonlocal --budget cpu``: A2C on Pong with the
Nature CNN, ``cnn``, and with the non-local block before the fully connected layer, ``fc``,
the paper's default) and writes:

- ``curves.png`` / ``curves.csv``: one panel per game, one line per architecture: the mean
  over seeds of the training episodes' return (rolling mean over :data:`SMOOTH` episodes) with
  a band of ± one standard deviation over seeds (min-max with fewer than three);
- ``summary.md``: per cell, seed 003's table-1 metric (``eval.json``'s ``training_return``: the
  mean return of the training episodes that end in the final 10,000 time steps), the return
  of the training episodes in the last :data:`FINAL_FRACTION` of the steps (many more
  episodes, so a steadier figure), the test return of the final model (10 episodes), steps/s
  and wall time per run, the paper's figure beside them; then one row per run.

``python results/atari_nonlocal/summary.py --collect runs/atari_nonlocal`` first copies the
finished cpu-budget runs here (:func:`zoo.results.collect_runs`): the small files, the Monitor
logs the table-1 metric is read from, and ``metrics.csv`` cut to :data:`METRICS`. The models
(13 MB with RMSprop's state) stay in ``runs/``.
``--readme README.md`` puts the first table of ``summary.md`` between the README's
``<!-- e8-table: ... -->`` markers.
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
GAMES = ("Pong", "Breakout")
VARIANTS = ("cnn", "fc", "conv1", "conv2", "conv3", "all", "conv1x1", "conv3x3")
LABELS = {
    "cnn": "Nature CNN",
    "fc": "non-local before FC",
    "conv1": "non-local before conv1",
    "conv2": "non-local before conv2",
    "conv3": "non-local before conv3",
    "all": "non-local at all four",
    "conv1x1": "Conv 32 1x1 before FC",
    "conv3x3": "Conv 32 3x3 before FC",
}
# Seed 003, table 1 (A2C, 10M steps, final 10k-step average): CNN -> self-attention.
PAPER = {("Pong", "cnn"): 18.1, ("Pong", "fc"): 19.5, ("Breakout", "cnn"): 382.0,
         ("Breakout", "fc"): 387.0}  # fmt: skip
METRICS = (
    "episode_return",
    "episode_length",
    "train/entropy_loss",
    "train/policy_loss",
    "train/value_loss",
    "train/explained_variance",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collect", type=Path, help="copy finished cpu runs from this folder")
    parser.add_argument("--readme", type=Path, help="refill its e8-table block with the table")
    args = parser.parse_args()
    if args.collect is not None:
        for target in collect_runs(args.collect, HERE, "cpu", METRICS):
            print(f"collected {target.relative_to(HERE)}")

    games = [g for g in GAMES if any(finished_runs(HERE / f"{g}-{v}") for v in VARIANTS)]
    fig = new_figure(6.0 * max(len(games), 1), 4.5)
    axes = fig.subplots(1, max(len(games), 1), squeeze=False)[0]
    csv_rows = [("game", "variant", "step", "mean", "lo", "hi", "n_seeds")]
    means = [
        "| game | architecture | seeds | final 10k steps (table 1's metric) | paper (10M steps) "
        "| last 10% of steps | test return (final model) | steps/s | wall time per run |",
        "| --- | --- | ---: | --- | ---: | --- | --- | ---: | ---: |",
    ]
    rows = [
        "| cell | seed | steps | final 10k steps (episodes) | last 10% of steps "
        "| test return (10 episodes) | steps/s | wall time |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for ax, game in zip(axes, games, strict=False):
        for variant in VARIANTS:
            tag = f"{game}-{variant}"
            results = [read_run(run) for run in finished_runs(HERE / tag)]
            if not results:
                continue
            curves = [r.curve(SMOOTH) for r in results]
            finals = [r.final_return(FINAL_FRACTION) for r in results]
            training = [r.eval["training_return"] for r in results]
            tests = [r.eval["policies"]["stochastic"] for r in results]
            for r, final, train, test in zip(results, finals, training, tests, strict=True):
                rows.append(
                    f"| {tag} | {r.seed} | {r.num_timesteps:,} | "
                    f"{train['mean_reward']:.1f} ({train['n_episodes']}) | {final:.1f} | "
                    f"{test['mean_reward']:.1f} ± {test['std_reward']:.1f} | "
                    f"{r.steps_per_s:,.0f} | {r.wall_minutes:.0f} min |"
                )
            paper = PAPER.get((game, variant))
            means.append(
                f"| {game} | {LABELS[variant]} | {len(results)} | "
                f"{spread([t['mean_reward'] for t in training])} | "
                f"{'' if paper is None else paper} | {spread(finals)} | "
                f"{spread([t['mean_reward'] for t in tests])} | "
                f"{statistics.mean(r.steps_per_s for r in results):,.0f} | "
                f"{statistics.mean(r.wall_minutes for r in results):.0f} min |"
            )
            color = f"C{VARIANTS.index(variant)}"
            label = f"{LABELS[variant]} ({len(results)})"
            csv_rows += [
                (game, variant, f"{s:.0f}", f"{m:.3f}", f"{a:.3f}", f"{b:.3f}", len(results))
                for s, m, a, b in plot_band(ax, curves, color, label, GRID_POINTS)
            ]
        ax.set_title(game)
        ax.set_xlabel("steps (agent steps, 4 frames each)")
        ax.set_ylabel(f"episode return (rolling mean of {SMOOTH}; band over seeds)")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(loc="upper left", fontsize=8)
    fig.suptitle("E8 at the cpu budget: A2C with and without a non-local block")
    save_figure(fig, HERE / "curves.png")
    with (HERE / "curves.csv").open("w", newline="") as fh:
        csv.writer(fh).writerows(csv_rows)
    text = "\n".join(["# E8 at the cpu budget", "", *means, "", *rows, ""])
    (HERE / "summary.md").write_text(text)
    if args.readme is not None and replace_block(args.readme, "e8-table", "\n".join(means)):
        print(f"updated {args.readme}")
    print(text)


if __name__ == "__main__":
    main()
