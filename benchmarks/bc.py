"""Behaviour-cloning step of the E5 Puzzle Pong student: data path, forward, backward, samples/s.

    python benchmarks/bc.py [--threads 1] [--occlusion 0.0 0.5] [--repeats 20]
                            [--train-batches 200] [--samples 10000] [--no-nature] [--label NAME]

Writes ``benchmarks/results/bc.json`` and ``bc.png``. The student is the configured one
(``puzzle_pong_bc``, built by the zoo's own :func:`zoo.trainers.bc_trainer.make_student`:
VisionAttentionNeuron M=400, d 32 -> CNN -> 512 -> 6) and the data a synthetic
:class:`~attn_policies.algorithms.bc_data.BCDataset` with the env's shapes and dtypes (196 uint8
tokens of 6x6x4 per step, a one-hot previous action, 6 teacher logits) drawn from a seeded
generator, so no teacher is needed. Per batch of 256, one training step of
:func:`~attn_policies.algorithms.bc.train_bc` is timed in three parts, each median over
``--repeats`` consecutive steps:

* data: what ``train_bc`` does before the forward pass, with its own functions
  (:class:`~attn_policies.algorithms.bc.BatchSampler`): the batch tensors taken from the
  dataset and the occlusion of the tokens (still ``uint8``), plus the epoch's shuffled order
  (``rng.permutation``, timed apart) spread over the epoch's batches. There is no patching
  or patch shuffling per batch: ``PatchObservation`` cut the screens into tokens when the
  teacher's data was collected (in raster order; the student is permutation invariant);
* forward: the student and the MSE loss against the teacher's logits;
* backward: ``zero_grad``, backward, gradient clipping and the Adam step.

The data share is data / (data + forward + backward). End to end, ``train_bc`` itself runs
about ``--train-batches`` batches (whole epochs over the dataset) and its samples/s are
reported. For the issue's comparison, SB3's NatureCNN with a 512 -> 6 head does the same
forward (uint8 frames scaled by 1/255, as SB3 preprocesses them) and backward + Adam step on
256 unshuffled 4x84x84 screens.

Each ``(label, threads, occlusion)`` row replaces only its own entry of an existing JSON
(with the command and the machine's load average when it ran), so the ratios can be run one
at a time and code versions compared: ``--label "before (af328b0)"`` rows were measured on
that commit, whose ``train_bc`` indexed numpy arrays batch by batch and occluded with
``gather`` and whose student converted the tokens to float before reordering them.

``--ant-only`` refreshes one key, ``ant_student``: one update of E4's AttentionNeuron student
(``AttentionNeuronPolicy.ant``, 28 inputs, M = 32) at the authors' released script's scale
(8 trajectories, BPTT through a 500-step window, sigma 0.1 on the previous action, Adam 3e-4,
clip 0.1) through :func:`~attn_policies.algorithms.dagger.fit_epoch` on synthetic episodes,
with the compiled window (``DAggerConfig.compiled``) and stepped in torch (the code before it,
unchanged), in turns; ``speedup_neuron_bc`` is the ratio of their median seconds per update.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from stable_baselines3.common.torch_layers import NatureCNN
from torch import nn

from attn_policies.algorithms import bc
from attn_policies.algorithms.bc_data import BCDataset
from attn_policies.canvas import new_figure, save_figure
from zoo import factory
from zoo.config import load_runs
from zoo.trainers.bc_trainer import bc_config, make_student

OUT = Path(__file__).parent / "results"
EXPERIMENT = "puzzle_pong_bc"


def student_and_config(occlusion: float, seed: int = 0) -> tuple[nn.Module, bc.BCConfig, Any]:
    """The configured student (fresh weights), its BCConfig at ``occlusion`` and obs space."""
    run = load_runs(EXPERIMENT, budget="cpu")[0]
    env = factory.make_single_env(run)
    space = env.observation_space
    env.close()
    torch.manual_seed(seed)
    student, _ = make_student(run)
    config = dataclasses.replace(bc_config(run), occlusion=occlusion, seed=seed)
    return student, config, space


def synthetic_data(space: spaces.Dict, n_actions: int, samples: int, seed: int = 0) -> Any:
    """A BCDataset of the env's shapes and dtypes from a seeded generator (no teacher)."""
    rng = np.random.default_rng(seed)
    obs = {}
    for key, box in space.spaces.items():
        if box.dtype == np.uint8:
            obs[key] = rng.integers(0, 256, (samples, *box.shape), dtype=np.uint8)
        else:  # the one-hot previous action
            obs[key] = np.eye(*box.shape, dtype=box.dtype)[rng.integers(0, box.shape[0], samples)]
    targets = rng.normal(size=(samples, n_actions)).astype(np.float32)
    return BCDataset(obs, targets, rng.integers(0, n_actions, samples))


def data_batches(
    data: Any, config: bc.BCConfig
) -> Iterator[tuple[Any, torch.Tensor, torch.Tensor]]:
    """``train_bc``'s batches, epoch after epoch, from its own sampler and generators."""
    sampler = bc.BatchSampler(data, config)
    rng = np.random.default_rng(config.seed)
    generator = torch.Generator().manual_seed(config.seed)
    while True:
        yield from sampler.epoch(rng, generator)


def shuffle_ms(n: int, repeats: int) -> float:
    """Median ms of one epoch's shuffled order (``train_bc`` draws it once per epoch)."""
    rng = np.random.default_rng(0)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        rng.permutation(n)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def time_steps(student: nn.Module, data: Any, config: bc.BCConfig, repeats: int) -> dict:
    """Median ms per batch of the data path, forward and backward of train_bc's step."""
    optimizer = torch.optim.Adam(student.parameters(), lr=config.learning_rate)
    student.train()
    batches = data_batches(data, config)
    times: dict[str, list[float]] = {"data": [], "forward": [], "backward": []}
    n_tokens = []
    for i in range(repeats + 2):  # two warm-up steps
        t0 = time.perf_counter()
        obs, targets, _ = next(batches)
        t1 = time.perf_counter()
        out = student(obs)
        loss = F.mse_loss(out, targets.reshape(out.shape))
        t2 = time.perf_counter()
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(student.parameters(), config.grad_clip)
        optimizer.step()
        loss.item()
        t3 = time.perf_counter()
        if i >= 2 and len(targets) == config.batch_size:  # full batches only
            for name, dt in zip(times, (t1 - t0, t2 - t1, t3 - t2), strict=True):
                times[name].append(dt)
            n_tokens.append(obs[config.tokens_key].shape[1])
    ms = {name: 1e3 * statistics.median(ts) for name, ts in times.items()}
    ms["data"] += shuffle_ms(len(data), repeats) / math.ceil(len(data) / config.batch_size)
    step = sum(ms.values())
    return {
        "tokens_per_sample": statistics.median(n_tokens),
        "ms_per_batch": {k: round(v, 3) for k, v in ms.items()},
        "iqr_ms": {
            k: [round(1e3 * q, 3) for q in np.percentile(ts, [25, 75])] for k, ts in times.items()
        },
        "step_ms": round(step, 3),
        "data_share": round(ms["data"] / step, 4),
        "samples_per_s_from_parts": round(1e3 * config.batch_size / step, 1),
        "timed_batches": len(times["data"]),
    }


def time_train_bc(student: nn.Module, data: Any, config: bc.BCConfig, batches: int) -> dict:
    """samples/s of ``train_bc`` itself over about ``batches`` batches (whole epochs)."""
    per_epoch = math.ceil(len(data) / config.batch_size)
    epochs = max(1, round(batches / per_epoch))
    config = dataclasses.replace(config, epochs=epochs)
    t0 = time.perf_counter()
    bc.train_bc(student, data, config)
    seconds = time.perf_counter() - t0
    return {
        "epochs": epochs,
        "batches": epochs * per_epoch,
        "seconds": round(seconds, 2),
        "samples_per_s": round(epochs * len(data) / seconds, 1),
    }


def time_nature_cnn(batch: int, repeats: int, seed: int = 0) -> dict:
    """SB3 NatureCNN + FC 512 -> 6 on unshuffled 4x84x84 uint8 screens: same step, same loss."""
    frames = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    torch.manual_seed(seed)
    model = nn.Sequential(NatureCNN(frames), nn.Linear(512, 6))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(seed)
    screens = torch.as_tensor(rng.integers(0, 256, (batch, 4, 84, 84), dtype=np.uint8))
    targets = torch.as_tensor(rng.normal(size=(batch, 6)).astype(np.float32))
    times: dict[str, list[float]] = {"forward": [], "backward": []}
    for i in range(repeats + 2):
        t0 = time.perf_counter()
        loss = F.mse_loss(model(screens.float() / 255.0), targets)  # SB3's preprocess_obs
        t1 = time.perf_counter()
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
        loss.item()
        t2 = time.perf_counter()
        if i >= 2:
            times["forward"].append(t1 - t0)
            times["backward"].append(t2 - t1)
    ms = {k: round(1e3 * statistics.median(v), 3) for k, v in times.items()}
    return {
        "batch": batch,
        "params": sum(p.numel() for p in model.parameters()),
        "ms_per_batch": ms,
        "fwd_bwd_ms": round(sum(ms.values()), 3),
    }


def plot(results: dict, path: Path) -> None:
    rows = [
        (label, threads, occ, row)
        for label, by_threads in results["runs"].items()
        for threads, by_occ in by_threads.items()
        for occ, row in by_occ.items()
        if occ != "nature_cnn"
    ]
    fig = new_figure(9, 0.55 * len(rows) + 2.2, layout="tight")
    ax = fig.subplots()
    names = [f"{label}, {threads}, {occ}" for label, threads, occ, _ in rows]
    left = np.zeros(len(rows))
    for part, color in (("data", "tab:red"), ("forward", "tab:blue"), ("backward", "tab:cyan")):
        ms = np.array([row["steps"]["ms_per_batch"][part] for *_, row in rows])
        ax.barh(names, ms, left=left, color=color, label=part)
        left += ms
    for y, (*_, row) in enumerate(rows):
        steps = row["steps"]
        text = f"data {100 * steps['data_share']:.1f}%"
        if "train_bc" in row:
            text += f", train_bc {row['train_bc']['samples_per_s']:.0f} samples/s"
        ax.text(left[y], y, "  " + text, va="center", fontsize=7)
    natures = [
        by_occ["nature_cnn"]["fwd_bwd_ms"]
        for by_threads in results["runs"].values()
        for by_occ in by_threads.values()
        if "nature_cnn" in by_occ
    ]
    if natures:
        ax.axvline(natures[-1], color="grey", ls="--", label="SB3 NatureCNN fwd+bwd (84x84x4)")
    ax.set_xlim(0, 1.45 * max(left.max(), *natures) if natures else 1.45 * left.max())
    ax.set_xlabel("ms per batch of 256 (median)")
    ax.set_title("Puzzle Pong BC student: one train_bc step", fontsize=9)
    ax.tick_params(labelsize=7)
    ax.invert_yaxis()
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=4, fontsize=7)
    save_figure(fig, path, dpi=110)


def time_ant_student(repeats: int, seed: int = 0) -> dict[str, Any]:
    """Seconds per update of E4's student, compiled window vs torch steps, in turns."""
    from attn_policies.algorithms.dagger import DAggerConfig, Episodes, fit_epoch
    from attn_policies.es_policies import AttentionNeuronPolicy

    steps, trajectories, n_inputs = 500, 8, 28
    rng = np.random.default_rng(seed)
    data = Episodes(
        obs=rng.standard_normal((steps, trajectories, n_inputs)).astype(np.float32),
        perm=np.stack([rng.permutation(n_inputs) for _ in range(trajectories)]),
        actions=rng.uniform(-1, 1, (steps, trajectories, 8)).astype(np.float32),
        targets=rng.uniform(-1, 1, (steps, trajectories, 8)).astype(np.float32),
        alive=np.ones((steps, trajectories), dtype=bool),
    )
    common = {"window": steps, "batch_episodes": trajectories, "prev_action_noise": 0.1}
    common |= {"learning_rate": 3e-4, "max_grad_norm": 0.1}
    seconds: dict[str, list[float]] = {"compiled": [], "torch": []}
    students = {}
    for name in seconds:
        torch.manual_seed(seed)
        student = AttentionNeuronPolicy.ant()
        optimizer = torch.optim.Adam(student.parameters(), lr=common["learning_rate"])
        cfg = DAggerConfig(compiled=name == "compiled", **common)
        students[name] = (student, optimizer, cfg, torch.Generator().manual_seed(seed))
        fit_epoch(student, optimizer, data, cfg, students[name][3])  # warm-up: compilation
    for _ in range(repeats):
        for name, (student, optimizer, cfg, gen) in students.items():
            start = time.perf_counter()
            fit_epoch(student, optimizer, data, cfg, gen)
            seconds[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(times) for name, times in seconds.items()}
    return {
        "what": "one update of E4's student (AttentionNeuronPolicy.ant): 8 trajectories, "
        "BPTT through 500 steps, sigma 0.1 on a_{t-1}, Adam 3e-4, clip 0.1; one thread",
        "command": shlex.join(["python", *sys.argv]),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "seconds_per_update": medians,
        "seconds_all": seconds,
        "speedup_neuron_bc": round(medians["torch"] / medians["compiled"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--occlusion", type=float, nargs="*", default=[0.0, 0.5])
    parser.add_argument("--repeats", type=int, default=20, help="timed steps per ratio")
    parser.add_argument("--train-batches", type=int, default=200, help="0: skip train_bc")
    parser.add_argument("--samples", type=int, default=10_000, help="dataset size (cpu budget)")
    parser.add_argument("--no-nature", action="store_true", help="skip the NatureCNN row")
    parser.add_argument("--label", default="current", help="code version of the rows")
    parser.add_argument("--replot", action="store_true", help="redraw the PNG from the JSON")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--ant-only", action="store_true", help="refresh ant_student only")
    args = parser.parse_args()
    path = args.out / "bc.json"
    if args.ant_only:
        torch.set_num_threads(args.threads)
        ant = time_ant_student(args.repeats)
        old = json.loads(path.read_text()) if path.exists() else {"runs": {}}
        top = {"speedup_neuron_bc": ant["speedup_neuron_bc"]}
        path.write_text(json.dumps({**old, **top, "ant_student": ant}, indent=2) + "\n")
        print(json.dumps({k: v for k, v in ant.items() if k != "seconds_all"}, indent=1))
        return
    if args.replot:
        plot(json.loads(path.read_text()), args.out / "bc.png")
        return
    torch.set_num_threads(args.threads)
    results = json.loads(path.read_text()) if path.exists() else {"runs": {}}
    results["machine"] = {
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
    }
    rows = results["runs"].setdefault(args.label, {}).setdefault(f"threads={args.threads}", {})
    data = None
    for occlusion in args.occlusion:
        student, config, space = student_and_config(occlusion)
        if data is None:
            data = synthetic_data(space, 6, args.samples)
        row: dict[str, Any] = {
            "command": shlex.join(["python", *sys.argv]),
            "load_average_1min": round(os.getloadavg()[0], 2),  # other jobs on the machine
            "samples": len(data),
            "batch_size": config.batch_size,
            "steps": time_steps(student, data, config, args.repeats),
        }
        if args.train_batches:
            student, config, _ = student_and_config(occlusion)
            row["train_bc"] = time_train_bc(student, data, config, args.train_batches)
        rows[f"occlusion={occlusion}"] = row
        s = row["steps"]
        ms = s["ms_per_batch"]
        e2e = f"  train_bc {row['train_bc']['samples_per_s']:7.1f}/s" if "train_bc" in row else ""
        print(
            f"occlusion {occlusion:.2f} ({s['tokens_per_sample']:.0f} tokens): data "
            f"{ms['data']:7.2f}  fwd {ms['forward']:7.2f}  bwd {ms['backward']:7.2f} ms  "
            f"data share {100 * s['data_share']:5.2f}%  {s['samples_per_s_from_parts']:7.1f} "
            f"samples/s{e2e}",
            flush=True,
        )
    if not args.no_nature:
        rows["nature_cnn"] = nature = {
            "command": shlex.join(["python", *sys.argv]),
            "load_average_1min": round(os.getloadavg()[0], 2),
            **time_nature_cnn(256, args.repeats),
        }
        ms = nature["ms_per_batch"]
        print(
            f"SB3 NatureCNN 4x84x84: fwd {ms['forward']:7.2f}  bwd {ms['backward']:7.2f} ms  "
            f"({nature['fwd_bwd_ms']:.2f} ms)",
            flush=True,
        )
    args.out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    plot(results, args.out / "bc.png")
    print(f"wrote {path}")


if __name__ == "__main__":
    gym.logger.min_level = 40
    main()
