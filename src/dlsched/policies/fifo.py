"""FIFO: first come, first served."""

from .queued import QueuedPolicy, submit_order


class Fifo(QueuedPolicy):
    name = "fifo"
    description = "first come, first served; non-preemptive (strict unless --scan backfill)"

    def __init__(self, placement: str = "best-fit", scan: str = "strict") -> None:
        super().__init__(submit_order, placement, scan)
