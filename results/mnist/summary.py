"""Summary table of the E1 runs on the UCI digits: ``python results/mnist/summary.py``.

Reads ``<set>/<model>/<run>/eval.json`` (and ``status.json``) beside this file, for the sets
``digits`` (cpu budget, 300 iterations) and ``digits_full`` (full budget, the book's 1,000),
and writes ``summary.md``: test accuracy per seed, mean ± standard deviation over seeds, and
the book's figures on MNIST.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

HERE = Path(__file__).parent
SETS = {"digits": "cpu budget", "digits_full": "full budget"}
MODELS = ("relational", "cnn")
BOOK = {"relational": "94.6% (notebook 96.0%)", "cnn": "87.8%"}


def main() -> None:
    means = [
        "| runs | relational | CNN |",
        "| --- | --- | --- |",
        f"| book, MNIST, 1000 iterations | {BOOK['relational']} | {BOOK['cnn']} |",
    ]
    rows = [
        "| runs | model | seed | test accuracy (500 transformed test digits) | iterations | "
        "wall time |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, label in SETS.items():
        if not (HERE / name).is_dir():
            continue
        cells, iterations = [], set()
        for model in MODELS:
            accuracies = []
            for folder in sorted((HERE / name / model).iterdir()):
                result = json.loads((folder / "eval.json").read_text())
                status = json.loads((folder / "status.json").read_text())
                accuracies.append(result["test_accuracy"])
                iterations.add(status["num_timesteps"])
                rows.append(
                    f"| {name} | {model} | {status['seed']} | {result['test_accuracy']:.1%} | "
                    f"{status['num_timesteps']} | {status['wall_seconds'] / 60:.1f} min |"
                )
            if len(accuracies) > 1:
                mean, spread = statistics.mean(accuracies), statistics.stdev(accuracies)
                cells.append(f"{mean:.1%} ± {spread:.1%} ({len(accuracies)} seeds)")
            else:
                cells.append(f"{accuracies[0]:.1%} (1 seed)")
        steps = "/".join(str(i) for i in sorted(iterations))
        means.append(f"| UCI digits, {label}, {steps} iterations | {cells[0]} | {cells[1]} |")
    text = "\n".join(["# E1 on the UCI digits", "", *means, "", *rows, ""])
    (HERE / "summary.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
