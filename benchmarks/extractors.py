"""Forward+backward time per batch of every attn_policies extractor against SB3's own.

    python benchmarks/extractors.py [--repeats 15] [--only SUBSTRING] [--no-memory]

Writes ``benchmarks/results/extractors.json`` (and ``extractors.png``). Each case is an input
(observation space + batch size) with our extractor(s) and the SB3 extractor a user would
otherwise reach for on that input: NatureCNN for 84x84 frames, SB3's MlpPolicy trunk
(flatten + 2x64 tanh) for small inputs. All models of a case are timed alternately on the
same pre-drawn batch (A B C A B C ...), so drift in machine speed hits every side alike; the
median time per batch and the ratio to the SB3 baseline are reported. The loss is the sum of
squared features, so backward reaches every weight the features depend on.

Peak memory of the non-local variants on an A2C batch (16 envs x 5 steps = 80 frames of
4x84x84) is measured in a fresh subprocess per model: the process's peak RSS during one
forward+backward pass minus its resident size just before (Linux).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.preprocessing import preprocess_obs
from stable_baselines3.common.torch_layers import (
    BaseFeaturesExtractor,
    FlattenExtractor,
    NatureCNN,
    create_mlp,
)
from torch import nn

from attn_policies.canvas import new_figure, save_figure

OUT = Path(__file__).parent / "results"
Factory = Callable[[spaces.Space], nn.Module]


class MlpTrunk(BaseFeaturesExtractor):
    """What SB3's MlpPolicy computes before its heads: flatten, then 2x64 tanh."""

    def __init__(self, observation_space: spaces.Space) -> None:
        super().__init__(observation_space, 64)
        self.flatten = FlattenExtractor(observation_space)
        self.mlp = nn.Sequential(*create_mlp(self.flatten.features_dim, -1, [64, 64], nn.Tanh))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.flatten(obs))


@dataclass
class Case:
    """One input: its space, batch size, the SB3 baseline and our models."""

    name: str
    space: spaces.Space
    batch: int
    baseline: tuple[str, Factory]
    models: dict[str, Factory] = field(default_factory=dict)
    baseline_space: spaces.Space | None = None  # when SB3's extractor reads another input


def draw_batch(space: spaces.Space, batch: int, seed: int = 0) -> object:
    space.seed(seed)
    raw = [space.sample() for _ in range(batch)]
    if isinstance(space, spaces.Dict):
        stacked: object = {k: torch.as_tensor(np.stack([r[k] for r in raw])) for k in space}
    else:
        stacked = torch.as_tensor(np.stack(raw))
    return preprocess_obs(stacked, space, normalize_images=True)


def fwd_bwd(model: nn.Module, obs: object) -> None:
    model.zero_grad(set_to_none=True)
    model(obs).square().sum().backward()


def time_case(case: Case, repeats: int, seed: int = 0) -> dict[str, object]:
    torch.manual_seed(seed)
    obs = draw_batch(case.space, case.batch, seed)
    base_space = case.baseline_space or case.space
    models = {case.baseline[0]: case.baseline[1](base_space)}
    models |= {name: make(case.space) for name, make in case.models.items()}
    inputs = {name: obs for name in models}
    inputs[case.baseline[0]] = draw_batch(base_space, case.batch, seed)
    for name, m in models.items():
        fwd_bwd(m, inputs[name])  # warm-up: allocator, lazy init
    times: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(repeats):
        for name, m in models.items():
            t0 = time.perf_counter()
            fwd_bwd(m, inputs[name])
            times[name].append(time.perf_counter() - t0)
    base = statistics.median(times[case.baseline[0]])
    rows = {}
    for name, ts in times.items():
        med = statistics.median(ts)
        rows[name] = {
            "params": sum(p.numel() for p in models[name].parameters()),
            "ms_per_batch": round(1e3 * med, 3),
            "iqr_ms": [round(1e3 * q, 3) for q in np.percentile(ts, [25, 75])],
            "vs_baseline": round(med / base, 3),
            "baseline": name == case.baseline[0],
        }
    return {
        "space": str(case.space),
        "baseline_space": str(base_space),
        "batch": case.batch,
        "torch_threads": torch.get_num_threads(),
        "repeats": repeats,
        "models": rows,
    }


def build_cases() -> list[Case]:
    from attn_policies import (
        awrl,
        cnn_layers,
        feature_baselines,
        neuron_extractors,
        nonlocal_cnn,
        relational,
    )

    frames = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    doorkey = spaces.Box(0.0, 1.0, (3, 7, 7), np.float32)
    mnist = spaces.Box(0.0, 1.0, (1, 28, 28), np.float32)
    pong_4l = spaces.Box(0.0, 255.0, (4, 32), np.float32)
    puzzle = spaces.Dict(
        {
            "observation": spaces.Box(0, 255, (196, 144), np.uint8),
            "prev_action": spaces.Box(0.0, 1.0, (6,), np.float32),
        }
    )
    cartpole = spaces.Dict(
        {
            "observation": spaces.Box(-np.inf, np.inf, (4, 5), np.float32),
            "prev_action": spaces.Box(-1.0, 1.0, (4, 1), np.float32),
        }
    )
    nature: tuple[str, Factory] = ("sb3 NatureCNN", NatureCNN)
    mlp: tuple[str, Factory] = ("sb3 MlpPolicy trunk", MlpTrunk)
    return [
        Case(
            "DoorKey 3x7x7 (E2)",
            doorkey,
            50,
            mlp,
            {"RelationalExtractor (book DoorKey)": relational.RelationalExtractor},
        ),
        Case(
            "MNIST 1x28x28 (E1)",
            mnist,
            300,
            mlp,
            {
                "RelationalMNIST (85,228)": lambda s: relational.RelationalMNIST(),
                "CNNMNIST (88,252)": lambda s: relational.CNNMNIST(),
            },
        ),
        Case(
            "DistractorPong 4L, 4x32 features (E7)",
            pong_4l,
            256,
            mlp,
            {
                "AWRLExtractor g": lambda s: awrl.AWRLExtractor(s, variant="g"),
                "AWRLExtractor d": lambda s: awrl.AWRLExtractor(s, variant="d"),
                "FeatureFCExtractor": feature_baselines.FeatureFCExtractor,
                "FeatureCNNExtractor": feature_baselines.FeatureCNNExtractor,
                "FeatureCNNExtractor deep (a-CNN)": lambda s: feature_baselines.FeatureCNNExtractor(
                    s, deep=True
                ),
            },
        ),
        Case(
            "ShuffledCartPole window 4x5 + prev action (E3)",
            cartpole,
            256,
            ("sb3 MlpPolicy trunk (flattened window)", MlpTrunk),
            {"AttentionNeuronVectorExtractor": neuron_extractors.AttentionNeuronVectorExtractor},
            cartpole["observation"],
        ),
        Case(
            "Puzzle Pong 196 patches x 144 (E5) vs NatureCNN on 4x84x84",
            puzzle,
            256,
            ("sb3 NatureCNN (4x84x84 frames)", NatureCNN),
            {"AttentionNeuronExtractor": neuron_extractors.AttentionNeuronExtractor},
            frames,
        ),
        Case(
            "Atari 4x84x84, PPO minibatch 256 (E5 teacher)",
            frames,
            256,
            nature,
            {"ChannelsLastNatureCNN": cnn_layers.ChannelsLastNatureCNN},
        ),
        Case(
            "Atari 4x84x84, A2C batch 16x5 (E8)",
            frames,
            80,
            nature,
            {
                f"NonLocalNatureCNN {label}": (
                    lambda s, kw=kw: nonlocal_cnn.NonLocalNatureCNN(s, **kw)
                )
                for label, kw in NONLOCAL_VARIANTS.items()
            },
        ),
    ]


NONLOCAL_VARIANTS: dict[str, dict[str, object]] = {
    "no block (the seed's CNN, conv3 = 32)": {"positions": ()},
    "fc": {"positions": ("fc",)},
    "conv3": {"positions": ("conv3",)},
    "conv2": {"positions": ("conv2",)},
    "conv1 (row)": {"positions": ("conv1",), "form": "row"},
    "all four (row)": {"positions": "all", "form": "row"},
    "conv1x1 replacement": {"positions": ("fc",), "replacement": "conv1x1"},
    "conv3x3 replacement": {"positions": ("fc",), "replacement": "conv3x3"},
}
# Memory only (too slow to time alongside the rest): full attention before conv1.
MEMORY_VARIANTS: dict[str, dict[str, object] | None] = {
    "sb3 NatureCNN": None,
    "NonLocalNatureCNN fc": {"positions": ("fc",)},
    "NonLocalNatureCNN conv1 (row)": {"positions": ("conv1",), "form": "row"},
    "NonLocalNatureCNN conv1 (full)": {"positions": ("conv1",), "form": "full"},
    "NonLocalNatureCNN all four (full)": {"positions": "all", "form": "full"},
}


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status (Linux only)")


def _memory_child(kwargs_json: str) -> None:
    """Run in a subprocess: one forward+backward on 80 frames; print peak-RSS growth in MB."""
    kwargs = json.loads(kwargs_json)
    frames = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    if kwargs is None:
        model: nn.Module = NatureCNN(frames)
    else:
        from attn_policies.nonlocal_cnn import NonLocalNatureCNN

        if isinstance(kwargs.get("positions"), list):
            kwargs["positions"] = tuple(kwargs["positions"])
        model = NonLocalNatureCNN(frames, **kwargs)
    obs = draw_batch(frames, 80)
    # getrusage's ru_maxrss survives fork+exec (it would report the parent's peak), so use the
    # per-process high-water mark VmHWM, reset to the current size just before the pass.
    Path("/proc/self/clear_refs").write_text("5")
    before = _status_kib("VmRSS")
    t0 = time.perf_counter()
    fwd_bwd(model, obs)
    seconds = time.perf_counter() - t0
    peak = _status_kib("VmHWM")
    print(json.dumps({"peak_mb": round((peak - before) / 1024, 1), "seconds": round(seconds, 3)}))


def measure_memory() -> dict[str, object]:
    rows = {}
    for name, kwargs in MEMORY_VARIANTS.items():
        proc = subprocess.run(
            [sys.executable, __file__, "--memory-child", json.dumps(kwargs)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode == 0:
            rows[name] = json.loads(proc.stdout.strip().splitlines()[-1])
        else:
            rows[name] = {"error": proc.stderr.strip().splitlines()[-1][:300]}
        print(f"  memory {name}: {rows[name]}", flush=True)
    return {"batch": "80 x 4x84x84 (A2C: 16 envs x 5 steps)", "models": rows}


def plot(results: dict[str, object], path: Path) -> None:
    cases = results["cases"]
    fig = new_figure(8, 2.2 * len(cases), layout="tight")
    axes = fig.subplots(len(cases), 1, squeeze=False)
    for ax, (name, case) in zip(axes[:, 0], cases.items(), strict=True):
        labels = list(case["models"])
        ms = [case["models"][m]["ms_per_batch"] for m in labels]
        colors = ["grey" if case["models"][m]["baseline"] else "tab:blue" for m in labels]
        ax.barh(labels, ms, color=colors)
        ax.set_xscale("log")
        ax.set_xlim(min(ms) / 4, max(ms) * 1.3)  # bars start a fixed factor below the fastest
        ax.set_title(f"{name} (batch {case['batch']})", fontsize=9)
        ax.tick_params(labelsize=7)
        ax.invert_yaxis()
    axes[-1, 0].set_xlabel("forward+backward ms per batch (log scale; grey = SB3 baseline)")
    save_figure(fig, path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument(
        "--only", default="", help="rerun only cases whose name contains this (others kept)"
    )
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument(
        "--memory-only", action="store_true", help="redo the memory rows of an existing JSON"
    )
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    if args.memory_child is not None:
        _memory_child(args.memory_child)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    if args.memory_only:
        path = args.out / "extractors.json"
        results = json.loads(path.read_text())
        results["memory"] = measure_memory()
        path.write_text(json.dumps(results, indent=2) + "\n")
        print(f"updated {path}")
        return
    results: dict[str, object] = {
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor(),
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
        },
        "repeats": args.repeats,
        "cases": {},
    }
    path = args.out / "extractors.json"
    if args.only and path.exists():  # refresh some cases, keep the others (and their machine)
        kept = json.loads(path.read_text())
        results["cases"], results["machine"] = kept["cases"], kept["machine"]
    for case in build_cases():
        if args.only not in case.name:
            continue
        print(case.name, flush=True)
        results["cases"][case.name] = row = time_case(case, args.repeats)
        for model, r in row["models"].items():
            print(f"  {model:45s} {r['ms_per_batch']:9.2f} ms  x{r['vs_baseline']}", flush=True)
    if not args.no_memory:
        results["memory"] = measure_memory()
    elif path.exists():
        results["memory"] = json.loads(path.read_text()).get("memory")
    path.write_text(json.dumps(results, indent=2) + "\n")
    plot(results, args.out / "extractors.png")
    print(f"wrote {path}")


if __name__ == "__main__":
    gym.logger.min_level = 40
    main()
