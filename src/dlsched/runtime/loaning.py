"""The server's side of capacity loaning (Aryl): inference servers lent to training and
reclaimed, as the executor and the store must see it.

The cluster state decides (which servers are lent, which reclaimed, which jobs leave them and
when a server is empty again); this module carries that out: it stops and starts the inference
stand-ins on the servers, requeues the jobs whose notice ran out, and keeps each server handed
back as *returning* until its stand-in runs there (the proof that no training worker is left).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from ..jobs import Status

# ``service`` below is the SchedulerService that uses this module (not imported: it imports us)
SchedulerService = Any

log = logging.getLogger("dlsched.service")


class ServerLoaning:
    def __init__(self, service: SchedulerService) -> None:
        self.service = service
        # servers the state handed back, until their stand-in runs (node -> (asked, deadline))
        self.returning: dict[int, tuple[float, float]] = {}
        self.returned_after_s: list[float] = []
        for nid in service.state.loans.inference_nodes:  # inference holds its servers at start
            service.executor.serve_inference(service.node_names[nid])

    def set_demand(self, servers: int) -> None:
        """The inference side needs ``servers`` of its servers within the notice: idle ones are
        lent to training (their stand-ins stop), or loaned ones are reclaimed as the policy
        chooses (its jobs scale in or are preempted now)."""
        service = self.service
        state, names = service.state, service.node_names
        before = set(state.loans.loaned)
        applied = state.set_inference_demand(servers)
        for nid in set(state.loans.loaned) - before:
            service.executor.release_inference(names[nid])
            log.info("inference server %s lent to training", names[nid])
        service._act(applied, reason="its inference server was reclaimed")

    def handed_back(self, returned: Iterable[tuple[int, float, float]]) -> None:
        """Servers the state has no job on any more: start the inference stand-in there, which
        runs once the last training worker has left."""
        for nid, asked, deadline in returned:
            self.service.executor.serve_inference(self.service.node_names[nid])
            self.returning[nid] = (asked, deadline)

    def check_deadlines(self) -> None:
        """Notices that ran out: preempt the jobs the state still places there and kill runs
        still on servers handed back; count servers whose stand-in runs."""
        service = self.service
        for job in service.state.enforce_reclaims():
            service._requeued(
                job,
                "preempted: its inference server was reclaimed and the notice ran out",
                preemptions=job.preemptions,
            )
        now = service.clock()
        for nid, (asked, deadline) in list(self.returning.items()):
            name = service.node_names[nid]
            if service.executor.inference_ready(name):
                del self.returning[nid]
                self.returned_after_s.append(now - asked)
                service.metrics.servers_returned.inc()
                log.info(
                    "inference server %s handed back %.1f s after it was reclaimed",
                    name,
                    now - asked,
                )
            elif now > deadline:
                for jid in service.executor.evict(name):
                    # a worker that did not leave in time (a stop or scale-in still under way):
                    # the whole run is killed, and the job resumes from its last checkpoint
                    live = service.live.get(jid)
                    if live is not None and live.state.status is Status.RUNNING:
                        service.state.fail(live.state)
                        service._requeued(
                            live.state,
                            f"killed: a worker was still on {name} at the end of the "
                            "reclaim notice; resumes from its last checkpoint",
                            stop=False,  # the executor evicted it
                            failures=live.state.failures,
                        )

    def pools(self) -> dict:
        """The inference pool: its servers by state, the announced demand and the counts."""
        loans = self.service.state.loans
        names = self.service.node_names
        stats = loans.stats
        return {
            "inference_servers": [names[n] for n in loans.inference_nodes],
            "demand": loans.announced,
            "held": loans.held,
            "loaned": sorted(names[n] for n in loans.loaned),
            "reclaiming": sorted(names[n] for n in loans.reclaiming),
            "returning": sorted(names[n] for n in self.returning),
            "notice_s": loans.notice_s,
            "loans": stats.loans,
            "reclaims": stats.reclaims,
            "returned": len(self.returned_after_s),
            "reclaim_scale_ins": stats.reclaim_scale_ins,
            "reclaim_preemptions": stats.reclaim_preemptions + stats.forced_preemptions,
            "forced_preemptions": stats.forced_preemptions,
            "max_return_s": max(self.returned_after_s, default=None),
        }
