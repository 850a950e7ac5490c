"""Each node's tenant-process template (:mod:`.template`): an actor of the executor's runs it
(so it goes when the server goes), and a worker about to start a tenant process asks it for the
template's socket. A node's first tenant process waits for the template's imports (2-4 s here);
when the template is not there (it failed, or the sandbox says ``warm=False``) the process
starts cold, as a new interpreter."""

from __future__ import annotations

import logging
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from .sandbox import JOB_DIR_IN_SANDBOX, Sandbox
from .template import ENV_ROOM
from .tenant_process import WarmStart

NAME = "tenant-template-{node}"  # one per Ray node (its id), in the executor's namespace
# Chosen: the template imports PyTorch and torch._dynamo in 2-4 s here; a start waits this long
# for it at most, then starts cold
READY_TIMEOUT_S = 60.0
log = logging.getLogger("dlsched.executor")


@ray.remote(num_cpus=0)
class TemplateHost:
    """Runs the node's template process while it lives."""

    def __init__(self, sandbox: Sandbox) -> None:
        # an abstract socket (no file to leave behind) in the host's network namespace, which
        # only the tenant processes of a job spanning hosts share; only root may use it (the
        # template checks the caller's uid)
        self.address = "\0dlsched-template-" + secrets.token_hex(8)
        self.errors = tempfile.TemporaryFile()  # its output, for the log if it ends (a pipe
        # nobody reads would stop it once full)
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-m", "dlsched.runtime.template", self.address[1:]],
            env=template_environment(sandbox),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.errors,
            cwd="/",
            start_new_session=True,
        )
        self.listening = self.told = False

    def socket_address(self, timeout_s: float) -> str | None:
        """The template's socket once it listens; None if it has ended (logged once; the
        node's tenant processes then start cold) or does not listen within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None:
            if self.listening or _listening(self.address):
                self.listening = True
                return self.address
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)
        if not self.told:
            self.told = True
            self.errors.seek(0)
            text = self.errors.read()[-2000:].decode(errors="replace")
            log.error("the tenant template ended (exit code %s): %s", self.proc.returncode, text)
        return None


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


def start_host(node_id: str, sandbox: Sandbox):
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
        for _ in range(20):  # the executor asked for it just before this worker: a moment
            try:
                host = ray.get_actor(name)
                break
            except ValueError:
                time.sleep(0.1)
        else:
            host = ray.get_actor(name)
        address = ray.get(host.socket_address.remote(READY_TIMEOUT_S), timeout=READY_TIMEOUT_S + 10)
    except Exception:  # no host (another server's cluster), or it failed: a cold start
        log.warning("no tenant template on this node: a cold start", exc_info=True)
        return None
    if address is None:
        return None
    return WarmStart(address, sandbox.uid(job_id), sandbox.limits(), JOB_DIR_IN_SANDBOX)
