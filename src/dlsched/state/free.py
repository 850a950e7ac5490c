"""The free-GPU index: per usable node its free GPU ids, nodes bucketed by free count, so that
a best-fit lookup costs O(GPUs per node) instead of a scan of the cluster. The cluster state
keeps the live one; policies read it and place against a ``copy()`` when they plan several
starts.
"""

from __future__ import annotations

from typing import Iterable

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
