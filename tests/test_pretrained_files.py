"""Tests for zoo.pretrained_files (reading the seed 001 authors' folders, no code run)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from test_pretrained import GIN, write_folder

from zoo.config import ConfigError
from zoo.pretrained_files import Reference, parse_gin, read_checkpoint


def test_parse_gin_values_and_errors():
    parsed = parse_gin('a.B.x = [16,]\na.B.s = "tanh"\n# c\nimport m\nz.l = @m.K()\nq.n = None\n')
    assert parsed == {"a.B.x": [16], "a.B.s": "tanh", "z.l": Reference("m.K"), "q.n": None}
    with pytest.raises(ConfigError, match="not a gin binding"):
        parse_gin("this is not gin\n")


def test_read_checkpoint_returns_the_checked_folder(tmp_path):
    params = np.linspace(-1, 1, 913)
    log = "Episode: 0, reward: 500.5\nEpisode: 1, reward: 400.5\nAvg reward: 450.5, sd: 50.0\n"
    folder = write_folder(tmp_path / "src", "cartpole_pi", params, log=log)
    ckpt = read_checkpoint(folder)
    assert (ckpt.solution, ckpt.task) == ("PIFCSolution", "CartPoleSwingUpTask")
    assert ckpt.solution_args["hidden_dim"] == 16 and "task_loader" not in ckpt.task_args
    np.testing.assert_array_equal(ckpt.params, params)
    assert ckpt.sha256["config.gin"] == hashlib.sha256(GIN["cartpole_pi"].encode()).hexdigest()
    assert ckpt.logs == {"test_log.txt": {"mean": 450.5, "std": 50.0, "n_episodes": 2}}
    with pytest.raises(ConfigError, match="is not a folder"):
        read_checkpoint(tmp_path / "nowhere")
