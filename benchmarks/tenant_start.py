"""What a tenant process's start costs, cold (bubblewrap runs a new interpreter that imports
PyTorch) against forked from a node's template (runtime/template.py), in the same sandbox:
the wall time until it is READY and the CPU the whole machine spent meanwhile (so run it on a
quiet machine). Needs root and bubblewrap, as isolated tenants do.

    .venv/bin/python benchmarks/tenant_start.py [--starts 10]
"""

from __future__ import annotations

import argparse
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dlsched.runtime.sandbox import JOB_DIR_IN_SANDBOX, Sandbox
from dlsched.runtime.template_host import _listening, template_environment
from dlsched.runtime.tenant_process import TenantProcess, WarmStart


def busy_seconds() -> float:
    """CPU seconds all cores spent busy since boot."""
    import os

    values = [int(v) for v in open("/proc/stat").readline().split()[1:]]
    return (sum(values) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


def one_start(sandbox: Sandbox, root: Path, n: int, template: str | None) -> tuple[float, float]:
    job = f"job-{n}"
    job_dir = root / "jobs" / job
    sandbox.prepare_job_dir(job_dir, job)
    warm = template and WarmStart(template, sandbox.uid(job), sandbox.limits(), JOB_DIR_IN_SANDBOX)
    cpu, started = busy_seconds(), time.perf_counter()
    process = TenantProcess(
        sandbox.command(job_dir, job, placeholder=bool(warm)),
        sandbox.environment(job_dir),
        root / f"{job}.log",
        sandbox.control_group(job),
        None,
        warm or None,
    )
    process.call("progress", timeout_s=120)  # answered once READY
    wall, spent = time.perf_counter() - started, busy_seconds() - cpu
    process.kill()
    return wall, spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=10, help="starts of each kind")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dlsched-start-"))
    sandbox = Sandbox(hide=(str(root),))
    address = "\0dlsched-template-bench-" + secrets.token_hex(4)
    cpu, started = busy_seconds(), time.perf_counter()
    template = subprocess.Popen(
        [sys.executable, "-I", "-m", "dlsched.runtime.template", address[1:]],
        env=template_environment(sandbox),
    )
    while not _listening(address):
        time.sleep(0.01)
    print(
        f"the template: up in {time.perf_counter() - started:.2f} s, "
        f"{busy_seconds() - cpu:.2f} CPU-s (once per node)"
    )
    try:
        results = {"cold": [], "forked": []}
        for n in range(args.starts):  # interleaved, so both see the same machine
            results["cold"].append(one_start(sandbox, root, 2 * n + 1, None))
            results["forked"].append(one_start(sandbox, root, 2 * n + 2, address))
    finally:
        template.kill()
        shutil.rmtree(root, ignore_errors=True)
    print(f"{'start':>7} {'wall s (median, range)':>28} {'CPU-s (median, range)':>28}")
    for kind, runs in results.items():
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        print(
            f"{kind:>7} {statistics.median(walls):8.3f} ({min(walls):.3f}-{max(walls):.3f})"
            f"{'':6} {statistics.median(cpus):8.3f} ({min(cpus):.3f}-{max(cpus):.3f})"
        )
    cold, forked = (statistics.median(c for _, c in results[k]) for k in ("cold", "forked"))
    print(f"a forked start costs {forked / cold:.3f} of a cold one's CPU")


if __name__ == "__main__":
    main()
