"""How many examples a property test draws: its own count in full runs (``make test``, CI),
scaled down by ``DLSCHED_EXAMPLES_SCALE`` for the inner loop (``make check`` runs a quarter)."""

from __future__ import annotations

import os

SCALE = float(os.environ.get("DLSCHED_EXAMPLES_SCALE", "1"))
if not 0 < SCALE <= 1:
    raise ValueError(f"DLSCHED_EXAMPLES_SCALE must be in (0, 1], got {SCALE}")


def examples(full: int) -> int:
    """``full`` examples scaled by ``SCALE``, at least one."""
    return max(1, round(full * SCALE))
