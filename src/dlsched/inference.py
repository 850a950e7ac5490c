"""The inference pool's demand over time: how many of its servers it needs (Aryl, PAPERS.md s. 3).

A source is a real load curve shipped with the package (``data/DATA.md`` names where each comes
from) or a CSV of one's own (first column seconds, second the load):

- ``genai``: Alibaba's GenAI inference QPS, summed per 5 minutes over about 22 h (day and
  night): the default.
- ``philly-nodes``: active Philly nodes per minute, Oct-Dec 2017 (Helios' artifact).

The scaling rule: servers needed at t = ceil(servers x ``peak_share`` x load(t) / peak load), so
at the curve's peak the inference side uses ``peak_share`` of its servers and never loans the
rest (its headroom). The curve is repeated from the simulation's start for as long as needed.

Announcements: the inference side tells the scheduler what it will need ``notice_s`` ahead (the
reclaim notice), so the demand announced at t is the largest need over [t, t + notice]. With
servers handed back within the notice, inference is never short; the simulator measures it.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
from bisect import bisect_right
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from .errors import SpecError
from .jobs import MAX_TIME_S
from .traces.base import readable

# Chosen defaults (no public figure fits every deployment): the inference side's peak uses 90%
# of its servers, and it announces a need 2 minutes ahead (the reclaim notice).
DEFAULT_PEAK_SHARE = 0.9
DEFAULT_RECLAIM_NOTICE_S = 120.0

SOURCES = {
    "genai": ("genai_qps_5min.csv", "sum"),  # t_sec, API, Generative QPS: their sum
    "philly-nodes": ("philly_node_sequence.csv.gz", "active"),  # time, active, total nodes
}


@dataclass(slots=True, frozen=True)
class LoadCurve:
    """A load sampled at ``times`` (seconds from the curve's start, increasing), each value
    holding until the next; ``period_s`` is the curve's length when repeated."""

    name: str
    times: tuple[float, ...]
    values: tuple[float, ...]
    period_s: float


# Chosen: the closest two samples of a demand curve may be. The replay takes a step at each
# (repeated for as long as jobs run): samples 1e-9 s apart stalled it, blamed on the policy.
MIN_SAMPLE_GAP_S = 1.0


def load_curve(source: str) -> LoadCurve:
    """A bundled curve by name, or a CSV file: a header, then rows of seconds and load."""
    if source in SOURCES:
        filename, column = SOURCES[source]
        data = resources.files("dlsched").joinpath("data/traces/inference", filename).read_bytes()
        if filename.endswith(".gz"):
            data = gzip.decompress(data)
        rows = list(csv.DictReader(io.StringIO(data.decode())))
        if column == "sum":
            times = [float(r["t_sec"]) for r in rows]
            values = [sum(float(v) for k, v in r.items() if k != "t_sec") for r in rows]
        else:  # one row a minute from the first timestamp
            times = [60.0 * i for i in range(len(rows))]
            values = [float(r[column]) for r in rows]
        return _curve(source, times, values)
    path = Path(source)
    if not path.is_file():
        raise SpecError(
            "inference_demand",
            f"'{source}' is neither a bundled curve ({', '.join(SOURCES)}) nor a file",
        )
    times, values = [], []
    with readable(path, "inference_demand"), path.open(newline="") as f:
        reader = csv.reader(f)
        next(reader, None)
        for line, row in enumerate(reader, start=2):
            try:
                t, v = float(row[0]), float(row[1])
            except (IndexError, ValueError):
                raise SpecError(
                    "inference_demand",
                    f"{source} line {line}: expected two numbers (seconds, load), got {row!r}",
                ) from None
            if not (math.isfinite(t) and math.isfinite(v) and v >= 0):
                raise SpecError(
                    "inference_demand",
                    f"{source} line {line}: times and loads must be finite, loads >= 0",
                )
            times.append(t)
            values.append(v)
    return _curve(path.name, times, values)


def _curve(name: str, times: list[float], values: list[float]) -> LoadCurve:
    if len(times) < 2 or any(b - a < MIN_SAMPLE_GAP_S for a, b in zip(times, times[1:])):
        raise SpecError(
            "inference_demand",
            f"{name}: needs two or more samples at increasing times, at least "
            f"{MIN_SAMPLE_GAP_S:g} s apart",
        )
    if times[-1] - times[0] > MAX_TIME_S:
        raise SpecError("inference_demand", f"{name}: spans more than {MAX_TIME_S:g} s")
    if max(values) <= 0:
        raise SpecError("inference_demand", f"{name}: the load is zero everywhere")
    start = times[0]
    step = times[-1] - times[-2]
    return LoadCurve(name, tuple(t - start for t in times), tuple(values), times[-1] - start + step)


def servers_needed(
    curve: LoadCurve, servers: int, peak_share: float = DEFAULT_PEAK_SHARE
) -> list[int]:
    """The scaling rule, per sample of the curve."""
    if not 0 < peak_share <= 1:
        raise SpecError("peak_share", f"must be in (0, 1], got {peak_share!r}")
    peak = max(curve.values)
    return [min(servers, math.ceil(servers * peak_share * v / peak - 1e-9)) for v in curve.values]


@dataclass(slots=True, frozen=True)
class DemandStep:
    time_s: float  # from the start of a cycle
    needed: int  # servers inference uses from now on
    announced: int  # the most it will need within the notice: what the scheduler is told


@dataclass(slots=True, frozen=True)
class DemandCycle:
    """One period of the scaled curve, repeated from the simulation's start."""

    source: str
    servers: int
    steps: tuple[DemandStep, ...]  # the first at 0; only where needed or announced changes
    period_s: float
    notice_s: float
    peak_share: float


def demand_cycle(
    curve: LoadCurve,
    servers: int,
    notice_s: float = DEFAULT_RECLAIM_NOTICE_S,
    peak_share: float = DEFAULT_PEAK_SHARE,
) -> DemandCycle:
    """The curve scaled to ``servers``, with what is announced ``notice_s`` ahead (looking
    across the cycle's end into the next repetition)."""
    period = curve.period_s
    if not (isinstance(notice_s, (int, float)) and 0 <= notice_s < period):
        raise SpecError(
            "reclaim_notice_s",
            f"must be a number in [0, {period:g}) (the curve's period), got {notice_s!r}",
        )
    per_sample = servers_needed(curve, servers, peak_share)
    times = list(curve.times) + [t + period for t in curve.times]
    needs = per_sample * 2
    instants = sorted(set(curve.times) | {(t - notice_s) % period for t in curve.times})
    steps: list[DemandStep] = []
    for t in instants:
        i = bisect_right(times, t) - 1
        j = bisect_right(times, t + notice_s) - 1
        step = DemandStep(t, needs[i], max(needs[i : j + 1]))
        if not steps or (step.needed, step.announced) != (steps[-1].needed, steps[-1].announced):
            steps.append(step)
    return DemandCycle(curve.name, servers, tuple(steps), period, float(notice_s), peak_share)
