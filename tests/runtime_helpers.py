"""Shared pieces of the runtime tests: an in-process service with its API client, waiting."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

# Ray as the server runs it (token auth, loopback only): set before any test imports Ray
from dlsched.runtime.ray_setup import configure_ray  # noqa: E402
from scratch_dirs import scratch_dir  # noqa: E402

configure_ray(Path(scratch_dir("dlsched-test-ray-")) / "ray.token", embedded=True)

# tenant code isolated as the server does by default, where this machine allows it (root and
# bubblewrap: the tests here run as root); else run as this user, as --trust-tenants does
CAN_ISOLATE = os.geteuid() == 0 and shutil.which("bwrap") is not None


# the tests' own tenant programs (hostile ones, slow builds)
PROGRAMS = Path(__file__).parent / "programs"


def sandbox_for(data_dir, isolate: bool = CAN_ISOLATE, **options):
    from dlsched.runtime.sandbox import Sandbox

    # PROGRAMS exposed: a checkout under /root, /home or /tmp is hidden from tenant code (a
    # clone under /tmp failed the slow-build test with FileNotFoundError)
    sandbox = Sandbox(
        hide=(str(Path(data_dir).resolve()),),
        isolate=isolate,
        expose=(str(PROGRAMS),),
        **options,
    )
    sandbox.check()
    return sandbox


def wait_for(
    predicate, timeout_s: float = 120.0, every_s: float = 0.3, what: str = "condition", state=None
):
    """Until ``predicate()`` is true; a timeout's error adds ``state()`` (what the test can see
    then: a job's events), so a failure on a loaded machine can be explained afterwards."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every_s)
    seen = f"; then: {state()}" if state else ""
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}{seen}")


def wait_for_gpus_released(cluster, timeout_s: float = 30.0) -> None:
    """Until every GPU of ``cluster`` (a :class:`LocalRayCluster`) is free in Ray's books."""
    import ray

    from dlsched.runtime.ray_executor import JOBS_PER_GPU, gpu_resource

    names = [gpu_resource(n, i) for n in cluster.nodes for i in range(cluster.gpus_per_node)]

    def held() -> dict:
        available = ray.available_resources()
        return {r: available.get(r, 0) for r in names if available.get(r, 0) < JOBS_PER_GPU}

    wait_for(
        lambda: not held(),
        timeout_s,
        what="every GPU released",
        state=lambda: (held(), ray.util.list_named_actors(all_namespaces=True)),
    )


class Harness:
    """A scheduler service over a Ray cluster, its loop running, and a TestClient on its API."""

    def __init__(
        self,
        address: str,
        data_dir,
        policy: str = "fifo",
        params: dict | None = None,
        resize_mechanism: str = "background",
        sandbox=None,
        limiter=None,
        **service_options,
    ) -> None:
        from fastapi.testclient import TestClient

        from dlsched.runtime.api import create_app, hash_token
        from dlsched.runtime.ray_executor import RayExecutor
        from dlsched.runtime.service import SchedulerService
        from dlsched.runtime.store import SQLiteStore

        self.store = SQLiteStore(data_dir / "db.sqlite")
        self.executor = RayExecutor(
            address, data_dir, sandbox or sandbox_for(data_dir), start_timeout_s=60
        )
        self.service = SchedulerService(
            self.store,
            self.executor,
            policy,
            params,
            interval_s=0.2,
            resize_mechanism=resize_mechanism,
            **service_options,
        )
        self.service.start()
        self.client = TestClient(
            create_app(self.service, self.store, hash_token("admin-secret"), limiter=limiter)
        )
        self.admin = {"Authorization": "Bearer admin-secret"}

    def tenant(self, name: str) -> dict:
        r = self.client.post("/v1/tenants", json={"name": name}, headers=self.admin)
        assert r.status_code == 201, r.text
        return {"Authorization": f"Bearer {r.json()['token']}"}

    def submit(self, auth: dict, **spec) -> str:
        r = self.client.post("/v1/jobs", json=spec, headers=auth)
        assert r.status_code == 201, r.text
        return r.json()["id"]

    def job(self, job_id: str) -> dict:
        return self.client.get(f"/v1/jobs/{job_id}", headers=self.admin).json()

    def wait_status(self, job_id: str, *statuses: str, timeout_s: float = 120.0) -> dict:
        return wait_for(
            lambda: (j := self.job(job_id))["status"] in statuses and j,
            timeout_s,
            what=f"{job_id} to be {'/'.join(statuses)}",
            state=lambda: self.events(job_id),
        )

    def events(self, *job_ids: str) -> dict:
        """Each job's status and event messages (for a failing test's message)."""
        return {
            jid: (job["status"], [e["message"] for e in job["events"]])
            for jid in job_ids
            if (job := self.job(jid))
        }

    def close(self) -> None:
        self.service.stop()
        self.executor.shutdown()


def log_of(h: Harness, job_id: str) -> str:
    return h.client.get(f"/v1/jobs/{job_id}/logs", headers=h.admin).text


LM = {"entrypoint": "dlsched.workloads.lm:build", "args": {"samples": 256, "dim": 32, "layers": 1}}
RESNET = {"entrypoint": "dlsched.workloads.resnet:build", "args": {"samples": 256, "width": 8}}
# Real training (model, DDP, checkpoints) whose device time is emulated: a worker sleeps
# 20 ms + 1 ms per sample of its batch instead of holding a core, so four workers on two cores
# run as four devices would, leave the CPU to start-ups and profiling runs, and a job's length
# is set by its iterations (about 30 ms each here), not by the load.
EMULATED = {
    "entrypoint": "dlsched.workloads.emulated:build",
    "args": {"samples": 256, "fixed_ms": 20.0, "per_sample_ms": 1.0},
}


def local_ray_cluster(**shape):
    """An embedded Ray cluster for one test module or the session; the test process is
    disconnected from any other first, so executors made on it connect to this one."""
    import ray

    from dlsched.runtime.ray_executor import LocalRayCluster

    ray.shutdown()
    cluster = LocalRayCluster(**shape)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


class HttpServer:
    """The API app on a real port (uvicorn in a thread), for a browser."""

    def __init__(self, app) -> None:
        import socket
        import threading

        import uvicorn

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        )
        self.server.install_signal_handlers = lambda: None
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        wait_for(lambda: self.server.started, 30, what="the HTTP server to start")

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def chromium_path() -> str | None:
    """Debian's chromium (``.ci/run`` installs it when missing), or $DLSCHED_CHROMIUM."""
    import os
    import shutil

    return (
        os.environ.get("DLSCHED_CHROMIUM")
        or shutil.which("chromium")
        or shutil.which("chromium-browser")
    )
