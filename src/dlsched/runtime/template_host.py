"""Each node's tenant-process template (:mod:`.template`): an actor of the executor's runs it
(so it goes when the server goes), and a worker about to start a tenant process asks it for the
template's socket. A node's first tenant process waits for the template's imports (2-4 s here);
a template that ended is started again when next asked for, at most ``MAX_RESTARTS`` times;
without one (or with ``warm=False`` in the sandbox) a tenant process starts cold, as a new
interpreter."""

from __future__ import annotations

import logging
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from .sandbox import JOB_DIR_IN_SANDBOX, Sandbox
from .template import ENV_ROOM
from .tenant_process import WarmStart

NAME = "tenant-template-{node}"  # one per Ray node (its id), in the executor's namespace
# Chosen: the template imports PyTorch and torch._dynamo in 2-4 s here; a start waits this long
# for it at most, then starts cold
READY_TIMEOUT_S = 60.0
MAX_RESTARTS = 3  # chosen: a template that keeps ending is a node's problem, not a start's
log = logging.getLogger("dlsched.executor")


class TemplateProcess:
    """The node's template process: started at once, and again (at most ``MAX_RESTARTS``
    times) when a worker asks for it and it has ended."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.env = template_environment(sandbox)
        self.restarts = 0
        self._start()

    def _start(self) -> None:
        # an abstract socket (no file to leave behind) in the host's network namespace, which
        # only the tenant processes of a job spanning hosts share; only root may use it (the
        # template checks the caller's uid)
        self.address = "\0dlsched-template-" + secrets.token_hex(8)
        self.errors = tempfile.TemporaryFile()  # its output, for the log if it ends (a pipe
        # nobody reads would stop it once full)
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-m", "dlsched.runtime.template", self.address[1:]],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.errors,
            cwd="/",
            start_new_session=True,
        )
        self.listening = False

    def socket_address(self, timeout_s: float) -> str | None:
        """The template's socket once it listens (a template that ended is logged and started
        again); None if it does not listen within ``timeout_s`` or has ended too often: the
        node's tenant processes then start cold."""
        if self.proc.poll() is not None:
            self.errors.seek(0)
            text = self.errors.read()[-2000:].decode(errors="replace")
            log.error("the tenant template ended (exit code %s): %s", self.proc.returncode, text)
            if self.restarts >= MAX_RESTARTS:
                return None
            self.restarts += 1
            self._start()
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None:
            if self.listening or _listening(self.address):
                self.listening = True
                return self.address
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)
        return None


# Runs the node's template process while it lives (the template dies with it)
TemplateHost = ray.remote(num_cpus=0)(TemplateProcess)


def template_environment(sandbox: Sandbox) -> dict[str, str]:
    """The template's: the sandbox's, with room for a forked process's own (template.ENV_ROOM)."""
    return {**sandbox.environment(Path(JOB_DIR_IN_SANDBOX)), "DLSCHED_ENV_ROOM": " " * ENV_ROOM}


def _listening(address: str) -> bool:
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(address)
        except OSError:
            return False
    return True


def start_host(node_id: str, sandbox: Sandbox) -> Any:
    """The node's template host, started if this cluster has none yet (without waiting)."""
    return TemplateHost.options(
        name=NAME.format(node=node_id),
        get_if_exists=True,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
    ).remote(sandbox)


def warm_start(sandbox: Sandbox, job_id: str) -> WarmStart | None:
    """How this worker's tenant process starts from its node's template, or None (cold)."""
    if not (sandbox.isolate and sandbox.warm):
        return None
    try:
        name = NAME.format(node=ray.get_runtime_context().get_node_id())
        for tries_left in reversed(range(20)):  # asked for just before this worker: a moment
            try:
                host = ray.get_actor(name)
                break
            except ValueError:
                if not tries_left:
                    raise
                time.sleep(0.1)
        address = ray.get(host.socket_address.remote(READY_TIMEOUT_S), timeout=READY_TIMEOUT_S + 10)
    except Exception:  # no host (another server's cluster), or it failed: a cold start
        log.warning("no tenant template on this node: a cold start", exc_info=True)
        return None
    if address is None:
        return None
    return WarmStart(address, sandbox.uid(job_id), sandbox.limits(), JOB_DIR_IN_SANDBOX)
