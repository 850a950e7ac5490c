"""What must hold of a cluster state between transitions; the tests check it after every step
of random workloads, in the simulator and in the runtime's service."""

from __future__ import annotations

import math

from ..jobs import PENDING, RUNNING
from ..workload_model import one_more_gpu_helps
from .cluster_state import ClusterState, may_take_partner
from .queues import PendingQueue


def problems(state: ClusterState) -> list[str]:
    """Every broken invariant, in words (empty when the state is consistent)."""
    out: list[str] = []
    cluster, free, occupancy = state.cluster, state.free, state.occupancy
    for jid, job in (*state.pending.items(), *state.running.items()):
        if job.num_gpus != job.spec.num_gpus:
            out.append(f"job {jid} counts {job.num_gpus} GPUs asked, its spec {job.spec.num_gpus}")
    for jid, job in state.pending.items():
        if job.status is not PENDING or job.gpus:
            out.append(f"pending job {jid} is {job.status.value} on GPUs {job.gpus}")
        if jid in state.running:
            out.append(f"job {jid} is both pending and running")
    holders_seen: dict[int, list[str]] = {}
    for jid, job in state.running.items():
        if job.status is not RUNNING:
            out.append(f"running job {jid} is {job.status.value}")
        low, high = job.spec.start_range(state.policy.moldable)
        if not low <= len(set(job.gpus)) == len(job.gpus) <= high:
            out.append(f"job {jid} holds {job.gpus}, outside its gang of {low}..{high}")
        for g in job.gpus:
            holders_seen.setdefault(g, []).append(jid)
            if free.is_free(g):
                out.append(f"GPU {g} of running job {jid} is in the free index")
            nid = cluster.gpu_node[g]
            if nid in state.down_nodes:
                out.append(f"job {jid} runs on GPU {g} of a down node")
            elif (
                nid not in free.usable
                and nid not in state.loans.reclaiming
                and nid not in state.cordoned
            ):
                out.append(f"job {jid} runs on GPU {g} of node {nid}, which training may not use")
        if job.leaving and (job.switch_at is None or not set(job.leaving).isdisjoint(job.gpus)):
            out.append(f"job {jid} leaves GPUs {job.leaving} with no move under way to {job.gpus}")
        for g in job.leaving:
            holders_seen.setdefault(g, []).append(jid)
            if free.is_free(g):
                out.append(f"GPU {g} that job {jid}'s old workers hold is in the free index")
    leaving = [g for job in state.running.values() for g in job.leaving]
    if len(set(leaving)) != len(leaving) or set(leaving) != occupancy.moving_from:
        out.append(f"GPUs left by moves {sorted(leaving)}: occupancy {occupancy.moving_from}")
    for g, holders in enumerate(occupancy.jobs):
        ids = sorted(h.job_id for h in holders)
        if ids != sorted(holders_seen.get(g, [])):
            out.append(
                f"GPU {g}: occupancy says {ids}, running jobs say {sorted(holders_seen.get(g, []))}"
            )
        if len(holders) > occupancy.max_jobs_per_gpu:
            out.append(f"GPU {g} holds {len(holders)} jobs")
        if len(holders) > 1:
            capacity = cluster.nodes[cluster.gpu_node[g]].gpu_mem_mib
            memory = [h.memory_mib for h in holders]
            if None in memory or sum(m or 0.0 for m in memory) > capacity + 1e-6:
                out.append(f"GPU {g}: memory {memory} over its {capacity} MiB")
            for h in holders:
                if not h.sharing:
                    out.append(f"job {h.job_id} shares GPU {g} but is not marked sharing")
        elif holders and holders[0].sharing and not occupancy.partners(holders[0]):
            out.append(f"job {holders[0].job_id} is marked sharing without a partner")
    loans = state.loans
    for nid in free.usable:
        if cluster.nodes[nid].pool != "training" and nid not in loans.loaned:
            out.append(f"inference node {nid} is usable but not loaned")
    if set(loans.loaned) & set(loans.reclaiming):
        out.append("a server is both loaned and being reclaimed")
    for nid in state.cordoned & free.usable:
        out.append(f"node {nid} is cordoned but in the free index")
    leased = [g for gpus in state.leases.values() for g in gpus]
    for g in leased:
        nid = cluster.gpu_node[g]
        if (
            free.is_free(g)
            or len(occupancy.jobs[g]) > 1
            or (nid not in free.usable and nid not in state.cordoned)
        ):
            out.append(f"leased GPU {g} is free, shared or on a node not in use")
    if len(set(leased)) != len(leased) or set(leased) != occupancy.leased:
        out.append(f"leases {sorted(leased)} against occupancy's {sorted(occupancy.leased)}")
    usable = free.usable_gpus()
    busy = sum(
        1
        for g, h in enumerate(occupancy.jobs)
        if (h or g in occupancy.leased) and cluster.gpu_node[g] in free.usable
    )
    if free.total + busy != usable:
        out.append(f"free {free.total} + busy {busy} != usable {usable}")
    for count, bucket in enumerate(free.buckets):
        wrong = sorted(n for n in bucket if n not in free.usable or len(free.free[n]) != count)
        if wrong or (count == 0 and bucket):
            out.append(f"free-count bucket {count} lists nodes {sorted(bucket)}")
    if sum(len(b) for b in free.buckets) != sum(1 for n in free.usable if free.free[n]):
        out.append("a usable node with free GPUs is missing from the buckets")
    if occupancy.shared_gpus != sum(1 for h in occupancy.jobs if len(h) > 1):
        out.append("the shared-GPU count is off")
    elastic = [j for j in state.running.values() if j.spec.elastic]
    if sorted(state.running_elastic) != sorted(j.job_id for j in elastic):
        out.append(f"running elastic jobs {sorted(state.running_elastic)} are not the running ones")
    extra = sum(len(j.gpus) - j.base_gpus for j in elastic)
    if state.elastic_extra_gpus != extra:
        out.append(f"elastic jobs hold {extra} GPUs above base, not {state.elastic_extra_gpus}")
    grown = sum(max(0, len(j.gpus) - j.num_gpus) for j in elastic)
    if state.elastic_grown_gpus != grown:
        out.append(f"elastic jobs hold {grown} GPUs above request, not {state.elastic_grown_gpus}")
    above = sorted(j.job_id for j in elastic if len(j.gpus) > j.base_gpus)
    if sorted(state.elastic_above_base) != above:
        out.append(f"elastic jobs above base {sorted(state.elastic_above_base)}, not {above}")
    growable = sorted(
        j.job_id for j in elastic if one_more_gpu_helps(state.workload, j.spec, len(j.gpus))
    )
    if sorted(state.elastic_growable) != growable:
        out.append(f"growable elastic jobs {sorted(state.elastic_growable)}, not {growable}")
    if state._candidates is not None:
        candidates = sorted(j.job_id for j in state.running.values() if may_take_partner(j))
        if sorted(state._candidates) != candidates:
            out.append(f"sharing candidates {sorted(state._candidates)}, not {candidates}")
    running = set(state.running)
    for order in state._running_orders.values():
        listed = [j.job_id for j in order]
        if set(listed) != running or len(listed) != len(running):
            out.append(f"a running order lists {sorted(listed)}, not the running jobs")
        elif listed != [j.job_id for j in sorted(order, key=lambda j: (order.key(j), j.seq))]:
            out.append("a running order is not in its key's order")
        asked: dict = {}
        for held in order:
            head = order.key(held)[0]
            asked[head] = asked.get(head, 0) + held.num_gpus
        if asked != order.head_gpus:
            out.append(f"a running order counts {order.head_gpus} GPUs per head, not {asked}")
    for orders, admitted in ((state._queues, True), (state._held_back, False)):
        waiting = {j for j, job in state.pending.items() if job.admitted is admitted}
        for queue in orders.values():
            out += _queue_problems(queue, waiting)
    for drift in state._running_drifts.values():
        if len(drift) != len(running) or any(jid not in drift for jid in running):
            out.append("a drifting index does not hold exactly the running jobs")
    if state.admission is not None:
        out += _admission_problems(state)
    return out


def _queue_problems(queue: PendingQueue, waiting: set[str]) -> list[str]:
    """A pending queue against the jobs it must list: all of them, in order, with exact sums."""
    listed = [j.job_id for j in queue]
    if sorted(listed) != sorted(waiting):
        return [f"a pending queue lists {sorted(listed)}, not the waiting jobs {sorted(waiting)}"]
    if listed != [j.job_id for j in sorted(queue, key=lambda j: (queue.key(j), j.seq))]:
        return ["a pending queue is not in its key's order"]
    out = []
    if queue.bucket is not None and queue.totals is not None:
        for b, entries in queue.buckets.items():
            values = list(zip(*(queue.totals(e[2]) for e in entries)))
            if queue.bucket_totals(b) != tuple(math.fsum(v) for v in values):
                out.append(f"bucket {b!r} sums {queue.bucket_totals(b)}, not its jobs' {values}")
    return out


def _admission_problems(state: ClusterState) -> list[str]:
    """The admission stage's books against the live jobs they describe."""
    out = []
    books = state.admissions
    live = [*state.pending.values(), *state.running.values()]
    admitted: dict[str, set[str]] = {}
    priorities: dict[str, dict[int, int]] = {}
    waiting: dict[str, int] = {}
    for job in live:
        if not job.admitted:
            continue
        t, p = job.spec.tenant, job.spec.priority
        admitted.setdefault(t, set()).add(job.job_id)
        priorities.setdefault(t, {})[p] = priorities.get(t, {}).get(p, 0) + 1
        if job.status is PENDING:
            waiting[t] = waiting.get(t, 0) + job.base_gpus
    kept = {t: set(jobs) for t, jobs in books.by_tenant.items() if jobs}
    if kept != admitted:
        out.append(f"admitted jobs by tenant {kept}, not {admitted}")
    counts = {t: dict(c) for t, c in books.priorities.items() if c}
    if counts != priorities:
        out.append(f"admitted jobs by priority class {counts}, not {priorities}")
    lowest = {t: min(c) for t, c in priorities.items()}
    if books.lowest != lowest:
        out.append(f"lowest admitted class by tenant {books.lowest}, not {lowest}")
    if state.admission is not None:  # (the state tells the books only with a stage)
        counted = {t: n for t, n in state.tenant_gpus.items() if n}
        for t, n in waiting.items():
            counted[t] = counted.get(t, 0) + n
        if books.counted != counted:
            out.append(f"tenants count {books.counted} GPUs, not {counted}")
    stray = state._dismissed - {j.job_id for j in state.pending.values() if not j.admitted}
    if stray:
        out.append(f"jobs the stage took back {sorted(stray)} do not wait to be admitted")
    return out
