"""Why g-AWRL does not learn Pong at L here: PPO statistics of short probe runs.

``python results/atariari/probes.py`` reads ``probes/<name>/metrics.csv`` (each folder's
``command.txt`` is the command that made it; ``status.json`` says where a probe was stopped)
and writes ``probes.md``: per probe, the training episodes' return early and late, the policy
entropy after 50k / 100k / 200k steps, the approximate KL and clip fraction of the first
update and their means over the first 200k steps. All probes are Pong L, seed 0, the thesis's
PPO settings; they differ only in what the table's first column names. The last column is
the final model's test return (``eval.json``, 10 episodes) where a probe ran to its end.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from zoo.metrics import read_metrics, series

HERE = Path(__file__).parent / "probes"
PROBES = {
    "fc_1M": "FC baseline, 1M steps",
    "g_awrl_1M": "g-AWRL as configured (table 7.2 heads on 8 x 128 tokens, ReLU), 1M steps",
    "g_awrl_batch_stats": "g-AWRL, batch-norm with batch statistics when acting too",
    "g_awrl_identity": "g-AWRL, no activation after the batch-norms (the text names none)",
    "g_awrl_fc32": "g-AWRL, a final FC of 32 units before the heads (the text's final FC)",
    "g_awrl_no_ortho": "g-AWRL, PyTorch's default init instead of SB3's orthogonal one",
    "g_awrl_lr2.5e-5": "g-AWRL, learning rate 2.5e-5 (a tenth of the thesis's), 2M steps",
}


def at(steps: np.ndarray, values: np.ndarray, step: float) -> float:
    """The value logged at the first step at or after ``step`` (NaN past the end)."""
    i = np.searchsorted(steps, step)
    return float(values[i]) if i < len(values) else float("nan")


def window(steps: np.ndarray, values: np.ndarray, lo: float, hi: float) -> float:
    keep = (steps >= lo) & (steps < hi)
    return float(values[keep].mean()) if keep.any() else float("nan")


def main() -> None:
    rows = [
        "| probe | steps run | return, first 100k | return, last 100k | entropy at 50k / 100k "
        "/ 200k | first update: KL, clip | first 200k: mean KL, clip | test return |",
        "| --- | ---: | ---: | ---: | --- | --- | --- | ---: |",
    ]
    for name, label in PROBES.items():
        folder = HERE / name
        table = read_metrics(folder)
        status = json.loads((folder / "status.json").read_text())
        end = float(status["num_timesteps"])
        es, er = series(table, "episode_return")
        s, entropy = series(table, "train/entropy_loss")
        _, kl = series(table, "train/approx_kl")
        _, clip = series(table, "train/clip_fraction")
        test = "stopped early"
        if (folder / "eval.json").is_file():
            result = json.loads((folder / "eval.json").read_text())["policies"]["stochastic"]
            test = f"{result['mean_reward']:.1f} ± {result['std_reward']:.1f}"
        entropies = " / ".join(
            f"{-at(s, entropy, k):.2f}".replace("nan", "n/a") for k in (50e3, 100e3, 200e3)
        )
        rows.append(
            f"| {label} (`{name}`) | {end:,.0f} | {window(es, er, 0, 1e5):.1f} | "
            f"{window(es, er, end - 1e5, end + 1):.1f} | {entropies} | "
            f"{kl[0]:.4f}, {clip[0]:.3f} | {window(s, kl, 0, 2e5):.4f}, "
            f"{window(s, clip, 0, 2e5):.3f} | {test} |"
        )
    text = "\n".join(
        [
            "# E7 probes: PPO on Pong L, seed 0",
            "",
            "Entropy of a uniform policy over Pong's 6 actions: 1.79.",
            "",
            *rows,
            "",
        ]
    )
    (HERE.parent / "probes.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
