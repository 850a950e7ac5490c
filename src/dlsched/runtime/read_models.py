"""What the server's API and dashboard show, read from the service's state under its lock (the
scheduling loop never calls these): the cluster snapshot, each tenant's standing under its
quota, and the history export a what-if replay reads. The inference pool's view is
:meth:`.loaning.ServerLoaning.pools`."""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..admission import TenantUsage
from ..jobs import JobState
from .export import export_history

# ``service`` below is the SchedulerService that uses this module (not imported: it imports us)
SchedulerService = Any


def snapshot(service: SchedulerService, tenant: str | None = None) -> dict:
    """The cluster as the admin (``tenant`` None) or a tenant may see it: a tenant sees its
    own job ids; other tenants' jobs only as busy GPUs and counts."""

    def shown(job: JobState) -> bool:
        return tenant is None or job.spec.tenant == tenant

    state = service.state
    nodes = []
    by_gpu: dict[int, list[JobState]] = {}
    for job in state.running.values():
        for g in job.gpus:
            by_gpu.setdefault(g, []).append(job)
    profiling_on = {g: jid for jid, gpus in state.leases.items() for g in gpus}
    for node in service.cluster.nodes:
        holders, detail = {}, {}
        for g in node.gpu_ids:
            entries = [
                (j.job_id, j.spec.tenant, False) for j in by_gpu.get(g, [])
            ]  # (job, tenant, profiling?)
            if g in profiling_on:
                owner = profiling_on[g]
                entries.append((owner, service.to_profile.running.get(owner), True))
            if entries:
                seen = [
                    (jid if tenant is None or t == tenant else "(another tenant)", t, p)
                    for jid, t, p in entries
                ]
                holders[g - node.first_gpu] = " + ".join(
                    f"{jid} (profiling)" if p else jid for jid, _, p in seen
                )
                detail[g - node.first_gpu] = [
                    {
                        "job": jid,
                        "tenant": t if tenant is None or t == tenant else None,
                        **({"profiling": True} if p else {}),
                    }
                    for jid, t, p in seen
                ]
        loans = state.loans
        lent = (
            "loaned"
            if node.node_id in loans.loaned
            else "reclaiming"
            if node.node_id in loans.reclaiming
            else "returning"
            if node.node_id in service.loaning.returning
            else "held"
        )
        nodes.append(
            {
                "name": service.node_names[node.node_id],
                "gpus": node.num_gpus,
                "alive": node.node_id not in state.down_nodes,
                "in_service": node.node_id not in state.cordoned,
                "jobs_by_gpu": holders,
                "holders": detail,
                "pool": node.pool,
                **({"loan": lent} if node.pool == "inference" else {}),
            }
        )
    # the GPUs no job holds that cannot take one: serving inference, or on a node down or out
    # of service (counting them as in use, as the total less the free ones did, misled)
    idle_by_reason: Counter = Counter()
    for node, shown_node in zip(service.cluster.nodes, nodes):
        idle = node.num_gpus - len(shown_node["jobs_by_gpu"])
        if not shown_node["alive"] or not shown_node["in_service"]:
            idle_by_reason["out_of_service"] += idle
        elif shown_node.get("loan") in ("held", "returning"):
            idle_by_reason["inference"] += idle
    queue = sorted(state.pending.values(), key=lambda j: j.seq)
    by_tenant: dict[str, int] = Counter(j.spec.tenant for j in queue)
    if tenant is not None:
        by_tenant = {
            "yours": by_tenant.get(tenant, 0),
            "others": len(queue) - by_tenant.get(tenant, 0),
        }
    over = {
        t: {"nominal": u.quota.nominal, "reserved": u.used}
        for t, u in service.admission.usage_by_tenant(state).items()
        if u.borrowed and (tenant is None or t == tenant)
    }
    return {
        "policy": service.policy.name,
        "gpus_total": service.cluster.num_gpus,
        "over_quota": over,
        "gpus_free": state.free.total,
        "gpus_in_use": sum(len(n["jobs_by_gpu"]) for n in nodes),  # by jobs and profiling runs
        "gpus_serving_inference": idle_by_reason["inference"],
        "gpus_out_of_service": idle_by_reason["out_of_service"],  # (or on a node down)
        "nodes": nodes,
        "running": [j.job_id for j in state.running.values() if shown(j)],
        "queue": [j.job_id for j in queue if shown(j)],
        "queue_by_tenant": dict(by_tenant),
        "last_pass_ms": None if service.pass_s is None else service.pass_s * 1000,
    }


def quota_standing(service: SchedulerService, tenant: str | None = None) -> dict:
    """Per tenant (the admin: all that have a quota or jobs; a tenant: itself): its quota,
    the GPUs its admitted jobs reserve and hold, what it borrows, its waiting jobs by reason,
    whether it was removed."""
    admission, state = service.admission, service.state
    usage = admission.usage_by_tenant(state)
    unprofiled = service.unprofiled_waiting_for_quota()  # (not in the state until profiled)
    for t in unprofiled.keys() - usage.keys():
        usage[t] = TenantUsage(admission.config.quota(t), 0, 0, 0)
    if tenant is not None:
        quota = admission.config.quota(tenant)
        usage = {tenant: usage.get(tenant) or TenantUsage(quota, 0, 0, 0)}
    waiting_all: Counter = Counter(j.spec.tenant for j in state.pending.values())
    # a removed tenant's quota from a file or the API stays, lent to its cohort: say whose
    removed = {t["name"] for t in service.store.tenants(removed=True)}
    out = {}
    for t, u in sorted(usage.items()):
        q = u.quota
        out[t] = {
            "nominal": None if q.nominal >= service.UNLIMITED else q.nominal,
            "borrowing_limit": q.borrowing_limit,
            "lending_limit": q.lending_limit,
            "cohort": q.cohort,
            "weight": q.weight,
            "reserved": u.used,
            "gpus_held": u.held,
            "borrowed": u.borrowed,
            "waiting_for_quota": u.waiting_for_quota + unprofiled[t],
            "waiting_for_gpus": waiting_all.get(t, 0) - u.waiting_for_quota,
            "removed": t in removed,
        }
    return {"source": admission.config.source, "tenants": out}


def export(
    service: SchedulerService, since: float, until: float, tenant: str | None = None
) -> dict:
    """Finished and running jobs as a trace the simulator replays (:mod:`.export`)."""
    history = export_history(
        service.store,
        service.cluster.spec(),
        service.policy.name,
        service.policy_params,
        since,
        until,
        tenant,
        service.node_names,
    )
    config = service.admission.config
    # the quotas in force now (a replay applies them); other tenants' only to the admin
    quotas = config.as_dict() if config.source != "none" and tenant is None else None
    return {
        **history,
        "quotas": config.source,
        "quota_config": quotas,
        "interval_s": service.interval_s,
    }
