"""GPU sharing with gradient accumulation: SJF-BSBF and its aggressive baseline SJF-FFS
(Luo, Wang, Shi et al., arXiv 2407.13088; PAPERS.md section 1). Both are non-preemptive and
take pending jobs in shortest-job-first order (oracle duration), strict unless ``scan`` says
otherwise.

A pending job takes idle GPUs when enough are free. Otherwise it may share GPUs with running
jobs that are alone on theirs (at most two jobs per GPU), if its memory at some sub-batch fits
beside each partner's and the pair's co-location slowdowns were measured:

- ``sjf-ffs`` shares whenever that fits (first fit: partners in GPU order), at the smallest
  sub-batch split that fits memory.
- ``sjf-bsbf`` shares only with partners that pass the pairwise benefit test t_con < t_seq, and
  picks them smallest t_con first, as the authors' testbed does (Lai-JX/Scheduler,
  ``cluster/switch.py``, ``bsbf_alloc_res``: candidates sorted by t_con ascending). That is the
  partner that ends soonest, not the largest gain t_seq - t_con; the paper's text says "best
  benefit first" without the order, so dlsched follows the code. For pending a and running b with
  solo
  remaining times T_a, T_b (a's at its full batch) and slowdowns xi_a, xi_b:
      b ends first (xi_a T_a >= xi_b T_b): t_con = T_a / 2 + (1 - 1 / (2 xi_a)) xi_b T_b
      a ends first:                        t_con = T_b / 2 + (1 - 1 / (2 xi_b)) xi_a T_a
      t_seq = T_b + T_a / 2
  When a must run at k sub-batches to fit, each of its steps takes f = T_a(k) / T_a(1) longer
  while it shares, and it goes back to its full batch once b ends (the state restores it): both
  cases above then hold with xi_a replaced by f xi_a and T_a kept at the full batch, and the
  "wait, then run alone" case t_seq is at the full batch too.
  Reconstructed choices (documented parameters where they are choices):
  * sharing time point: with fixed slowdowns the pair's total completion time is linear in the
    start of sharing, so the best point is now or when b ends; that is the pairwise test itself,
    re-checked at every scheduling event;
  * sub-batch: k in 1, 2, 4, ... dividing the per-GPU batch, the smallest whose memory fits
    beside the partner. A step at k sub-batches is never faster than at 1 (each pass pays the
    fixed compute cost), so T_a and hence t_con grow with k: the smallest fitting k minimizes
    t_con;
  * a job with several partners runs at the pace of its slowest worker (xi_a = the largest).

The consolidated variants (``sjf-ffs-consolidated``, ``sjf-bsbf-consolidated``) place a job,
idle and shared GPUs together, on as few nodes as its size allows, or not at all.

Candidates are grouped by (model, memory per GPU): within a group t_con and t_seq depend on T_b
alone and t_con grows with it, so each group's best partner is found by bisection over its
jobs sorted by finish time. Jobs with a GPU-type constraint or unknown memory never share.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..cluster import Cluster
from ..jobs import JobView
from ..view import IdleGpus
from .base import PolicyView
from .queued import QueuedPolicy, shortest_first

MAX_ACCUMULATION = 16  # chosen: sub-batches of at least 1/16 of the batch


def t_con(t_a: float, t_b: float, xi_a: float, xi_b: float) -> float:
    """Mean completion time of the pair from now if they share now."""
    if xi_a * t_a >= xi_b * t_b:
        return t_a / 2 + (1 - 1 / (2 * xi_a)) * xi_b * t_b
    return t_b / 2 + (1 - 1 / (2 * xi_b)) * xi_a * t_a


def t_seq(t_a: float, t_b: float) -> float:
    """Mean completion time of the pair if a waits for b."""
    return t_b + t_a / 2


@dataclass(slots=True)
class _Group:
    """Running jobs alone on their GPUs with the same model and memory per GPU."""

    model: str
    memory_mib: float
    capacity_mib: int  # the smallest GPU memory under its members
    finish: list[float]  # sorted
    jobs: list[JobView]  # in finish order
    by_gpu: list[JobView]  # in GPU order
    first: int = 0  # jobs[:first] are all claimed in this pass
    first_by_gpu: int = 0  # likewise for by_gpu

    def skip_claimed(self, claimed: set[int]) -> None:
        jobs, by_gpu = self.jobs, self.by_gpu
        while self.first < len(jobs) and jobs[self.first].seq in claimed:
            self.first += 1
        while self.first_by_gpu < len(by_gpu) and by_gpu[self.first_by_gpu].seq in claimed:
            self.first_by_gpu += 1


@dataclass(slots=True, frozen=True)
class _Pairing:
    accumulation: int
    xi_a: float
    xi_b: float
    t_a_factor: float  # T_a(k) / T_a(1)


Partners = Callable[[JobView, "_Group", "_Pairing", float, float], Iterator[tuple[float, JobView]]]


def benefit_partners(
    job: JobView, group: _Group, pairing: _Pairing, t_a: float, now: float
) -> Iterator[tuple[float, JobView]]:
    """SJF-BSBF: (t_con, partner) of the group's members that pass the benefit test, best first.
    ``t_a`` is the job's remaining solo time at its full batch."""
    xi_a, xi_b = (
        pairing.xi_a * pairing.t_a_factor,
        pairing.xi_b,
    )  # accumulation slows it while it shares
    # t_con < t_seq holds for T_b <= xi_a T_a / xi_b iff (1 - 1/(2 xi_a)) xi_b < 1, and for
    # larger T_b iff T_b > T_a (2 (1 - 1/(2 xi_b)) xi_a - 1): the passing T_b form at most
    # two intervals, and t_con grows with T_b, so the first passing jobs are the best.
    lower_ok = (1 - 1 / (2 * xi_a)) * xi_b < 1
    above = max(xi_a * t_a / xi_b, t_a * (2 * (1 - 1 / (2 * xi_b)) * xi_a - 1))
    jobs = group.jobs
    start = group.first if lower_ok else max(group.first, bisect_right(group.finish, now + above))
    for idx in range(start, len(jobs)):
        t_b = group.finish[idx] - now
        if not lower_ok and t_b <= above:
            continue
        tc = t_con(t_a, t_b, xi_a, xi_b)
        if tc < t_seq(t_a, t_b):
            yield tc, jobs[idx]


def first_fit_partners(
    job: JobView, group: _Group, pairing: _Pairing, t_a: float, now: float
) -> Iterator[tuple[float, JobView]]:
    """SJF-FFS: every member whose memory fits, in GPU order (no benefit test)."""
    for partner in group.by_gpu[group.first_by_gpu :]:
        yield partner.gpus[0], partner


def sharing_kind(job: JobView) -> tuple:
    spec = job.spec
    return (spec.model, spec.batch_size, spec.num_gpus, spec.gpu_types)


class GpuSharing:
    """The sharing part of a queue policy: where a job that finds no idle GPUs may join running
    jobs, at which sub-batch count. ``partners`` is the partner choice (benefit test or first
    fit)."""

    kind = staticmethod(sharing_kind)

    def __init__(
        self, partners: Partners, placement: str, max_accumulation: int = MAX_ACCUMULATION
    ) -> None:
        if not (isinstance(max_accumulation, int) and max_accumulation >= 1):
            raise ValueError("max_accumulation must be an integer >= 1")
        self.partners = partners
        self.consolidated = placement == "consolidated"
        self.max_accumulation = max_accumulation
        self._gpu_mem: tuple[Cluster, list[int]] | None = None

    def params(self) -> dict:
        return {"max_accumulation": self.max_accumulation}

    def gpu_memory(self, cluster: Cluster) -> list[int]:
        """Each GPU's memory in MiB (the cluster's, computed once)."""
        if self._gpu_mem is None or self._gpu_mem[0] is not cluster:
            nodes = cluster.nodes
            self._gpu_mem = (cluster, [nodes[n].gpu_mem_mib for n in cluster.gpu_node])
        return self._gpu_mem[1]

    def begin(self, view: PolicyView) -> _SharingPass:
        return _SharingPass(self, view)


class _SharingPass:
    """One scheduling pass's sharing state: the candidate groups (built on first need), the
    partners claimed so far, and each kind of job's feasible groups."""

    def __init__(self, part: GpuSharing, view: PolicyView) -> None:
        self.part, self.view, self.now = part, view, view.now
        self.groups: list[_Group] | None = None
        self.claimed: set[int] = set()  # seq of running jobs given a partner in this pass
        self.feasible: dict[tuple, list] = {}  # job signature -> [(group, pairing)]
        # seq -> the GPUs a candidate with a profiling run beside it offers (the others all)
        self.open_gpus: dict[int, tuple[int, ...]] = {}

    def find(self, job: JobView, free: IdleGpus) -> tuple[tuple[int, ...] | None, int]:
        """GPUs for ``job`` (idle ones first, then partners', best first) and its sub-batch
        count; (None, 1) if not enough."""
        if job.spec.gpu_types is not None:
            return None, 1
        # a job whose memory is unknown pairs with nobody (``_pairing`` asks it first) and
        # builds no groups: 139,977 of the 178,397 jobs a Philly replay asks about
        if self.view.workload.memory_mib(job.spec, job.num_gpus, 1) is None:
            return None, 1
        if self.groups is None:
            self.groups = self._groups()
        chosen = self._share(job, free, self.groups)
        if chosen is None:
            return None, 1
        gpus, k, partners = chosen
        self.claimed.update(p.seq for p in partners)
        return gpus, k

    def _groups(self) -> list[_Group]:
        """Running jobs that could take a partner, grouped and sorted by finish time."""
        view = self.view
        finish_of = view.projected_finish
        gpu_mem = self.part.gpu_memory(view.cluster)
        leased = view.occupancy.leased
        cordoned, gpu_node = view.cordoned, view.cluster.gpu_node
        by_key: dict[tuple, list[JobView]] = {}
        for job in view.sharing_candidates.values():
            # (alone on its GPUs, its model and memory known); one scaled in by the quota stage
            # in this pass (the view shows its GPUs given up idle) takes no partner
            gpus = job.gpus
            if job.spec.elastic and view.gpus_of(job) != gpus:
                continue
            if cordoned and any(gpu_node[g] in cordoned for g in gpus):
                continue  # a job on a node out of service takes no partner there
            if leased and not leased.isdisjoint(gpus):
                # a profiling run (seconds) holds the second place on some of its GPUs: the
                # others stay open, as a run may be leased beside a job that has a partner
                gpus = self.open_gpus[job.seq] = tuple(g for g in gpus if g not in leased)
                if not gpus:
                    continue
            capacity = gpu_mem[gpus[0]] if len(gpus) == 1 else min(gpu_mem[g] for g in gpus)
            by_key.setdefault((job.spec.model, job.memory_mib, capacity), []).append(job)
        groups = []
        for (model, memory, capacity), jobs in by_key.items():
            jobs.sort(key=lambda j: (finish_of(j), j.seq))
            groups.append(
                _Group(
                    model,
                    memory,
                    capacity,
                    [finish_of(j) for j in jobs],
                    jobs,
                    sorted(jobs, key=lambda j: j.gpus[0]),
                )
            )
        return groups

    def _pairing(self, job: JobView, group: _Group) -> _Pairing | None:
        """Sub-batch and slowdowns for ``job`` beside a member of ``group``, or None."""
        workload = self.view.workload
        partner = group.jobs[0]
        xi_a, xi_b = workload.slowdown(job, partner), workload.slowdown(partner, job)
        if xi_a is None or xi_b is None:
            return None
        k = 1
        while k <= self.part.max_accumulation:
            memory = workload.memory_mib(job.spec, job.num_gpus, k)
            if memory is None:
                return None
            if memory + group.memory_mib <= group.capacity_mib:
                return _Pairing(k, xi_a, xi_b, workload.accumulation_cost(job.spec, k))
            k *= 2
        return None

    def _share(
        self, job: JobView, free: IdleGpus, groups: list[_Group]
    ) -> tuple[tuple[int, ...], int, list[JobView]] | None:
        t_a1 = job.remaining_s
        signature = (job.spec.model, job.spec.batch_size, job.spec.num_gpus)
        feasible = self.feasible.get(signature)
        if feasible is None:  # the groups this kind of job may join, with how
            feasible = self.feasible[signature] = [
                (g, p) for g in groups if (p := self._pairing(job, g)) is not None
            ]
        offers: list[tuple[float, JobView, _Pairing]] = []
        for group, pairing in feasible:
            offers.extend(self._candidates(job, group, pairing, t_a1))
        if not offers:
            return None
        offers.sort(key=lambda o: (o[0], o[1].seq))
        need = job.num_gpus
        gpus = sorted(g for nid in free.usable for g in free.free[nid])[:need] if free.total else []
        partners: list[JobView] = []
        k = 1
        for _, partner, pairing in offers:
            if len(gpus) >= need:
                break
            gpus.extend(self.open_gpus.get(partner.seq, partner.gpus)[: need - len(gpus)])
            partners.append(partner)
            k = max(k, pairing.accumulation)
        if len(gpus) < need:
            return None
        if self.part.consolidated:
            cluster = self.view.cluster
            if len({cluster.gpu_node[g] for g in gpus}) > cluster.min_nodes_for(need):
                return None
        return tuple(gpus), k, partners

    def _candidates(
        self, job: JobView, group: _Group, pairing: _Pairing, t_a1: float
    ) -> list[tuple[float, JobView, _Pairing]]:
        """This group's partners for ``job``, best first, with their sort keys: unclaimed ones
        until they hold enough GPUs."""
        claimed = self.claimed
        group.skip_claimed(claimed)
        out = []
        need, got = job.spec.num_gpus, 0
        for key, partner in self.part.partners(job, group, pairing, t_a1, self.now):
            if partner.seq in claimed:
                continue
            out.append((key, partner, pairing))
            got += len(self.open_gpus.get(partner.seq, partner.gpus))
            if got >= need:
                break
        return out


class SjfSharing(QueuedPolicy):
    """SJF order with a sharing part; each variant in the catalog names its partner choice."""

    partners: Partners

    def __init__(
        self,
        placement: str = "best-fit",
        scan: str = "strict",
        max_accumulation: int = MAX_ACCUMULATION,
    ) -> None:
        super().__init__(
            shortest_first,
            placement,
            scan,
            GpuSharing(type(self).partners, placement, max_accumulation),
        )


class SjfBsbf(SjfSharing):
    name = "sjf-bsbf"
    description = (
        "SJF order; shares a GPU pair only when the benefit test passes, best benefit first"
    )
    partners = staticmethod(benefit_partners)


class SjfFfs(SjfSharing):
    name = "sjf-ffs"
    description = "SJF order; shares a GPU whenever memory fits (first fit), no benefit test"
    partners = staticmethod(first_fit_partners)


class SjfBsbfConsolidated(SjfSharing):
    name = "sjf-bsbf-consolidated"
    description = "sjf-bsbf, each job on as few nodes as its size allows"
    partners = staticmethod(benefit_partners)

    def __init__(
        self,
        placement: str = "consolidated",
        scan: str = "strict",
        max_accumulation: int = MAX_ACCUMULATION,
    ) -> None:
        super().__init__(placement, scan, max_accumulation)


class SjfFfsConsolidated(SjfSharing):
    name = "sjf-ffs-consolidated"
    description = "sjf-ffs, each job on as few nodes as its size allows"
    partners = staticmethod(first_fit_partners)

    def __init__(
        self,
        placement: str = "consolidated",
        scan: str = "strict",
        max_accumulation: int = MAX_ACCUMULATION,
    ) -> None:
        super().__init__(placement, scan, max_accumulation)
