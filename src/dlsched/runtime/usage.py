"""Accounting, as Slurm's ``sacct`` gives it: per tenant and per job over a period, GPU-hours,
time queued and running, preemptions; from the store's record of every stretch a job held GPUs
(``runs``) and of its jobs."""

from __future__ import annotations

import math

from ..errors import SpecError
from .store import Store


def usage_report(store: Store, since: float, until: float, tenant_id: str | None = None) -> dict:
    """Jobs that were queued or running in [since, until], and the tenants' totals."""
    for name, v in (("since", since), ("until", until)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise SpecError(name, f"must be a time in Unix seconds, got {v!r}")
    if not since < until:
        raise SpecError("until", f"must be after since ({since:g}), got {until:g}")
    held: dict[str, list[float]] = {}  # job -> [GPU-seconds, running seconds]
    for r in store.runs(since, until, tenant_id):
        h = held.setdefault(r["job_id"], [0.0, 0.0])
        h[0] += r["gpus"] * (r["end"] - r["start"])
        h[1] += r["end"] - r["start"]
    jobs: list[dict] = []
    tenants: dict[str, dict] = {}
    for row in store.jobs(tenant_id=tenant_id):
        start, end = max(since, row["submitted"]), min(until, row["finished"] or until)
        if end <= start and row["id"] not in held:
            continue
        gpu_s, running_s = held.get(row["id"], (0.0, 0.0))
        job = {
            "job_id": row["id"],
            "tenant": row["tenant_id"],
            "status": row["status"],
            "gpu_hours": gpu_s / 3600,
            "running_s": running_s,
            "queued_s": max(0.0, (end - start) - running_s),
            "preemptions": row["preemptions"],
            "failures": row["failures"],
        }
        jobs.append(job)
        t = tenants.setdefault(
            row["tenant_id"],
            {
                "tenant": row["tenant_id"],
                "jobs": 0,
                "gpu_hours": 0.0,
                "running_s": 0.0,
                "queued_s": 0.0,
                "preemptions": 0,
            },
        )
        t["jobs"] += 1
        for key in ("gpu_hours", "running_s", "queued_s", "preemptions"):
            t[key] += job[key]
    return {
        "since": since,
        "until": until,
        "tenants": sorted(tenants.values(), key=lambda t: t["tenant"]),
        "jobs": jobs,
    }
