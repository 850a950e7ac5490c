"""Means with confidence intervals across seeds, for experiments that repeat a run."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

# Student's t, 97.5% quantile, by degrees of freedom 1-30 (standard tables); above 30 the
# normal's 1.96 is within 4%.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """The mean and the half-width of its 95% confidence interval (Student's t; nan for one
    value, where no interval can be given)."""
    if not values:
        raise ValueError("no values")
    mean = statistics.fmean(values)
    n = len(values)
    if n == 1:
        return mean, math.nan
    t = _T975[n - 2] if n - 1 <= len(_T975) else 1.96
    return mean, t * statistics.stdev(values) / math.sqrt(n)


def geometric_mean_ci(ratios: Sequence[float]) -> tuple[float, float, float]:
    """The geometric mean of ``ratios`` and its 95% interval (low, high): :func:`mean_ci` of
    their logarithms, so a ratio and its inverse weigh alike (nan bounds for one ratio)."""
    mean, half = mean_ci([math.log(r) for r in ratios])
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def format_ci(values: Sequence[float], digits: int = 1, scale: float = 1.0) -> str:
    """``mean ± half-width`` (or just the mean of a single value)."""
    mean, half = mean_ci([v * scale for v in values])
    return f"{mean:,.{digits}f}" + ("" if math.isnan(half) else f" ± {half:,.{digits}f}")
