"""Means with confidence intervals (dlsched.stats), against values worked out by hand."""

import math

import pytest

from dlsched.stats import format_ci, mean_ci


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
