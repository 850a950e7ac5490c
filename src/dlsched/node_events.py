"""Node failures, repairs and maintenance for a replay (``--node-events FILE``, a sweep's
``node_events``).

A CSV file with a header and one event per row::

    time_s,kind,node
    86400,down,3
    90000,up,3

``time_s`` is on the trace's clock (seconds, as the jobs' submit times); ``kind`` is ``down`` (the
node leaves: the jobs holding any of its GPUs fail and wait again), ``up`` (its GPUs are usable
again), ``cordon`` (the operator takes it out of service: no new job goes there, its jobs run
to their ends), ``drain`` (the same, and its jobs are preempted now: each checkpoints and waits
again) or ``uncordon`` (back in service); ``node`` is the node's number, counted from 0 in the
order the cluster spec lists its nodes (``2x8:V100,1x8:K80``: nodes 0 and 1 are the V100 ones, 2
the K80 one).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .errors import SpecError, quoted
from .jobs import check_time
from .traces.base import check_shape, number, read_rows

NodeEvent = tuple[float, str, int]
KINDS = ("down", "up", "cordon", "drain", "uncordon")
# Chosen: the most events a run takes (a node failing every minute of Philly's 80 days is a
# tenth of it); past it, a file is more likely a mistake than a failure model
MAX_NODE_EVENTS = 1_000_000
COLUMNS = ("time_s", "kind", "node")


def check_node_event(
    time_s: object, kind: object, node: object, nodes: int | None = None
) -> NodeEvent:
    """One event, or a SpecError naming its field (``time_s``, ``kind`` or ``node``); with
    ``nodes``, the node must be one of a cluster's that many."""
    check_time("time_s", time_s)
    if kind not in KINDS:
        shown = quoted(kind) if isinstance(kind, str) else repr(kind)
        raise SpecError("kind", f"must be one of {', '.join(KINDS)}, got {shown}")
    if not isinstance(node, int) or isinstance(node, bool) or node < 0:
        raise SpecError("node", f"must be a node number >= 0, got {node!r}")
    if nodes is not None and node >= nodes:
        raise SpecError("node", f"no node {node}: the cluster's are 0..{nodes - 1}")
    return float(time_s), kind, node  # type: ignore[arg-type]  # (checked by check_time)


def check_node_events(events: Sequence) -> tuple[NodeEvent, ...]:
    """Every event checked, each error naming its place (``node_events[2].kind``)."""
    if len(events) > MAX_NODE_EVENTS:
        raise SpecError("node_events", f"at most {MAX_NODE_EVENTS:,} events, got {len(events):,}")
    checked = []
    for i, event in enumerate(events):
        if not isinstance(event, tuple | list) or len(event) != 3:
            raise SpecError(f"node_events[{i}]", f"must be (time_s, {' | '.join(KINDS)}, node)")
        try:
            checked.append(check_node_event(*event))
        except SpecError as e:
            raise SpecError(f"node_events[{i}].{e.field}", e.reason) from None
    return tuple(checked)


def check_nodes(events: Sequence[NodeEvent], nodes: int) -> None:
    """Checked events name only a cluster's ``nodes`` nodes (a run's cluster is known after
    its events were checked)."""
    if max((node for _, _, node in events), default=-1) < nodes:
        return
    i = next(i for i, (_, _, node) in enumerate(events) if node >= nodes)
    try:
        check_node_event(*events[i], nodes)
    except SpecError as e:
        raise SpecError(f"node_events[{i}].{e.field}", e.reason) from None


def read_node_events(path: str | Path, nodes: int | None = None) -> tuple[NodeEvent, ...]:
    """The events of a CSV file (the module's format), each on one of ``nodes`` nodes when
    given; an error names the row and column."""
    events = []
    for row_number, row in read_rows(path, COLUMNS, str(path), option="node_events"):
        if row_number > MAX_NODE_EVENTS:
            raise SpecError("node_events", f"at most {MAX_NODE_EVENTS:,} rows", source=str(path))
        try:
            check_shape(row)
            time_s = number(row, "time_s")
            node = number(row, "node", integer=True)
            events.append(check_node_event(time_s, (row["kind"] or "").strip(), node, nodes))
        except SpecError as e:
            raise e.at(row=row_number, source=str(path)) from None
    return tuple(events)


def node_events_csv(events: Sequence[Sequence]) -> str:
    """Events as the module's CSV file (``read_node_events`` reads it back)."""
    lines = [",".join(COLUMNS)] + [f"{t:g},{kind},{node}" for t, kind, node in events]
    return "\n".join(lines) + "\n"
