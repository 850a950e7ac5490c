"""Tiresias (Gu et al., NSDI'19): discretized two-dimensional least-attained-service.

A job's attained service is the GPU-seconds it has executed (GPUs x time making progress; a
pause to restart does not count, or a job whose queue quantum is shorter than the pause would
be demoted and preempted forever without progress). Queue k holds jobs whose
attained service since their last promotion lies between thresholds k-1 and k; lower queues
run first, FIFO by submit time within a queue. A running job that crosses a threshold drops a
queue, and may then be preempted by a pending job of a higher queue. A preempted job that has
waited ``starvation_factor`` times the length of its last run is promoted back to the top queue.

Only a job of a higher queue preempts. Thresholds (``--param thresholds_gpu_s=...``: numbers,
or the name of a set):

- ``tiresias-sim`` (default): three queues split at 3,250 and 7,200 GPU-seconds, the Tiresias
  authors' simulator (SymbioticLab/Tiresias, ``simulator/jobs.py``, ``queue_limit``, with
  ``dlas-gpu``). The default because the comparisons in docs/experiments/ are against Tiresias
  as its authors ran it.
- ``las-3.2h``: one threshold of 3.2 GPU-hours (48 min x 4 GPUs), a public LAS simulator's
  default and dlsched's default before.

No promotion by default (``starvation_factor`` unset), as the authors' ``dlas-gpu``: promotion
with a small factor makes long jobs cycle between the queues, each cycle costing a preemption
(on the Muri traces, dozens per job). ``starvation_factor=F`` turns it on (their
``dlas-gpu-F``). docs/policies.md compares every semantic with the authors' simulator.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Container, Iterable

from ..errors import SpecError
from ..jobs import CANCELLED, DONE, PENDING, RUNNING, JobView
from ..view import RunningJobs
from .base import PolicyView
from .preemptive import PreemptiveOrder, PreemptivePolicy

THRESHOLD_SETS: dict[str, tuple[float, ...]] = {
    "tiresias-sim": (3250.0, 7200.0),  # the authors' simulator's queue limits (GPU-seconds)
    "las-3.2h": (11520.0,),  # a public LAS simulator's single threshold
}
DEFAULT_THRESHOLDS_GPU_S = "tiresias-sim"
DEFAULT_STARVATION_FACTOR = None  # no promotion, as the authors' dlas-gpu


class TiresiasOrder(PreemptiveOrder):
    """Tiresias' queues as a preemptive order (also used by elastic Tiresias)."""

    def __init__(
        self,
        thresholds_gpu_s: tuple[float, ...] | list[float] | str = DEFAULT_THRESHOLDS_GPU_S,
        starvation_factor: float | None = DEFAULT_STARVATION_FACTOR,
    ) -> None:
        given: Iterable[float | str]
        if isinstance(thresholds_gpu_s, str):
            given = THRESHOLD_SETS.get(thresholds_gpu_s) or thresholds_gpu_s.split(",")
        elif isinstance(thresholds_gpu_s, (int, float)):
            given = [thresholds_gpu_s]
        else:
            given = thresholds_gpu_s
        try:
            self.thresholds = tuple(float(t) for t in given)
        except (TypeError, ValueError):
            raise SpecError(
                "thresholds_gpu_s",
                f"not a list of numbers nor a set ({', '.join(THRESHOLD_SETS)}): "
                f"{thresholds_gpu_s!r}",
            ) from None
        if not all(0 < t < math.inf for t in self.thresholds) or list(self.thresholds) != sorted(
            set(self.thresholds)
        ):  # (nan and inf passed: nan compares false, and equals itself in a list)
            raise SpecError(
                "thresholds_gpu_s",
                f"must be increasing finite positive numbers, got {thresholds_gpu_s!r}",
            )
        if starvation_factor is not None and not (
            isinstance(starvation_factor, (int, float)) and starvation_factor > 0
        ):
            raise SpecError(
                "starvation_factor",
                f"must be a number > 0 (or unset for no promotion), got {starvation_factor!r}",
            )
        self.starvation_factor = None if starvation_factor is None else float(starvation_factor)
        # job id -> queue index, for the jobs below the top queue only (0, the top, is the
        # default): its keys are the demoted jobs (``low_priority``)
        self.level: dict[str, int] = {}
        self.offset: dict[str, float] = {}  # attained service at its last promotion
        self.timers: list[tuple[float, int, str, JobView, float]] = []
        # job id -> the number of its latest demotion timer, while that is in ``timers``; a
        # resize arms another and the one it replaces is ``_replaced`` (it never wakes the
        # replay: a job whose growth an admission stage cuts at every pass is armed twice a pass)
        self._demoting: dict[str, int] = {}
        self._replaced: set[int] = set()
        self._below: list[int] = [0] * (len(self.thresholds) + 1)  # in a pass: begin_pass
        self._queues_lowest_first = range(len(self.thresholds), -1, -1)
        self._timer_seq = 0

    def params(self) -> dict:
        return {
            "thresholds_gpu_s": list(self.thresholds),
            "starvation_factor": self.starvation_factor,
        }

    def rank(self, job: JobView, now: float) -> tuple:
        return (self.level.get(job.job_id, 0), job.spec.submit_time_s, job.seq)

    def outranks(self, job: JobView, victim: JobView, now: float) -> bool:
        # Only a higher queue preempts: within a queue, order decides who starts next, but a
        # running job is never stopped for a peer (that would thrash at every promotion).
        return self.level.get(victim.job_id, 0) > self.level.get(job.job_id, 0)

    def worst_first(self, job: JobView) -> tuple:
        return (-self.level.get(job.job_id, 0), -job.spec.submit_time_s, -job.seq)

    def _timer(self, at: float, kind: str, job: JobView, tag: float) -> None:
        self._timer_seq += 1
        heapq.heappush(self.timers, (at, self._timer_seq, kind, job, tag))

    def preemptible_gpus(self, job: JobView, enough: float = math.inf) -> float:
        return self._below[self.level.get(job.job_id, 0)]

    def begin_pass(self, running: RunningJobs) -> None:
        # for each queue, the GPUs the running jobs of the queues below it asked for, as the
        # state counts them at the pass's start (worst_first's first element is minus the queue)
        per_queue, below, total = running.head_gpus.get, self._below, 0
        for queue in self._queues_lowest_first:
            below[queue] = total
            total += per_queue(-queue, 0)

    def low_priority(self) -> Container[str]:
        return self.level.keys()

    def started(self, job: JobView, now: float) -> None:
        # (on the GPUs it asked for: the pass may yet resize it, ``resized``)
        self._arm_demotion(job, now, job.executed_gpu_s, now, job.num_gpus, _after(now))

    def resized(self, job: JobView, gpus: int, now: float) -> None:
        # its timer counted on other GPUs: on fewer, it would demote the job late
        seq = self._demoting.get(job.job_id)
        if seq is None or not gpus:  # no timer (a job in the last queue), or a start withdrawn
            return
        self._replaced.add(seq)
        if 64 < len(self._replaced) > len(self.timers) // 2:
            replaced = self._replaced
            self.timers = [t for t in self.timers if t[1] not in replaced]
            heapq.heapify(self.timers)
            replaced.clear()
        running = job.status is RUNNING
        resumes = job.resume_at if running and job.resume_at > now else now
        run_start = job.segment_start if running else now  # (a start in this pass: now)
        self._arm_demotion(job, resumes, job.executed_at(now), run_start, gpus, _after(now))

    def _arm_demotion(
        self,
        job: JobView,
        progress_from: float,
        executed: float,
        run_start: float,
        gpus: int,
        earliest: float = -math.inf,
    ) -> None:
        """Wake up when the job's executed service on ``gpus`` GPUs from ``progress_from``
        would cross its queue's threshold, at ``earliest`` at the soonest. A restart pause
        delays the crossing and a shrink moves it later, which the timer finds out when it
        fires; a growth arms it again."""
        if self.level.get(job.job_id, 0) < len(self.thresholds):
            at = self._crossing(job, progress_from, executed, gpus)
            self._demote_at(at if at > earliest else earliest, job, run_start)

    def _demote_at(self, at: float, job: JobView, run_start: float) -> None:
        self._timer(at, "demote", job, run_start)
        self._demoting[job.job_id] = self._timer_seq

    def _crossing(self, job: JobView, progress_from: float, executed: float, gpus: int) -> float:
        """When the job's service crosses its queue's threshold, making progress on ``gpus``
        GPUs from ``progress_from``."""
        threshold = self.thresholds[self.level.get(job.job_id, 0)]
        left = threshold - (executed - self.offset.get(job.job_id, 0.0))
        return progress_from + max(0.0, left) / gpus

    def stopped(self, job: JobView, now: float) -> None:
        # a victim of the pass under way: its GPUs are counted idle now (between passes this
        # is moot: the next pass counts afresh)
        level = self.level.get(job.job_id, 0)
        for queue in range(level):
            self._below[queue] -= job.num_gpus
        if job.status in (DONE, CANCELLED):
            self.level.pop(job.job_id, None)
            self.offset.pop(job.job_id, None)
            self._demoting.pop(job.job_id, None)
            return
        if self.starvation_factor is not None:
            run = now - job.segment_start
            self._timer(now + self.starvation_factor * run, "promote", job, now)

    def on_timers(self, view: PolicyView) -> None:
        now = view.now
        while self.timers and self.timers[0][0] <= now:
            _, seq, kind, job, tag = heapq.heappop(self.timers)
            jid = job.job_id
            if kind == "demote":
                if seq in self._replaced:
                    self._replaced.remove(seq)
                    continue
                if self._demoting.get(jid) == seq:
                    del self._demoting[jid]  # (armed again below, if it is)
                level = self.level.get(jid, 0)
                # still in that run, and not in the last queue: a run is known by its start, so
                # one that began where the last one did (a failed start retried at the same
                # instant) has two timers, and the second finds the job demoted already
                if (
                    job.status is RUNNING
                    and job.segment_start == tag
                    and level < len(self.thresholds)
                ):
                    # service accrues on the GPUs the job holds (an elastic job's may differ
                    # from its request)
                    gpus = len(job.gpus)
                    executed = view.executed_gpu_s(job)
                    if executed - self.offset.get(jid, 0.0) < self.thresholds[level] * (1 - 1e-9):
                        # short (paused, or on fewer GPUs): again when its service would cross
                        # on them, counted from the end of a pause under way (not every
                        # threshold's worth during it: a small threshold woke the replay tens of
                        # thousands of times a pause; nor again and again, each time a share,
                        # when it holds fewer than asked)
                        resumes = job.resume_at if job.resume_at > now else now
                        at = self._crossing(job, resumes, executed, gpus)
                        if at > now:
                            self._demote_at(at, job, tag)
                            continue
                        # what is left is below the clock's resolution at now: crossed (a
                        # timer at now again would be popped again, for ever)
                    self.level[jid] = level + 1
                    self.policy.running_order(view).rekey(job)
                    self._arm_demotion(job, now, executed, tag, gpus)
            elif job.status is PENDING and job.pending_since == tag and self.level.get(jid, 0) > 0:
                del self.level[jid]  # back in the top queue
                self.offset[jid] = job.executed_gpu_s
                self.policy.queue(view).rerank(job)

    def next_timer(self) -> float | None:
        timers, replaced = self.timers, self._replaced
        if replaced:  # (only elastic Tiresias replaces timers)
            while timers and timers[0][1] in replaced:
                replaced.remove(heapq.heappop(timers)[1])
        return timers[0][0] if timers else None


def _after(now: float) -> float:
    """The soonest a timer set in a pass, once its timers have run, can fire: the next time the
    clock can tell from ``now`` (a pass asks no other at its own time; a job requeued at the
    instant of its crossing and started again in that pass waited for the next event)."""
    return math.nextafter(now, math.inf)


class Tiresias(PreemptivePolicy):
    name = "tiresias"
    description = (
        "discretized 2D least-attained-service queues (optional starvation promotion); preemptive"
    )

    def __init__(
        self,
        placement: str = "best-fit",
        scan: str = "greedy",
        thresholds_gpu_s: tuple[float, ...] | list[float] | str = DEFAULT_THRESHOLDS_GPU_S,
        starvation_factor: float | None = DEFAULT_STARVATION_FACTOR,
    ) -> None:
        super().__init__(TiresiasOrder(thresholds_gpu_s, starvation_factor), placement, scan)
