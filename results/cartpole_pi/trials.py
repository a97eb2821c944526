"""E3, issue 12: more searches for the catch, from the best agents trained here.

``shaped`` and ``apg`` start from ``results/cartpole_pi/pi_warm_T300`` (415.5 over the 1000
test episodes; it spins the pole over the top instead of holding it, see ``balance.md``),
``cma`` from another trial's final agent. Each prints the test mean over the first 200 test
episodes as it goes and ends with the ``balance.md`` row of the final agent over all 1000
(seeds ``eval.test_seed + i``, inputs in order, as ``attn-zoo evaluate``). Results go to
``trials_<name>.json`` beside this script, the final agent to ``trials_<name>.npy``.

``python results/cartpole_pi/trials.py shaped [GENERATIONS]`` (default 300; 48 min beside
three other jobs): sep-CMA-ES, population 256 x 16 repeats, sigma0 0.03, seed 1, on a *training*
fitness that pays each step's reward times ``exp(-θ'^2 / 8)``. A slower pass over the top
then pays more, which gives the search a path of small steps from spinning towards holding;
the test keeps the true reward.

``shaped --from-zero`` runs the same search from scratch instead (x0 = 0, sigma0 0.1, as
``attn-zoo train cartpole_pi``), so that the shaped fitness leads from the start rather than
from a spinner.

``python results/cartpole_pi/trials.py cma NAME [GENERATIONS]``: the same sep-CMA-ES on the true
fitness, started from the final agent of trial ``NAME`` (every trial saves it as
``trials_<name>.npy``, float32 parameters); ``--shaped``: on the shaped fitness instead;
``--upright-mix``: on the true reward, but the training episodes whose task seed is odd (about
half; the population shares the seeds) start upright as in the balancing task
(``N(0, 0.2)`` around the pole up), so that holding the pole pays in the fitness even before
the swing-up's catch is found. The test keeps the Harder starts.

``python results/cartpole_pi/trials.py apg [UPDATES] [--teacher]`` (default 500; 8-9 min beside
three other jobs): analytic policy gradient. The env's dynamics written again in torch (the env's
numpy version cannot be differentiated) let the return of a 150-step window be
differentiated through the physics and the agent's LSTM: Adam (lr 1e-3, or 3e-4 with
``--teacher``), gradient norm clipped at 1, 128 episodes a batch, inputs shuffled per episode.
Each window starts at a step ``t0 ~ U[0, 850]`` of a no-grad rollout from a Harder reset,
played by the agent itself or, with ``--teacher``, by the FNN teacher
(``results/cartpole_pi/fnn``, which holds the pole) while the agent's state follows along
(fed the teacher's actions), so that most windows start with the pole up; ``--mix``: the
teacher plays half of the updates' prefixes (drawn per update). A copy that leaves the track
earns nothing after it, and that cut has no gradient; ``--through`` simulates on past the
rail instead, where the reward's ``cos(x / 2.4 · π / 2)`` turns negative, so the gradient
sees the rail. ``--soft`` weighs each step's reward by a smooth survival instead of the cut: the
running product of ``sigmoid((2.4 - |x|) / 0.05)`` over the window's steps, so that crossing
the rail costs the rest of the window's reward, as the real cut does, and the gradient sees it.
``--upright``: every window starts at step 0 from the balancing task's starts (no prefix), to
learn holding and centring the cart; ``--window=STEPS`` sets the window (150); ``--lr=LR``
Adam's step (1e-3, 3e-4 with a teacher);
``--from=NAME`` starts from trial ``NAME``'s final agent instead of ``pi_warm_T300``.

``python results/cartpole_pi/trials.py hold [UPDATES] [--window=STEPS] [--chunks] [--x-cost=W]
[--lr=LR] [--best] [--from=NAME] [--fnn]`` (default 1000 updates, windows growing to 300
steps): the first stage of a curriculum, Adam through the same torch physics on the
balancing task's starts with a quadratic cost that makes holding the pole and centring the
cart the optimum (see :func:`hold`; ``--chunks``: whole episodes in windows, ``--x-cost``:
the weight of the cart's offset, ``--lr``: Adam's step, 1e-3, ``--best``: keep the agent of
the best check rather than the last); from fresh weights, or trial ``NAME``'s agent.
``--fnn`` trains the FNN baseline the same way, a check that the method can teach holding at
all.
"""

from __future__ import annotations

import functools
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from balance import play_policy
from torch.utils._pytree import tree_map

from attn_envs.envs import cartpole_swingup as csu
from attn_envs.envs.cartpole_swingup_torch import dynamics, reward
from attn_envs.envs.cartpole_swingup_torch import observation as observe
from attn_policies.algorithms.cmaes import CMAESConfig, CMAESTrainer
from attn_policies.algorithms.es_eval import BatchedEvaluator, RolloutSpec
from attn_policies.es_policies import FNNPolicy
from zoo import runs
from zoo.trainers import get_trainer
from zoo.trainers.cmaes_trainer import policy_factory

HERE = Path(__file__).parent
START = "results/cartpole_pi/pi_warm_T300"
TEACHER = "results/cartpole_pi/fnn"
CHECK = 200  # test episodes of the running check
SPEED = 2.0  # θ' scale of the shaped fitness
RAIL_WIDTH = 0.05  # m: --soft's survival falls from 0.88 to 0.12 within 0.1 m of the rail


def load(folder: str) -> tuple[torch.nn.Module, Any]:
    handle = runs.load(folder)
    return get_trainer("cmaes").load(handle.path, handle.config, "best"), handle.config


def flat(policy: torch.nn.Module) -> np.ndarray:
    return torch.nn.utils.parameters_to_vector(policy.parameters()).detach().numpy()


class ShapedSwingUp(csu.CartPoleSwingUpVectorEnv):
    """Training only: the reward times ``exp(-θ'^2 / (2 SPEED^2))``."""

    def step(self, actions: np.ndarray) -> tuple[Any, ...]:
        obs, reward, terminated, truncated, info = super().step(actions)
        return obs, reward * np.exp(-0.5 * (obs[:, 4] / SPEED) ** 2), terminated, truncated, info


class MixedStarts(csu.CartPoleSwingUpVectorEnv):
    """Training only: copies with an odd reset seed start upright (the balancing task's starts)."""

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> tuple[Any, ...]:
        if seed is None or isinstance(seed, int | np.integer):
            raise ValueError("MixedStarts needs one seed per copy")
        # One draw per distinct seed (the population shares them), given as the `state` option.
        unique, inverse = np.unique(np.asarray(seed), return_inverse=True)
        states = np.stack(
            [
                csu.sample_initial_states(csu.np_random(int(s))[0], 1, s % 2 == 0, s % 2 == 1)[0]
                for s in unique
            ]
        )
        return super().reset(seed=seed, options={**(options or {}), "state": states[inverse]})


def swingup_env(
    n: int, env_class: type[csu.CartPoleSwingUpVectorEnv] = csu.CartPoleSwingUpVectorEnv
) -> csu.CartPoleSwingUpVectorEnv:
    return env_class(n, harder=True, max_episode_steps=1000, autoreset=False)


def sep_cma(
    generations: int,
    rows: list[dict[str, Any]],
    shape: bool,
    x0: np.ndarray | None = None,
    mixed: bool = False,
    sigma0: float = 0.03,
) -> np.ndarray:
    """sep-CMA-ES from ``START`` (or ``x0``) on the shaped fitness, or on the true one;
    ``mixed``: half of the training starts upright (true reward)."""
    policy, run = load(START)
    factory = policy_factory(run)
    env = swingup_env
    if shape or mixed:
        env = functools.partial(swingup_env, env_class=ShapedSwingUp if shape else MixedStarts)
    train = BatchedEvaluator(RolloutSpec(policy_fn=factory, vector_env_fn=env))
    test = BatchedEvaluator(RolloutSpec(policy_fn=factory, vector_env_fn=swingup_env))
    seeds = [run.eval.test_seed + i for i in range(CHECK)]
    fitness = "shaped_mean" if shape else "train_mean"
    x0 = flat(policy) if x0 is None else x0
    config = CMAESConfig(256, 16, sigma0, seed=1, options={"CMA_diagonal": True}, x0=x0)
    trainer = CMAESTrainer(train, config)
    rows.append({"generation": 0, "test": float(test.evaluate(x0[None], seeds).mean())})
    start = time.time()
    for g in range(1, generations + 1):
        record = trainer.step()
        if g % 10 == 0:
            x = trainer.favourite
            rows.append(
                {
                    "generation": g,
                    "test": float(test.evaluate(x[None].astype(np.float32), seeds).mean()),
                    fitness: record["fitness_mean"],
                    "sigma": record["sigma"],
                    "minutes": round((time.time() - start) / 60, 1),
                }
            )
            print(rows[-1], flush=True)
    return trainer.favourite


# -- analytic policy gradient -----------------------------------------------------------------


def apg(
    updates: int,
    teacher_share: float,
    through: bool,
    rows: list[dict[str, Any]],
    soft: bool = False,
    upright: bool = False,
    window: int = 150,
    x0: np.ndarray | None = None,
    lr: float | None = None,
) -> np.ndarray:
    batch = 128
    policy, run = load(START)
    if x0 is not None:
        torch.nn.utils.vector_to_parameters(torch.tensor(x0), policy.parameters())  # a copy
    teacher = load(TEACHER)[0] if teacher_share else None
    test = BatchedEvaluator(RolloutSpec(policy_fn=policy_factory(run), vector_env_fn=swingup_env))
    seeds = [run.eval.test_seed + i for i in range(CHECK)]
    lr = lr if lr is not None else 3e-4 if teacher_share else 1e-3
    optimizer = torch.optim.Adam(policy.parameters(), lr=lr)
    rng = np.random.default_rng(0)
    rows.append({"update": 0, "test": float(test.evaluate(flat(policy)[None], seeds).mean())})
    start = time.time()
    for u in range(1, updates + 1):
        starts = csu.sample_initial_states(rng, batch, not upright, upright)
        s = torch.as_tensor(starts, dtype=torch.float32)
        perm = torch.as_tensor(np.stack([rng.permutation(5) for _ in range(batch)]))
        t0 = 0 if upright else int(rng.integers(0, 1000 - window + 1))
        alive, state = torch.ones(batch, dtype=torch.bool), None
        drive = teacher  # None at share 0; shares 0 and 1 draw nothing (same random stream)
        if 0 < teacher_share < 1:
            drive = teacher if rng.random() < teacher_share else None
        with torch.no_grad():
            for _ in range(t0):
                obs = observe(s)
                action, state = policy(torch.gather(obs, 1, perm), state)
                if drive is not None:
                    action = drive(obs)[0]
                    state = state._replace(prev_action=action)
                s = dynamics(s, action.squeeze(-1))
                alive &= s[:, 0].abs() <= csu.X_THRESHOLD
        state = None if state is None else tree_map(torch.Tensor.detach, state)
        total, survival = torch.zeros(batch), alive.float()
        for _ in range(window):
            action, state = policy(torch.gather(observe(s), 1, perm), state)
            s = dynamics(s, action.squeeze(-1))
            if soft:
                survival = survival * torch.sigmoid((csu.X_THRESHOLD - s[:, 0].abs()) / RAIL_WIDTH)
                total = total + reward(s) * survival
            else:
                total = total + (reward(s) if through else reward(s) * alive)
            alive = alive & (s[:, 0].abs() <= csu.X_THRESHOLD)
        loss = -total.mean() / window
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        optimizer.step()
        if u % 100 == 0:
            rows.append(
                {
                    "update": u,
                    "test": float(test.evaluate(flat(policy)[None], seeds).mean()),
                    "window_reward": -loss.item(),
                    "minutes": round((time.time() - start) / 60, 1),
                }
            )
            print(rows[-1], flush=True)
    return flat(policy)


def hold(
    updates: int,
    rows: list[dict[str, Any]],
    window: int = 300,
    x0: np.ndarray | None = None,
    fnn: bool = False,
    chunks: bool = False,
    x_weight: float = 0.25,
    lr: float = 1e-3,
    keep_best: bool = False,
) -> np.ndarray:
    """Stage 1 of a curriculum: learn to hold and centre the pole on upright starts.

    Adam through the physics on a quadratic cost, ``1 - cos θ + x_weight (x / 2.4)^2 + 0.01
    θ'^2 + 0.01 x'^2`` a step, which a spinning pole pays dearly for (the task's reward pays a
    spinner 0.6-0.8 a step); the window grows from 25 steps by one every two updates up to
    ``window``, so the first gradients come from the first moments of a fall. ``chunks``:
    whole 1000-step episodes instead, with an update every ``window`` steps (truncated
    backpropagation through time), so the cost of drifting off the rail late in an episode
    is seen; after each window, a copy whose pole has fallen (abs(θ) above π/2) or whose cart
    has left the rail starts again from a fresh upright start, so every window trains holding.
    From fresh weights (``torch.manual_seed(0)``) unless ``x0``. Checked every 100 updates on
    the 1000 upright test starts (``play_policy(upright=True)``: held-up share,
    return). ``fnn``: the same for the FNN baseline (5 -> 16 tanh -> 1 tanh, inputs in
    order), a check of the method itself. ``keep_best``: return the agent of the best check
    (upright return) instead of the last.
    """
    batch = 128
    _, run = load(START)
    torch.manual_seed(0)
    policy = FNNPolicy(5, 1, hidden=16) if fnn else policy_factory(run)()
    if x0 is not None:
        torch.nn.utils.vector_to_parameters(torch.tensor(x0), policy.parameters())
    optimizer = torch.optim.Adam(policy.parameters(), lr=lr)
    rng = np.random.default_rng(0)
    start = time.time()
    u, best, best_x = 0, -math.inf, flat(policy)
    while u < updates:
        s = torch.as_tensor(csu.sample_initial_states(rng, batch, False, True), dtype=torch.float32)
        perm = torch.as_tensor(np.stack([rng.permutation(5) for _ in range(batch)]))
        if fnn:  # not permutation invariant: inputs in order (the same random stream)
            perm = torch.arange(5).expand(batch, 5)
        state = None
        steps = window if chunks else min(window, 25 + (u + 1) // 2)
        for _ in range(1000 // window if chunks else 1):
            u += 1
            cost = torch.zeros(())
            for _ in range(steps):
                action, state = policy(torch.gather(observe(s), 1, perm), state)
                s = dynamics(s, action.squeeze(-1))
                x, x_dot, theta, theta_dot = s.unbind(-1)
                cost = cost + (
                    1 - torch.cos(theta) + x_weight * (x / csu.X_THRESHOLD) ** 2
                    + 0.01 * theta_dot**2 + 0.01 * x_dot**2
                ).mean()  # fmt: skip
            loss = cost / steps
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
            optimizer.step()
            s = s.detach()
            state = None if state is None else tree_map(torch.Tensor.detach, state)
            if chunks:  # copies that dropped the pole or left the rail start again, upright
                theta = torch.remainder(s[:, 2] + math.pi, 2 * math.pi) - math.pi
                down = (theta.abs() > math.pi / 2) | (s[:, 0].abs() > csu.X_THRESHOLD)
                if down.any():
                    fresh = csu.sample_initial_states(rng, int(down.sum()), False, True)
                    s[down] = torch.as_tensor(fresh, dtype=torch.float32)
                    if state is not None:
                        state = policy.reset_state(state, down)
            if u % 100 == 0:
                with torch.no_grad():
                    up = play_policy(policy, run.eval.test_seed, upright=True)
                rows.append(
                    {
                        "update": u,
                        "window": steps,
                        "cost": loss.item(),
                        "upright_mean": float(up["mean"]),
                        "upright_held_up": float(up["held_up"]),
                        "upright_early": float(up["early"]),
                        "minutes": round((time.time() - start) / 60, 1),
                    }
                )
                print(rows[-1], flush=True)
                if rows[-1]["upright_mean"] > best:
                    best, best_x = rows[-1]["upright_mean"], flat(policy)
            if u == updates:
                break
    return best_x if keep_best else flat(policy)


def trial_agent(name: str, option: str) -> np.ndarray:
    """The final agent of trial ``name`` (``trials_<name>.npy``), or exit saying it is missing."""
    path = HERE / f"trials_{name}.npy"
    if not name or not path.is_file():
        sys.exit(f"{option} needs the NAME of a finished trial (trials_NAME.npy in {HERE})")
    return np.load(path, allow_pickle=False)


def main(args: list[str]) -> None:
    torch.set_num_threads(1)
    if not args or args[0] not in ("shaped", "apg", "cma", "hold"):
        sys.exit(
            "usage: trials.py shaped [GENERATIONS] [--from-zero]"
            " | cma NAME [GENERATIONS] [--shaped|--upright-mix]"
            " | apg [UPDATES] [--teacher|--mix] [--through|--soft] [--upright]"
            " [--window=STEPS] [--lr=LR] [--from=NAME]"
            " | hold [UPDATES] [--window=STEPS] [--chunks] [--x-cost=W] [--lr=LR] [--best]"
            " [--from=NAME] [--fnn]"
        )
    share = 1.0 if "--teacher" in args else 0.5 if "--mix" in args else 0.0
    through, soft = "--through" in args, "--soft" in args
    numbers = [int(a) for a in args[1:] if a.isdigit()]
    rows: list[dict[str, Any]] = []
    if args[0] == "hold":
        window = next((int(a.split("=")[1]) for a in args if a.startswith("--window=")), 300)
        base = next((a.split("=")[1] for a in args if a.startswith("--from=")), None)
        x0 = None if base is None else trial_agent(base, "--from")
        fnn, chunks = "--fnn" in args, "--chunks" in args
        x_weight = next((float(a.split("=")[1]) for a in args if a.startswith("--x-cost=")), 0.25)
        name = "hold" + "_fnn" * fnn + "_chunks" * chunks + f"_w{window}" * (window != 300)
        lr = next((float(a.split("=")[1]) for a in args if a.startswith("--lr=")), 1e-3)
        name += f"_x{x_weight:g}" * (x_weight != 0.25) + f"_lr{lr:g}" * (lr != 1e-3)
        keep = "--best" in args
        name += "_best" * keep + f"_from_{base}" * (base is not None)
        x = hold(numbers[0] if numbers else 1000, rows, window, x0, fnn, chunks, x_weight, lr, keep)
        if fnn:  # the FNN's row; the file keeps the FNN's parameters
            net = FNNPolicy(5, 1, hidden=16)
            torch.nn.utils.vector_to_parameters(torch.as_tensor(x), net.parameters())
            final = play_policy(net, load(START)[1].eval.test_seed)
            out = {"command": f"python results/cartpole_pi/trials.py {' '.join(args)}"}
            out |= {"curve": rows, "final_1000": {k: float(v) for k, v in final.items()}}
            (HERE / f"trials_{name}.json").write_text(json.dumps(out, indent=1) + "\n")
            np.save(HERE / f"trials_{name}.npy", np.asarray(x, np.float32))
            return
    elif args[0] == "shaped" and "--from-zero" in args:  # from scratch, as the cpu run starts
        x0 = np.zeros_like(flat(load(START)[0]))
        name = "shaped_from_zero"
        x = sep_cma(numbers[0] if numbers else 300, rows, True, x0, sigma0=0.1)
    elif args[0] == "shaped":
        name, x = "shaped", sep_cma(numbers[0] if numbers else 300, rows, shape=True)
    elif args[0] == "cma":
        x0 = trial_agent(args[1] if len(args) > 1 else "", "cma")
        mixed = "--upright-mix" in args
        name = f"cma_{args[1]}" + "_shaped" * ("--shaped" in args) + "_mixed" * mixed
        x = sep_cma(numbers[0] if numbers else 300, rows, "--shaped" in args, x0, mixed)
    else:
        upright = "--upright" in args
        window = next((int(a.split("=")[1]) for a in args if a.startswith("--window=")), 150)
        base = next((a.split("=")[1] for a in args if a.startswith("--from=")), None)
        x0 = None if base is None else trial_agent(base, "--from")
        name = "apg" + {1.0: "_teacher", 0.5: "_mix", 0.0: ""}[share]
        name += "_through" * through + "_soft" * soft + "_upright" * upright
        lr = next((float(a.split("=")[1]) for a in args if a.startswith("--lr=")), None)
        name += f"_w{window}" * (window != 150) + f"_lr{lr:g}" * (lr is not None)
        name += f"_from_{base}" * (base is not None)
        x = apg(numbers[0] if numbers else 500, share, through, rows, soft, upright, window, x0, lr)
    policy, run = load(START)
    torch.nn.utils.vector_to_parameters(
        torch.as_tensor(x, dtype=torch.float32), policy.parameters()
    )
    final = play_policy(policy, run.eval.test_seed)
    print(final)
    out = {"command": f"python results/cartpole_pi/trials.py {' '.join(args)}", "curve": rows}
    out["final_1000"] = {k: float(v) for k, v in final.items()}
    (HERE / f"trials_{name}.json").write_text(json.dumps(out, indent=1) + "\n")
    np.save(HERE / f"trials_{name}.npy", np.asarray(x, np.float32))  # the agent, for `cma`


if __name__ == "__main__":
    main(sys.argv[1:])
