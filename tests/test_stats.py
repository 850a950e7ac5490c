"""Means with confidence intervals (dlsched.stats), against values worked out by hand."""

import math

import pytest

from dlsched.stats import format_ci, geometric_mean_ci, mean_ci


def test_the_interval_is_students_t_over_the_standard_error():
    # 1, 2, 3, 4, 5: mean 3, sample sd sqrt(2.5) = 1.5811, se 0.7071, t(4) 2.776: 1.963
    mean, half = mean_ci([1, 2, 3, 4, 5])
    assert mean == 3 and half == pytest.approx(2.776 * math.sqrt(2.5) / math.sqrt(5))
    assert format_ci([1, 2, 3, 4, 5], digits=2) == "3.00 ± 1.96"
    # two values 10 and 12: sd sqrt(2), se 1, t(1) 12.706
    assert mean_ci([10, 12]) == (11, pytest.approx(12.706))


def test_one_value_has_no_interval_and_none_is_an_error():
    assert format_ci([0.5], digits=1, scale=100) == "50.0"
    assert math.isnan(mean_ci([7.0])[1])
    with pytest.raises(ValueError):
        mean_ci([])


def test_a_geometric_mean_s_interval_is_symmetric_in_ratio_and_inverse():
    # ratios 2 and 8: logarithms ln 2 and ln 8, mean ln 4; half-width 12.706 * stdev / sqrt(2),
    # stdev = (ln 8 - ln 2) / sqrt(2) = ln 4 / sqrt(2), so the half-width is 12.706 * ln 4 / 2
    mean, low, high = geometric_mean_ci([2.0, 8.0])
    assert mean == pytest.approx(4.0)
    assert high == pytest.approx(4.0 * 4.0 ** (12.706 / 2))
    assert low * high == pytest.approx(mean**2)  # as far below as above, in ratio
    inverse = geometric_mean_ci([1 / 2, 1 / 8])
    assert inverse == pytest.approx((1 / mean, 1 / high, 1 / low))
    one = geometric_mean_ci([1.5])
    assert one[0] == pytest.approx(1.5) and math.isnan(one[1]) and math.isnan(one[2])
