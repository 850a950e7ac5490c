"""Free-GPU index and placement strategies, shared by every policy.

``FreeGpus`` keeps, per usable node, its free GPU ids and buckets nodes by free count, so that
a best-fit lookup costs O(GPUs per node) instead of a scan of the cluster. Policies get the
backend's index read-only and place against a ``copy()`` when they plan several starts.
"""

from __future__ import annotations

from typing import Callable, Iterable

from ..cluster import Cluster


class FreeGpus:
    __slots__ = ("cluster", "free", "buckets", "total", "usable")

    def __init__(self, cluster: Cluster, usable_nodes: Iterable[int] | None = None) -> None:
        self.cluster = cluster
        max_gpus = max(n.num_gpus for n in cluster.nodes)
        self.free: list[list[int]] = [[] for _ in cluster.nodes]
        self.buckets: list[set[int]] = [set() for _ in range(max_gpus + 1)]
        self.usable: set[int] = set()
        self.total = 0
        nodes = (n.node_id for n in cluster.nodes if n.pool == "training") \
            if usable_nodes is None else usable_nodes
        for nid in nodes:
            self.add_node(nid)

    def copy(self) -> "FreeGpus":
        other = FreeGpus.__new__(FreeGpus)
        other.cluster = self.cluster
        other.free = [f[:] for f in self.free]
        other.buckets = [b.copy() for b in self.buckets]
        other.usable = self.usable.copy()
        other.total = self.total
        return other

    # -- node membership (pools, failures, loans) ------------------------------------------
    def add_node(self, nid: int) -> None:
        """Make a whole idle node usable."""
        if nid in self.usable:
            raise ValueError(f"node {nid} is already usable")
        self.usable.add(nid)
        self.free[nid] = list(self.cluster.nodes[nid].gpu_ids)
        self.buckets[len(self.free[nid])].add(nid)
        self.total += len(self.free[nid])

    def remove_node(self, nid: int) -> None:
        """Stop using a node; its busy GPUs must have been released first."""
        if len(self.free[nid]) != self.cluster.nodes[nid].num_gpus:
            raise ValueError(f"node {nid} still has GPUs in use")
        self.buckets[len(self.free[nid])].discard(nid)
        self.total -= len(self.free[nid])
        self.free[nid] = []
        self.usable.discard(nid)

    # -- taking and releasing --------------------------------------------------------------
    def take(self, gpus: Iterable[int]) -> None:
        gpu_node, free, buckets, usable = self.cluster.gpu_node, self.free, self.buckets, self.usable
        taken = 0
        for g in gpus:
            nid = gpu_node[g]
            f = free[nid]
            if nid not in usable or g not in f:
                self.total -= taken
                raise ValueError(f"GPU {g} is not free")
            n = len(f)
            f.remove(g)
            buckets[n].discard(nid)
            buckets[n - 1].add(nid)
            taken += 1
        self.total -= taken

    def release(self, gpus: Iterable[int]) -> None:
        gpu_node, free, buckets, usable = self.cluster.gpu_node, self.free, self.buckets, self.usable
        for g in gpus:
            nid = gpu_node[g]
            if nid not in usable:
                continue  # the node left while the job ran; nothing to give back
            f = free[nid]
            if g in f:
                raise ValueError(f"GPU {g} is already free")
            n = len(f)
            f.append(g)
            buckets[n].discard(nid)
            buckets[n + 1].add(nid)
            self.total += 1

    def is_free(self, g: int) -> bool:
        return g in self.free[self.cluster.gpu_node[g]]

    def free_on(self, nid: int) -> int:
        return len(self.free[nid])

    def nodes_with_at_least(self, need: int, types: tuple[str, ...] | None = None) -> list[int]:
        """Usable nodes with >= need free GPUs (of an allowed type), fewest free first."""
        out: list[int] = []
        nodes = self.cluster.nodes
        for c in range(need, len(self.buckets)):
            bucket = self.buckets[c]
            if bucket:
                out.extend(sorted(n for n in bucket if types is None or nodes[n].gpu_type in types))
        return out


def _lowest(free: list[int], k: int) -> list[int]:
    return sorted(free)[:k]


def best_fit(free: FreeGpus, need: int, types: tuple[str, ...] | None = None) -> tuple[int, ...] | None:
    """One node if any has room (the one with the fewest free GPUs that fits, so large holes
    stay whole); otherwise the fewest nodes, taking the emptiest first."""
    if need > free.total:
        return None
    nodes = free.cluster.nodes
    for c in range(need, len(free.buckets)):
        bucket = free.buckets[c]
        if bucket:
            if types is None:
                return tuple(_lowest(free.free[min(bucket)], need))
            ok = [n for n in bucket if nodes[n].gpu_type in types]
            if ok:
                return tuple(_lowest(free.free[min(ok)], need))
    return _fill_from_emptiest(free, need, types)


def consolidated(free: FreeGpus, need: int, types: tuple[str, ...] | None = None) -> tuple[int, ...] | None:
    """As few nodes as the job's size allows, or nothing: a job that fits on one node gets one
    node; a larger one gets ceil(need / node size) nodes."""
    if need > free.total:
        return None
    largest = len(free.buckets) - 1  # the largest node's GPU count
    if need <= largest:
        for c in range(need, len(free.buckets)):
            bucket = free.buckets[c]
            ok = [n for n in bucket if types is None or free.cluster.nodes[n].gpu_type in types]
            if ok:
                return tuple(_lowest(free.free[min(ok)], need))
        return None
    gpus = _fill_from_emptiest(free, need, types)
    if gpus is None:
        return None
    used_nodes = len({free.cluster.gpu_node[g] for g in gpus})
    return gpus if used_nodes <= free.cluster.min_nodes_for(need) else None


def spread(free: FreeGpus, need: int, types: tuple[str, ...] | None = None) -> tuple[int, ...] | None:
    """One GPU per node round-robin, emptiest nodes first (for jobs that want bandwidth per
    GPU, or to study what consolidation buys)."""
    if need > free.total:
        return None
    nodes = free.nodes_with_at_least(1, types)[::-1]
    if sum(free.free_on(n) for n in nodes) < need:
        return None
    taken: list[int] = []
    avail = {n: sorted(free.free[n]) for n in nodes}
    while len(taken) < need:
        for n in nodes:
            if avail[n] and len(taken) < need:
                taken.append(avail[n].pop(0))
    return tuple(taken)


def _fill_from_emptiest(free: FreeGpus, need: int, types: tuple[str, ...] | None) -> tuple[int, ...] | None:
    taken: list[int] = []
    nodes = free.cluster.nodes
    for c in range(len(free.buckets) - 1, 0, -1):
        for nid in sorted(free.buckets[c]):
            if types is not None and nodes[nid].gpu_type not in types:
                continue
            taken.extend(_lowest(free.free[nid], need - len(taken)))
            if len(taken) == need:
                return tuple(taken)
    return None


Placement = Callable[[FreeGpus, int, "tuple[str, ...] | None"], "tuple[int, ...] | None"]

PLACEMENTS: dict[str, Placement] = {
    "best-fit": best_fit,
    "consolidated": consolidated,
    "spread": spread,
}
