"""The environment Ray reads at import and at start, set by the server before it imports Ray.

Ray is locked down: token authentication on every RPC and HTTP entry point (``RAY_AUTH_MODE=token``,
the token in a 0600 file of the server's data directory, so tenant code, which runs as other
uids and does not see that directory, cannot present it), and an embedded cluster listens on
127.0.0.1 only (Ray's single-machine mode). An attached cluster (``--ray-address``) must run
with the same token: its nodes are started with ``RAY_AUTH_MODE=token`` and the token
(docs/security.md).
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
from pathlib import Path

from ..errors import SpecError


def configure_ray(token_path: Path, embedded: bool) -> None:
    """Token auth with the token in ``token_path`` (created 0600 if missing); loopback only
    when ``embedded``. Must run before Ray is imported (Ray reads the loopback switch then)."""
    if "ray" in sys.modules and embedded:
        raise RuntimeError("configure_ray must run before ray is imported")
    if not token_path.exists():
        fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    elif not token_path.read_text().strip():
        raise ValueError(f"{token_path} is empty")
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(token_path.resolve())
    os.environ.pop("RAY_AUTH_TOKEN", None)  # the file, not an inherited one
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    if embedded:
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # every Ray process on 127.0.0.1


# What an embedded cluster's head leaves out (``RayParams`` fields): the dashboard, the
# autoscaler's monitor (the cluster's nodes are dlsched's to add) and the log monitor (no driver
# streams its workers' output: ``log_to_driver=False``). In the suite, nine clusters' log
# monitors took 35 CPU-s and their monitors 9 (benchmarks/suite_cpu.py, 2026-11-28).
LEAN_HEAD = {"include_dashboard": False, "no_monitor": True, "include_log_monitor": False}


def lean_head_node() -> type:
    """Ray's ``Node`` class for a head without the dashboard's API server, which Ray starts even
    with ``include_dashboard=False`` and has no switch for: a Python process importing Ray
    (about a CPU-second at each start here), which nothing of dlsched reads. Ray is pinned to
    2.60, whose ``ray.init`` and ``ray.cluster_utils`` make their heads through this class."""
    from ray._private.node import Node

    class LeanHead(Node):
        def start_api_server(self, *, include_dashboard: bool, raise_on_failure: bool) -> None:
            self._webui_url = None  # what ``ray.init`` reports without a dashboard

    return LeanHead


# Chosen: a Ray head on a working network answers a connection in milliseconds
REACH_TIMEOUT_S = 10.0


def check_reachable(address: str, option: str, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """That a Ray cluster's address given on the command line answers (a TCP connection to its
    port), or :class:`SpecError` naming ``option``: ``ray.init`` on an address nobody answers
    waits for minutes, logging retries. ``auto`` (Ray finds a local cluster) is left to Ray."""
    if address == "auto":
        return
    host, sep, port = address.split("://", 1)[-1].rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise SpecError(option, f"must be HOST:PORT (or auto), got {address!r}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as e:
        reason = e.strerror or str(e) or type(e).__name__
        raise SpecError(option, f"no Ray cluster answers at {address}: {reason}") from None
