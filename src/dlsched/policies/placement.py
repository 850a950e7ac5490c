"""Placement strategies, shared by every policy: plain functions over the free-GPU index
(read through :class:`~dlsched.view.IdleGpus`) that return the GPUs to use, or None."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..cluster import Node
from ..view import IdleGpus


def _lowest(free: Sequence[int], k: int) -> list[int]:
    return sorted(free)[:k]


def best_fit(
    free: IdleGpus,
    need: int,
    types: tuple[str, ...] | None = None,
    allowed: Callable[[int], bool] | None = None,
) -> tuple[int, ...] | None:
    """One node if any has room (the one with the fewest free GPUs that fits, so large holes
    stay whole); otherwise the fewest nodes, taking the emptiest first. Only nodes of ``types``
    and, when given, those ``allowed(node)`` accepts."""
    if need > free.total:
        return None
    nodes = free.cluster.nodes
    for c in range(need, len(free.buckets)):
        bucket = free.buckets[c]
        if bucket:
            if types is None and allowed is None:
                return tuple(_lowest(free.free[min(bucket)], need))
            ok = [n for n in bucket if _eligible(nodes[n], types, allowed)]
            if ok:
                return tuple(_lowest(free.free[min(ok)], need))
    return _fill_from_emptiest(free, need, types, allowed)


def _eligible(
    node: Node, types: tuple[str, ...] | None, allowed: Callable[[int], bool] | None
) -> bool:
    return (types is None or node.gpu_type in types) and (allowed is None or allowed(node.node_id))


def consolidated(
    free: IdleGpus, need: int, types: tuple[str, ...] | None = None
) -> tuple[int, ...] | None:
    """As few nodes as the job's size allows, or nothing: as few as the nodes it may use
    (:meth:`~dlsched.cluster.Cluster.min_nodes_for`) could hold it on."""
    if need > free.total:
        return None
    fewest = free.cluster.min_nodes_for(need, types)
    if fewest == 1:
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
    return gpus if used_nodes <= fewest else None


def spread(
    free: IdleGpus, need: int, types: tuple[str, ...] | None = None
) -> tuple[int, ...] | None:
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


def _fill_from_emptiest(
    free: IdleGpus,
    need: int,
    types: tuple[str, ...] | None,
    allowed: Callable[[int], bool] | None = None,
) -> tuple[int, ...] | None:
    taken: list[int] = []
    nodes = free.cluster.nodes
    every = types is None and allowed is None
    for c in range(len(free.buckets) - 1, 0, -1):
        for nid in sorted(free.buckets[c]):
            if not every and not _eligible(nodes[nid], types, allowed):
                continue
            taken.extend(_lowest(free.free[nid], need - len(taken)))
            if len(taken) == need:
                return tuple(taken)
    return None


Placement = Callable[[IdleGpus, int, "tuple[str, ...] | None"], "tuple[int, ...] | None"]

PLACEMENTS: dict[str, Placement] = {
    "best-fit": best_fit,
    "consolidated": consolidated,
    "spread": spread,
}
