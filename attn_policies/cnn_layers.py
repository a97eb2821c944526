"""CPU-friendly forms of SB3's image extractors.

:class:`ChannelsLastNatureCNN` is SB3's ``NatureCNN`` fed its input in channels-last (NHWC)
memory layout, so PyTorch runs every convolution channels-last. The parameters (kept in
the usual layout, so SB3's orthogonal init and saved models work unchanged), state-dict keys
and outputs are ``NatureCNN``'s (outputs equal up to float rounding), but oneDNN's CPU
convolutions run faster on NHWC: forward+backward of a batch of 256 4x84x84 frames takes
227 ms instead of 314 ms on one thread of this project's 2-core machine beside two other
jobs (``python benchmarks/extractors.py --only "PPO minibatch"``). The E5 Puzzle Pong
teacher (``pong_ppo_teacher``, which uses it) trains at 254 steps/s against 186 for the same
run on ``NatureCNN``, which partly ran beside test runs (so part of that gap is load).
"""

from __future__ import annotations

import torch
from stable_baselines3.common.torch_layers import NatureCNN
from torch import Tensor

__all__ = ["ChannelsLastNatureCNN"]


class ChannelsLastNatureCNN(NatureCNN):
    """SB3's ``NatureCNN`` with a channels-last input (same weights, same outputs).

    Args:
        observation_space: channel-first image ``Box`` (as SB3 passes it).
        features_dim: width of the final linear layer.
        normalized_image: as in ``NatureCNN`` (skip the uint8 image check).

    Example:
        >>> import numpy as np
        >>> from gymnasium import spaces
        >>> from stable_baselines3.common.torch_layers import NatureCNN
        >>> space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
        >>> _ = torch.manual_seed(0)
        >>> fast, plain = ChannelsLastNatureCNN(space), NatureCNN(space)
        >>> _ = plain.load_state_dict(fast.state_dict())
        >>> x = torch.rand(2, 4, 84, 84)
        >>> fast(x).shape, torch.allclose(fast(x), plain(x), atol=1e-5)
        (torch.Size([2, 512]), True)
    """

    def forward(self, observations: Tensor) -> Tensor:
        x = observations.contiguous(memory_format=torch.channels_last)
        return self.linear(self.cnn(x))
