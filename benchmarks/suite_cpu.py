"""Where the test suite's CPU goes: run a command (by default the end-to-end tests on Ray) and
sample every process's CPU time until it ends, then print the CPU by kind of process (tenant
processes, Ray's workers and daemons, pytest, ...) and how busy the machine was; with
``--by-test``, also the tenant processes each test started (found by the job directory the
bubblewrap of their sandbox binds, which is under the test's ``tmp_path``: isolated tenants
only).

    .venv/bin/python benchmarks/suite_cpu.py [-- pytest args...]

A process is sampled every ``--every`` seconds, so one that lives less than that may be missed,
and one's last moments are not counted: the totals are a lower bound. Linux only (/proc).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import time

from dlsched.runtime.procfs import PPID, STIME, UTIME
from dlsched.runtime.reaper import process_table

TICK = os.sysconf("SC_CLK_TCK")
# the first of these found in a process's program (its first five words, as pytest-xdist's
# workers are `python -u -c "import sys;exec(...)"`; a daemon's command line also names the
# worker command it starts, further on) names its kind
TENANT = "tenant processes (with bubblewrap's wrappers)"
KINDS = [
    ("tenant_process", TENANT),
    ("dlsched.runtime.template", "tenant templates (one per node) and their waiting children"),
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


def cpu_times() -> dict[int, tuple[float, str, int]]:
    """pid -> (CPU seconds so far, command line, parent pid) of every process readable now."""
    return {
        pid: ((int(f[UTIME]) + int(f[STIME])) / TICK, cmd, int(f[PPID]))
        for pid, (f, cmd) in process_table().items()
    }


JOB_DIR = re.compile(r"--bind (\S+) /job ")
TEST_DIR = re.compile(r"/popen-gw\d+/([^/]+)/|/pytest-\d+/([^/]+)/")


def pid_namespace(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return ""


def test_of(pid: int, seen: dict, namespaces: dict[int, str]) -> str:
    """The test (its ``tmp_path``'s name, cut to 30 characters by pytest) whose job a tenant
    process ran: from the command line of the bubblewrap whose sandbox (its init's PID
    namespace) the process is in, as setpriv and prlimit exec into it (started cold) or the
    node's template forked it there (its own command line names nothing)."""
    for bwrap, (_, cmdline, _) in seen.items():
        job_dir = JOB_DIR.search(cmdline + " ")
        inits = [p for p, (_, _, parent) in seen.items() if parent == bwrap]
        if job_dir and namespaces.get(pid) in [namespaces.get(i) for i in inits]:
            test = TEST_DIR.search(job_dir.group(1))
            return next(filter(None, test.groups())) if test else job_dir.group(1)
    return "(not isolated: no job directory bound)"


def machine_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--every", type=float, default=0.2, help="seconds between samples")
    parser.add_argument(
        "--by-test", action="store_true", help="the tenant processes of each test, too"
    )
    parser.add_argument("pytest_args", nargs="*", default=["-m", "runtime"])
    args = parser.parse_args()
    before = cpu_times()  # what ran before the command is not counted
    busy0, total0 = machine_ticks()
    started = time.monotonic()
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:warnings", *args.pytest_args]
    child = subprocess.Popen(cmd)
    seen: dict[int, tuple[float, str, int]] = {}
    namespaces: dict[int, str] = {}  # pid -> its PID namespace, for --by-test
    while child.poll() is None:
        for pid, (cpu, cmdline, parent) in cpu_times().items():
            spent = cpu - before.get(pid, (0.0, "", 0))[0]
            known = seen.get(pid, (0.0, "", parent))
            # (a new process is kept from its first sample, for --by-test's parents: bubblewrap
            # uses next to no CPU)
            if pid != os.getpid() and (spent > known[0] or pid not in before | seen):
                # an exiting process (a zombie) has no command line left: keep the one it had
                seen[pid] = (spent, cmdline or known[1], parent)
                if args.by_test and pid not in namespaces:
                    namespaces[pid] = pid_namespace(pid)
        time.sleep(args.every)
    wall = time.monotonic() - started
    busy1, total1 = machine_ticks()
    by_kind: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    for cpu, cmdline, _ in seen.values():
        by_kind[kind(cmdline)][0] += cpu
        by_kind[kind(cmdline)][1] += 1
    print(f"\n{' '.join(cmd)}: exit {child.returncode}, {wall:.0f} s")
    print(f"machine busy {100 * (busy1 - busy0) / max(1, total1 - total0):.0f}% of its cores")
    print(f"{'CPU s':>8} {'processes':>9}  kind")
    for name, (cpu, count) in sorted(by_kind.items(), key=lambda kv: -kv[1][0]):
        print(f"{cpu:8.1f} {count:9d}  {name}")
    print(f"{sum(c for c, _ in by_kind.values()):8.1f} {'':9}  total (a lower bound)")
    if args.by_test:
        by_test: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
        for pid, (cpu, cmdline, _) in seen.items():
            if kind(cmdline) == TENANT and not JOB_DIR.search(cmdline + " "):  # not a wrapper
                test = test_of(pid, seen, namespaces)
                by_test[test][0] += cpu
                by_test[test][1] += 1
        print(f"\n{'CPU s':>8} {'processes':>9}  tenant processes of the test")
        for name, (cpu, count) in sorted(by_test.items(), key=lambda kv: -kv[1][0]):
            print(f"{cpu:8.1f} {count:9d}  {name}")


if __name__ == "__main__":
    main()
