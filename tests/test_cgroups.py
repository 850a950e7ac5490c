"""A control group per tenant process: memory bounded with all it forks (issue 29, 3). Runs
where the machine gives root a writable memory and pids hierarchy (v1 or v2); skipped elsewhere,
where the rlimits alone bound each process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dlsched.runtime.cgroups import (
    ORPHAN_AGE_S,
    Group,
    detect,
    group_name,
    join_fds,
    remove_orphans,
)
from dlsched.runtime.procfs import stat_fields
from dlsched.runtime.tenant_process import TenantError, TenantProcess

HIERARCHY = detect() if os.geteuid() == 0 else None
pytestmark = pytest.mark.skipif(
    HIERARCHY is None, reason="needs root and a writable cgroup memory and pids hierarchy"
)

FORKS = textwrap.dedent(
    """
    import os, time
    for _ in range(3):  # three children of 200 MiB each: each under the limit, not together
        if os.fork() == 0:
            hold = b"x" * (200 << 20)
            time.sleep(5)  # (they hold the channel too: it closes once they are gone)
            os._exit(0)
    _, status = os.wait()  # the first child to end: one the kernel killed
    os._exit(1 if status else 0)
    """
)


def test_forked_children_count_together_and_the_kill_is_named(tmp_path):
    group = Group(HIERARCHY, f"test-{os.getpid()}", 400 << 20, 64)
    process = TenantProcess([sys.executable, "-c", FORKS], {}, tmp_path / "log", group)
    with pytest.raises(TenantError) as e:
        process.call("never-answered", timeout_s=50)
    assert "went over the memory limit of 400 MiB" in str(e.value)
    assert not any(d.exists() for d in group.dirs)  # removed with its processes


def test_a_group_bounds_tasks_too(tmp_path):
    group = Group(HIERARCHY, f"test-tasks-{os.getpid()}", None, 16)
    code = "import threading, time\n" + "\n".join(
        [
            "n = 0",
            "try:",
            "    for _ in range(100):",
            "        threading.Thread(target=time.sleep, args=(30,), daemon=True).start(); n += 1",
            "except RuntimeError:",
            "    print('threads refused after', n, flush=True)",
        ]
    )
    process = TenantProcess([sys.executable, "-c", code], {}, tmp_path / "log", group)
    process.proc.wait(timeout=30)
    process.log.thread.join(timeout=10)
    text = (tmp_path / "log").read_text()
    assert "threads refused after" in text
    assert int(text.split()[-1]) < 16


SPINS = textwrap.dedent(
    """
    import time
    end = time.monotonic() + 2.0
    while time.monotonic() < end:  # busy for 2 s of wall time
        pass
    print("CPU", time.process_time(), flush=True)
    """
)


@pytest.mark.skipif(HIERARCHY is None or not HIERARCHY.cpu, reason="needs cgroup CPU control")
def test_a_group_bounds_cpu_time(tmp_path):
    # issue 29, 3: a job's CPU was not bounded. Under 0.1 of a core, 2 s of spinning gets at
    # most about 0.2 s of CPU (plus a scheduling period); unbounded it gets most of the 2 s,
    # over 0.6 s even with the other core's worth of load of a full test run
    group = Group(HIERARCHY, f"test-cpu-{os.getpid()}", None, 16, cpus=0.1)
    process = TenantProcess([sys.executable, "-c", SPINS], {}, tmp_path / "log", group)
    with pytest.raises(TenantError):
        process.call("never-answered", timeout_s=50)
    process.log.thread.join(timeout=10)
    cpu = float((tmp_path / "log").read_text().split("CPU", 1)[1])
    assert cpu < 0.4, cpu


def test_groups_whose_maker_died_go_and_the_others_stay():
    # the executor kills a run's Ray workers, so a worker never removes its tenant process's
    # group itself: the next group made on the node removes those of dead makers
    ended = subprocess.Popen([sys.executable, "-c", ""])
    ended.wait()  # a pid no process has now
    orphan = Group(HIERARCHY, f"test-orphan-{ended.pid}.1-1", None, 16)
    # a maker whose pid is used again by a later process: its start time differs
    reused = Group(HIERARCHY, f"test-orphan-{os.getpid()}.1-2", None, 16)
    recent = Group(HIERARCHY, f"test-orphan-{ended.pid}.1-3", None, 16)  # it may yet be filled
    old_style = Group(HIERARCHY, f"test-orphan-{ended.pid}-4", None, 16)  # named before
    mine = Group(HIERARCHY, group_name("test-mine", 1), None, 16)
    past = time.time() - 2 * ORPHAN_AGE_S
    for group in (orphan, reused, old_style, mine):
        for d in group.dirs:
            os.utime(d, (past, past))
    try:
        assert remove_orphans(HIERARCHY) >= 3 * len(orphan.dirs)  # (and any of earlier runs)
        assert not any(d.exists() for d in orphan.dirs + reused.dirs + old_style.dirs)
        assert all(d.exists() for d in recent.dirs + mine.dirs)
    finally:
        for group in (orphan, reused, old_style, recent, mine):
            group.remove()


def _sleeper_in(group: Group) -> subprocess.Popen:
    """A process that would sleep ten minutes, in ``group`` before it execs."""
    fds = group.open_for_child()
    try:
        return subprocess.Popen(["sleep", "600"], preexec_fn=lambda: join_fds(fds))
    finally:
        for fd in fds:
            os.close(fd)


def test_the_tasks_left_in_a_group_whose_maker_died_are_killed_with_it():
    # an orphaned bubblewrap sandbox, its launcher killed mid-setup, waited for it two hours:
    # what is left in a dead maker's group is killed, in this pid namespace only (a pid of
    # another one means nothing here), and at once (no one of this namespace can fill it now)
    ended = subprocess.Popen([sys.executable, "-c", ""])
    ended.wait()
    namespace = os.stat("/proc/self/ns/pid").st_ino
    orphan = Group(HIERARCHY, f"test-left-{ended.pid}.1.{namespace}-1", None, 16)
    elsewhere = Group(HIERARCHY, f"test-left-{ended.pid}.1.{namespace + 1}-2", None, 16)
    mine = Group(HIERARCHY, group_name("test-left-mine", 2), None, 16)
    sleepers = {g: _sleeper_in(g) for g in (orphan, elsewhere, mine)}
    past = time.time() - 2 * ORPHAN_AGE_S
    for group in (elsewhere, mine):  # (the orphan's is as new as can be)
        for d in group.dirs:
            os.utime(d, (past, past))
    try:
        remove_orphans(HIERARCHY)
        assert sleepers[orphan].wait(timeout=10) == -signal.SIGKILL
        assert not any(d.exists() for d in orphan.dirs)
        assert sleepers[elsewhere].poll() is None and sleepers[mine].poll() is None
        assert all(d.exists() for d in elsewhere.dirs + mine.dirs)
    finally:
        for group, sleeper in sleepers.items():
            sleeper.kill()
            sleeper.wait()
            group.remove()


ESCAPES = textwrap.dedent(
    """
    import os, sys, time
    child = os.fork()
    if child == 0:  # a session of its own: the kill of the process's session misses it
        os.setsid()
        time.sleep(600)
        os._exit(0)
    print("CHILD", child, flush=True)
    """
)


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def test_what_a_tenant_process_leaves_in_its_group_is_killed_with_it(tmp_path):
    # its child holds the channel, so the worker's kill() is what ends the job's processes
    group = Group(HIERARCHY, f"test-escapes-{os.getpid()}", None, 16)
    process = TenantProcess([sys.executable, "-c", ESCAPES], {}, tmp_path / "log", group)
    assert process.proc.wait(timeout=30) == 0
    deadline = time.monotonic() + 10
    while "CHILD" not in _text(tmp_path / "log") and time.monotonic() < deadline:
        time.sleep(0.05)  # (the log is copied by a thread of its own)
    child = int(_text(tmp_path / "log").split("CHILD", 1)[1].split()[0])
    try:
        process.kill()
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # (a zombie until init reaps it: its state says so)
        stat = stat_fields(child)
        assert stat is None or stat[0] == "Z", stat
        process._reader.join(timeout=10)  # (it removes the group)
        assert not any(d.exists() for d in group.dirs)
    finally:
        if Path(f"/proc/{child}").exists():
            os.kill(child, signal.SIGKILL)
            group.remove()
