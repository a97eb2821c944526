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

The article's behaviour cloning (E4) is a mode of the same loop: ``beta="teacher"`` (the teacher
drives every copy in every round), ``collect_rounds=K`` (rounds 1..K only collect, so the
dataset is ``K * n_envs`` teacher episodes; each later round is one epoch over all of it),
``batch_episodes=64`` (minibatches of trajectories, each unrolled from the episode start with
its state carried through every window) and ``prev_action_noise=0.03`` (Gaussian noise on the
previous action the student is fed while it is trained).

Randomness is derived from ``(seed, round)``, so :meth:`DAgger.save` / :meth:`DAgger.restore`
(student, optimizer and the kept datasets as ``.npz``) continue bit for bit.

Example:
    >>> import torch
    >>> from attn_envs.envs.cartpole_swingup_vector import CartPoleSwingUpVectorEnv
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

from attn_policies.atomic import atomic_path, atomic_write, make_folder
from attn_policies.checks import require_int
from attn_policies.safe_reads import check_archive, load_tensors, read_json

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
        beta: the teacher's share per round: ``"dagger"`` (1, then 0.5 / 0 alternately),
            ``"teacher"`` (1 always: plain behaviour cloning) or a constant in [0, 1].
        collect_rounds: 0: collect and train in every round (DAgger). ``K > 0``: rounds
            1..K only collect and keep every round's data; each later round is one epoch
            over all of it (``keep_rounds`` is then unused).
        batch_episodes: trajectories per minibatch; 0: each kept round is one batch.
        prev_action_noise: std of the Gaussian noise added to the previous action the
            student is fed in training (0: none, no draws).
        handover: 0: a copy the teacher drives, it drives to the end. ``H > 0``: it hands
            over to the student at a step drawn uniformly from ``[0, H)``, so the student is
            labelled on its own actions where only the teacher gets (CartPoleSwingUp: with
            the pole already up, where a student that never balances never is).
        teacher_action_noise: std of Gaussian noise added to the action a copy plays while
            the teacher drives it, clipped to the action space (DART's noise injection: the
            recorded target stays the teacher's own action, so the student is shown how the
            teacher corrects the small errors it will make; 0: the teacher's action as it is,
            no draws). For a deterministic teacher this is what "sampled" actions can mean.
        compiled: fit a student that has ``forward_window`` (the AttentionNeuron agent) one
            window at a time with its compiled forward and backward; False steps it in torch
            (the same loss and gradients to float tolerance, ~10x slower for E4's student).
    """

    n_envs: int = 64
    max_steps: int = 1000
    window: int = 25
    learning_rate: float = 3e-3
    max_grad_norm: float = 1.0
    keep_rounds: int = 3
    shuffle_inputs: bool = True
    seed: int = 0
    beta: str | float = "dagger"
    collect_rounds: int = 0
    batch_episodes: int = 0
    prev_action_noise: float = 0.0
    handover: int = 0
    teacher_action_noise: float = 0.0
    compiled: bool = True

    def __post_init__(self) -> None:
        for name in ("n_envs", "max_steps", "window", "keep_rounds"):
            require_int(getattr(self, name), f"DAggerConfig.{name}")
        for name in ("learning_rate", "max_grad_norm"):
            if not float(getattr(self, name)) > 0:
                raise ValueError(f"DAggerConfig.{name} must be > 0, got {getattr(self, name)}")
        for name in ("collect_rounds", "batch_episodes", "handover"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"DAggerConfig.{name} must be an int >= 0, got {value!r}")
        for name in ("prev_action_noise", "teacher_action_noise"):
            if not float(getattr(self, name)) >= 0:
                raise ValueError(f"DAggerConfig.{name} must be >= 0, got {getattr(self, name)}")
        beta = self.beta
        if isinstance(beta, str):
            if beta not in BETA_SCHEDULES:
                raise ValueError(
                    f"DAggerConfig.beta must be one of {', '.join(BETA_SCHEDULES)} or a number "
                    f"in [0, 1], got {beta!r}"
                )
        elif isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 <= beta <= 1:
            raise ValueError(f"DAggerConfig.beta must be in [0, 1], got {beta!r}")

    def beta_at(self, round_: int) -> float:
        """The teacher's share in round ``round_`` (0-based) under :attr:`beta`."""
        if self.beta == "dagger":
            return beta_of(round_)
        return 1.0 if self.beta == "teacher" else float(self.beta)

    def collects(self, round_: int) -> bool:
        return self.collect_rounds == 0 or round_ < self.collect_rounds

    def trains(self, round_: int) -> bool:
        return self.collect_rounds == 0 or round_ >= self.collect_rounds


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

    @classmethod
    def concatenate(cls, parts: list[Episodes]) -> Episodes:
        """The episodes of ``parts`` side by side, shorter ones padded with dead steps."""
        t = max(p.alive.shape[0] for p in parts)

        def pad(a: np.ndarray) -> np.ndarray:
            return np.pad(a, [(0, t - a.shape[0])] + [(0, 0)] * (a.ndim - 1))

        return cls(
            obs=np.concatenate([pad(p.obs) for p in parts], 1),
            perm=np.concatenate([p.perm for p in parts], 0),
            actions=np.concatenate([pad(p.actions) for p in parts], 1),
            targets=np.concatenate([pad(p.targets) for p in parts], 1),
            alive=np.concatenate([pad(p.alive) for p in parts], 1),
        )


BETA_SCHEDULES = ("dagger", "teacher")


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
    """Play ``cfg.n_envs`` episodes, each copy following the teacher with probability ``beta``
    (with ``cfg.handover``, up to a step drawn per copy, and the student from there on)."""
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
        # drawn only with handover, so runs without it keep their random streams
        switch = rng.integers(cfg.handover, size=b) if cfg.handover else None
        # the student's actions would go unused (with handover it always takes over)
        teacher_only = bool(use_teacher.all()) and switch is None
        if cfg.teacher_action_noise:
            space = env.single_action_space
            if not isinstance(space, gym.spaces.Box):
                raise ValueError(f"teacher_action_noise needs a Box action space, got {space}")
            low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
        alive = np.ones(b, bool)
        rows: dict[str, list[np.ndarray]] = {"obs": [], "actions": [], "targets": [], "alive": []}
        state = None
        with torch.no_grad():
            for step in range(cfg.max_steps):
                o = torch.as_tensor(obs, dtype=torch.float32)
                target = teacher_action(teacher, o)
                played = target
                if cfg.teacher_action_noise:  # drawn only when asked: streams stay as before
                    noise = rng.standard_normal(target.shape).astype(np.float32)
                    played = target + cfg.teacher_action_noise * torch.as_tensor(noise)
                    played = torch.clamp(played, low, high)
                if teacher_only:
                    action = played
                else:
                    own, state = student(torch.gather(o, 1, perm_t), state)
                    drive = use_teacher
                    if switch is not None:
                        drive = use_teacher & torch.as_tensor(step < switch)[:, None]
                    action = torch.where(drive, played, own)
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
    student: nn.Module,
    optimizer: torch.optim.Optimizer,
    data: Episodes,
    cfg: DAggerConfig,
    generator: torch.Generator | None = None,
) -> float:
    """One truncated-BPTT pass over ``data``; the mean squared error per alive step.

    With ``cfg.batch_episodes`` the episodes go in minibatches of that many, in an order
    drawn from ``generator``; with ``cfg.prev_action_noise`` the previous action fed to the
    student gets Gaussian noise drawn from ``generator`` (which either needs).
    """
    b = data.alive.shape[1]
    if not cfg.batch_episodes and not cfg.prev_action_noise:
        return _fit_batch(student, optimizer, data, cfg, None)[0]
    if generator is None:
        raise ValueError("fit_epoch: batch_episodes / prev_action_noise need a generator")
    order = torch.randperm(b, generator=generator).numpy() if cfg.batch_episodes else np.arange(b)
    size = cfg.batch_episodes or b
    total, count = 0.0, 0.0
    for start in range(0, b, size):
        idx = np.sort(order[start : start + size])
        part = Episodes(
            obs=data.obs[:, idx],
            perm=data.perm[idx],
            actions=data.actions[:, idx],
            targets=data.targets[:, idx],
            alive=data.alive[:, idx],
        )
        loss, steps = _fit_batch(student, optimizer, part, cfg, generator)
        total, count = total + loss * steps, count + steps
    return total / max(count, 1.0)


def _fit_batch(
    student: nn.Module,
    optimizer: torch.optim.Optimizer,
    data: Episodes,
    cfg: DAggerConfig,
    generator: torch.Generator | None,
) -> tuple[float, float]:
    """Truncated BPTT over one batch of whole episodes: (mean loss per alive step, steps)."""
    obs = torch.gather(
        torch.as_tensor(data.obs),
        2,
        torch.as_tensor(data.perm).unsqueeze(0).expand(data.obs.shape[0], -1, -1),
    )
    actions, targets = torch.as_tensor(data.actions), torch.as_tensor(data.targets)
    if cfg.prev_action_noise:
        noise = torch.randn(actions.shape, generator=generator, dtype=actions.dtype)
        actions = actions + cfg.prev_action_noise * noise
    alive = torch.as_tensor(data.alive, dtype=torch.float32)
    # A student that unrolls a window itself (AttentionNeuronPolicy.forward_window: the window
    # forward and backward compiled) gets the previous actions it is fed step by step below:
    # zeros first, then the recorded actions.
    window = getattr(student, "forward_window", None) if cfg.compiled else None
    fed = torch.cat([torch.zeros_like(actions[:1]), actions[:-1]]) if window else None
    state, total, count = None, 0.0, 0.0
    for start in range(0, obs.shape[0], cfg.window):
        stop = min(obs.shape[0], start + cfg.window)
        denom = alive[start:stop].sum()
        if denom == 0:  # every copy has ended: the rest is padding
            break
        loss = obs.new_zeros(())
        if window is not None and fed is not None:
            out, state = window(obs[start:stop], fed[start:stop], state)
            loss = (((out - targets[start:stop]) ** 2).sum(-1) * alive[start:stop]).sum()
        else:
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
    return total / max(count, 1.0), count


class DAgger:
    """Round-by-round DAgger; :meth:`step` collects one round and trains on the kept rounds.

    Attributes:
        round: rounds finished.
        env_steps: alive env steps collected so far.
        datasets: the last ``keep_rounds`` rounds' :class:`Episodes` (every collected
            round's when ``collect_rounds`` is set).
        dataset_rounds: the round (1-based) each of :attr:`datasets` was collected in.
    """

    def __init__(
        self, student: nn.Module, teacher: Teacher, env_fn: EnvFactory, cfg: DAggerConfig
    ) -> None:
        self.student, self.teacher, self.env_fn, self.cfg = student, teacher, env_fn, cfg
        self.optimizer = torch.optim.Adam(student.parameters(), lr=cfg.learning_rate)
        self.round = 0
        self.env_steps = 0
        self.datasets: list[Episodes] = []
        self.dataset_rounds: list[int] = []
        self._joined: Episodes | None = None  # all datasets side by side (collect_rounds)

    def step(self) -> dict[str, Any]:
        """One round: collect ``n_envs`` episodes and/or train; ``loss`` is NaN if no training."""
        cfg = self.cfg
        beta = cfg.beta_at(self.round)
        seed = int(np.random.SeedSequence([cfg.seed, self.round]).generate_state(1)[0])
        if cfg.collects(self.round):
            data = collect(self.student, self.teacher, self.env_fn, cfg, beta, seed)
            keep = len(self.datasets) + 1 if cfg.collect_rounds else cfg.keep_rounds
            self.datasets = [*self.datasets, data][-keep:]
            self.dataset_rounds = [*self.dataset_rounds, self.round + 1][-keep:]
            self.env_steps += data.steps
            self._joined = None
        loss = float("nan")
        if cfg.trains(self.round):
            torch.manual_seed(seed)  # nothing in a stock student draws, but a custom one may
            generator = torch.Generator().manual_seed(seed)
            self.student.train()
            if cfg.collect_rounds:  # one epoch over the whole dataset
                if self._joined is None:
                    self._joined = Episodes.concatenate(self.datasets)
                loss = fit_epoch(self.student, self.optimizer, self._joined, cfg, generator)
            else:
                for kept in self.datasets:  # oldest first, as the prototype
                    loss = fit_epoch(self.student, self.optimizer, kept, cfg, generator)
            self.student.eval()
        self.round += 1
        return {"round": self.round, "beta": beta, "env_steps": self.env_steps, "loss": loss}

    # -- checkpoints (tensors, arrays and JSON only: loading runs no code) -----------------

    def save(self, directory: str | Path) -> None:
        """Write the state to ``directory``: each file atomically under a per-round name,
        then ``trainer.json`` naming them, then the older files go (a crash at any point
        leaves one whole checkpoint)."""
        directory = make_folder(directory)  # a symlink there is replaced, not followed
        student = f"student-{self.round}.pt"
        with atomic_path(directory / student) as tmp:
            torch.save(
                {"student": self.student.state_dict(), "optimizer": self.optimizer.state_dict()},
                tmp,
            )
        names = []
        for data, collected in zip(self.datasets, self.dataset_rounds, strict=True):
            name = f"round-{collected}.npz"
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
        meta = read_json(directory / "trainer.json")  # size and nesting checked first
        blob = load_tensors(directory / Path(meta["student"]).name)  # zip sizes first
        self.student.load_state_dict(blob["student"])
        self.optimizer.load_state_dict(blob["optimizer"])
        self.datasets, self.dataset_rounds, self._joined = [], [], None
        for name in meta["datasets"]:
            collected = int(Path(name).stem.removeprefix("round-"))
            file = directory / Path(name).name
            if file.exists():
                check_archive(file, what="DAgger dataset")
                with np.load(file, allow_pickle=False) as z:
                    fields = {f.name: z[f.name] for f in dataclasses.fields(Episodes)}
                self.datasets.append(Episodes(**fields))
            else:
                self.datasets.append(self._recollect(collected, file))
            self.dataset_rounds.append(collected)
        self.round, self.env_steps = int(meta["round"]), int(meta["env_steps"])

    def _recollect(self, collected: int, file: Path) -> Episodes:
        """The data of round ``collected`` played again, for a checkpoint committed without
        its datasets (they are most of its size): a round the teacher drove alone (beta 1, no
        handover) never used the student, so its seeded episodes come out the same."""
        round_ = collected - 1
        beta = self.cfg.beta_at(round_)
        if beta != 1.0 or self.cfg.handover:
            raise FileNotFoundError(
                f"{file}: missing, and round {collected} mixed in the student's own actions "
                f"(beta {beta}), so it cannot be collected again"
            )
        seed = int(np.random.SeedSequence([self.cfg.seed, round_]).generate_state(1)[0])
        return collect(self.student, self.teacher, self.env_fn, self.cfg, beta, seed)
