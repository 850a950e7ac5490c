"""The cyclic garbage collector paused while a tenant process starts.

A start imports torch, builds the job's program and, for a job of several workers, constructs
DDP, whose first construction imports ``torch._dynamo``. That makes millions of objects that
all live on, and each collection they set off walks all of them: a sixth of a multi-worker
start's CPU (2.99 against 2.52 CPU-s for torch, the runtime and DDP's first construction, means
of 10 runs, 2026-11-27). The test suite starts hundreds of these processes on two cores. The
collector is on again before any training or timed pass, so a program's cyclic garbage (which
may hold device memory) never piles up where it is measured or run.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Within it, no cyclic collection (as it was after: nested uses keep it off)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
