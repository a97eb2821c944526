"""A replay buffer that stores rewarding transitions several times (book sec. 10.6).

In sparse-reward tasks such as DoorKey the rare rewarding transition is easily lost in a
uniformly sampled buffer; the book inserts it 50 times. Subclassing SB3's
:class:`ReplayBuffer` keeps sampling and saving untouched, and lets a config name it as
``replay_buffer_class``. ``optimize_memory_usage`` is refused: that layout keeps ``s'`` of
row ``i`` as the ``s`` of row ``i + 1``, so consecutive copies would overwrite each other's
next observation with their own.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer

from attn_policies.checks import require_int


class OversamplingReplayBuffer(ReplayBuffer):
    """SB3 :class:`ReplayBuffer` that inserts each rewarding transition ``copies`` times.

    A transition is rewarding when its reward exceeds ``threshold``.

    With several envs, the extra copies of the rewarding transitions are packed into whole
    buffer rows (one row holds one transition per env), cycling through the rewarding
    transitions, so each gets ``copies`` or slightly more insertions in total.

    Args:
        buffer_size: capacity in transitions per env, as for :class:`ReplayBuffer`.
        observation_space: as for :class:`ReplayBuffer`.
        action_space: as for :class:`ReplayBuffer`.
        copies: total insertions of each rewarding transition (book: 50); 1 is a plain buffer.
        threshold: rewards strictly above it count as rewarding.
        **kwargs: every other :class:`ReplayBuffer` argument except
            ``optimize_memory_usage=True`` (ValueError, see the module docstring).

    Example:
        >>> import numpy as np
        >>> from gymnasium import spaces
        >>> space = spaces.Box(-1, 1, (2,))
        >>> buf = OversamplingReplayBuffer(100, space, spaces.Discrete(2), copies=5)
        >>> obs = np.zeros((1, 2), np.float32)
        >>> buf.add(obs, obs, np.array([0]), np.array([0.0]), np.array([False]), [{}])
        >>> buf.add(obs, obs, np.array([1]), np.array([1.0]), np.array([True]), [{}])
        >>> buf.size()
        6
    """

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        *args: Any,
        copies: int = 50,
        threshold: float = 0.0,
        **kwargs: Any,
    ) -> None:
        copies = require_int(int(copies) if isinstance(copies, np.integer) else copies, "copies")
        optimize = args[2] if len(args) > 2 else kwargs.get("optimize_memory_usage", False)
        if optimize and copies > 1:
            raise ValueError(
                "OversamplingReplayBuffer cannot use optimize_memory_usage=True: its copies "
                "would overwrite each other's next observation; set it to False"
            )
        super().__init__(buffer_size, observation_space, action_space, *args, **kwargs)
        self.copies = int(copies)
        self.threshold = float(threshold)

    def add(
        self,
        obs: np.ndarray,
        next_obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        done: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> None:
        super().add(obs, next_obs, action, reward, done, infos)
        hits = np.flatnonzero(np.asarray(reward).reshape(self.n_envs) > self.threshold)
        if self.copies == 1 or hits.size == 0:
            return
        n_rows = -(-(self.copies - 1) * hits.size // self.n_envs)  # ceil division
        # Row r, env slot j holds rewarding transition hits[(r * n_envs + j) % len(hits)].
        picks = hits[np.arange(n_rows * self.n_envs).reshape(n_rows, self.n_envs) % hits.size]
        for row in picks:
            super().add(
                obs[row],
                next_obs[row],
                action[row],
                np.asarray(reward)[row],
                np.asarray(done)[row],
                [infos[i] for i in row],
            )
