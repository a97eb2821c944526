"""DAgger behaviour cloning of a recurrent ES policy from a teacher (issue 12, E3 warm start).

Each round plays ``n_envs`` episodes in which every copy follows the teacher with probability
``beta`` (1 in round 0, then 0.5 and 0 alternately) and the student otherwise; the teacher's
action is recorded as the target at every step. The student then makes one pass over each of
the last ``keep_rounds`` datasets: truncated BPTT over windows of ``window`` steps carrying
its recurrent state, MSE on the teacher's action over the steps where the episode was alive,
Adam with gradient clipping. The student sees its inputs shuffled by one permutation per
episode (per copy), so a permutation-invariant student learns from every ordering.

The student is any ``nn.Module`` with ``(obs (B, N), state | None) -> (action (B, A), state)``
(e.g. :class:`~attn_policies.es_policies.AttentionNeuronPolicy`); a state with a ``prev_action``
field (a NamedTuple such as ``PolicyState``) gets the action actually played, which under a
mixed policy may be the teacher's. The teacher is a callable ``obs (B, N) -> action (B, A)``
(an ``(action, state)`` tuple is also accepted, its state ignored: stateless teachers only).
The env is ``n -> VectorEnv`` with numpy actions; copies stop counting once they end, so any
autoreset mode works (``autoreset=False`` envs also stop stepping the physics).

Randomness is derived from ``(seed, round)``, so :meth:`DAgger.save` / :meth:`DAgger.restore`
(student, optimizer and the kept datasets as ``.npz``) continue bit for bit.

Example:
    >>> import torch
    >>> from attn_envs.envs.cartpole_swingup import CartPoleSwingUpVectorEnv
    >>> from attn_policies.es_policies import AttentionNeuronPolicy, FNNPolicy
    >>> _ = torch.manual_seed(0)
    >>> teacher = FNNPolicy(5, 1, 4)
    >>> env_fn = lambda n: CartPoleSwingUpVectorEnv(n, max_episode_steps=20, autoreset=False)
    >>> cfg = DAggerConfig(n_envs=4, window=5, seed=1)
    >>> dagger = DAgger(AttentionNeuronPolicy.cartpole(), teacher, env_fn, cfg)
    >>> rec = dagger.step()
    >>> rec["round"], rec["beta"], rec["env_steps"], rec["loss"] > 0
    (1, 1.0, 80, True)
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from attn_policies.atomic import atomic_path, atomic_write
from attn_policies.attention import require_int

Teacher = Callable[[Tensor], Any]
EnvFactory = Callable[[int], gym.vector.VectorEnv]


@dataclass
class DAggerConfig:
    """Settings of :class:`DAgger` (defaults: the E3 prototype that reached 211.6).

    Attributes:
        n_envs: episodes collected per round.
        max_steps: cap on steps per collected episode.
        window: truncated-BPTT length (steps per gradient update).
        learning_rate: Adam step size.
        max_grad_norm: gradient-norm clip.
        keep_rounds: train on the datasets of the last this many rounds.
        shuffle_inputs: feed the student its inputs under one random permutation per episode.
        seed: seeds env resets, mixing and permutations (derived per round).
    """

    n_envs: int = 64
    max_steps: int = 1000
    window: int = 25
    learning_rate: float = 3e-3
    max_grad_norm: float = 1.0
    keep_rounds: int = 3
    shuffle_inputs: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("n_envs", "max_steps", "window", "keep_rounds"):
            require_int(getattr(self, name), f"DAggerConfig.{name}")
        for name in ("learning_rate", "max_grad_norm"):
            if not float(getattr(self, name)) > 0:
                raise ValueError(f"DAggerConfig.{name} must be > 0, got {getattr(self, name)}")


@dataclass
class Episodes:
    """One round's data, time-major: ``obs (T, B, N)`` as the env gave it, ``perm (B, N)`` the
    student's input order, ``actions``/``targets (T, B, A)`` played / teacher, ``alive (T, B)``."""

    obs: np.ndarray
    perm: np.ndarray
    actions: np.ndarray
    targets: np.ndarray
    alive: np.ndarray

    @property
    def steps(self) -> int:
        return int(self.alive.sum())


def beta_of(round_: int) -> float:
    """Share of copies driven by the teacher in round ``round_``: 1, then 0.5 / 0 alternately."""
    return 1.0 if round_ == 0 else (0.5 if round_ % 2 else 0.0)


def teacher_action(teacher: Teacher, obs: Tensor) -> Tensor:
    out = teacher(obs)
    return out[0] if isinstance(out, tuple) else out


def _with_prev_action(state: Any, action: Tensor) -> Any:
    if state is not None and hasattr(state, "_replace") and "prev_action" in state._fields:
        return state._replace(prev_action=action)
    return state


def _detach(state: Any) -> Any:
    """The state cut from the graph (tensors in nested tuples / NamedTuples)."""
    if isinstance(state, Tensor):
        return state.detach()
    if isinstance(state, tuple):
        items = [_detach(s) for s in state]
        return type(state)(*items) if hasattr(state, "_fields") else tuple(items)
    return state


def collect(
    student: nn.Module,
    teacher: Teacher,
    env_fn: EnvFactory,
    cfg: DAggerConfig,
    beta: float,
    seed: int,
) -> Episodes:
    """Play ``cfg.n_envs`` episodes, each copy following the teacher with probability ``beta``."""
    rng = np.random.default_rng(seed)
    env = env_fn(cfg.n_envs)
    try:
        obs, _ = env.reset(seed=int(rng.integers(2**31)))
        b, n = obs.shape
        perm = (
            np.stack([rng.permutation(n) for _ in range(b)])
            if cfg.shuffle_inputs
            else (np.tile(np.arange(n), (b, 1)))
        )
        perm_t = torch.as_tensor(perm)
        use_teacher = torch.as_tensor(rng.random(b) < beta)[:, None]
        alive = np.ones(b, bool)
        rows: dict[str, list[np.ndarray]] = {"obs": [], "actions": [], "targets": [], "alive": []}
        state = None
        with torch.no_grad():
            for _ in range(cfg.max_steps):
                o = torch.as_tensor(obs, dtype=torch.float32)
                target = teacher_action(teacher, o)
                own, state = student(torch.gather(o, 1, perm_t), state)
                action = torch.where(use_teacher, target, own)
                state = _with_prev_action(state, action)
                for key, value in zip(rows, (o, action, target, alive.copy()), strict=True):
                    rows[key].append(np.asarray(value))
                obs, _, terminated, truncated, _ = env.step(action.numpy())
                alive &= ~(np.asarray(terminated) | np.asarray(truncated))
                if not alive.any():
                    break
    finally:
        env.close()
    arrays = {k: np.stack(v) for k, v in rows.items()}
    return Episodes(perm=perm, **arrays)


def fit_epoch(
    student: nn.Module, optimizer: torch.optim.Optimizer, data: Episodes, cfg: DAggerConfig
) -> float:
    """One truncated-BPTT pass over ``data``; the mean squared error per alive step."""
    obs = torch.gather(
        torch.as_tensor(data.obs),
        2,
        torch.as_tensor(data.perm).unsqueeze(0).expand(data.obs.shape[0], -1, -1),
    )
    actions, targets = torch.as_tensor(data.actions), torch.as_tensor(data.targets)
    alive = torch.as_tensor(data.alive, dtype=torch.float32)
    state, total, count = None, 0.0, 0.0
    for start in range(0, obs.shape[0], cfg.window):
        stop = min(obs.shape[0], start + cfg.window)
        denom = alive[start:stop].sum()
        if denom == 0:  # every copy has ended: the rest is padding
            break
        loss = obs.new_zeros(())
        for t in range(start, stop):
            if t > 0:
                state = _with_prev_action(state, actions[t - 1])
            out, state = student(obs[t], state)
            loss = loss + (((out - targets[t]) ** 2).sum(-1) * alive[t]).sum()
        optimizer.zero_grad()
        (loss / denom).backward()
        nn.utils.clip_grad_norm_(student.parameters(), cfg.max_grad_norm)
        optimizer.step()
        state = _detach(state)
        total, count = total + float(loss.detach()), count + float(denom)
    return total / max(count, 1.0)


class DAgger:
    """Round-by-round DAgger; :meth:`step` collects one round and trains on the kept rounds.

    Attributes:
        round: rounds finished.
        env_steps: alive env steps collected so far.
        datasets: the last ``keep_rounds`` rounds' :class:`Episodes`.
    """

    def __init__(
        self, student: nn.Module, teacher: Teacher, env_fn: EnvFactory, cfg: DAggerConfig
    ) -> None:
        self.student, self.teacher, self.env_fn, self.cfg = student, teacher, env_fn, cfg
        self.optimizer = torch.optim.Adam(student.parameters(), lr=cfg.learning_rate)
        self.round = 0
        self.env_steps = 0
        self.datasets: list[Episodes] = []

    def step(self) -> dict[str, Any]:
        beta = beta_of(self.round)
        seed = int(np.random.SeedSequence([self.cfg.seed, self.round]).generate_state(1)[0])
        data = collect(self.student, self.teacher, self.env_fn, self.cfg, beta, seed)
        self.datasets = [*self.datasets, data][-self.cfg.keep_rounds :]
        self.env_steps += data.steps
        torch.manual_seed(seed)  # nothing in a stock student draws, but a custom one may
        self.student.train()
        loss = float("nan")
        for kept in self.datasets:  # oldest first, as the prototype
            loss = fit_epoch(self.student, self.optimizer, kept, self.cfg)
        self.student.eval()
        self.round += 1
        return {"round": self.round, "beta": beta, "env_steps": self.env_steps, "loss": loss}

    # -- checkpoints (tensors, arrays and JSON only: loading runs no code) -----------------

    def save(self, directory: str | Path) -> None:
        """Write the state to ``directory``: each file atomically under a per-round name,
        then ``trainer.json`` naming them, then the older files go (a crash at any point
        leaves one whole checkpoint)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        student = f"student-{self.round}.pt"
        with atomic_path(directory / student) as tmp:
            torch.save(
                {"student": self.student.state_dict(), "optimizer": self.optimizer.state_dict()},
                tmp,
            )
        names = []
        for i, data in enumerate(self.datasets):
            name = f"round-{self.round - len(self.datasets) + i + 1}.npz"
            if not (directory / name).exists():  # a round's data never changes once written
                with atomic_path(directory / name) as tmp, tmp.open("wb") as fh:
                    np.savez(fh, **dataclasses.asdict(data))
            names.append(name)
        meta = {
            "round": self.round,
            "env_steps": self.env_steps,
            "student": student,
            "datasets": names,
        }
        atomic_write(directory / "trainer.json", json.dumps(meta, indent=1))
        for old in [*directory.glob("round-*.npz"), *directory.glob("student-*.pt")]:
            if old.name not in (student, *names):
                old.unlink()

    def restore(self, directory: str | Path) -> None:
        """Load what :meth:`save` wrote (tensors with ``weights_only``, arrays without pickle)."""
        directory = Path(directory)
        meta = json.loads((directory / "trainer.json").read_text())
        blob = torch.load(directory / Path(meta["student"]).name, weights_only=True)
        self.student.load_state_dict(blob["student"])
        self.optimizer.load_state_dict(blob["optimizer"])
        self.datasets = []
        for name in meta["datasets"]:
            with np.load(directory / Path(name).name, allow_pickle=False) as z:
                fields = {f.name: z[f.name] for f in dataclasses.fields(Episodes)}
            self.datasets.append(Episodes(**fields))
        self.round, self.env_steps = int(meta["round"]), int(meta["env_steps"])
