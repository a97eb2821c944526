"""One EvoJAX generation of CartPoleSwingUp(harder) + PermutationInvariantPolicy, timed.

    benchmarks/.venv-evojax/bin/python benchmarks/es_evojax.py [--population 256]
        [--repeats 16] [--steps 1000] [--rounds 3]

Runs inside ``benchmarks/.venv-evojax`` (``python benchmarks/es.py --setup-evojax``), never in
the project's environment: it imports only EvoJAX, jax and numpy. ``benchmarks/es.py`` calls
it and merges the JSON it prints as its last stdout line.

The generation is EvoJAX's own training evaluation, ``SimManager.eval_params(params,
test=False)`` as its ``Trainer`` calls it: the population repeated ``repeats`` times, one
``lax.scan`` over ``steps`` steps in which ended tasks are masked (and auto-reset by the task),
so every rollout costs the full ``steps``. Parameters are ``sigma * N(0, I)`` around 0, like
the first generation of CMA-ES with ``sigma0 = sigma``. The first call (trace + XLA compile +
one run) is reported apart from the ``rounds`` timed calls that follow it.

The policy defaults to the authors' E3 agent (seed 001, cartpole_pi.gin): ``hidden_dim`` (M)
16, ``msg_dim`` 32, ``pos_em_dim`` 8; EvoJAX's ``examples/train_cartpole.py --pi`` uses its
``--hidden-size`` default of 64 instead (``--hidden-dim 64``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import time
from importlib.metadata import version
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from evojax.policy import PermutationInvariantPolicy
from evojax.sim_mgr import SimManager
from evojax.task.cartpole import CartPoleSwingUp


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--population", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=16)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3, help="timed generations after warm-up")
    parser.add_argument("--hidden-dim", type=int, default=16, help="M, the number of queries")
    parser.add_argument("--msg-dim", type=int, default=32)
    parser.add_argument("--pos-em-dim", type=int, default=8)
    parser.add_argument("--sigma", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for name in ("population", "repeats", "steps", "rounds", "hidden_dim"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def build(args: argparse.Namespace) -> tuple[SimManager, PermutationInvariantPolicy]:
    quiet = logging.getLogger("es_evojax")
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False  # EvoJAX's loggers print to stdout, which carries our JSON
    task = CartPoleSwingUp(max_steps=args.steps, harder=True, test=False)
    test_task = CartPoleSwingUp(max_steps=args.steps, harder=True, test=True)
    policy = PermutationInvariantPolicy(
        act_dim=task.act_shape[0],
        hidden_dim=args.hidden_dim,
        msg_dim=args.msg_dim,
        pos_em_dim=args.pos_em_dim,
        logger=quiet,
    )
    sim = SimManager(
        n_repeats=args.repeats,
        test_n_repeats=1,
        pop_size=args.population,
        n_evaluations=1,
        policy_net=policy,
        train_vec_task=task,
        valid_vec_task=test_task,
        seed=args.seed,
        logger=quiet,
    )
    return sim, policy


def count_live_steps(sim: SimManager) -> list[int]:
    """Wrap the rollout so each call records its live steps (masks are returned anyway).

    The scan emits the mask *after* each step; a copy of length ``L`` contributes ``L - 1``
    ones (every copy ends by ``max_steps``), so live steps = ``mask.sum() + copies``.
    """
    counts: list[int] = []
    rollout = sim._train_rollout_fn

    def counting(*a: Any, **kw: Any) -> Any:
        out = rollout(*a, **kw)
        masks = out[2]
        counts.append(int(masks.sum()) + int(masks.shape[-1]))
        return out

    sim._train_rollout_fn = counting
    return counts


def main() -> None:
    args = parse_args()
    sim, policy = build(args)
    live = count_live_steps(sim)
    rng = np.random.default_rng(args.seed)
    params = jnp.asarray(
        args.sigma * rng.standard_normal((args.population, policy.num_params)), jnp.float32
    )

    t0 = time.perf_counter()
    scores, _ = sim.eval_params(params, test=False)
    scores.block_until_ready()
    first = time.perf_counter() - t0
    times = []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        scores, _ = sim.eval_params(params, test=False)
        scores.block_until_ready()  # jax dispatches asynchronously
        times.append(time.perf_counter() - t0)

    seconds = statistics.median(times)
    nominal = args.population * args.repeats * args.steps
    live_steps = statistics.median(live[1:])
    result = {
        "versions": {
            "python": platform.python_version(),
            "evojax": version("evojax"),
            "jax": jax.__version__,
            "jaxlib": version("jaxlib"),
            "flax": version("flax"),
            "numpy": np.__version__,
        },
        "devices": [str(d) for d in jax.devices()],
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "policy": {
            "class": "evojax.policy.PermutationInvariantPolicy",
            "hidden_dim": args.hidden_dim,
            "msg_dim": args.msg_dim,
            "pos_em_dim": args.pos_em_dim,
            "num_params": int(policy.num_params),
        },
        "task": f"evojax.task.cartpole.CartPoleSwingUp(harder=True, max_steps={args.steps})",
        "solutions": f"{args.sigma} * N(0, I), numpy default_rng({args.seed})",
        "first_call_seconds": first,
        "compile_seconds_estimate": max(first - seconds, 0.0),
        "seconds_per_generation": seconds,
        "seconds_all_rounds": times,
        "nominal_env_steps": nominal,
        "env_steps_per_s": nominal / seconds,
        "live_env_steps": int(live_steps),
        "live_env_steps_per_s": live_steps / seconds,
        "fitness_mean": float(scores.mean()),
        "fitness_max": float(scores.max()),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
