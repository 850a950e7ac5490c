"""What a job's real runs measured: its iteration time in each configuration it ran in, and the
pauses before its first iteration at a start and at a restart. The service keeps one
:class:`JobMeter` per live job and stores it with the job; the history export
(:mod:`.export`) turns it into the solo speed and pauses a what-if replay uses.

A configuration is ``(workers, sub-batches, shared)``. Iteration times are total iterations over
total seconds between consecutive progress reports of one run in one configuration, so the
service's polling adds no bias, only jitter at the ends of each stretch.

A pause is what a run's first progress report leaves once its iterations are timed at the
configuration's measured speed, resolved when asked for rather than at that report: the
worker's own figure then is a moving average that still carries its first, slowest iterations
(on a loaded machine seconds each), and charging them to the iterations made a replay reach
that report's iteration a minute early.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .speed import RuntimeSpeed, global_batch

if TYPE_CHECKING:
    from ..jobs import JobSpec


def config_key(workers: int, accumulation: int, shared: bool) -> str:
    return f"{workers}x{accumulation}{'s' if shared else ''}"


def parse_key(key: str) -> tuple[int, int, bool]:
    workers, _, rest = key.partition("x")
    return int(workers), int(rest.rstrip("s")), rest.endswith("s")


@dataclass(slots=True)
class JobMeter:
    speeds: dict[str, list[float]] = field(default_factory=dict)  # config -> [iterations, seconds]
    # per run, its launch to its first progress report: [seconds, iterations done by then, the
    # configuration, the worker's own iteration time then] (a bare number: a stored pause)
    starts: list = field(default_factory=list)  # first starts
    restarts: list = field(default_factory=list)
    # the run under way: (launch time, iteration it resumed from, first start?) until its first
    # progress, then the last progress seen (config, iteration, time)
    _launch: tuple[float, int, bool] | None = None
    _last: tuple[str, int, float] | None = None
    # the run that failed before its first progress: (seconds since the launch that began
    # this start, first start?), carried into the next launch's pause
    _failed_starts: tuple[float, bool] | None = None

    @classmethod
    def load(cls, stored: dict | None) -> JobMeter:
        stored = stored or {}
        return cls(
            speeds={k: list(v) for k, v in stored.get("speeds", {}).items()},
            starts=list(stored.get("starts", [])),
            restarts=list(stored.get("restarts", [])),
        )

    def dump(self) -> dict:
        return {"speeds": self.speeds, "starts": self.starts, "restarts": self.restarts}

    def launched(self, t: float, iteration: int, first: bool) -> None:
        if self._failed_starts is not None:
            lost_s, first = self._failed_starts
            t -= lost_s
        self._launch, self._last, self._failed_starts = (t, iteration, first), None, None

    def failed(self, t: float) -> None:
        """Its run failed. One that never reported progress never started: its time is part of
        the pause of the run that does (a replay, which has no failures, then starts the job
        as late as the server managed to), and that pause is the job's first start if this one
        was."""
        if self._launch is None:
            return
        launched_at, _, first = self._launch  # (moved back by any failed runs before it)
        self._launch, self._failed_starts = None, (t - launched_at, first)

    def reconfigured(self) -> None:
        """Its workers, sub-batches or sharing changed: the stretch under way ends unmeasured."""
        self._last = None

    def observe(self, t: float, iteration: int, iteration_s: float | None, key: str) -> bool:
        """A progress report at ``t``; True when it added a measurement."""
        if self._launch is not None:
            launched_at, resumed_from, first = self._launch
            if iteration <= resumed_from:
                return False  # still the previous run's report
            self._launch = None
            if iteration_s:
                first_report = [t - launched_at, iteration - resumed_from, key, iteration_s]
                (self.starts if first else self.restarts).append(first_report)
            self._last = (key, iteration, t)
            return True
        last, self._last = self._last, (key, iteration, t)
        if last is None or last[0] != key or iteration <= last[1] or t <= last[2]:
            return False
        total = self.speeds.setdefault(key, [0, 0.0])
        total[0] += iteration - last[1]
        total[1] += t - last[2]
        return True

    def iteration_s(self, key: str) -> float | None:
        iterations, seconds = self.speeds.get(key, (0, 0.0))
        return seconds / iterations if iterations else None

    def start_pauses(self) -> list[float]:
        """Each first start's pause before its first iteration, s."""
        return [self._pause(r) for r in self.starts]

    def restart_pauses(self) -> list[float]:
        """Each restart's pause (a preemption's, a failure's or a resize's) before its first
        iteration, s."""
        return [self._pause(r) for r in self.restarts]

    def _pause(self, report: Any) -> float:
        if isinstance(report, (int, float)):
            return float(report)
        elapsed, iterations, key, reported_s = report
        return max(0.0, elapsed - iterations * (self.iteration_s(key) or reported_s))


def _time_at(t: float, key: str, spec: JobSpec, speed: RuntimeSpeed, to_request: bool) -> float:
    """Convert an iteration time measured alone in configuration ``key`` to the job's request
    with no sub-batches (``to_request``), or back, by the runtime's own model."""
    workers, accumulation, _ = parse_key(key)
    factor = speed.accumulation_cost(spec, accumulation) / speed.speed_at_size(spec, workers)
    return t / factor if to_request else t * factor


def solo_iteration_s(
    meter: JobMeter, spec: JobSpec, speed: RuntimeSpeed, typical_slowdown: float | None = None
) -> tuple[float, str] | None:
    """The job's iteration time alone on its requested GPUs without sub-batches, and how it was
    obtained: ``measured`` there; ``derived`` by the runtime's model (scaling, accumulation
    cost) from the alone configuration it ran longest in; ``profiled``, its profiling run's
    time on its own placement; or, given ``typical_slowdown``, ``derived-shared`` from the
    configuration it ran longest in while sharing. None when none of these is known."""
    exact = meter.iteration_s(config_key(spec.num_gpus, 1, False))
    if exact is not None:
        return exact, "measured"
    # (iterations, configuration, iteration time) of each configuration it ran in, longest first
    runs = sorted(
        (
            (n, k, t)
            for k, (n, _) in meter.speeds.items()
            if (t := meter.iteration_s(k)) is not None
        ),
        reverse=True,
    )
    alone = [(k, t) for _, k, t in runs if not parse_key(k)[2]]
    if alone:
        return _time_at(alone[0][1], alone[0][0], spec, speed, to_request=True), "derived"
    profiled = speed.iteration_s(spec, spec.num_gpus, 1, global_batch(spec) / spec.num_gpus)
    if profiled is not None:
        return profiled, "profiled"
    if runs and typical_slowdown:
        _, key, t = runs[0]
        return _time_at(t / typical_slowdown, key, spec, speed, to_request=True), "derived-shared"
    return None


def shared_slowdown(
    meter: JobMeter, spec: JobSpec, speed: RuntimeSpeed, solo_s: float
) -> float | None:
    """How much slower its iterations ran while it shared a GPU than alone in the same
    configuration (weighted by iterations); None when it never shared."""
    iterations = weighted = 0.0
    for key, (n, seconds) in meter.speeds.items():
        workers, accumulation, shared = parse_key(key)
        if not shared or not n:
            continue
        alone = meter.iteration_s(config_key(workers, accumulation, False)) or _time_at(
            solo_s, key, spec, speed, to_request=False
        )
        iterations += n
        weighted += n * (seconds / n) / alone
    return weighted / iterations if iterations else None
