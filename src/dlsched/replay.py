"""What-if replays of a dlsched server's own history (``dlsched whatif``), and how well the
simulator predicts what the server measured (calibration).

A replay runs the exported jobs (:mod:`dlsched.traces.history`) on the server's cluster with the
runtime's workload model (:class:`~dlsched.runtime.speed.RuntimeSpeed`, the one the server
decided with) given each job's measured profile and sharing slowdown (a job that never shared
slows down by the median of the others', as the server learns it); each job's work is its
iterations at its measured solo iteration time, and each start and restart pauses as long as
that job's measured ones did.
"""

from __future__ import annotations

import math
import statistics

from .jobs import JobSpec, JobState
from .policies.base import Policy
from .runtime.speed import RuntimeSpeed


def replay_model(replay: dict[str, dict]) -> RuntimeSpeed:
    speed = RuntimeSpeed()
    for job_id, measured in replay.items():
        if measured["profile"] is not None:
            speed.profiles[job_id] = measured["profile"]
        if measured["slowdown"]:
            speed.measured_slowdown(job_id, measured["slowdown"])
    return speed


def with_profiling(jobs: list[JobSpec], replay: dict[str, dict], policy: Policy) -> list[JobSpec]:
    """Under a policy that needs a job's profile (sharing, GENIE) the server schedules a job only
    after its profiling run: it arrives as far after its submission as its profiling took."""
    if not (policy.shares_gpus or policy.moldable):
        return jobs
    return sorted(
        (
            j.evolve(submit_time_s=j.submit_time_s + replay[j.job_id]["profile_s"])
            if replay[j.job_id]["profile_s"]
            else j
            for j in jobs
        ),
        key=lambda j: j.submit_time_s,
    )


def calibration(
    replay: dict[str, dict], simulated: list[JobState], original: dict[str, float]
) -> dict:
    """The simulated JCTs of the jobs the server finished against the measured ones.
    ``original`` holds each job's submission time as exported (a profiled arrival is later)."""
    pairs = []
    for job in simulated:
        measured = replay[job.job_id]
        if measured["status"] != "done" or measured["jct_s"] is None or job.finish is None:
            continue
        pairs.append((measured["jct_s"], job.finish - original[job.job_id]))
    if not pairs:
        return {"jobs": 0}
    errors = [abs(s - m) / m for m, s in pairs]
    mean_measured = statistics.fmean(m for m, _ in pairs)
    mean_simulated = statistics.fmean(s for _, s in pairs)
    return {
        "jobs": len(pairs),
        "mean_jct_measured_s": mean_measured,
        "mean_jct_simulated_s": mean_simulated,
        "mean_jct_error": (mean_simulated - mean_measured) / mean_measured,
        "job_error_median": statistics.median(errors),
        "job_error_p90": sorted(errors)[min(len(errors) - 1, math.ceil(0.9 * len(errors)) - 1)],
        "job_error_max": max(errors),
    }


def measured_summary(replay: dict[str, dict]) -> dict:
    """The server's own outcome of the jobs it finished: what a replay is held against."""
    done = [m for m in replay.values() if m["status"] == "done" and m["jct_s"] is not None]
    if not done:
        return {"jobs": 0}
    return {
        "jobs": len(done),
        "mean_jct_s": statistics.fmean(m["jct_s"] for m in done),
        "median_jct_s": statistics.median(m["jct_s"] for m in done),
        "makespan_s": max(m["end_s"] for m in done),  # times count from the first submission
        "preemptions": sum(m["preemptions"] or 0 for m in done),
    }
