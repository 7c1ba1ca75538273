"""Stage service times against the quantiles they are built from (hand-computed)."""

from __future__ import annotations

import numpy as np
import pytest

from sparseloom.evaluation.service_time import ServiceTimes, quantile_ms
from sparseloom.evaluation.synthetic import task_profile
from sparseloom.profile.table import ProfileTable


def test_the_quantile_function_passes_through_p25_median_and_p75() -> None:
    # p25 1, median 2, spread 3 (p75 4): slopes 4 ms per unit of u below the median, 8 above.
    # u = 0: 2 - 0.5·4 = 0; u = 1: 2 + 0.5·8 = 6.
    expected = {0.0: 0.0, 0.125: 0.5, 0.25: 1.0, 0.5: 2.0, 0.75: 4.0, 1.0: 6.0}
    for u, ms in expected.items():
        assert quantile_ms(1.0, 2.0, 3.0, u) == pytest.approx(ms)


def test_the_quantile_function_never_goes_below_zero_or_decreases() -> None:
    # p25 1, median 3: at u = 0 the line is at 3 - 2·2 = -1, floored to 0.
    assert quantile_ms(1.0, 3.0, 2.0, 0.0) == 0.0
    # A median below p25 (rounding in the profile) counts as p25: flat below p75.
    assert quantile_ms(2.0, 1.5, 0.0, 0.9) == pytest.approx(2.0)


def test_sampled_stage_times_have_the_profiles_quartiles() -> None:
    latency = np.array([[[1.0]]])
    profile = task_profile("x", latency, accuracy=np.array([0.9]))
    profile.latency_median_ms[:] = 2.0
    profile.latency_spread_ms[:] = 3.0
    table = ProfileTable("one", ("A",), {"x": profile})
    times = ServiceTimes(table, "sampled", seed=1)
    draws = np.array([times.stage_ms("x", 0, 0, 0) for _ in range(20_000)])
    # 20,000 draws: a quartile's sampling error is about 0.01 u, i.e. 0.04-0.08 ms here.
    assert np.percentile(draws, [25, 50, 75]) == pytest.approx([1.0, 2.0, 4.0], abs=0.15)
    again = ServiceTimes(table, "sampled", seed=1)
    assert [again.stage_ms("x", 0, 0, 0) for _ in range(5)] == list(draws[:5])


def test_an_unknown_model_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match="sampled, median, p25"):
        ServiceTimes(ProfileTable("none", ("A",)), "mean")
