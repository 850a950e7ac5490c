"""Where the test suite's CPU goes: run a command (by default the end-to-end tests on Ray) and
sample every process's CPU time until it ends, then print the CPU by kind of process (tenant
processes, Ray's workers and daemons, pytest, ...) and how busy the machine was.

    .venv/bin/python benchmarks/suite_cpu.py [-- pytest args...]

A process is sampled every ``--every`` seconds, so one that lives less than that may be missed,
and one's last moments are not counted: the totals are a lower bound. Linux only (/proc).
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time

from dlsched.runtime.procfs import STIME, UTIME
from dlsched.runtime.reaper import process_table

TICK = os.sysconf("SC_CLK_TCK")
# the first of these found in a process's program (its first five words, as pytest-xdist's
# workers are `python -u -c "import sys;exec(...)"`; a daemon's command line also names the
# worker command it starts, further on) names its kind
KINDS = [
    ("tenant_process", "tenant processes (with bubblewrap's wrappers)"),
    ("ray::", "Ray worker processes (actors, tasks)"),  # their titles once they run
    ("default_worker", "Ray worker processes (actors, tasks)"),
    ("raylet", "Ray: raylets"),
    ("gcs_server", "Ray: GCS"),
    ("log_monitor", "Ray: log monitor"),
    ("dashboard", "Ray: dashboard agents"),
    ("runtime_env", "Ray: runtime env agents"),
    ("monitor.py", "Ray: monitor"),
    ("chromium", "chromium (the dashboard's browser test)"),
    ("dlsched", "dlsched CLI processes (servers)"),
    ("pytest", "pytest and its workers"),
    ("spawn_main", "pytest and its workers"),
    ("exec(eval(sys.s", "pytest and its workers"),
]


def kind(cmdline: str) -> str:
    program = " ".join(cmdline.split(" ")[:5])
    tenant = "tenant_process" in cmdline  # started through bubblewrap: named at the end
    for marker, name in KINDS:
        if marker in program or (tenant and marker == "tenant_process"):
            return name
    return "other"


def cpu_times() -> dict[int, tuple[float, str]]:
    """pid -> (CPU seconds so far, command line) of every process readable now."""
    return {
        pid: ((int(f[UTIME]) + int(f[STIME])) / TICK, cmd)
        for pid, (f, cmd) in process_table().items()
    }


def machine_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--every", type=float, default=0.2, help="seconds between samples")
    parser.add_argument("pytest_args", nargs="*", default=["-m", "runtime"])
    args = parser.parse_args()
    before = cpu_times()  # what ran before the command is not counted
    busy0, total0 = machine_ticks()
    started = time.monotonic()
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:warnings", *args.pytest_args]
    child = subprocess.Popen(cmd)
    seen: dict[int, tuple[float, str]] = {}
    while child.poll() is None:
        for pid, (cpu, cmdline) in cpu_times().items():
            spent = cpu - before.get(pid, (0.0, ""))[0]
            known = seen.get(pid, (0.0, ""))
            if pid != os.getpid() and spent > known[0]:
                # an exiting process (a zombie) has no command line left: keep the one it had
                seen[pid] = (spent, cmdline or known[1])
        time.sleep(args.every)
    wall = time.monotonic() - started
    busy1, total1 = machine_ticks()
    by_kind: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    for cpu, cmdline in seen.values():
        by_kind[kind(cmdline)][0] += cpu
        by_kind[kind(cmdline)][1] += 1
    print(f"\n{' '.join(cmd)}: exit {child.returncode}, {wall:.0f} s")
    print(f"machine busy {100 * (busy1 - busy0) / max(1, total1 - total0):.0f}% of its cores")
    print(f"{'CPU s':>8} {'processes':>9}  kind")
    for name, (cpu, count) in sorted(by_kind.items(), key=lambda kv: -kv[1][0]):
        print(f"{cpu:8.1f} {count:9d}  {name}")
    print(f"{sum(c for c, _ in by_kind.values()):8.1f} {'':9}  total (a lower bound)")


if __name__ == "__main__":
    main()
