"""The free-GPU index: per usable node its free GPU ids, nodes bucketed by free count, so that
a best-fit lookup costs O(GPUs per node) instead of a scan of the cluster. Bucket 0 stays empty:
no lookup wants a node without a free GPU, and on a busy cluster it would be the bucket of
nearly every node, copied by every planning pass that fills or frees one. The cluster state
keeps the live one; policies read it and place against a ``copy()`` when they plan several
starts.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from ..cluster import Cluster


class FreeGpus:
    """Copies are copy-on-write: a copy shares every node's free list, every bucket and the set
    of usable nodes with its original until either side changes one, so a scheduling pass that
    plans against a copy costs what it touches, not the size of the cluster."""

    __slots__ = (
        "cluster",
        "free",
        "buckets",
        "total",
        "usable",
        "_shared",
        "_own_free",
        "_own_buckets",
        "_own_usable",
    )

    def __init__(self, cluster: Cluster, usable_nodes: Iterable[int] | None = None) -> None:
        self.cluster = cluster
        max_gpus = max(n.num_gpus for n in cluster.nodes)
        self.free: list[list[int]] = [[] for _ in cluster.nodes]
        self.buckets: list[set[int]] = [set() for _ in range(max_gpus + 1)]
        self.usable: set[int] = set()
        self.total = 0
        self._shared = False  # inner lists and sets may be another index's too
        self._own_free: set[int] = set()  # while shared: the nodes whose lists are ours
        self._own_buckets: set[int] = set()
        self._own_usable = True  # False while the usable set may be another index's
        nodes = (
            (n.node_id for n in cluster.nodes if n.pool == "training")
            if usable_nodes is None
            else usable_nodes
        )
        for nid in nodes:
            self.add_node(nid)

    def copy(self) -> FreeGpus:
        other = FreeGpus.__new__(FreeGpus)
        other.cluster = self.cluster
        other.free = self.free[:]
        other.buckets = self.buckets[:]
        other.usable = self.usable
        other.total = self.total
        for index in (self, other):
            index._shared, index._own_free, index._own_buckets = True, set(), set()
            index._own_usable = False
        return other

    def _node_list(self, nid: int) -> list[int]:
        """The node's free list, ours to change."""
        if self._shared and nid not in self._own_free:
            self.free[nid] = self.free[nid][:]
            self._own_free.add(nid)
        return self.free[nid]

    def _bucket(self, count: int) -> set[int]:
        """The bucket of nodes with ``count`` free GPUs, ours to change."""
        if self._shared and count not in self._own_buckets:
            self.buckets[count] = self.buckets[count].copy()
            self._own_buckets.add(count)
        return self.buckets[count]

    def _usable_set(self) -> set[int]:
        """The usable nodes, ours to change."""
        if not self._own_usable:
            self.usable = self.usable.copy()
            self._own_usable = True
        return self.usable

    # -- node membership (pools, failures, loans) ------------------------------------------
    def add_node(self, nid: int, busy: Collection[int] = ()) -> None:
        """Make a node usable, its GPUs but those ``busy`` free."""
        if nid in self.usable:
            raise ValueError(f"node {nid} is already usable")
        self._usable_set().add(nid)
        self.free[nid] = [g for g in self.cluster.nodes[nid].gpu_ids if g not in busy]
        self._own_free.add(nid)
        if self.free[nid]:
            self._bucket(len(self.free[nid])).add(nid)
        self.total += len(self.free[nid])

    def remove_node(self, nid: int) -> None:
        """Stop using a node; its busy GPUs must have been released first."""
        if len(self.free[nid]) != self.cluster.nodes[nid].num_gpus:
            raise ValueError(f"node {nid} still has GPUs in use")
        self.retire_node(nid)

    def retire_node(self, nid: int) -> None:
        """Stop offering a node whose GPUs may still be in use (a reclaimed loan): its free
        GPUs leave the index now, and GPUs its jobs release later are not given back."""
        if self.free[nid]:
            self._bucket(len(self.free[nid])).discard(nid)
        self.total -= len(self.free[nid])
        self.free[nid] = []
        self._own_free.add(nid)
        self._usable_set().discard(nid)

    # -- taking and releasing --------------------------------------------------------------
    def take(self, gpus: Iterable[int]) -> None:
        gpu_node, free, usable = self.cluster.gpu_node, self.free, self.usable
        taken = 0
        for g in gpus:
            nid = gpu_node[g]
            if nid not in usable or g not in free[nid]:
                self.total -= taken
                raise ValueError(f"GPU {g} is not free")
            f = self._node_list(nid)
            n = len(f)
            f.remove(g)
            self._bucket(n).discard(nid)
            if n > 1:
                self._bucket(n - 1).add(nid)
            taken += 1
        self.total -= taken

    def take_back(self, gpus: Iterable[int]) -> None:
        """Take again GPUs a trial gave back (``release``): those of a node not in use (cordoned,
        being reclaimed) were not given back, and are not taken."""
        usable, gpu_node = self.usable, self.cluster.gpu_node
        self.take([g for g in gpus if gpu_node[g] in usable])

    def release(self, gpus: Iterable[int]) -> None:
        gpu_node, usable = self.cluster.gpu_node, self.usable
        for g in gpus:
            nid = gpu_node[g]
            if nid not in usable:
                continue  # the node left while the job ran; nothing to give back
            if g in self.free[nid]:
                raise ValueError(f"GPU {g} is already free")
            f = self._node_list(nid)
            n = len(f)
            f.append(g)
            if n:
                self._bucket(n).discard(nid)
            self._bucket(n + 1).add(nid)
            self.total += 1

    def usable_gpus(self) -> int:
        """GPUs of the usable nodes, busy or free."""
        nodes = self.cluster.nodes
        return sum(nodes[n].num_gpus for n in self.usable)

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
