"""FIFO: first come, first served."""

from ..jobs import JobState
from .base import register
from .queued import QueuedPolicy


@register
class Fifo(QueuedPolicy):
    name = "fifo"
    description = "first come, first served; non-preemptive (strict unless backfill)"

    def key(self, job: JobState) -> tuple:
        return (job.spec.submit_time_s,)
