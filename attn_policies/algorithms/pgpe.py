"""PGPE: policy gradients with parameter-based exploration (Sehnke et al. 2010), as in EvoJAX.

A separable Gaussian search distribution ``N(center, diag(stdev^2))`` is sampled in mirrored
pairs ``center ± eps``; fitness is replaced by centred ranks in ``[-0.5, 0.5]``, the center
follows the pairs' rank differences through Adam or ClipUp (Toklu et al. 2020), and each
coordinate's stdev follows the pairs' mean rank, its change capped at ``stdev_max_change``
of its value per generation. EvoJAX trains its permutation-invariant CartPoleSwingUp agent
with it (``examples/train_cartpole.py``: population 256, center step 0.037, stdev step 0.078,
initial stdev 0.082). :class:`PGPE` has :class:`~attn_policies.algorithms.cmaes.CMAES`'s
interface (``ask``, ``tell``, ``favourite``, ``sigma``, ``dumps``, ``loads``), so
:class:`~attn_policies.algorithms.cmaes.CMAESTrainer` runs either, chosen by its config.

Example:
    >>> import numpy as np
    >>> opt = PGPE(3, PGPEConfig(population=8, sigma0=0.1, seed=0))
    >>> for _ in range(200):
    ...     x = opt.ask()
    ...     opt.tell(x, -((x - 1.0) ** 2).sum(axis=1))
    >>> x.shape, bool(np.allclose(opt.favourite, 1.0, atol=0.1))
    ((8, 3), True)
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Literal

import numpy as np

from attn_policies.algorithms.cmaes_state import StateFormatError
from attn_policies.checks import require_int
from attn_policies.safe_reads import parse_json

__all__ = ["PGPE", "PGPEConfig", "centred_ranks"]

_FORMAT = "attn-zoo pgpe state 1"


@dataclass
class PGPEConfig:
    """PGPE settings (defaults: EvoJAX's ``PGPE`` defaults, Adam on the center).

    Args:
        population: solutions per generation, an even number (mirrored pairs).
        repeats: episodes per solution; their task seeds are shared by the population.
        sigma0: initial stdev of every coordinate.
        seed: seeds the sampler and the task-seed generator.
        x0: the start center (a warm start); ``None`` starts at zeros.
        center_learning_rate: Adam's step size, or ClipUp's step size.
        stdev_learning_rate: step size of the stdev update.
        stdev_max_change: largest relative change of a coordinate's stdev per generation.
        optimizer: ``"adam"`` or ``"clipup"`` for the center.
        max_speed: ClipUp's velocity cap (``0``: twice ``center_learning_rate``).
        momentum: ClipUp's momentum.
    """

    population: int = 256
    repeats: int = 16
    sigma0: float = 0.1
    seed: int = 0
    x0: np.ndarray | None = None
    center_learning_rate: float = 0.15
    stdev_learning_rate: float = 0.1
    stdev_max_change: float = 0.2
    optimizer: Literal["adam", "clipup"] = "adam"
    max_speed: float = 0.0
    momentum: float = 0.9

    def __post_init__(self) -> None:
        require_int(self.population, "population", minimum=2)
        if self.population % 2:
            raise ValueError(
                f"PGPE samples mirrored pairs: population must be even, got {self.population}"
            )
        require_int(self.repeats, "repeats")
        for name in ("sigma0", "center_learning_rate", "stdev_max_change"):
            value = getattr(self, name)
            if not 0 < value < float("inf"):
                raise ValueError(f"need a finite {name} > 0, got {value!r}")
        for name in ("stdev_learning_rate", "max_speed"):
            if not 0 <= getattr(self, name) < float("inf"):
                raise ValueError(
                    f"stdev_learning_rate and max_speed must be finite and >= 0, "
                    f"got {name}={getattr(self, name)!r}"
                )
        if not 0 <= self.momentum < 1:
            raise ValueError(f"momentum must lie in [0, 1), got {self.momentum!r}")
        if self.optimizer not in ("adam", "clipup"):
            raise ValueError(f"optimizer must be 'adam' or 'clipup', got {self.optimizer!r}")
        if self.x0 is not None:
            self.x0 = np.array(self.x0, dtype=np.float64)
            if self.x0.ndim != 1 or not np.isfinite(self.x0).all():
                raise ValueError("x0 must be a finite 1-D vector")


def centred_ranks(fitness: np.ndarray) -> np.ndarray:
    """Ranks scaled to ``[-0.5, 0.5]`` (ties broken by position): only the order counts."""
    fitness = np.asarray(fitness)
    ranks = np.empty(fitness.size, dtype=np.float64)
    ranks[np.argsort(fitness, kind="stable")] = np.arange(fitness.size)
    return ranks / max(fitness.size - 1, 1) - 0.5


class PGPE:
    """The search distribution, its sampler and the center's optimiser state."""

    state_prefix = "pgpe_state"

    def __init__(self, dim: int, config: PGPEConfig) -> None:
        self.dim, self.config = int(dim), config
        if config.x0 is not None and config.x0.shape != (self.dim,):
            raise ValueError(f"x0 has {config.x0.size} values, the policy {self.dim} parameters")
        self.center = np.zeros(self.dim) if config.x0 is None else config.x0.copy()
        self.stdev = np.full(self.dim, float(config.sigma0))
        self.first = np.zeros(self.dim)  # Adam's moments, or ClipUp's velocity in ``first``
        self.second = np.zeros(self.dim)
        self.steps = 0
        self.sampler = np.random.default_rng(config.seed)

    def ask(self) -> np.ndarray:
        """``population`` solutions: ``center + eps_i`` then ``center - eps_i`` per row pair."""
        eps = self.sampler.standard_normal((self.config.population // 2, self.dim)) * self.stdev
        pairs = np.stack([self.center + eps, self.center - eps], axis=1)
        return pairs.reshape(self.config.population, self.dim)

    def tell(self, solutions: np.ndarray, fitness: np.ndarray) -> None:
        """Update from the fitness (maximised) of the last :meth:`ask`'s solutions, in order."""
        solutions = np.asarray(solutions, dtype=np.float64)
        if solutions.shape != (self.config.population, self.dim):
            raise ValueError(
                f"tell() needs {self.config.population} solutions of {self.dim} values, got "
                f"shape {solutions.shape}"
            )
        eps = (solutions[0::2] - solutions[1::2]) / 2.0
        middle = (solutions[0::2] + solutions[1::2]) / 2.0
        if not np.allclose(middle, self.center, rtol=0, atol=1e-9 + 1e-6 * np.abs(eps).max()):
            raise ValueError(
                "tell() needs ask()'s mirrored pairs around the current center, in order"
            )
        ranks = centred_ranks(fitness).reshape(-1, 2)
        n = ranks.shape[0]
        grad_center = (ranks[:, 0] - ranks[:, 1]) @ eps / (2.0 * n)
        baseline = ranks.mean()
        grad_stdev = (ranks.mean(axis=1) - baseline) @ ((eps**2 - self.stdev**2) / self.stdev) / n
        self.center = self.center + self._center_step(grad_center)
        limit = self.config.stdev_max_change * self.stdev
        change = np.clip(self.config.stdev_learning_rate * grad_stdev, -limit, limit)
        self.stdev = self.stdev + change

    def _center_step(self, grad: np.ndarray) -> np.ndarray:
        cfg = self.config
        self.steps += 1
        if cfg.optimizer == "clipup":
            norm = np.linalg.norm(grad)
            direction = grad / norm if norm > 0 else grad
            self.first = cfg.momentum * self.first + cfg.center_learning_rate * direction
            cap = cfg.max_speed or 2.0 * cfg.center_learning_rate
            speed = np.linalg.norm(self.first)
            if speed > cap:
                self.first *= cap / speed
            return self.first.copy()
        beta1, beta2, eps = 0.9, 0.999, 1e-8
        self.first = beta1 * self.first + (1 - beta1) * grad
        self.second = beta2 * self.second + (1 - beta2) * grad**2
        m_hat = self.first / (1 - beta1**self.steps)
        v_hat = self.second / (1 - beta2**self.steps)
        return cfg.center_learning_rate * m_hat / (np.sqrt(v_hat) + eps)

    @property
    def favourite(self) -> np.ndarray:
        return self.center.copy()

    @property
    def sigma(self) -> float:
        """The mean stdev (the counterpart of CMA-ES's step size in logs)."""
        return float(self.stdev.mean())

    def dumps(self) -> bytes:
        """The state as ``.npz`` bytes: arrays and JSON, no pickles."""
        meta = {
            "format": _FORMAT,
            "dim": self.dim,
            "steps": self.steps,
            "sampler": self.sampler.bit_generator.state,
        }
        arrays = {
            "center": self.center,
            "stdev": self.stdev,
            "first": self.first,
            "second": self.second,
            "meta": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
        }
        buffer = io.BytesIO()
        np.savez(buffer, allow_pickle=False, **arrays)  # numbers only
        return buffer.getvalue()

    @classmethod
    def loads(cls, data: bytes, config: PGPEConfig, where: str = "PGPE state") -> PGPE:
        """Rebuild from :meth:`dumps`; the step sizes and population come from ``config``.

        Raises:
            StateFormatError: not such a state (a pickle, damage, another format), naming
                ``where``.
        """
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
            meta = parse_json(arrays.pop("meta").tobytes(), f"{where}: meta", StateFormatError)
        except Exception as err:  # zip, npy or JSON damage, pickles refused
            raise StateFormatError(f"{where}: not a readable PGPE state ({err})") from None
        if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
            raise StateFormatError(f"{where}: not a PGPE state")
        try:
            self = cls(int(meta["dim"]), config)
            for name in ("center", "stdev", "first", "second"):
                value = np.asarray(arrays[name], dtype=np.float64)
                if value.shape != (self.dim,):
                    raise ValueError(f"{name} has shape {value.shape}")
                setattr(self, name, value)
            self.steps = int(meta["steps"])
            self.sampler.bit_generator.state = dict(meta["sampler"])
        except Exception as err:
            raise StateFormatError(f"{where}: inconsistent PGPE state ({err})") from None
        return self
