"""The admission stage's books, kept by the cluster state at every transition.

What a quota stage needs to know of the jobs it admitted, so that it keeps no copy: the live
admitted jobs of each tenant (waiting or running) in the order they were admitted (a job
admitted again after an eviction goes to the end), how many of them each priority class has, and
the GPUs they count against their tenant: a waiting one its base size, a running one (and a
profiling run) the GPUs it holds (``ClusterState.tenant_gpus``, told by the state).
"""

from __future__ import annotations

from ..jobs import JobState


class AdmittedJobs:
    def __init__(self) -> None:
        # tenant -> job id -> (admission number, job), in the order of admission
        self.by_tenant: dict[str, dict[str, tuple[int, JobState]]] = {}
        self._admissions = 0
        # tenant -> priority class -> its admitted live jobs; and the lowest of those classes
        # (asked of every bucket head over its room in every pass)
        self.priorities: dict[str, dict[int, int]] = {}
        self.lowest: dict[str, int] = {}
        # tenant -> the GPUs it counts (those held, and the waiting ones' base sizes), but
        # zeros: the stage compares it with its own at every pass
        self.counted: dict[str, int] = {}

    def add(self, job: JobState, number: int | None = None) -> None:
        """Admit ``job``, last in admission order, or at ``number`` (its place before an
        eviction that was taken back)."""
        tenant, priority = job.spec.tenant, job.spec.priority
        if number is None:
            self._admissions += 1
            number = self._admissions
        self.by_tenant.setdefault(tenant, {})[job.job_id] = (number, job)
        counts = self.priorities.setdefault(tenant, {})
        counts[priority] = counts.get(priority, 0) + 1
        if priority < self.lowest.get(tenant, priority + 1):
            self.lowest[tenant] = priority

    def remove(self, job: JobState) -> int | None:
        """Take ``job`` out of the books; returns its admission number (None: not admitted)."""
        tenant, priority = job.spec.tenant, job.spec.priority
        found = self.by_tenant.get(tenant, {}).pop(job.job_id, None)
        if found is None:
            return None
        counts = self.priorities[tenant]
        counts[priority] -= 1
        if not counts[priority]:
            del counts[priority]
            if counts:
                self.lowest[tenant] = min(counts)
            else:
                del self.lowest[tenant]
        return found[0]

    def waits(self, job: JobState, sign: int) -> None:
        """An admitted job starts (-1) or stops (+1) waiting: it counts its base size."""
        self.count(job.spec.tenant, sign * job.base_gpus)

    def count(self, tenant: str, change: int) -> None:
        """The GPUs the tenant counts change by ``change`` (the state tells those held)."""
        n = self.counted.get(tenant, 0) + change
        if n:
            self.counted[tenant] = n
        else:
            self.counted.pop(tenant, None)
