"""Cluster model: nodes with GPUs, grouped in pools (training / inference) and racks.

A cluster is built from a short spec such as ``64x8:V100`` or
``32x8:V100,16x4:T4*0.5@inference`` (``COUNTxGPUS[:TYPE[/MEM_MIB][*SPEED]][@POOL]``, comma
separated), or from a YAML file (see :func:`load_cluster`). GPUs get global integer ids,
numbered node by node. ``SPEED`` is a GPU type's speed relative to a V100, for types no public
source measured (the performance model knows K80, P100 and V100 only).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from .errors import SpecError, quoted
from .yamlfile import read_yaml

POOLS = ("training", "inference")

# GPU memory (MiB) of the common types, from the vendors' data sheets; used when a spec
# names a type but not its memory. Override with ``:TYPE/MEM`` or the YAML ``gpu_mem_mib``.
GPU_MEMORY_MIB = {
    "K80": 12 * 1024,
    "P100": 16 * 1024,
    "V100": 16 * 1024,
    "V100M16": 16 * 1024,
    "V100M32": 32 * 1024,
    "T4": 16 * 1024,
    "A10": 24 * 1024,
    "A100": 40 * 1024,
    "A100-80G": 80 * 1024,
    "H100": 80 * 1024,
    "RTXA6000": 48 * 1024,
}
DEFAULT_GPU_TYPE = "V100"
DEFAULT_CPUS_PER_GPU = 8  # a typical 8-GPU server has 64 cores; overridable per node
DEFAULT_NODES_PER_RACK = 16
# Bounds on a cluster's size (chosen: 64x the largest cluster the benchmarks simulate, 2048 x 8,
# in GPUs): a spec past them stops with an error instead of building nodes until memory runs
# out (99999999x8 was killed by the kernel).
MAX_NODES = 131_072
MAX_GPUS = 1_048_576
# Chosen, far past any real GPU: a GPU's memory (1 TiB), its speed relative to a V100 (a
# thousandth to a thousand times: beyond, job speeds overflowed or divided by zero), and a GPU
# type's name
MAX_GPU_MEM_MIB = 1 << 20
GPU_SPEED_RANGE = (1e-3, 1e3)
MAX_GPU_TYPE_CHARS = 64
MAX_CPUS_PER_NODE = MAX_GPUS * DEFAULT_CPUS_PER_GPU  # the largest node's default
# a node group's keys in a cluster YAML file (one misspelled, gpu_typ, gave V100s silently)
GROUP_FIELDS = frozenset(
    {
        "count",
        "gpus_per_node",
        "gpu_type",
        "gpu_mem_mib",
        "gpu_speed",
        "cpus_per_node",
        "pool",
        "nodes_per_rack",
    }
)


@dataclass(slots=True, frozen=True)
class Node:
    node_id: int
    name: str
    gpu_type: str
    num_gpus: int
    gpu_mem_mib: int
    num_cpus: int
    pool: str = "training"
    rack: int = 0
    first_gpu: int = 0  # global id of this node's first GPU

    @property
    def gpu_ids(self) -> range:
        return range(self.first_gpu, self.first_gpu + self.num_gpus)


@dataclass(slots=True)
class Cluster:
    nodes: list[Node]
    # speed relative to a V100 of GPU types the spec gave one (for every model; see perf.model)
    gpu_speeds: dict[str, float] = field(default_factory=dict)
    gpu_node: list[int] = field(init=False)  # global GPU id -> node id
    largest_node_gpus: int = field(init=False)  # the most GPUs any node has (a fact, cached)
    smallest_gpu_mib: int = field(init=False)  # the least memory of any GPU (likewise)
    _capacity: dict = field(init=False, repr=False, compare=False, default_factory=dict)
    _min_nodes: dict = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        if not self.nodes:
            raise SpecError("nodes", "a cluster needs at least one node")
        self.gpu_node = []
        for index, node in enumerate(self.nodes):
            if node.first_gpu != len(self.gpu_node) or node.node_id != index:
                raise SpecError("nodes", "nodes must be numbered in order (use Cluster.build)")
            self.gpu_node.extend([node.node_id] * node.num_gpus)
        self.largest_node_gpus = max(n.num_gpus for n in self.nodes)
        self.smallest_gpu_mib = min(n.gpu_mem_mib for n in self.nodes)

    @classmethod
    def build(cls, groups: list[dict]) -> Cluster:
        """Build from groups of identical nodes: dicts with count, gpus_per_node and optional
        gpu_type, gpu_mem_mib, gpu_speed, cpus_per_node, pool, nodes_per_rack."""
        nodes: list[Node] = []
        speeds: dict[str, float] = {}
        rack_base = 0
        total_gpus = 0
        for gi, g in enumerate(groups):
            if not isinstance(g, dict):
                raise SpecError(
                    f"groups[{gi}]", f"must be a mapping (count, gpus_per_node, ...), got {g!r}"
                )
            if unknown := sorted(set(g) - GROUP_FIELDS, key=str):
                raise SpecError(
                    f"groups[{gi}].{unknown[0]}",
                    f"unknown field (known: {', '.join(sorted(GROUP_FIELDS))})",
                )
            count = _positive_int(g.get("count"), f"groups[{gi}].count")
            gpus = _positive_int(g.get("gpus_per_node"), f"groups[{gi}].gpus_per_node")
            total_gpus += count * gpus
            if len(nodes) + count > MAX_NODES:
                raise SpecError(
                    f"groups[{gi}].count", f"the cluster would have over {MAX_NODES:,} nodes"
                )
            if total_gpus > MAX_GPUS:
                raise SpecError(
                    f"groups[{gi}].count", f"the cluster would have over {MAX_GPUS:,} GPUs"
                )
            gpu_type = str(g.get("gpu_type") or DEFAULT_GPU_TYPE)
            if len(gpu_type) > MAX_GPU_TYPE_CHARS:
                raise SpecError(
                    f"groups[{gi}].gpu_type", f"must be at most {MAX_GPU_TYPE_CHARS} characters"
                )
            mem = g.get("gpu_mem_mib")
            if mem is None:
                if gpu_type not in GPU_MEMORY_MIB:
                    raise SpecError(
                        f"groups[{gi}].gpu_mem_mib",
                        f"unknown GPU type '{gpu_type}': give its memory in MiB",
                    )
                mem = GPU_MEMORY_MIB[gpu_type]
            mem = _positive_int(mem, f"groups[{gi}].gpu_mem_mib", MAX_GPU_MEM_MIB)
            if g.get("gpu_speed") is not None:
                speed = _speed(g["gpu_speed"], f"groups[{gi}].gpu_speed")
                if speeds.setdefault(gpu_type, speed) != speed:
                    raise SpecError(
                        f"groups[{gi}].gpu_speed",
                        f"{gpu_type} was given speed {speeds[gpu_type]:g} and {speed:g}: "
                        "one speed per GPU type",
                    )
            cpus = _positive_int(
                g.get("cpus_per_node", gpus * DEFAULT_CPUS_PER_GPU),
                f"groups[{gi}].cpus_per_node",
                MAX_CPUS_PER_NODE,
            )
            pool = str(g.get("pool", "training"))
            if pool not in POOLS:
                raise SpecError(
                    f"groups[{gi}].pool", f"must be one of {', '.join(POOLS)}, got '{pool}'"
                )
            per_rack = _positive_int(
                g.get("nodes_per_rack", DEFAULT_NODES_PER_RACK), f"groups[{gi}].nodes_per_rack"
            )
            for i in range(count):
                nid = len(nodes)
                first = nodes[-1].first_gpu + nodes[-1].num_gpus if nodes else 0
                nodes.append(
                    Node(
                        nid,
                        f"{pool[:3]}-{gpu_type.lower()}-{nid}",
                        gpu_type,
                        gpus,
                        mem,
                        cpus,
                        pool,
                        rack_base + i // per_rack,
                        first,
                    )
                )
            rack_base = (nodes[-1].rack + 1) if nodes else 0
        return cls(nodes, speeds)

    @property
    def num_gpus(self) -> int:
        return len(self.gpu_node)

    def pool_gpus(self, pool: str) -> int:
        # (memoized with capacity_for: fair share asks at every pass, 7% of a DRF replay)
        return self.capacity_for(None, pool)

    def min_nodes_for(self, gpus: int, gpu_types: tuple[str, ...] | None = None) -> int:
        """The fewest nodes that can hold ``gpus`` GPUs (of ``gpu_types``; None: any): the
        training pool's largest nodes first, then loaned servers' (Aryl). Before, every node
        was taken to be the largest one's size, any pool or type: a consolidated placement
        could then ask for fewer nodes than any placement has, and the job never ran."""
        key = (gpus, gpu_types)
        fewest = self._min_nodes.get(key)  # (memoized: asked by placements and predictions)
        if fewest is None:
            fewest, left = 0, gpus
            for pool in ("training", "inference"):
                sizes = sorted(
                    (
                        n.num_gpus
                        for n in self.nodes
                        if n.pool == pool and (gpu_types is None or n.gpu_type in gpu_types)
                    ),
                    reverse=True,
                )
                for size in sizes:
                    if left <= 0:
                        break
                    fewest, left = fewest + 1, left - size
            if left > 0:  # more than the nodes hold: as if more of the largest
                fewest += -(-left // self.largest_node_gpus)
            self._min_nodes[key] = fewest
        return fewest

    def capacity_for(self, gpu_types: tuple[str, ...] | None, pool: str = "training") -> int:
        """GPUs of the pool a job restricted to ``gpu_types`` (None: any) could ever use."""
        key = (gpu_types, pool)
        if key not in self._capacity:  # memoized: asked once per job of a trace
            self._capacity[key] = sum(
                n.num_gpus
                for n in self.nodes
                if n.pool == pool and (gpu_types is None or n.gpu_type in gpu_types)
            )
        return self._capacity[key]

    def spec(self) -> str:
        """The cluster as ``--cluster`` takes it (load_cluster reads it back)."""
        groups: dict[tuple, int] = {}
        for n in self.nodes:
            key = (n.num_gpus, n.gpu_type, n.gpu_mem_mib, n.pool)
            groups[key] = groups.get(key, 0) + 1
        return ",".join(
            f"{c}x{g}:{t}/{m}{self._speed_suffix(t)}@{p}" for (g, t, m, p), c in groups.items()
        )

    def _speed_suffix(self, gpu_type: str) -> str:
        return f"*{self.gpu_speeds[gpu_type]:g}" if gpu_type in self.gpu_speeds else ""

    def describe(self) -> str:
        groups: dict[tuple, int] = {}
        for n in self.nodes:
            key = (n.num_gpus, n.gpu_type, n.pool)
            groups[key] = groups.get(key, 0) + 1
        return ", ".join(
            f"{c}x{g}:{t}{self._speed_suffix(t)}@{p}" for (g, t, p), c in groups.items()
        )


def _positive_int(value: object, name: str, most: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise SpecError(name, f"must be a positive integer, got {value!r}")
    try:
        as_int = int(value)
    except (TypeError, ValueError):
        raise SpecError(name, f"must be a positive integer, got {value!r}") from None
    if as_int != float(value) or as_int <= 0:
        raise SpecError(name, f"must be a positive integer, got {value!r}")
    if most is not None and as_int > most:
        raise SpecError(name, f"must be at most {most:,}, got {value!r}")
    return as_int


def _speed(value: object, name: str) -> float:
    low, high = GPU_SPEED_RANGE
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise SpecError(name, f"must be a number in [{low:g}, {high:g}], got {value!r}")
    try:
        as_float = float(value)
    except ValueError:
        as_float = math.nan
    if not low <= as_float <= high:
        raise SpecError(name, f"must be a number in [{low:g}, {high:g}], got {value!r}")
    return as_float


_GROUP = re.compile(
    r"^(\d+)x(\d+)(?::([A-Za-z0-9_\-]+)(?:/(\d+))?(?:\*([0-9.eE+-]+))?)?(?:@([a-z]+))?$"
)


# a node group's field (Cluster.build's, as a cluster file names it) -> its part of a short spec
_SPEC_TERMS = {
    "count": "COUNT",
    "gpus_per_node": "GPUS",
    "gpu_type": "TYPE",
    "gpu_mem_mib": "MEM_MIB",
    "gpu_speed": "SPEED",
    "pool": "POOL",
}


def parse_cluster_spec(spec: str) -> Cluster:
    """Parse ``COUNTxGPUS[:TYPE[/MEM_MIB][*SPEED]][@POOL]`` groups separated by commas."""
    groups = []
    parts = [p.strip() for p in spec.split(",")]
    for part in parts:
        m = _GROUP.match(part)
        if not m:
            raise SpecError(
                "cluster",
                f"cannot parse '{part}': expected COUNTxGPUS[:TYPE[/MEM_MIB][*SPEED]][@POOL],"
                " e.g. 64x8:V100 or 16x4:T4*0.5@inference",
            )
        count, gpus, gtype, mem, speed, pool = m.groups()
        g: dict = {"count": int(count), "gpus_per_node": int(gpus)}
        if gtype:
            g["gpu_type"] = gtype
        if mem:
            g["gpu_mem_mib"] = int(mem)
        if speed:
            g["gpu_speed"] = speed
        if pool:
            g["pool"] = pool
        groups.append(g)
    try:
        return Cluster.build(groups)
    except SpecError as e:  # named as the user wrote it: the group and its part, not the field
        named = re.fullmatch(r"groups\[(\d+)\]\.(\w+)", e.field)
        if named is None or named[2] not in _SPEC_TERMS:
            raise
        where = f"{quoted(parts[int(named[1])])}: {_SPEC_TERMS[named[2]]}"
        raise SpecError("cluster", f"{where}: {e.reason}") from None


def load_cluster(spec_or_path: str) -> Cluster:
    """A cluster from a short spec, or from a YAML file with a ``groups:`` list of node groups
    (keys as in :meth:`Cluster.build`)."""
    path = Path(spec_or_path)
    if spec_or_path.endswith((".yaml", ".yml")) or path.is_file():
        if not path.is_file():
            raise SpecError("cluster", f"no such file: {spec_or_path}")
        data = read_yaml(path, "cluster")
        if not isinstance(data, dict) or not isinstance(data.get("groups"), list):
            raise SpecError("groups", f"{spec_or_path} must hold a mapping with a 'groups' list")
        return Cluster.build(data["groups"])
    return parse_cluster_spec(spec_or_path)
