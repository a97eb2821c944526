"""Test-session settings shared by every test module."""

from __future__ import annotations

import torch

# pytest -n 2 on 2 cores: each worker's extra intra-op threads only contend with the other
# worker (small models ran up to 10x slower), so tests run torch single-threaded.
torch.set_num_threads(1)
