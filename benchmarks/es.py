"""Env-steps per second of one ES generation: batched, process pool, per-individual loop, EvoJAX.

    python benchmarks/es.py --setup-evojax          # once: the EvoJAX reference venv
    python benchmarks/es.py [--population 256 --repeats 16 --steps 1000 --rounds 3]

Writes ``benchmarks/results/es.json`` and ``es.png``. The task is one CMA-ES generation of
the E3 agent, ``AttentionNeuronPolicy.cartpole`` (913 parameters) on
``attn_envs/CartPoleSwingUpHarder-v0``: ``population`` solutions, each on the same
``repeats`` task seeds, episodes of ``steps`` steps. The solutions are the first ``ask()`` of
:class:`~attn_policies.algorithms.cmaes.CMAES` (``x0 = 0``, ``sigma0 = 0.1``), as a training
run starts.

Evaluators, all in this run on the same cores:

* ``batched``: :class:`BatchedEvaluator`, torch with 2 threads, and again with 1;
* ``process pool``: :class:`ProcessEvaluator` with 2 workers of 1 thread each; its start-up
  (spawn, imports, first rollout) is reported apart;
* ``per-individual loop``: one ``CartPoleSwingUpEnv(harder=True)`` and one policy at batch 1
  stepped in Python until the episode ends, as the authors' code evaluates; a subset of the
  generation is timed and extrapolated from its rate per live step;
* ``EvoJAX``: ``benchmarks/es_evojax.py`` in ``benchmarks/.venv-evojax`` (EvoJAX's own
  CartPoleSwingUp(harder) + PermutationInvariantPolicy, its ``SimManager`` rollout).

Env-steps are counted as EvoJAX counts them: ``population x repeats x steps`` per generation
(``nominal``; EvoJAX and the batched evaluator step every copy until the last one ends). The
steps of copies still alive (``live``, ``evaluator.env_steps``) are reported too, and the loop
is also compared on them, since it stops each episode when it ends. Every timed figure is the
median over ``rounds`` generations run after an untimed warm-up generation; the cases are
interleaved round by round so drift in machine speed hits every side alike.

CMA-ES's own cost is pycma's ask + tell for ``--cma-generations`` generations at the same
dimension and population (full covariance, and ``CMA_diagonal``), against a synthetic
fitness, reported as seconds and as a share of the batched generation time.

The batched evaluator runs :meth:`AttentionNeuronPolicy.population_step` on the copies still
alive; ``batched (vmap), 1 thread`` is the generic ``vmap`` path on every copy, for
comparison. How far the batched step is from the machine: the policy's FLOPs per live step
(:func:`policy_flops`) times live steps per second, against the FLOP/s of a large float32
matmul measured here (1 and 2 threads). A ``late generation`` row times both paths on a
trained population (``--late-model`` + 0.02 noise), where most episodes run all 1000 steps,
so its live-step rate is the one a long training run sees.

``--neuron-only`` refreshes one key, ``neuron_es``: a trained generation (``--neuron-model``, the
E3 recipe's best model, plus ``--neuron-noise`` 0.01 noise: episodes mostly run long), timed
with the evaluator as it ships (the compiled AttentionNeuron step and env) and as it was at
``--neuron-before`` (a commit checked out in a git worktree whose packages the timed process
imports first), in turns, one process and one thread each; ``speedup_neuron_es`` is after /
before in live agent-steps/s, with the FLOP/s achieved against this machine's matmul peak.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from attn_envs.envs.cartpole_swingup import CartPoleSwingUpEnv
from attn_policies.algorithms.cmaes import CMAES, CMAESConfig
from attn_policies.algorithms.es_eval import BatchedEvaluator, Evaluator, PolicyFactory, RolloutSpec
from attn_policies.algorithms.es_workers import ProcessEvaluator
from attn_policies.canvas import new_figure, save_figure
from attn_policies.es_policies import AttentionNeuronPolicy

HERE = Path(__file__).parent
OUT = HERE / "results"
VENV = HERE / ".venv-evojax"
REQUIREMENTS = HERE / "evojax-requirements.txt"
ENV_ID = "attn_envs:attn_envs/CartPoleSwingUpHarder-v0"
POLICY = PolicyFactory("attn_policies.es_policies:AttentionNeuronPolicy.cartpole")
LOOP = "per-individual loop"
POOL = "process pool"


def setup_evojax(path: Path = VENV) -> Path:
    """Create the EvoJAX venv at ``path`` (if missing) and install ``evojax-requirements.txt``."""
    python = path / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)]
    subprocess.run(pip, check=True)
    return python


def run_evojax(python: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Time EvoJAX in its venv; its JSON, or ``{"error": ...}`` when it cannot run."""
    if not python.exists():
        return {"error": f"{python} not found: run `python {__file__} --setup-evojax` first"}
    cmd = [
        str(python),
        str(HERE / "es_evojax.py"),
        *("--population", str(args.population), "--repeats", str(args.repeats)),
        *("--steps", str(args.steps), "--rounds", str(args.rounds)),
        *("--hidden-dim", str(args.evojax_hidden_dim), "--sigma", str(args.sigma0)),
        *("--seed", str(args.seed)),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {proc.returncode}: {tail[:300]}", "command": " ".join(cmd)}
    return {**json.loads(lines[-1]), "command": " ".join(cmd)}


def make_spec(steps: int) -> RolloutSpec:
    return RolloutSpec(
        policy_fn=POLICY,
        env_id=ENV_ID,
        env_kwargs={"max_episode_steps": steps},
        max_steps=steps,
        torch_threads=1,  # per pool worker: 2 workers x 1 thread on 2 cores
    )


def first_generation(dim: int, population: int, sigma0: float, seed: int) -> np.ndarray:
    """The first ``ask()`` of a CMA-ES run from ``x0 = 0``: ``sigma0``-wide samples."""
    cfg = CMAESConfig(population=population, sigma0=sigma0, seed=seed)
    return CMAES(dim, cfg).ask().astype(np.float32)


def loop_episode(
    policy: AttentionNeuronPolicy, env: CartPoleSwingUpEnv, solution: np.ndarray, seed: int
) -> tuple[float, int]:
    """The authors' evaluation of one individual on one seed: ``(return, steps)``."""
    policy.set_flat_parameters(solution)
    obs, _ = env.reset(seed=seed)
    state, total, steps = None, 0.0, 0
    with torch.no_grad():
        while True:
            action, state = policy(torch.as_tensor(obs)[None], state)
            obs, reward, terminated, truncated, _ = env.step(action[0].numpy())
            total += reward
            steps += 1
            if terminated or truncated:
                return total, steps


class Case:
    """One timed evaluator: a warm-up generation, then one timed generation per round."""

    def __init__(self, name: str, evaluator: Evaluator, threads: int | None = None) -> None:
        self.name, self.evaluator, self.threads = name, evaluator, threads
        self.seconds: list[float] = []
        self.live: list[int] = []
        self.returns: np.ndarray | None = None
        self.extra: dict[str, Any] = {}  # evaluator-specific fields of the summary row

    def run(self, solutions: np.ndarray, seeds: list[int], timed: bool = True) -> None:
        if self.threads is not None:
            torch.set_num_threads(self.threads)
        before = self.evaluator.env_steps
        start = time.perf_counter()
        self.returns = self.evaluator.evaluate(solutions, seeds)
        seconds = time.perf_counter() - start
        if timed:
            self.seconds.append(seconds)
            self.live.append(self.evaluator.env_steps - before)

    def summary(self, nominal: int) -> dict[str, Any]:
        seconds, live = statistics.median(self.seconds), statistics.median(self.live)
        row: dict[str, Any] = {
            "seconds_per_generation": seconds,
            "seconds_all_rounds": self.seconds,
            "env_steps_per_s": nominal / seconds,
            "live_env_steps": int(live),
            "live_env_steps_per_s": live / seconds,
        }
        if self.threads is not None:
            row["torch_threads"] = self.threads
        if isinstance(self.evaluator, BatchedEvaluator):
            row["steps_stepped"] = int(self.evaluator.last_lengths.max())  # until the last ends
        return row | self.extra


def time_loop(
    solutions: np.ndarray, seeds: list[int], steps: int, individuals: int, repeats: int
) -> dict[str, Any]:
    """Time the per-individual loop on the first ``individuals`` x ``repeats`` episodes."""
    torch.set_num_threads(1)  # batch 1: more threads only add synchronisation
    policy = POLICY().eval()
    env = CartPoleSwingUpEnv(harder=True, max_episode_steps=steps)
    loop_episode(policy, env, solutions[0], seeds[0])  # warm-up
    returns = np.zeros((individuals, repeats))
    live = 0
    start = time.perf_counter()
    for i in range(individuals):
        for r in range(repeats):
            returns[i, r], n = loop_episode(policy, env, solutions[i], seeds[r])
            live += n
    seconds = time.perf_counter() - start
    return {
        "subset": f"{individuals} individuals x {repeats} repeats",
        "torch_threads": 1,
        "seconds": seconds,
        "live_env_steps": live,
        "live_env_steps_per_s": live / seconds,
        "returns": returns,
    }


def time_cma(
    dim: int, population: int, sigma0: float, generations: int, seed: int, **options: Any
) -> dict[str, Any]:
    """pycma ask + tell seconds per generation against a synthetic (sphere) fitness."""
    es = CMAES(dim, CMAESConfig(population=population, sigma0=sigma0, seed=seed, options=options))
    target = np.random.default_rng(seed).standard_normal(dim)
    times = []
    for _ in range(generations):
        t0 = time.perf_counter()
        x = es.ask()
        t1 = time.perf_counter()
        fitness = -np.square(x - target).sum(axis=1)
        t2 = time.perf_counter()
        es.tell(x, fitness)
        times.append((t1 - t0) + (time.perf_counter() - t2))
    return {
        "options": options,
        "generations": generations,
        "mean_seconds": statistics.fmean(times),
        "max_seconds": max(times),
        "seconds_all": times,
    }


def policy_flops(n_inputs: int = 5, hidden: int = 8, queries: int = 16, actions: int = 1) -> dict:
    """FLOPs of one live step of ``AttentionNeuronPolicy.cartpole`` in ``population_step``.

    A multiply-add counts 2, any other arithmetic or activation 1. ``matmul`` is the part in
    batched matmuls (gates ``h W_hh``, scores); ``total`` adds the elementwise work.
    """
    n, h, m, a = n_inputs, hidden, queries, actions
    matmul = 2 * n * 4 * h * h + 2 * m * h * n + 2 * m * n + 2 * m * a  # gates, scores, A o, head
    elementwise = (
        2 * 4 * h * a  # a_{t-1} W_a + b
        + 3 * n * 4 * h  # + bias, + o_i w_o
        + n * 4 * h  # sigmoid (3 gates) + tanh (g)
        + 5 * n * h  # c = f c + i g; h = o tanh(c)
        + 2 * m * n  # score bias, tanh
        + 2 * m
        + 2 * a  # tanh(m), head bias + tanh
    )
    return {"matmul": matmul, "total": matmul + elementwise}


def matmul_flops(threads: int, size: int = 1024, seconds: float = 1.0) -> float:
    """Measured float32 FLOP/s of ``size x size`` matmuls with ``threads`` torch threads."""
    torch.set_num_threads(threads)
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        torch.mm(a, b)
        calls += 1
    return 2 * size**3 * calls / (time.perf_counter() - start)


def machine_limit(rows: dict[str, dict[str, Any]], late: dict[str, Any] | None) -> dict[str, Any]:
    """Achieved policy FLOP/s of the batched rows against measured matmul FLOP/s."""
    flops = policy_flops()
    peak = {1: matmul_flops(1), 2: matmul_flops(2)}
    out: dict[str, Any] = {
        "policy_flops_per_live_step": flops,
        "matmul_flops_per_s": {f"{k} thread{'s' if k > 1 else ''}": v for k, v in peak.items()},
        "note": (
            "achieved = policy FLOPs per live step x live steps/s (env and Python overhead "
            "included in the time); share = achieved / matmul FLOP/s with the same threads"
        ),
    }
    cases = {name: row for name, row in rows.items() if name.startswith("batched")}
    if late:
        cases |= {f"late generation, {name}": row for name, row in late["cases"].items()}
    for name, row in cases.items():
        achieved = flops["total"] * row["live_env_steps_per_s"]
        threads = row.get("torch_threads", 1)
        out[name] = {
            "achieved_flops_per_s": achieved,
            "share_of_matmul_flops": achieved / peak[min(threads, 2)],
        }
    return out


def time_late_generation(args: argparse.Namespace, spec: RolloutSpec) -> dict[str, Any] | None:
    """Both batched paths (1 thread) on a trained population: most episodes run to the end."""
    if args.late_model is None or not args.late_model.exists():
        return None
    policy = POLICY()
    policy.load_state_dict(torch.load(args.late_model, map_location="cpu", weights_only=True))
    x = policy.get_flat_parameters().numpy()
    noise = np.random.default_rng(args.seed).standard_normal((args.population, x.size))
    solutions = (x + 0.02 * noise).astype(np.float32)
    seeds = np.random.default_rng(args.seed + 1).integers(0, 2**31 - 1, args.repeats).tolist()
    torch.set_num_threads(1)
    cases = {}
    for name, fast in (("batched, 1 thread", True), ("batched (vmap), 1 thread", False)):
        evaluator = BatchedEvaluator(dataclasses.replace(spec, population_path=fast))
        evaluator.evaluate(solutions[:2], seeds[:2])  # warm-up
        start = time.perf_counter()
        evaluator.evaluate(solutions, seeds)
        seconds = time.perf_counter() - start
        live = int(evaluator.last_lengths.sum())
        cases[name] = {
            "seconds_per_generation": seconds,
            "live_env_steps": live,
            "live_env_steps_per_s": live / seconds,
            "torch_threads": 1,
        }
        print(f"late generation: {name:26s} {seconds:8.3f} s", flush=True)
    return {"model": str(args.late_model), "noise": 0.02, "cases": cases}


#: The recipe's trained E3 agent (seed 0's last stage) and the commit before the compiled step.
NEURON_MODEL = HERE.parent / "results/cartpole_pi/recipe/0-20261128-094056/stages/7_tune_last"
NEURON_BEFORE = "c71eeba"


def time_trained_generation(model: Path, noise: float, args: argparse.Namespace) -> dict:
    """One timed generation of ``model``'s neighbourhood with this process's packages (after a
    warm-up one): seconds, live steps, returns. Only API both sides have is used."""
    torch.set_num_threads(1)
    policy = POLICY()
    policy.load_state_dict(torch.load(model, map_location="cpu", weights_only=True))
    x = policy.get_flat_parameters().numpy()
    rng = np.random.default_rng(args.seed)
    solutions = (x + noise * rng.standard_normal((args.population, x.size))).astype(np.float32)
    seeds = rng.integers(0, 2**31 - 1, args.repeats).tolist()
    evaluator = BatchedEvaluator(make_spec(args.steps))
    evaluator.evaluate(solutions[:4], seeds[:2])  # warm-up: compilation, allocations
    start = time.perf_counter()
    returns = evaluator.evaluate(solutions, seeds)
    seconds = time.perf_counter() - start
    live = int(evaluator.last_lengths.sum())
    import attn_policies  # which checkout this process runs

    return {
        "seconds": seconds,
        "live_env_steps": live,
        "live_env_steps_per_s": live / seconds,
        "full_length_share": float((evaluator.last_lengths == args.steps).mean()),
        "fitness_mean": float(returns.mean()),
        "code": str(Path(attn_policies.__file__).parent.parent),
    }


def neuron_speedup(args: argparse.Namespace) -> dict[str, Any]:
    """``neuron_es``: the trained generation before (:data:`NEURON_BEFORE`) and after, in turns."""
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    child = [sys.executable, "-P", str(Path(__file__).resolve()), "--neuron-child"]
    child += ["--neuron-model", str(args.neuron_model), "--neuron-noise", str(args.neuron_noise)]
    child += ["--population", str(args.population), "--repeats", str(args.repeats)]
    child += ["--steps", str(args.steps), "--seed", str(args.seed)]
    with tempfile.TemporaryDirectory() as tmp:
        before = str(Path(tmp) / "before")
        git = ["git", "-C", str(HERE.parent), "worktree"]
        subprocess.run([*git, "add", "-q", "--detach", before, args.neuron_before], check=True)
        try:
            for r in range(args.rounds):
                for name, code in (("before", before), ("after", None)):
                    env = {**os.environ, "OMP_NUM_THREADS": "1"}
                    if code is not None:
                        env["PYTHONPATH"] = os.pathsep.join(
                            p for p in (code, env.get("PYTHONPATH", "")) if p
                        )
                    out = subprocess.run(child, env=env, check=True, capture_output=True, text=True)
                    row = json.loads(out.stdout.strip().splitlines()[-1])
                    if (code is not None) != row["code"].startswith(before):
                        raise RuntimeError(f"{name} imported the packages of {row['code']}")
                    runs[name].append({**row, "load_average_1min": os.getloadavg()[0]})
                    rate = row["live_env_steps_per_s"]
                    print(f"round {r} {name:6s} {row['seconds']:7.2f} s {rate:12,.0f} live/s")
        finally:
            subprocess.run([*git, "remove", "--force", before], check=True)
    rates = {
        k: statistics.median(r["live_env_steps_per_s"] for r in rows) for k, rows in runs.items()
    }
    flops = policy_flops()["total"]
    peak = matmul_flops(1)
    achieved = rates["after"] * flops
    return {
        "what": "one CMA-ES generation of E3's trained agent, torch 1 thread, one process each",
        "model": str(args.neuron_model.relative_to(HERE.parent)),
        "noise": args.neuron_noise,
        "population": args.population,
        "repeats": args.repeats,
        "steps": args.steps,
        "before_commit": args.neuron_before,
        "changed": "compiled AttentionNeuron population step (attn_policies.neuron_kernels) "
        "and CartPoleSwingUpVectorEnv's compiled step (advance_copies)",
        "live_env_steps_per_s": rates,
        "speedup_neuron_es": round(rates["after"] / rates["before"], 3),
        "policy_flops_per_live_step": flops,
        "matmul_flops_per_s_1_thread": peak,
        "achieved_flops_per_s_after": achieved,
        "share_of_matmul_peak_after": achieved / peak,
        "runs": runs,
    }


def plot(rates: dict[str, float], title: str, path: Path) -> None:
    labels = list(rates)
    fig = new_figure(7, 0.5 * len(labels) + 1.2, layout="tight")
    ax = fig.subplots()
    colors = ["grey" if "EvoJAX" in n else "tab:blue" for n in labels]
    ax.barh(labels, [rates[n] for n in labels], color=colors)
    for y, name in enumerate(labels):
        ax.text(rates[name], y, f" {rates[name]:,.0f}", va="center", fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("env-steps/s (population x repeats x steps per generation; log scale)")
    ax.set_title(title, fontsize=9)
    ax.invert_yaxis()
    ax.margins(x=0.25)
    save_figure(fig, path, dpi=110)


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a / b


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--population", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=16)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3, help="timed generations per evaluator")
    parser.add_argument("--sigma0", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2, help="process-pool workers")
    parser.add_argument("--loop-individuals", type=int, default=8)
    parser.add_argument("--loop-repeats", type=int, default=1)
    parser.add_argument("--cma-generations", type=int, default=20)
    parser.add_argument("--evojax-hidden-dim", type=int, default=16, help="M (seed 001: 16)")
    parser.add_argument("--evojax-python", type=Path, default=VENV / "bin" / "python")
    parser.add_argument("--no-evojax", action="store_true")
    parser.add_argument("--setup-evojax", action="store_true", help="create the venv and exit")
    parser.add_argument(
        "--ab",
        action="store_true",
        help="only time the population and vmap paths (1 thread, interleaved), print, exit",
    )
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--neuron-only", action="store_true", help="refresh neuron_es (before/after) only"
    )
    parser.add_argument("--neuron-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--neuron-model", type=Path, default=NEURON_MODEL / "best_model.pt")
    parser.add_argument("--neuron-noise", type=float, default=0.01)
    parser.add_argument("--neuron-before", default=NEURON_BEFORE)
    parser.add_argument(
        "--late-model",
        type=Path,
        default=HERE.parent / "results" / "cartpole_pi" / "pi_x0" / "best_model.pt",
        help="trained state dict for the late-generation row (skipped if missing)",
    )
    args = parser.parse_args()
    positive = ("population", "repeats", "steps", "rounds", "workers", "loop_individuals")
    for name in (*positive, "loop_repeats", "cma_generations"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.population < 2 or args.loop_individuals > args.population:
        parser.error("need 2 <= --population and --loop-individuals <= --population")
    if args.loop_repeats > args.repeats:
        parser.error("--loop-repeats must be <= --repeats")
    return args


def start_pool(spec: RolloutSpec, workers: int, solutions: np.ndarray, seeds: list[int]) -> Case:
    """Start the pool with one episode per worker; a second such call gives its rollout time."""
    t0 = time.perf_counter()
    pool = ProcessEvaluator(spec, n_workers=workers)
    tiny = solutions[:workers], seeds[:1]
    pool.evaluate(*tiny)
    t1 = time.perf_counter()
    pool.evaluate(*tiny)
    t2 = time.perf_counter()
    case = Case(POOL, pool)
    case.extra = {
        "workers": workers,
        "torch_threads_per_worker": spec.torch_threads,
        "start_up": {
            "first_call_seconds": t1 - t0,
            "rollout_seconds": t2 - t1,
            "startup_seconds": (t1 - t0) - (t2 - t1),  # spawn + imports + evaluator build
        },
    }
    return case


def ab_paths(args: argparse.Namespace, spec: RolloutSpec) -> None:
    """``--ab``: the population step against ``vmap`` on this generation, 1 thread each."""
    torch.set_num_threads(1)
    paths = {f: BatchedEvaluator(dataclasses.replace(spec, population_path=f)) for f in (1, 0)}
    solutions = first_generation(paths[1].num_parameters, args.population, args.sigma0, args.seed)
    seeds = np.random.default_rng(args.seed).integers(0, 2**31 - 1, args.repeats).tolist()
    nominal = args.population * args.repeats * args.steps
    for evaluator in paths.values():
        evaluator.evaluate(solutions[:2], seeds[:2])
    for r in range(args.rounds):
        for fast, evaluator in paths.items():
            start = time.perf_counter()
            evaluator.evaluate(solutions, seeds)
            seconds = time.perf_counter() - start
            name = "population step" if fast else "vmap"
            print(
                f"round {r} {name:16s} {seconds:7.2f} s  {nominal / seconds / 1e6:5.2f}M nominal "
                f"and {evaluator.last_lengths.sum() / seconds / 1e3:5.0f}k live env-steps/s "
                f"(load {os.getloadavg()[0]:.1f})",
                flush=True,
            )


def time_evaluators(
    args: argparse.Namespace, spec: RolloutSpec
) -> tuple[dict[str, dict[str, Any]], np.ndarray, list[int], np.ndarray]:
    """Batched (2 and 1 threads), pool and loop rows; also solutions, seeds, batched returns."""
    nominal = args.population * args.repeats * args.steps
    vmap_spec = dataclasses.replace(spec, population_path=False)
    cases = [
        Case("batched, 2 threads", BatchedEvaluator(spec), threads=2),
        Case("batched, 1 thread", BatchedEvaluator(spec), threads=1),
        Case("batched (vmap), 1 thread", BatchedEvaluator(vmap_spec), threads=1),
    ]
    dim = cases[0].evaluator.num_parameters
    solutions = first_generation(dim, args.population, args.sigma0, args.seed)
    seeds = np.random.default_rng(args.seed).integers(0, 2**31 - 1, args.repeats).tolist()
    cases.append(start_pool(spec, args.workers, solutions, seeds))
    try:
        for case in cases:
            case.run(solutions, seeds, timed=False)
        for r in range(args.rounds):
            for case in cases:
                case.run(solutions, seeds)
                print(f"round {r}: {case.name:20s} {case.seconds[-1]:8.3f} s", flush=True)
    finally:
        cases[-1].evaluator.close()
    rows = {case.name: case.summary(nominal) for case in cases}
    batched = cases[0].returns
    assert batched is not None and cases[-1].returns is not None and cases[2].returns is not None
    rows[POOL]["max_abs_return_diff_vs_batched"] = float(np.abs(cases[-1].returns - batched).max())
    # vmap and the population step round differently; over 1000 chaotic steps returns drift
    rows["batched (vmap), 1 thread"]["max_abs_return_diff_vs_batched"] = float(
        np.abs(cases[2].returns - batched).max()
    )

    loop = time_loop(solutions, seeds, args.steps, args.loop_individuals, args.loop_repeats)
    same = batched[: args.loop_individuals, : args.loop_repeats]
    rate = loop["live_env_steps_per_s"]
    rows[LOOP] = {
        **{k: v for k, v in loop.items() if k != "returns"},
        "max_abs_return_diff_vs_batched": float(np.abs(loop["returns"] - same).max()),
        "seconds_per_generation": nominal / rate,
        "seconds_per_generation_live": rows["batched, 2 threads"]["live_env_steps"] / rate,
        "env_steps_per_s": rate,
        "extrapolation": (
            "seconds_per_generation = population x repeats x steps / live_env_steps_per_s "
            "(every rollout run to the full steps, EvoJAX's count); seconds_per_generation_live"
            " = the batched run's live steps of this generation / live_env_steps_per_s (the "
            "loop stops each episode when it ends)"
        ),
    }
    return rows, solutions, seeds, batched


def compare(
    rows: dict[str, dict[str, Any]], evojax: dict[str, Any] | None, cma: dict[str, Any]
) -> tuple[dict[str, float | None], dict[str, bool | None]]:
    """Speed-up ratios (env-steps/s over env-steps/s) and the issue's goals."""

    def rate(name: str, key: str = "env_steps_per_s") -> float:
        return rows[name][key]

    evojax_rate = evojax.get("env_steps_per_s") if evojax else None
    two, one = "batched, 2 threads", "batched, 1 thread"
    speedups = {
        "batched_over_loop": ratio(rate(two), rate(LOOP)),
        "batched_over_loop_live": ratio(
            rate(two, "live_env_steps_per_s"), rate(LOOP, "live_env_steps_per_s")
        ),
        "batched_over_evojax": ratio(rate(two), evojax_rate),
        "batched_1_thread_over_loop": ratio(rate(one), rate(LOOP)),
        "batched_1_thread_over_evojax": ratio(rate(one), evojax_rate),
        "batched_1_thread_over_vmap_1_thread": ratio(rate(one), rate("batched (vmap), 1 thread")),
        "pool_over_loop": ratio(rate(POOL), rate(LOOP)),
        "batched_over_pool": ratio(rate(two), rate(POOL)),
    }
    over_evojax = speedups["batched_over_evojax"]
    goals = {
        "batched >= 50x loop": speedups["batched_over_loop"] >= 50,
        "batched >= 50x loop (live steps)": speedups["batched_over_loop_live"] >= 50,
        "batched >= 2x EvoJAX": None if over_evojax is None else over_evojax >= 2,
        "batched 1 thread >= 2x EvoJAX": (
            None if evojax_rate is None else speedups["batched_1_thread_over_evojax"] >= 2
        ),
        "CMA ask+tell < 10% of generation (full covariance, max)": (
            cma["full covariance"]["max_share_of_batched_generation"] < 0.1
        ),
        "CMA ask+tell < 10% of generation (CMA_diagonal, max)": (
            cma["CMA_diagonal"]["max_share_of_batched_generation"] < 0.1
        ),
    }
    return speedups, goals


def main() -> None:
    args = parse_args()
    if args.setup_evojax:
        print(f"EvoJAX venv ready: {setup_evojax()}")
        return
    if args.ab:
        ab_paths(args, make_spec(args.steps))
        return
    if args.neuron_child:
        print(json.dumps(time_trained_generation(args.neuron_model, args.neuron_noise, args)))
        return
    if args.neuron_only:
        path = args.out / "es.json"
        neuron = neuron_speedup(args)
        old = json.loads(path.read_text()) if path.exists() else {}
        top = {"speedup_neuron_es": neuron["speedup_neuron_es"]}
        path.write_text(json.dumps({**old, **top, "neuron_es": neuron}, indent=2) + "\n")
        print(json.dumps({k: v for k, v in neuron.items() if k != "runs"}, indent=1))
        return
    load_start = os.getloadavg()
    if load_start[0] > 0.5:
        print(f"warning: load average {load_start[0]:.2f}; timings need an idle machine")

    # EvoJAX first and alone: its process has exited before ours start.
    evojax = None if args.no_evojax else run_evojax(args.evojax_python, args)
    if evojax is not None:
        print(f"EvoJAX: {evojax.get('seconds_per_generation', evojax.get('error'))}", flush=True)

    spec = make_spec(args.steps)
    rows, solutions, seeds, returns = time_evaluators(args, spec)
    dim = solutions.shape[1]

    print("CMA-ES ask+tell ...", flush=True)
    batched_s = rows["batched, 2 threads"]["seconds_per_generation"]
    cma = {
        name: time_cma(dim, args.population, args.sigma0, args.cma_generations, args.seed, **opts)
        for name, opts in (("full covariance", {}), ("CMA_diagonal", {"CMA_diagonal": True}))
    }
    for row in cma.values():
        row["mean_share_of_batched_generation"] = row["mean_seconds"] / batched_s
        row["max_share_of_batched_generation"] = row["max_seconds"] / batched_s
    speedups, goals = compare(rows, evojax, cma)
    late = time_late_generation(args, spec)
    limit = machine_limit(rows, late)
    ask_tell = cma["full covariance"]["mean_seconds"]
    share = {
        name: ask_tell / (ask_tell + row["seconds_per_generation"])
        for name, row in {**rows, **(late or {}).get("cases", {})}.items()
        if name.startswith("batched")
    }

    fitness = returns.mean(axis=1)
    results = {
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor(),
            "cpu_count": os.cpu_count(),
            "usable_cores": len(os.sched_getaffinity(0)),
            "loadavg_start": load_start,
            "loadavg_end": os.getloadavg(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "numpy": np.__version__,
            "gymnasium": gym.__version__,
            "cma": version("cma"),
            "jax": (evojax or {}).get("versions", {}).get("jax"),
        },
        "task": {
            "env_id": ENV_ID,
            "policy": POLICY.target,
            "num_parameters": dim,
            "population": args.population,
            "repeats": args.repeats,
            "steps": args.steps,
            "nominal_env_steps_per_generation": args.population * args.repeats * args.steps,
            "solutions": f"first CMAES.ask(): x0 = 0, sigma0 = {args.sigma0}, seed {args.seed}",
            "task_seeds": seeds,
            "fitness_mean": float(fitness.mean()),
            "fitness_max": float(fitness.max()),
            "rounds": args.rounds,
        },
        "evaluators": rows,
        "evojax": evojax,
        "speedups": speedups,
        "goals": goals,
        "cma_ask_tell": cma,
        "late_generation": late,
        "machine_limit": limit,
        "ask_tell_share_of_generation": {
            "note": "full-covariance ask+tell / (ask+tell + evaluation), per batched row",
            **share,
        },
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "es.json"
    path.write_text(json.dumps(results, indent=2) + "\n")

    rates = {name: row["env_steps_per_s"] for name, row in rows.items()}
    if evojax is not None and "env_steps_per_s" in evojax:
        versions = evojax["versions"]
        label = f"EvoJAX {versions['evojax']} (jax {versions['jax']})"
        rates[label] = evojax["env_steps_per_s"]
    title = (
        f"CartPoleSwingUpHarder + AttentionNeuron, {args.population} x {args.repeats} x "
        f"{args.steps} steps, {os.cpu_count()} cores"
    )
    plot(rates, title, args.out / "es.png")
    for name, value in rates.items():
        print(f"{name:40s} {value:14,.0f} env-steps/s")
    for name, value in speedups.items():
        print(f"{name:40s} {'n/a' if value is None else f'{value:10.1f}x'}")
    for name, row in cma.items():
        mean, top = row["mean_seconds"], row["max_seconds"]
        print(f"CMA {name:20s} ask+tell mean {mean:.3f} s, max {top:.3f} s per generation")
    for name, row in limit.items():
        if isinstance(row, dict) and "achieved_flops_per_s" in row:
            print(
                f"{name:40s} {row['achieved_flops_per_s'] / 1e9:6.2f} GFLOP/s = "
                f"{100 * row['share_of_matmul_flops']:.1f}% of matmul"
            )
    peaks = ", ".join(f"{k}: {v / 1e9:.1f}" for k, v in limit["matmul_flops_per_s"].items())
    print(
        f"policy {limit['policy_flops_per_live_step']['total']} FLOPs/live step; matmul GFLOP/s "
        f"{peaks}"
    )
    if late:
        for name, row in late["cases"].items():
            print(f"late generation {name:24s} {row['live_env_steps_per_s']:12,.0f} live steps/s")
    for name, value in share.items():
        print(f"ask+tell share of a generation, {name:28s} {100 * value:.1f}%")
    print(f"wrote {path}")


if __name__ == "__main__":
    gym.logger.min_level = 40
    main()
