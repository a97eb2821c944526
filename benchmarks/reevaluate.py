"""Every committed run folder tested again: does it still score its recorded figure?

For each run folder under ``results/`` whose ``eval.json`` records a test (and whose model
is committed), ``zoo.evaluate`` replays the same test (the recorded number of episodes and
test seed, the best model) with today's code and compares each policy's mean with the
recorded one; a classifier's (E1) test accuracy on its fixed test set likewise. A refactor
that changed what an agent does shows up as a mismatch.

Usage::

    python benchmarks/reevaluate.py [--only 'cartpole_pi/*' ...] [--max-episodes 1000]
        [--jobs 2] [--resume LOG ...] [--out benchmarks/results/reevaluate.json]

It prints one JSON row per folder as it goes; ``--resume LOG`` takes the rows an earlier,
interrupted invocation printed into LOG and checks only the folders they lack. ``--jobs N``
checks N folders at a time, each in its own process with one torch thread.

``--base CHECKOUT`` (a ``git worktree`` of the revision before a change) replays every folder
that differs from its record once more with that revision's code, on this machine: equal
figures mean the change kept the behaviour, and the gap to the record is the machine's.

Folders whose recorded test is longer than ``--max-episodes`` episodes, or that hold no
model (run folders committed without weights, imported agents), are listed as skipped.

A folder whose replay differs is replayed again under each kernel set of
:data:`zoo.float_kernels.KERNELS` (AVX-512, AVX2, AVX, MKL's compatible path), as on other
CPUs: ``within_kernel_spread`` says whether the recorded mean lies between the lowest and the
highest of those replays, i.e. whether the same behaviour measured on another machine explains
it. ``eval.json`` files written since records began name their ``float_environment``; for
those, a replay in the same environment must give the recorded mean exactly.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import multiprocessing
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import torch

import zoo
from zoo.evaluation import float_environment
from zoo.float_kernels import KERNEL_VARIABLES, KERNELS, kernel_spread

# what a checkout of another revision runs in a child: the means of one folder's test
_BASE_REPLAY = """
import json, sys, torch
torch.set_num_threads(1)
import zoo
result = zoo.evaluate(sys.argv[1], n_episodes=int(sys.argv[2]), seed=int(sys.argv[3]))
print(json.dumps({mode: r["mean_reward"] for mode, r in result["policies"].items()}))
"""

RESULTS = Path("results")


def recorded_folders(patterns: list[str]) -> list[Path]:
    """Run folders under results/ with an ``eval.json`` and a ``config.yml``, optionally
    restricted to those matching one of ``patterns`` (relative to results/)."""
    folders = sorted(
        f.parent for f in RESULTS.rglob("eval.json") if (f.parent / "config.yml").exists()
    )
    if patterns:
        keep = [
            f for f in folders
            if any(fnmatch.fnmatch(str(f.relative_to(RESULTS)), p) for p in patterns)
        ]  # fmt: skip
        folders = keep
    return folders


def check(folder: Path, max_episodes: int) -> dict:
    """The recorded and replayed means of one folder's test."""
    recorded = json.loads((folder / "eval.json").read_text())
    policies = recorded.get("policies")
    n = recorded.get("n_episodes")
    row: dict = {"folder": str(folder)}
    if isinstance(recorded.get("test_accuracy"), float):  # a classifier (E1): its test set
        start = time.perf_counter()
        accuracy = zoo.evaluate(folder)["test_accuracy"]
        same = accuracy == recorded["test_accuracy"]
        row["seconds"] = round(time.perf_counter() - start, 1)
        row["policies"] = {
            "test_accuracy": {"recorded": recorded["test_accuracy"], "now": accuracy, "same": same}
        }
        # a fraction of n_test images: no last-bit drift to explain, equal or different
        return {**row, "same": same, "within_kernel_spread": False}
    if not isinstance(policies, dict) or not isinstance(n, int):
        return {**row, "skipped": "eval.json records no episode test"}
    if n > max_episodes:
        return {**row, "skipped": f"{n} episodes > --max-episodes {max_episodes}"}
    start = time.perf_counter()
    try:
        again = zoo.evaluate(folder, n_episodes=n, seed=recorded.get("test_seed"))
    except FileNotFoundError as err:
        return {**row, "skipped": str(err).splitlines()[0][:200]}
    row["seconds"] = round(time.perf_counter() - start, 1)
    row["policies"] = {}
    same = True
    for name, summary in policies.items():
        new = (again.get("policies") or {}).get(name, {})
        a, b = summary.get("mean_reward"), new.get("mean_reward")
        match = a is not None and b is not None and math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)
        same &= match
        row["policies"][name] = {"recorded": a, "now": b, "same": match}
    row["same"] = same
    if not same:
        recorded_env = recorded.get("float_environment")
        row["same_float_environment"] = (
            recorded_env == float_environment() if recorded_env else None
        )
        # the native kernels' replay is the one just made (one thread, as in the child)
        others = {k: v for k, v in KERNELS.items() if k != "native"}
        spread = kernel_spread(folder, n, recorded.get("test_seed"), others)
        for name, summary in policies.items():
            means = {"native": row["policies"][name]["now"], **spread.get(name, {})}
            low, high = min(means.values()), max(means.values())
            a = summary.get("mean_reward")
            row["policies"][name]["kernel_spread"] = means
            row["policies"][name]["within_kernel_spread"] = a is not None and low <= a <= high
        # in the environment it was recorded in, only the same figure is the same behaviour
        row["within_kernel_spread"] = not row["same_float_environment"] and all(
            p["same"] or p.get("within_kernel_spread") for p in row["policies"].values()
        )
    return row


def base_replay(row: dict, checkout: Path) -> dict:
    """``row`` with ``base``: its test replayed by ``checkout``'s code in a child interpreter
    (native kernels, one thread), and whether that equals today's replay to the last bit."""
    folder = Path(row["folder"]).resolve()
    recorded = json.loads((folder / "eval.json").read_text())
    n, seed = recorded.get("n_episodes"), recorded.get("test_seed")
    if n is None:  # a classifier's test set: replayed only by today's code
        return row
    env = {k: v for k, v in os.environ.items() if k not in KERNEL_VARIABLES}
    env.update(PYTHONPATH=str(checkout.resolve()), OMP_NUM_THREADS="1")
    command = [sys.executable, "-c", _BASE_REPLAY, str(folder), str(n), str(seed)]
    # cwd: the checkout, so that its packages, not this tree's, are the ones imported
    done = subprocess.run(command, env=env, cwd=checkout, capture_output=True, text=True)
    if done.returncode != 0:
        return {**row, "base": {"error": done.stderr.strip()[-300:]}}
    revision = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True, text=True
    ).stdout.strip()
    means = json.loads(done.stdout.strip().splitlines()[-1])
    now = {name: p["now"] for name, p in row["policies"].items()}
    return {**row, "base": {"revision": revision, "means": means, "same_as_now": means == now}}


def _check_one_thread(folder: Path, max_episodes: int, base: Path | None) -> dict:
    torch.set_num_threads(1)  # a run's default (zoo.runs), and the kernel replays'
    row = check(folder, max_episodes)
    return base_replay(row, base) if base is not None and row.get("same") is False else row


def printed_rows(logs: list[str]) -> dict[str, dict]:
    """The folders an earlier invocation checked, by folder: the rows it printed (one JSON
    object per line) or the ``runs`` of the JSON it wrote. Skipped folders are not taken:
    telling them again costs nothing, and a reason to skip may be gone."""
    rows: list[dict] = []
    for log in logs:
        text = Path(log).read_text()
        if text.startswith('{\n "summary"'):
            rows += json.loads(text)["runs"]
        else:
            rows += [json.loads(x) for x in text.splitlines() if x.startswith('{"folder"')]
    return {row["folder"]: row for row in rows if "same" in row}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--max-episodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--resume", nargs="*", default=[], metavar="LOG")
    parser.add_argument("--base", type=Path, metavar="CHECKOUT")
    parser.add_argument("--out", default="benchmarks/results/reevaluate.json")
    args = parser.parse_args()
    folders = recorded_folders(args.only)
    earlier = printed_rows(args.resume)
    rows = [earlier[str(f)] for f in folders if str(f) in earlier]
    if args.base is not None:  # resumed rows that differ and were not replayed by the base yet
        rows = [
            base_replay(r, args.base) if r.get("same") is False and "base" not in r else r
            for r in rows
        ]
    todo = [f for f in folders if str(f) not in earlier]
    # spawn: a forked child would inherit the parent's torch thread pool
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max(1, args.jobs), mp_context=context) as pool:
        futures = [pool.submit(_check_one_thread, f, args.max_episodes, args.base) for f in todo]
        for future in as_completed(futures):
            row = future.result()
            rows.append(row)
            print(json.dumps(row), flush=True)
    rows.sort(key=lambda r: r["folder"])
    checked = [r for r in rows if "same" in r]
    summary = {
        "checked": len(checked),
        "same": sum(r["same"] for r in checked),
        "within_kernel_spread": [
            r["folder"] for r in checked if not r["same"] and r["within_kernel_spread"]
        ],
        "different": [
            r["folder"] for r in checked if not r["same"] and not r["within_kernel_spread"]
        ],
        "skipped": len(rows) - len(checked),
    }
    if args.base is not None:
        replayed = [r for r in checked if "base" in r]
        summary["base_replayed"] = len(replayed)
        summary["changed_since_base"] = [
            r["folder"] for r in replayed if not r["base"].get("same_as_now")
        ]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"summary": summary, "runs": rows}, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0 if not summary["different"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
