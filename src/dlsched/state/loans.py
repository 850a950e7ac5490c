"""Capacity loaning (Aryl): which inference servers are loaned to training, which are being
reclaimed and by when, and the counts a report needs. The cluster state owns one and makes
every change; policies read it.

An inference server is, at any time, held by inference, loaned (training may use it), or
reclaiming (training must leave it by its deadline; nothing new is placed there). Servers are
loaned whole, highest node id first, so the inference side keeps a stable low-numbered core.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..cluster import Cluster
from ..jobs import check_time


@dataclass(slots=True)
class LoanStats:
    loans: int = 0  # servers loaned to training
    reclaims: int = 0  # servers asked back
    returned: int = 0  # servers handed back
    returned_late: int = 0  # handed back after their deadline (must stay 0)
    reclaim_scale_ins: int = 0  # elastic jobs shrunk off a reclaimed server (no preemption)
    reclaim_preemptions: int = 0  # jobs the policy preempted to free a reclaimed server
    forced_preemptions: int = 0  # jobs still there at the deadline, preempted by the state
    return_wait_s: float = 0.0  # summed time from a reclaim to its server's return


@dataclass(slots=True)
class LoanBook:
    inference_nodes: tuple[int, ...]
    notice_s: float
    loaned: dict[int, float] = field(default_factory=dict)  # node -> when loaned
    reclaiming: dict[int, tuple[float, float]] = field(
        default_factory=dict
    )  # node -> (asked, deadline)
    # servers inference said it needs: all it holds at the start, until it says otherwise
    announced: int = 0
    stats: LoanStats = field(default_factory=LoanStats)

    @classmethod
    def for_cluster(cls, cluster: Cluster, notice_s: float) -> LoanBook:
        check_time("reclaim_notice_s", notice_s)
        servers = tuple(n.node_id for n in cluster.nodes if n.pool == "inference")
        return cls(servers, float(notice_s), announced=len(servers))

    @property
    def held(self) -> int:
        """Servers the inference side has now."""
        return len(self.inference_nodes) - len(self.loaned) - len(self.reclaiming)

    def lendable(self, count: int, down: set[int]) -> list[int]:
        """Up to ``count`` servers inference holds and could lend, highest id first."""
        out: list[int] = []
        for nid in reversed(self.inference_nodes):
            if len(out) == count:
                break
            if nid not in self.loaned and nid not in self.reclaiming and nid not in down:
                out.append(nid)
        return out

    def next_deadline(self) -> float | None:
        return min(d for _, d in self.reclaiming.values()) if self.reclaiming else None
