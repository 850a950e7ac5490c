"""The cyclic garbage collector while a workload is prepared or simulated.

Both build or update hundreds of thousands of long-lived objects (job specs and states) and
make few cycles. The collector's default (a young collection every 700 new objects, and full
ones that walk every live object) then spends a large part of the run finding no garbage: a
fifth of preparing 400,000 synthetic jobs (``prepare("synthetic", ...)``: 8.2-9.0 s, 7.0 s
with these settings; docs/speed-log.md).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

# Young objects the collector lets pile up before it looks: a run's garbage is almost all acyclic
# (freed by reference counts), so Python's default of 700 only makes it look ten times as often
# for nothing (measured on Philly: collections cost 7% of a FIFO replay at 700, 2% at 10,000).
YOUNG_OBJECTS_BEFORE_COLLECTING = 10_000


@contextmanager
def fewer_collections() -> Iterator[None]:
    """The objects alive before (the jobs, the trace, the caller's own) kept out of the
    collector's full passes, which would walk them again for no garbage, and the young
    generation collected less often. Both are put back after, also on an error; nothing is
    frozen when the caller froze objects itself (nested uses freeze once)."""
    thresholds = gc.get_threshold()
    freeze = not gc.get_freeze_count()
    if freeze:
        gc.freeze()
    gc.set_threshold(max(thresholds[0], YOUNG_OBJECTS_BEFORE_COLLECTING), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if freeze:
            gc.unfreeze()
