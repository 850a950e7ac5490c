"""The dashboard's speed: GET /v1/dashboard with 10,000 jobs in the store (median of repeats,
target under 100 ms) and the page in Chromium with 1,000 jobs, from navigation to the job
table drawn (target under 1 s). The service runs over an executor with one idle emulated node:
no Ray, no jobs running; what is timed is the store, the API and the page.

    .venv/bin/python benchmarks/dashboard.py [--jobs 10000] [--page-jobs 1000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

import uvicorn
from fastapi.testclient import TestClient

from dlsched.runtime.api import create_app, hash_token
from dlsched.runtime.executor_api import NodeInfo
from dlsched.runtime.service import SchedulerService
from dlsched.runtime.store import SQLiteStore

SPEC = {"entrypoint": "dlsched.workloads.lm:build", "gpus": 1, "batch_size": 8, "iterations": 100}


class IdleExecutor:
    """One emulated node of 4 GPUs on which nothing runs."""

    def inventory(self):
        return [NodeInfo("n0", 4, True)]

    def poll(self):
        return []

    def progress(self, job_id):
        return None

    def serve_inference(self, node):
        pass


def store_with(path: Path, jobs: int) -> SQLiteStore:
    store = SQLiteStore(path)
    tenants = [store.create_tenant(f"t{i}", f"hash-{i}")["id"] for i in range(10)]
    for k in range(jobs):
        row = store.add_job(tenants[k % 10], SPEC)
        if k < jobs - 50:  # most are history, 50 still waiting
            store.update_job(
                row["id"],
                status="done",
                started=row["submitted"],
                finished=row["submitted"] + 60,
                iteration=100,
            )
    return store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--page-jobs", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    try:
        store = store_with(tmp / "big.sqlite", args.jobs)
        service = SchedulerService(store, IdleExecutor())
        client = TestClient(create_app(service, store, hash_token("admin")))
        headers = {"Authorization": "Bearer admin"}
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            r = client.get("/v1/dashboard", headers=headers)
            times.append(time.perf_counter() - t0)
            assert r.status_code == 200
        print(
            f"GET /v1/dashboard, {args.jobs:,} jobs in the store: median "
            f"{statistics.median(times) * 1000:.1f} ms, "
            f"max {max(times) * 1000:.1f} ms ({len(r.json()['jobs'])} jobs in the answer)"
        )

        chromium = shutil.which("chromium")
        if chromium is None:
            print("page load: no chromium")
            return
        from playwright.sync_api import sync_playwright

        small = store_with(tmp / "page.sqlite", args.page_jobs)
        app = create_app(SchedulerService(small, IdleExecutor()), small, hash_token("admin"))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        )
        server.install_signal_handlers = lambda: None
        threading.Thread(target=server.run, daemon=True).start()
        while not server.started:
            time.sleep(0.05)
        loads = []
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            for _ in range(5):
                page = browser.new_context().new_page()
                page.goto(f"http://127.0.0.1:{port}/")
                page.evaluate("sessionStorage.setItem('dlsched-token', 'admin')")
                t0 = time.perf_counter()
                page.reload()
                page.wait_for_selector("#jobs tbody tr")
                loads.append(time.perf_counter() - t0)
                page.close()
            browser.close()
        server.should_exit = True
        print(
            f"page load with {args.page_jobs:,} jobs (navigation to job table drawn): "
            f"median {statistics.median(loads) * 1000:.0f} ms, max {max(loads) * 1000:.0f} ms"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
