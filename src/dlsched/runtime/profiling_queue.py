"""The jobs waiting for a profiling run, and the runs under way: whose turn is next, and what
becomes of a job whose run failed. The service (:mod:`.service`) starts the runs and reads
their outcomes; where a run goes is :func:`.profiling_gpus.profiling_gpus`'s."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable

from ..state.cluster_state import ClusterState
from .profiling_gpus import profiling_gpus

# chosen: profiling runs at once (each is a process); the rest wait
DEFAULT_MAX_PROFILING = 2
# chosen: how long a GENIE job waits for two free GPUs of one node (its sample of 2 workers on
# a node) before it is profiled on what is free: on a busy cluster a pair may not free up while
# profiled jobs wait, and the job cannot be scheduled before its profile
DEFAULT_PAIR_WAIT_S = 60.0


class ProfilingQueue:
    def __init__(
        self, max_running: int = DEFAULT_MAX_PROFILING, pair_wait_s: float = DEFAULT_PAIR_WAIT_S
    ) -> None:
        self.max_running, self.pair_wait_s = max_running, pair_wait_s
        self.running: dict[str, str] = {}  # job id -> tenant: runs under way
        # tenant -> its jobs waiting for a run, oldest first; the dict's order is the tenants'
        # turn (a tenant served goes to the back)
        self._waiting: dict[str, deque[str]] = {}
        # runs beside a job (capped at the GPU's rest), and the jobs whose run there ran out
        # of memory: they wait for a whole GPU
        self._beside: set[str] = set()
        self._whole: set[str] = set()
        # job id -> its runs that failed for the cluster (Ray or a node, not its program)
        self._cluster_failures: Counter[str] = Counter()
        self._since: dict[str, float] = {}  # job id -> when it began to wait for its profile
        # job id -> (the fewest GPUs it may start on, its priority class): what its quota asks
        self._needs: dict[str, tuple[int, int]] = {}
        # the jobs timed on several placements (GENIE's that may run on more than one GPU)
        self._placements: set[str] = set()

    def add(
        self,
        tenant: str,
        jid: str,
        now: float,
        needs: tuple[int, int] = (1, 0),
        placements: bool = False,
    ) -> None:
        """A job to profile, after its tenant's others; ``needs``: (the fewest GPUs it may start
        on, its priority class); ``placements``: it is timed on 1 and 2 workers (GENIE)."""
        self._waiting.setdefault(tenant, deque()).append(jid)
        self._since[jid] = now
        self._needs[jid] = needs
        if placements:
            self._placements.add(jid)

    def again(self, tenant: str, jid: str, whole: bool = False) -> None:
        """A job whose run failed for want of memory beside a job (``whole``: it waits for a
        whole GPU) or for the cluster: run again, its tenant's next."""
        if whole:
            self._whole.add(jid)
        self._waiting.setdefault(tenant, deque()).appendleft(jid)

    def next_run(
        self,
        state: ClusterState,
        shares: bool,
        now: float,
        may_start: Callable[[str, int, int], bool] | None = None,
    ) -> tuple[str, str, tuple[int, ...], float | None] | None:
        """The next run to start if a slot and its GPUs are free: (job id, tenant, GPUs, the
        memory it may use there or None for whole GPUs), taken off the queue; unless ``shares``
        (the policy shares GPUs), only whole free GPUs. Free slots go to
        the tenants with jobs waiting, in turn; a tenant holds more than its share of the slots
        only while no other tenant waits for one. A tenant's job is its first that
        ``may_start(tenant, fewest GPUs, priority class)`` (its quota could admit it; a tenant
        with none waits without a turn). The job chosen waits for its GPUs (a job timed on
        placements for two of one node up to ``pair_wait_s``): a later one does not go first.
        The caller checks that the job still wants its run."""
        if not self._waiting or len(self.running) >= self.max_running:
            return None
        first: dict[str, str] = {}  # tenant -> its first job that may start
        for t, jobs in self._waiting.items():
            jid = next(
                (j for j in jobs if may_start is None or may_start(t, *self._needs[j])), None
            )
            if jid is not None:
                first[t] = jid
        if not first:
            return None
        running = Counter(self.running.values())
        wanting = len(first.keys() | running.keys())
        share = max(1, self.max_running // wanting)
        tenant = next((t for t in first if running[t] < share), next(iter(first)))
        jid = first[tenant]
        pair = now - self._since.get(jid, now) < self.pair_wait_s
        found = profiling_gpus(
            state,
            placements=jid in self._placements,
            whole=not shares or jid in self._whole,
            pair=pair,
        )
        if found is None:
            return None
        waiting = self._waiting.pop(tenant)
        waiting.remove(jid)
        if waiting:
            self._waiting[tenant] = waiting  # its next job: at the back of the turn
        return jid, tenant, *found

    def started(self, jid: str, tenant: str, beside: bool) -> None:
        self.running[jid] = tenant
        if beside:
            self._beside.add(jid)

    def ended(self, jid: str) -> bool:
        """The job's run reported: whether it ran beside a job."""
        self.running.pop(jid, None)
        beside = jid in self._beside
        self._beside.discard(jid)
        return beside

    def cluster_failure(self, jid: str) -> int:
        """The job's run failed for the cluster: how many of its runs have."""
        self._cluster_failures[jid] += 1
        return self._cluster_failures[jid]

    def __contains__(self, jid: str) -> bool:
        """Whether the job waits for a run or has one under way."""
        return jid in self._since

    def waiting(self) -> list[tuple[str, tuple[int, int]]]:
        """(tenant, what its quota must admit: fewest GPUs, priority class) of each job waiting
        for a run."""
        return [(t, self._needs[j]) for t, jobs in self._waiting.items() for j in jobs]

    def forget(self, jid: str) -> None:
        """The job needs no more runs (profiled, failed or cancelled)."""
        for tenant, jobs in self._waiting.items():
            if jid in jobs:  # cancelled while it waits
                jobs.remove(jid)
                if not jobs:
                    del self._waiting[tenant]
                break
        self._whole.discard(jid)
        self._cluster_failures.pop(jid, None)
        self._since.pop(jid, None)
        self._needs.pop(jid, None)
        self._placements.discard(jid)
