"""Tests for zoo.ray_cluster: a cell's Ray task options and the cluster's address (no Ray
needed)."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from zoo.config import ConfigError, EvalConfig, RunConfig
from zoo.ray_cluster import cell_resources, cluster_address


def run_of(body: dict[str, Any]) -> RunConfig:
    return RunConfig("x", "", "full", {"algo": "ppo", **body}, EvalConfig())


def test_resources_default_from_threads_and_device() -> None:
    assert cell_resources(run_of({})) == {"num_cpus": 1, "num_gpus": 0}
    run = run_of({"torch_threads": 4, "device": "cuda"})
    assert cell_resources(run) == {"num_cpus": 4, "num_gpus": 1}
    run.body["resources"] = {"num_cpus": 0.5, "num_gpus": 0, "memory": 2**30}
    assert cell_resources(run) == {"num_cpus": 0.5, "num_gpus": 0, "memory": 2**30}


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ({"gpus": 1}, "unknown key 'resources.gpus'. Did you mean 'num_gpus'"),
        ({"num_cpus": -1}, "'resources.num_cpus' must be a number >= 0"),
        ({"num_gpus": True}, "'resources.num_gpus' must be a number >= 0"),
        ({"custom": {"tpu": "many"}}, "'resources.custom.tpu' must be a number >= 0"),
        ([1, 2], "'resources' must be a mapping"),
    ],
)
def test_bad_resources_are_one_clear_error(resources: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        cell_resources(run_of({"resources": resources}))


def closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_address_that_does_not_answer_is_one_error_within_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = closed_port()
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        with pytest.raises(ConfigError, match=rf"cannot reach the Ray cluster at {address} \("):
            cluster_address(address)
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    with pytest.raises(ConfigError, match="cannot reach"):
        cluster_address(None)
    with pytest.raises(ConfigError, match="is not HOST:PORT"):
        cluster_address("head-without-port")
