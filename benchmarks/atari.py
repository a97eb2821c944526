"""E8's A2C on Pong, steps per second before and after the CPU speed-ups (issue 49, item 3).

Each cell is a real ``attn-zoo train atari_nonlocal`` run in a subprocess (one torch thread,
the cpu budget's 8 envs in the run's own process) with periodic evaluation off; its speed
is env steps over the training wall time the run writes to ``status.json``. The settings are
measured in turns (before, after, ... ``--repeats`` times) in one invocation on one machine,
and each setting's median is reported:

- ``before``: the cpu budget's network as it ships (fp32, NCHW, the block on SDPA);
- ``channels_last``: the same fp32 network with NHWC weights and activations
  (``features_extractor_kwargs.channels_last: true``), the same arithmetic;
- ``fast_rows``: channels-last and the non-local block's rows on
  :func:`attn_policies.nonlocal_cnn.row_attention` instead of SDPA
  (``features_extractor_kwargs.fast_rows: true``; fp32, other rounding; the plain CNN has
  no block, so it equals ``channels_last`` there);
- ``bf16``: ``fast_rows`` under bfloat16 autocast, measured only: no config uses it until
  learning curves on the same seeds match fp32's;
- ``16_envs``: ``before`` with the full budget's 16 envs (A2C batches of 80), still in one
  process;
- ``16_envs_fast_rows``: ``fast_rows`` with 16 envs;
- ``graph``: ``fast_rows`` with ``algo: a2c_graph``
  (:class:`attn_policies.algorithms.RolloutGraphA2C`: the update differentiates the acting
  forward passes instead of running the network again; the same update up to rounding);
- ``16_envs_graph``: ``graph`` with 16 envs.

``speedup_a2c_pong`` is ``16_envs_graph`` (the full budget's setting: 16 envs,
channels-last, fast rows, ``a2c_graph``) over ``before`` for the paper's default variant (the
non-local block before FC): the 10M-step runs' speed against the cpu budget as it shipped;
``speedup_a2c_pong_8_envs`` is ``fast_rows`` over ``before`` (the kernels alone).

``learning_curves`` is the A/B that a speed-up must pass before a config uses it
(:func:`zoo.curve_windows.curves_match`, its rule fixed before the runs): the committed 2M-step runs
of the cpu budget (``results/atari_nonlocal/Pong-fc``) against the same command with the full
budget's network and update (``results/atari_nonlocal/fast_rows_graph/Pong-fc``), windows of
500k steps. ``--ab-only`` refreshes that key alone in an existing JSON (no timing).

Usage::

    python benchmarks/atari.py [--steps 16000] [--repeats 2] [--out benchmarks/results/atari.json]
    python benchmarks/atari.py --ab-only

Writes the JSON and a PNG beside it. Run it on an otherwise quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

KWARGS = "policy_kwargs.features_extractor_kwargs"
FAST = [f"{KWARGS}.channels_last=true", f"{KWARGS}.fast_rows=true"]
SETTINGS: dict[str, list[str]] = {
    "before": [],
    "channels_last": FAST[:1],
    "fast_rows": FAST,
    "bf16": [*FAST, f"{KWARGS}.bf16=true"],
    "16_envs": ["n_envs=16"],
    "16_envs_fast_rows": ["n_envs=16", *FAST],
    "graph": [*FAST, "algo=a2c_graph"],
    "16_envs_graph": ["n_envs=16", *FAST, "algo=a2c_graph"],
}
VARIANTS = {"fc": "non-local block before FC (E8's default)", "cnn": "Nature CNN (no block)"}


#: E7's 4L g-AWRL (PPO, 8 envs in worker processes). Its one change: the attention hands SDPA
#: strided Q/K/V views instead of contiguous copies (the same numbers); ``before`` is the
#: commit before it, run from a git worktree (its packages first on ``PYTHONPATH``).
E7_CELL = ["game=Pong", "condition=4L", "model=g_awrl", "seed=0"]
E7_BEFORE = "64e0589"


#: The learning-curve A/B: committed runs, then the same command with the full budget's
#: network and update (channels-last, fast rows, a2c_graph), seeds 0-2 each.
AB = ("results/atari_nonlocal/Pong-fc", "results/atari_nonlocal/fast_rows_graph/Pong-fc")
AB_WINDOW = 500_000


def learning_curves() -> dict:
    """:func:`zoo.curve_windows.curves_match` of :data:`AB` (run from the repository root)."""
    from zoo.curve_windows import curves_match
    from zoo.experiments import find_experiment
    from zoo.run_scores import collect

    base, new = collect(find_experiment("E8"), folders=list(AB))
    return curves_match(base, new, AB_WINDOW)


def run_cell(variant: str, setting: str, steps: int) -> dict:
    """One short A2C Pong run; its steps per second of training wall time."""
    return timed_run(
        "atari_nonlocal", ["game=Pong", f"variant={variant}", *SETTINGS[setting]], steps
    )


def run_env(code: str | None = None) -> dict[str, str]:
    """A run's environment: one OpenMP thread; ``code``, a checkout whose packages it imports
    instead of the installed ones, first on ``PYTHONPATH``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if code is not None:
        paths = [code, *env.get("PYTHONPATH", "").split(os.pathsep)]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


def timed_run(experiment: str, overrides: list[str], steps: int, code: str | None = None) -> dict:
    """One short cpu-budget run of EXPERIMENT; its steps per second of training wall time.
    ``code``: as for :func:`run_env`."""
    with tempfile.TemporaryDirectory() as root:
        env = run_env(code)
        cmd = ["attn-zoo", "train", experiment, "--budget", "cpu", "--root", root]
        cmd += ["--no-progress", "--set", f"n_timesteps={steps}", "eval.freq=0",
                "eval.final_episodes=1", "torch_threads=1", *overrides]  # fmt: skip
        subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=3600)
        (status_file,) = Path(root).rglob("status.json")
        status = json.loads(status_file.read_text())
    done, wall = int(status["num_timesteps"]), float(status["wall_seconds"])
    return {"steps": done, "wall_seconds": wall, "steps_per_s": round(done / wall, 1)}


def e7_cell(steps: int, repeats: int) -> dict:
    """E7's 4L g-AWRL at :data:`E7_BEFORE` and as it ships, in turns, ``repeats`` times."""
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        before = str(Path(tmp) / "before")
        subprocess.run(["git", "worktree", "add", "-q", "--detach", before, E7_BEFORE], check=True)
        try:
            env = run_env(before)  # what the before runs get
            # -P: no working directory on sys.path, as for the attn-zoo script
            probe = "import attn_policies; print(attn_policies.__file__)"
            imported = subprocess.run(
                [sys.executable, "-P", "-c", probe],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            )
            if not imported.stdout.startswith(before):  # an install that shadows PYTHONPATH
                raise RuntimeError(f"before runs would import {imported.stdout.strip()}")
            for _ in range(repeats):
                for name, code in (("before", before), ("after", None)):
                    runs[name].append(timed_run("atariari", E7_CELL, steps, code))
                    print("e7 4L g-AWRL", name, runs[name][-1], flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", before], check=True)
    medians = {k: statistics.median(r["steps_per_s"] for r in rows) for k, rows in runs.items()}
    return {
        "what": "E7 PPO Pong 4L g-AWRL (atariari, cpu budget, 8 envs)",
        "overrides": E7_CELL,
        "before_commit": E7_BEFORE,
        **medians,
        "speedup": round(medians["after"] / medians["before"], 3),
        "changed": "AWRLSelfAttention passes SDPA strided Q/K/V views, no contiguous copies "
        "(outputs and gradients equal to the last bit: tests/test_awrl.py)",
        "runs": runs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=16_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS))
    parser.add_argument("--settings", nargs="*", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--e7-steps", type=int, default=16_384, help="0: leave E7 out")
    parser.add_argument("--out", default="benchmarks/results/atari.json")
    parser.add_argument("--ab-only", action="store_true", help="refresh learning_curves only")
    parser.add_argument("--e7-only", action="store_true", help="refresh e7_4l_g_awrl only")
    args = parser.parse_args()
    if args.ab_only or args.e7_only:
        out = Path(args.out)
        key, value = (
            ("learning_curves", learning_curves())
            if args.ab_only
            else ("e7_4l_g_awrl", e7_cell(args.e7_steps, args.repeats))
        )
        out.write_text(json.dumps({**json.loads(out.read_text()), key: value}, indent=1) + "\n")
        print(json.dumps(value, indent=1))
        return 0
    settings = args.settings
    runs: dict[str, dict[str, list[dict]]] = {v: {s: [] for s in settings} for v in args.variants}
    for _ in range(args.repeats):
        for variant in args.variants:
            for setting in settings:
                row = run_cell(variant, setting, args.steps)
                runs[variant][setting].append(row)
                print(variant, setting, row, flush=True)
    medians = {
        v: {s: statistics.median(r["steps_per_s"] for r in rows) for s, rows in cells.items()}
        for v, cells in runs.items()
    }
    result = {
        "what": "E8 A2C Pong (atari_nonlocal, cpu budget: one process, 1 torch thread)",
        "cpu_count": os.cpu_count(),
        "steps_per_run": args.steps,
        "settings": {s: SETTINGS[s] for s in settings},
        "medians": medians,
        "runs": runs,
    }
    if args.e7_steps:
        result["e7_4l_g_awrl"] = e7_cell(args.e7_steps, args.repeats)
    fc = medians.get("fc", {})
    for key, after in (
        ("speedup_a2c_pong", "16_envs_graph"),
        ("speedup_a2c_pong_8_envs", "fast_rows"),
    ):
        if "before" in fc and after in fc:
            result[key] = round(fc[after] / fc["before"], 3)
    result["learning_curves"] = learning_curves()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    fig, ax = plt.subplots(figsize=(7, 3.4))
    width = 0.8 / len(settings)
    for k, setting in enumerate(settings):
        xs = [i + k * width for i in range(len(medians))]
        ax.bar(xs, [medians[v][setting] for v in medians], width, label=setting)
    centre = width * (len(settings) - 1) / 2
    ax.set_xticks([i + centre for i in range(len(medians))], [VARIANTS[v] for v in medians])
    ax.set_ylabel("env steps / s")
    ax.set_title("E8 A2C Pong on this machine (median of runs)")
    ax.legend(fontsize=7, ncols=2)
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=120)
    print(json.dumps(medians, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
