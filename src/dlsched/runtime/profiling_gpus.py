"""Where a profiling run goes: the GPUs it holds in the books while it measures a job."""

from __future__ import annotations

from ..state.cluster_state import ClusterState


def profiling_gpus(
    state: ClusterState, placements: bool, whole: bool, pair: bool = True
) -> tuple[tuple[int, ...], float | None] | None:
    """GPUs of the training pool for one profiling run, and the memory it may use there
    (None: the whole GPU). A free GPU on the fullest node that has one (the least
    fragmentation); else, unless ``whole``, the second place on a GPU one job holds, under the
    rules of sharing: the job's memory known, and the run capped at the rest of the GPU's. A
    run timed on ``placements`` (GENIE's, of a job that may run on more than one GPU) takes
    free GPUs only: two of one node and one of another where one is free (its samples on 1
    worker, 2 on a node, 2 across nodes), else two of one node; where no node of the pool has
    two GPUs, or without ``pair`` (it waited long enough for two), one GPU and one of another
    node if free. None: not free yet."""
    free, occupancy, cluster = state.free, state.occupancy, state.cluster
    nodes = cluster.nodes
    by_fill = sorted(
        (len(free.free[n]), n) for n in free.usable if nodes[n].pool == "training" and free.free[n]
    )
    if placements:
        pairs = [n for count, n in by_fill if count >= 2]
        if not pairs:
            if not by_fill or (
                pair
                and any(nodes[n].num_gpus >= 2 for n in free.usable if nodes[n].pool == "training")
            ):
                return None  # wait for two of one node
            return tuple(min(free.free[n]) for _, n in by_fill[:2]), None
        first = sorted(free.free[pairs[0]])[:2]
        other = [n for _, n in by_fill if n != pairs[0]]
        return ((*first, min(free.free[other[0]])) if other else tuple(first)), None
    if by_fill:
        return (min(free.free[by_fill[0][1]]),), None
    if whole:
        return None
    slots = [
        (nodes[cluster.gpu_node[g]].gpu_mem_mib - (occupancy.memory[g] or 0.0), g)
        for job in state.running.values()
        if not job.spec.elastic and job.memory_mib is not None
        for g in job.gpus
        if len(occupancy.jobs[g]) == 1
        and nodes[cluster.gpu_node[g]].pool == "training"
        and occupancy.why_not_join(g, 0.0) is None
    ]
    if not slots:
        return None
    room, g = max(slots)
    return ((g,), room) if room > 0 else None
