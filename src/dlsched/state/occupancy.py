"""Which running jobs hold each GPU, and the memory they use there.

A GPU holds one job, or up to ``max_jobs_per_gpu`` when jobs share it. Memory is tracked per
GPU so that sharing never over-commits it; a job whose memory is unknown (no measured
footprint) may run alone but nobody may join it.
"""

from __future__ import annotations

from ..cluster import Cluster
from ..jobs import JobState, JobView


class GpuOccupancy:
    __slots__ = (
        "cluster",
        "max_jobs_per_gpu",
        "jobs",
        "memory",
        "shared_gpus",
        "leased",
        "moving_from",
    )

    def __init__(self, cluster: Cluster, max_jobs_per_gpu: int = 2) -> None:
        self.cluster = cluster
        self.max_jobs_per_gpu = max_jobs_per_gpu
        self.jobs: list[list[JobState]] = [[] for _ in range(cluster.num_gpus)]
        self.memory: list[float | None] = [0.0] * cluster.num_gpus  # None: unknown
        self.shared_gpus = 0  # GPUs holding > 1 job
        # GPUs a run outside any plan holds (a profiling run: ClusterState.lease), whole or
        # beside one job: nobody joins them, and they are not freed while it runs
        self.leased: set[int] = set()
        # GPUs a job's old workers hold until its background move switches (``job.leaving``):
        # the job is listed on them, alone; nobody joins them, and they are freed at the switch
        self.moving_from: set[int] = set()

    def why_not_join(self, g: int, memory_mib: float | None) -> str | None:
        """Why a job needing ``memory_mib`` per GPU cannot join the jobs on GPU ``g``, which is
        not free (None: it can)."""
        return self.why_not_join_holders(g, len(self.jobs[g]), self.memory[g], memory_mib)

    def why_not_join_holders(
        self, g: int, holders: int, used: float | None, memory_mib: float | None
    ) -> str | None:
        """:meth:`why_not_join` for GPU ``g`` held by ``holders`` jobs using ``used`` MiB (None:
        unknown), as they stand or as a plan will leave them (:mod:`.plan_check`)."""
        if g in self.leased:
            return f"GPU {g} holds a profiling run"
        if g in self.moving_from:
            return f"GPU {g}: a job's old workers leave it when its background resize switches"
        if not holders:
            return f"GPU {g} is neither free nor held: its node is not usable"
        if holders >= self.max_jobs_per_gpu:
            return f"GPU {g} already holds {holders} jobs (at most {self.max_jobs_per_gpu})"
        if used is None or memory_mib is None:
            return f"GPU {g}: memory of a job there is unknown, so it cannot be shared"
        capacity = self.cluster.nodes[self.cluster.gpu_node[g]].gpu_mem_mib
        if used + memory_mib > capacity:
            return f"GPU {g}: {used:.0f} + {memory_mib:.0f} MiB exceeds its {capacity} MiB"
        return None

    def attach(self, job: JobState) -> set[JobState]:
        """Put ``job`` on its GPUs (using ``job.memory_mib`` per GPU); return the jobs it now
        shares with."""
        memory_mib = job.memory_mib
        partners: set[JobState] = set()
        for g in job.gpus:
            holders = self.jobs[g]
            if holders:
                partners.update(holders)
                if len(holders) == 1:
                    self.shared_gpus += 1
                used = self.memory[g]
                self.memory[g] = None if used is None or memory_mib is None else used + memory_mib
            else:
                self.memory[g] = memory_mib
            holders.append(job)
        return partners

    def detach(self, job: JobState) -> tuple[set[JobState], list[int]]:
        """Take ``job`` off its GPUs; return its former partners and the GPUs now idle."""
        partners: set[JobState] = set()
        idle: list[int] = []
        for g in job.gpus:
            holders = self.jobs[g]
            holders.remove(job)
            if not holders:
                self.memory[g] = 0.0
                if g not in self.leased:
                    idle.append(g)
                continue
            partners.update(holders)
            if len(holders) == 1:
                self.shared_gpus -= 1
            self.memory[g] = self._recount(g)
        return partners, idle

    def hold_leaving(self, job: JobState, memory_mib: float | None) -> None:
        """Keep ``job`` on the GPUs its background move leaves (``job.leaving``), using
        ``memory_mib`` per GPU there, until :meth:`drop_leaving`."""
        for g in job.leaving:
            self.jobs[g].append(job)
            self.memory[g] = memory_mib
        self.moving_from.update(job.leaving)

    def drop_leaving(self, job: JobState) -> list[int]:
        """Take ``job`` off the GPUs its move left (it held them alone); return those now idle."""
        idle: list[int] = []
        for g in job.leaving:
            self.jobs[g].remove(job)
            self.memory[g] = 0.0
            self.moving_from.discard(g)
            if g not in self.leased:
                idle.append(g)
        return idle

    def recount(self, job: JobState) -> None:
        """Bring the memory of the job's GPUs up to date after its own memory changed."""
        for g in job.gpus:
            self.memory[g] = self._recount(g)

    def _recount(self, g: int) -> float | None:
        total = 0.0
        for other in self.jobs[g]:
            if other.memory_mib is None:
                return None
            total += other.memory_mib
        return total

    def partners(self, job: JobView) -> set[JobState]:
        out: set[JobState] = set()
        for g in job.gpus:
            holders = self.jobs[g]
            if len(holders) > 1:
                out.update(h for h in holders if h is not job)
        return out
