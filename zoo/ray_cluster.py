"""Where ``attn-zoo train NAME --ray`` runs and what each cell asks of it: the cluster's
address, the connection, and the Ray task options of a matrix cell.

Config keys (optional, any experiment)::

    resources: {num_cpus: 2, num_gpus: 1}   # per cell; also memory (bytes),
                                            # accelerator_type, custom: {name: amount}

Without ``resources`` a cell asks for ``torch_threads`` CPUs (1 if unset) and one GPU when
its ``device`` is ``cuda``.

The cluster is the user's choice, never a config's: ``--ray ADDRESS``, else ``RAY_ADDRESS``,
else a local instance (:func:`cluster_address`; an address that does not answer is one
error line within seconds). Ray is an optional dependency (``pip install 'attn-zoo[ray]'``),
imported only through :func:`import_ray`.
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Mapping
from typing import Any

from zoo.config_checks import ConfigError, RunConfig, nearest

_NUMBER_KEYS = ("num_cpus", "num_gpus", "memory")
RESOURCE_KEYS = (*_NUMBER_KEYS, "accelerator_type", "custom")


def import_ray() -> Any:
    """The ``ray`` module, or one :class:`ConfigError` line saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "--ray needs Ray, which is not installed: pip install 'attn-zoo[ray]'"
        ) from None
    return ray


def _number(where: str, key: str, value: Any) -> float:
    bad = isinstance(value, bool) or not isinstance(value, (int, float))
    if bad or not math.isfinite(value) or value < 0:
        raise ConfigError(f"{where}: 'resources.{key}' must be a number >= 0, got {value!r}")
    return value


def cell_resources(run: RunConfig) -> dict[str, Any]:
    """The Ray task options of one cell, from its ``resources`` key (or the defaults above).

    Example:
        >>> from zoo.config import EvalConfig
        >>> run = RunConfig("x", "", "full", {"algo": "ppo", "torch_threads": 2}, EvalConfig())
        >>> cell_resources(run)
        {'num_cpus': 2, 'num_gpus': 0}
        >>> run.body["resources"] = {"num_gpus": 1, "custom": {"pong": 1}}
        >>> cell_resources(run)
        {'num_cpus': 2, 'num_gpus': 1, 'resources': {'pong': 1}}
        >>> run.body["resources"] = {"num_cpu": 1}
        >>> cell_resources(run)
        Traceback (most recent call last):
        ...
        zoo.config.ConfigError: x: unknown key 'resources.num_cpu'. Did you mean 'num_cpus', ...
    """
    spec = run.body.get("resources") or {}
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{run.name}: 'resources' must be a mapping, got {spec!r}")
    device = str(run.body.get("device", ""))
    out: dict[str, Any] = {
        "num_cpus": run.body.get("torch_threads") or 1,
        "num_gpus": 1 if device.startswith("cuda") else 0,
    }
    for key, value in spec.items():
        if key not in RESOURCE_KEYS:
            raise ConfigError(
                f"{run.name}: unknown key 'resources.{key}'.{nearest(key, RESOURCE_KEYS)} "
                f"Known: {', '.join(RESOURCE_KEYS)}"
            )
        if key in _NUMBER_KEYS:
            out[key] = _number(run.name, key, value)
        elif key == "accelerator_type":
            if not isinstance(value, str):
                raise ConfigError(f"{run.name}: 'resources.accelerator_type' must be a string")
            out[key] = value
        else:
            if not isinstance(value, Mapping):
                raise ConfigError(f"{run.name}: 'resources.custom' must be a mapping")
            out["resources"] = {
                str(k): _number(run.name, f"custom.{k}", v) for k, v in value.items()
            }
    return out


# Seconds a Ray cluster's port may take to accept a connection (Ray itself retries for
# minutes against an address that never answers).
CONNECT_TIMEOUT_S = 10.0


def cluster_address(address: str | None) -> str | None:
    """The Ray cluster to join: ``address`` (``--ray ADDRESS``), else ``RAY_ADDRESS``, else
    ``None`` (a local instance). Never a config's: a shared config must not choose where the
    run's tasks, and the code and data they carry, go.

    A ``HOST:PORT`` or ``ray://HOST:PORT`` whose port does not accept a connection within
    :data:`CONNECT_TIMEOUT_S` is a :class:`ConfigError`, before Ray starts retrying.
    """
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is None or address in ("auto", "local"):
        return address
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(
            f"Ray address {address!r} is not HOST:PORT, ray://HOST:PORT, auto or local"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), CONNECT_TIMEOUT_S).close()
    except OSError as err:
        reason = err.strerror or str(err) or type(err).__name__
        raise ConfigError(
            f"cannot reach the Ray cluster at {address} ({reason}); check --ray ADDRESS "
            "or RAY_ADDRESS"
        ) from None
    return address


def connect(ray: Any, address: str | None, init_kwargs: Mapping[str, Any] | None) -> bool:
    """Connect to (or start) Ray unless already connected; whether this call did."""
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"address": address}
    if address is None:
        kwargs["include_dashboard"] = False  # a local instance: no dashboard needed
    try:
        ray.init(**{**kwargs, **(init_kwargs or {})})
    except ConnectionError as err:  # e.g. "auto" with no cluster running
        line = " ".join(str(err).split())
        raise ConfigError(f"cannot connect to the Ray cluster at {address}: {line}") from None
    return True
