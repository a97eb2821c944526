"""Per-wrapper random generators.

Gymnasium's ``Wrapper.np_random`` is the *inner* env's generator, so drawing from it would
change the env's own random stream. Each stochastic wrapper here owns a generator instead,
derived from the ``reset(seed=...)`` seed and the wrapper's class name, so stacking wrappers
never correlates their streams and ``reset(seed=s)`` replays the same sequence every time.
"""

from __future__ import annotations

import zlib

import numpy as np


def derive_rng(seed: int | None, salt: str) -> np.random.Generator:
    """Return a generator seeded from ``(seed, salt)``, or from OS entropy when seed is None."""
    if seed is None:
        return np.random.default_rng()
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, zlib.crc32(salt.encode())])


class SeededWrapperMixin:
    """Gives a wrapper ``self.rng``, reseeded whenever ``reset`` receives a seed.

    The stream is salted with the class name, or with ``_rng_stream`` where a subclass must
    draw what its parent draws.
    """

    _rng: np.random.Generator | None = None
    _rng_stream: str | None = None

    @property
    def _salt(self) -> str:
        return self._rng_stream or type(self).__name__

    @property
    def rng(self) -> np.random.Generator:
        if self._rng is None:
            self._rng = derive_rng(None, self._salt)
        return self._rng

    def _reseed(self, seed: int | None) -> None:
        if seed is not None or self._rng is None:
            self._rng = derive_rng(seed, self._salt)
