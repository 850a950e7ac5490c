"""Takes an embedded Ray cluster down with the process that started it, even after a SIGKILL.

Ray's head processes die with their parent, but its per-node agents, reparented to init, can
outlive it (seen here: two agents per node still running a minute after the server was killed).
:func:`start_reaper` starts a small watcher holding the read end of a pipe whose write end only
the watched process has: when it ends, however it ends, the pipe closes, and the watcher kills
every Ray process it saw descend from it (checked by start time, so a reused pid is spared).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys

from .procfs import PPID, START_TIME, stat_fields

RAY_MARKERS = ("ray::", "/ray/", "gcs_server", "raylet")
SCAN_EVERY_S = 1.0


def start_reaper() -> int:
    """Watch this process; returns the pipe's write end (close it to stop the watcher early)."""
    read, write = os.pipe()  # not inheritable: Ray's processes never hold the write end
    subprocess.Popen(
        [sys.executable, "-I", "-m", "dlsched.runtime.reaper", str(os.getpid()), str(read)],
        pass_fds=(read,),
        start_new_session=True,
        stdin=subprocess.DEVNULL,
    )
    os.close(read)
    return write


def process_table() -> dict[int, tuple[list[str], str]]:
    """pid -> (the fields of /proc/pid/stat after the command name, command line) of every
    process readable now (``benchmarks/suite_cpu.py`` reads its CPU times from them too)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = stat_fields(entry)
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile
        if fields is not None:
            out[int(entry)] = (fields, cmdline)
    return out


def _processes() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, start time, command line) of every process."""
    return {pid: (int(f[PPID]), f[START_TIME], cmd) for pid, (f, cmd) in process_table().items()}


def descendants(
    root: int, processes: dict[int, tuple[int, str, str]]
) -> dict[int, tuple[str, str]]:
    """Every process below ``root``: pid -> (start time, command line)."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in processes.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = {}, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found[pid] = processes[pid][1:]
        todo += children.get(pid, [])
    return found


def ray_descendants(root: int, processes: dict[int, tuple[int, str, str]]) -> dict[int, str]:
    """Ray processes below ``root``: pid -> start time."""
    return {
        pid: start
        for pid, (start, cmdline) in descendants(root, processes).items()
        if any(m in cmdline for m in RAY_MARKERS)
    }


def watch(root: int, pipe: int) -> None:
    seen: dict[int, str] = {}
    while not select.select([pipe], [], [], SCAN_EVERY_S)[0]:
        processes = _processes()
        seen.update(ray_descendants(root, processes))
        for pid in [p for p, start in seen.items() if processes.get(p, (0, None))[1] != start]:
            del seen[pid]  # ended: forget it before its pid is reused
    # the watched process is gone (or shut its cluster down): its Ray processes go too
    for _ in range(3):
        processes = _processes()
        for pid, start in list(seen.items()):
            if processes.get(pid, (0, None))[1] == start:
                seen.update(ray_descendants(pid, processes))
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


if __name__ == "__main__":
    watch(int(sys.argv[1]), int(sys.argv[2]))
