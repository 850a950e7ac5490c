"""A control group for each tenant process: its memory, its task count and its CPU time bounded
together with everything it forks (the rlimits of :mod:`.sandbox` bound each process alone: three
forked children could hold three times the memory limit).

cgroup v2 where the machine offers it with the memory and pids controllers, else cgroup v1's
memory and pids hierarchies; the CPU bound where the cpu controller (v2) or hierarchy (v1) is
there too, else none; where neither is writable (no root, a container without them) the
rlimits are the only bound, and :func:`detect` says so (the server logs it at start). A process
joins its group before it runs the tenant's code (in the child, before exec), so nothing it
starts escapes. When the kernel kills a process of the group for memory, :meth:`Group.oom_kills`
tells, and the job's events name the limit.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .procfs import START_TIME, stat_fields

ROOT = Path("/sys/fs/cgroup")
PARENT = "dlsched"  # our groups live under this one in each hierarchy
CPU_PERIOD_US = 100_000  # the kernel's default scheduling period for a CPU quota


@dataclass(frozen=True)
class Hierarchy:
    """Where groups are made: v2 (one directory per group), or v1 (one per controller)."""

    version: int
    roots: tuple[Path, ...]  # v2: the unified root; v1: the memory and pids roots (and cpu's)
    cpu: bool = False  # CPU time can be bounded


def detect(root: Path = ROOT) -> Hierarchy | None:
    """The writable hierarchy with memory and pids control, or None."""
    controllers = root / "cgroup.controllers"
    if controllers.exists():
        have = set(controllers.read_text().split())
        if {"memory", "pids"} <= have and os.access(root, os.W_OK):
            return Hierarchy(2, (root,), "cpu" in have)
        return None
    v1 = (root / "memory", root / "pids")
    writable = [
        p for p in (*v1, root / "cpu") if (p / "cgroup.procs").exists() and os.access(p, os.W_OK)
    ]
    if all(p in writable for p in v1):
        return Hierarchy(1, tuple(writable), len(writable) == 3)
    return None


# A group of another pid namespace (or named before namespaces were), found empty and its maker
# seemingly gone, is removed only this long after it was made: a maker this process cannot see
# (another pid namespace sharing the hierarchy) may be about to fill it.
ORPHAN_AGE_S = 60.0


def group_name(owner: str, number: int) -> str:
    """``owner-<pid>.<start time>.<pid namespace>-number``, this process's pid, start time and
    pid namespace: unique on the node even once pids wrap around (they do, in minutes, while the
    suite runs), and a later process can tell whether the maker still lives
    (:func:`remove_orphans`)."""
    pid = os.getpid()
    return f"{owner}-{pid}.{_start_time(pid)}.{_pid_namespace()}-{number}"


def _pid_namespace() -> str:
    """This process's pid namespace (its inode): a pid means a process only within it."""
    return str(os.stat("/proc/self/ns/pid").st_ino)


def _start_time(pid: int) -> str | None:
    """When process ``pid`` started (in clock ticks since boot), or None if there is none."""
    fields = stat_fields(pid)
    return None if fields is None else fields[START_TIME]


def remove_orphans(hierarchy: Hierarchy) -> int:
    """Remove the groups left behind by makers that died: the executor kills a run's Ray
    workers, and a killed worker never removes its tenant process's group (thousands piled up
    over a day of tests here), nor ends what is left in it (a bubblewrap sandbox whose launcher
    was killed in its setup waits for it for ever: one lived two hours here). The tasks of a
    group whose maker died in this pid namespace are killed first; one still busy then is
    removed by a later call. A group whose maker lives stays; so does one of another pid
    namespace while it holds a task (its maker's pid means nothing here), or made in the last
    ``ORPHAN_AGE_S``. Returns how many went."""
    removed, now, namespace = 0, time.time(), _pid_namespace()
    for root in hierarchy.roots:
        try:
            entries = list(os.scandir(root / PARENT))
        except FileNotFoundError:
            continue
        for entry in entries:
            parts = entry.name.rsplit("-", 2)
            # "<pid>.<start time>.<pid namespace>" (group_name), or without the namespace, or
            # "<pid>" alone (named by dlsched before)
            maker = parts[1].split(".") if len(parts) == 3 else []
            pid, started, made_in = (maker + ["", "", ""])[:3]
            if len(maker) > 3 or not pid.isdigit() or not (started.isdigit() or not started):
                continue  # not one of ours
            here = made_in in ("", namespace)  # (unnamed: made before namespaces were named)
            now_started = _start_time(int(pid))
            if here and now_started is not None and started in ("", now_started):
                continue  # its maker lives
            try:
                if made_in != namespace and now - entry.stat().st_mtime < ORPHAN_AGE_S:
                    continue
                if made_in == namespace and kill_tasks([Path(entry.path)]):
                    _remove_dir(Path(entry.path))  # once the killed have left
                else:
                    os.rmdir(entry.path)
                removed += not os.path.exists(entry.path)
            except OSError:  # not a directory, busy, or gone meanwhile
                continue
    return removed


def join_fds(fds: list[int]) -> None:
    """In a child before exec: this process (and all it will fork) joins the group whose
    ``cgroup.procs`` files are open at ``fds`` (:meth:`Group.open_for_child`)."""
    pid = str(os.getpid()).encode()
    for fd in fds:
        os.write(fd, pid)


class Group:
    """One tenant process's group: made with its limits, joined by the process before exec,
    removed once the process is gone."""

    def __init__(
        self,
        hierarchy: Hierarchy,
        name: str,
        memory_bytes: int | None,
        max_tasks: int,
        cpus: float | None = None,
    ) -> None:
        """``cpus``: the CPU time the group may use, in cores (None, or a hierarchy without
        CPU control: unbounded)."""
        if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
            raise ValueError(f"not a group name: {name!r}")
        self.hierarchy, self.memory_bytes = hierarchy, memory_bytes
        self.dirs = tuple(root / PARENT / name for root in hierarchy.roots)
        for root, d in zip(hierarchy.roots, self.dirs):
            parent = root / PARENT
            parent.mkdir(exist_ok=True)
            if hierarchy.version == 2:  # let children have the controllers
                cpu = " +cpu" if hierarchy.cpu else ""
                _write(parent / "cgroup.subtree_control", "+memory +pids" + cpu)
            d.mkdir()  # a new name (group_name): never one an earlier process left behind
        if hierarchy.version == 2:
            (d,) = self.dirs
            if memory_bytes is not None:
                _write(d / "memory.max", str(memory_bytes))
                _write(d / "memory.swap.max", "0", missing_ok=True)
            _write(d / "pids.max", str(max_tasks))
            if cpus is not None and hierarchy.cpu:
                _write(d / "cpu.max", f"{round(cpus * CPU_PERIOD_US)} {CPU_PERIOD_US}")
        else:
            memory, pids = self.dirs[:2]
            if memory_bytes is not None:
                _write(memory / "memory.limit_in_bytes", str(memory_bytes))
                # with swap accounting, swap counts too (else the limit would only move pages)
                _write(memory / "memory.memsw.limit_in_bytes", str(memory_bytes), missing_ok=True)
            _write(pids / "pids.max", str(max_tasks))
            if cpus is not None and hierarchy.cpu:
                _write(self.dirs[2] / "cpu.cfs_period_us", str(CPU_PERIOD_US))
                _write(self.dirs[2] / "cpu.cfs_quota_us", str(round(cpus * CPU_PERIOD_US)))
        self._procs = [str(d / "cgroup.procs") for d in self.dirs]

    def open_for_child(self) -> list[int]:
        """The group's ``cgroup.procs`` files, opened for a child to join by writing its pid
        (:func:`join_fds`) between fork and exec, where it may only make system calls. The
        caller closes them once the child has started (they close on exec in the child)."""
        return [os.open(path, os.O_WRONLY | os.O_CLOEXEC) for path in self._procs]

    def oom_kills(self) -> int:
        """Processes of the group the kernel killed for going over its memory limit."""
        d = self.dirs[0]
        if self.hierarchy.version == 2:
            text = _read(d / "memory.events")
            found = re.search(r"^oom_kill (\d+)", text, re.M)
            return int(found.group(1)) if found else 0
        text = _read(d / "memory.oom_control")
        found = re.search(r"^oom_kill (\d+)", text, re.M)
        if found:
            return int(found.group(1))
        return 1 if _read(d / "memory.failcnt").strip() not in ("", "0") else 0

    def kill_tasks(self) -> None:
        """Kill what is still in the group (its process has ended: nothing left there may run
        on, and a sandbox stuck in its setup never would end)."""
        kill_tasks(self.dirs)

    def remove(self) -> None:
        """Once its processes are gone: killed tasks may take a moment to leave the group, so
        this tries for up to two seconds (a group still busy then is left behind, empty soon
        and harmless)."""
        for d in self.dirs:
            _remove_dir(d)


def kill_tasks(dirs: Sequence[Path]) -> int:
    """SIGKILL every process in the groups at ``dirs``; returns how many were signalled. The
    groups are read again once the pidfds are open, and only those still listed are signalled,
    so a pid that a process outside took meanwhile never is."""
    signalled = 0
    for _ in range(3):  # a process may fork while its group is read: read it again
        fds = {}
        for pid in _listed(dirs):
            try:
                fds[pid] = os.pidfd_open(int(pid))
            except OSError:
                continue  # gone
        if not fds:
            break
        try:
            still = _listed(dirs)
            for pid, fd in fds.items():
                if pid in still:
                    try:
                        signal.pidfd_send_signal(fd, signal.SIGKILL)
                        signalled += 1
                    except OSError:
                        pass  # ended meanwhile
        finally:
            for fd in fds.values():
                os.close(fd)
    return signalled


def _listed(dirs: Sequence[Path]) -> set[str]:
    """The pids in the groups at ``dirs``."""
    return {pid for d in dirs for pid in _read(d / "cgroup.procs").split()}


def _remove_dir(d: Path) -> None:
    """Remove a group's directory, trying for up to two seconds while it is busy."""
    for _ in range(40):
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.05)


def _write(path: Path, value: str, missing_ok: bool = False) -> None:
    try:
        path.write_text(value)
    except FileNotFoundError:
        if not missing_ok:
            raise
    except OSError as e:  # a refused write names no file: this one does
        raise OSError(e.errno, f"writing {value!r} to {path}: {e.strerror}") from e


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
