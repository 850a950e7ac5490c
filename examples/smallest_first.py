"""The policy of docs/writing-a-policy.md: the job asking for the fewest GPUs first (the earliest
among equals), and later jobs take GPUs that the first cannot use (backfill). Non-preemptive.

    dlsched compare --trace philly --policies fifo,sjf,smallest_first:SmallestFirst --out cmp
    dlsched server --policy smallest_first:SmallestFirst
"""

from dlsched import Plan, Policy, PolicyView
from dlsched.jobs import JobView


def fewest_gpus_first(job: JobView) -> tuple:
    return (job.num_gpus, job.spec.submit_time_s)


class SmallestFirst(Policy):
    name = "smallest-first"
    description = "fewest GPUs first, then the earliest; later jobs backfill"

    def __init__(self, placement: str = "best-fit", scan: str = "backfill") -> None:
        super().__init__(placement, scan)  # --param placement=... / scan=strict reach here

    def schedule(self, view: PolicyView) -> Plan:
        plan = Plan()
        free = view.free.copy()  # plan against a copy: the view is read-only
        for job in view.queue(fewest_gpus_first):  # the state keeps this order
            if job.num_gpus > free.total:
                break  # every later job asks for at least as many GPUs
            gpus = self.place(free, job.num_gpus, job.spec.gpu_types)
            if gpus is None:
                if not self.backfill:
                    break  # strict: the first job that cannot start blocks the rest
                continue
            free.take(gpus)
            plan.start.append((job, gpus))
        return plan
