"""The one reader of ``/proc/<pid>/stat``: the reaper's process table, the control groups'
names (a maker's start time) and ``benchmarks/suite_cpu.py`` all take its fields from here."""

from __future__ import annotations

# indices into stat_fields(): proc(5)'s fields 4, 14, 15 and 22
PPID, UTIME, STIME, START_TIME = 1, 11, 12, 19


def stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (which may hold spaces and
    parentheses, so it is cut at the last one), or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
