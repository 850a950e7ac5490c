"""What the cluster state charges for each transition: documented, overridable defaults."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import SpecError
from ..jobs import JobSpec, check_time, finite_number

# Pollux's simulator charges a 30 s restart penalty per re-allocation (petuum/adaptdl,
# simulator/; Qiao et al., OSDI'21): our default pause before a preempted job makes progress again.
POLLUX_RESTART_PENALTY_S = 30.0
# Chosen: checkpoint write/read bandwidth of local NVMe-class storage (no public per-job figure).
DEFAULT_CHECKPOINT_MIB_S = 1024.0
# Amoeba reports background scaling saves ~95% of a stop-resume pause: the switch pauses 5% of it.
AMOEBA_SWITCH_FRACTION = 0.05
# Chosen: the slowest checkpoint storage accepted, a kilobyte a second (slower, the pause of a
# resize runs past any time a replay can hold)
MIN_CHECKPOINT_MIB_S = 0.001


@dataclass(slots=True, frozen=True)
class Costs:
    restart_overhead_s: float = POLLUX_RESTART_PENALTY_S
    startup_overhead_s: float = 0.0
    # Periodic checkpoints, every that many seconds of progress: a job stopped by a failure
    # loses what it did since the last one. None: no work is ever lost.
    checkpoint_interval_s: float | None = None
    # A policy's preemption checkpoints first and loses nothing (as Tiresias and Gandiva do);
    # False: it loses the work since the last periodic checkpoint, like a failure.
    checkpoint_on_preempt: bool = True
    # Elastic resizing. "stop-resume": checkpoint, stop, restart at the new size and reload:
    # every worker pauses. "background" (Amoeba/EDL): new workers prepare on their GPUs while
    # the old ones keep training, then all switch at a mini-batch boundary, pausing
    # ``background_switch_fraction`` of a stop-resume; leaving workers exit at a boundary and
    # the staying ones do not pause. A stop-resume pause is ``stop_resume_s`` plus writing and
    # reading the model's checkpoint at ``checkpoint_mib_s``.
    resize_mechanism: str = "background"
    stop_resume_s: float = POLLUX_RESTART_PENALTY_S
    checkpoint_mib_s: float = DEFAULT_CHECKPOINT_MIB_S
    background_switch_fraction: float = AMOEBA_SWITCH_FRACTION

    def __post_init__(self) -> None:
        for name in ("restart_overhead_s", "startup_overhead_s", "stop_resume_s"):
            check_time(name, getattr(self, name))
        if self.checkpoint_interval_s is not None:
            check_time("checkpoint_interval_s", self.checkpoint_interval_s, positive=True)
        if self.resize_mechanism not in ("background", "stop-resume"):
            raise SpecError(
                "resize_mechanism",
                f"must be 'background' or 'stop-resume', got {self.resize_mechanism!r}",
            )
        v = self.checkpoint_mib_s
        if not (finite_number(v) and v >= MIN_CHECKPOINT_MIB_S):
            raise SpecError(
                "checkpoint_mib_s",
                f"must be a finite number >= {MIN_CHECKPOINT_MIB_S:g}, got {v!r}",
            )
        if not 0 <= self.background_switch_fraction <= 1:
            raise SpecError("background_switch_fraction", "must be between 0 and 1")

    def start_pause_s(self, spec: JobSpec, first: bool) -> float:
        """The pause before a starting job progresses: its own measured one, else the default."""
        own = spec.startup_s if first else spec.restart_s
        if own is not None:
            return own
        return self.startup_overhead_s if first else self.restart_overhead_s

    def resize_pause_s(self, checkpoint_mib: float | None) -> float:
        """A stop-resume: the restart, plus saving and loading the checkpoint."""
        return self.stop_resume_s + (
            0.0 if checkpoint_mib is None else 2 * checkpoint_mib / self.checkpoint_mib_s
        )
