"""Early stopping: a load stops once a task's latency verdict can no longer change."""

from __future__ import annotations

from typing import Any

import pytest

from sparseloom.core.errors import ConfigError
from sparseloom.core.types import SLO
from sparseloom.runtime.load import LoadSpec
from sparseloom.runtime.session import RunConfig, serve


def test_a_load_stops_once_a_tenth_of_its_requests_missed_the_slo(tiny: tuple[Any, Any]
                                                                  ) -> None:
    workload, profile = tiny
    # 1 µs: every request misses it, so after 21 of the 200 planned the p90 is decided.
    config = RunConfig(slos={"tiny": SLO(0.0, 0.001)},
                       load=LoadSpec("poisson", queries=200, rate=500.0, early_stop=True))
    summary = serve(workload, profile, config).summary
    assert summary.submitted == summary.completed + summary.failed
    assert 21 <= summary.completed < 200
    assert not summary.valid
    assert any(reason.startswith("stopped early") for reason in summary.reasons)
    # The same load without early stopping serves all of it.
    whole = serve(workload, profile, RunConfig(
        slos={"tiny": SLO(0.0, 0.001)},
        load=LoadSpec("poisson", queries=200, rate=500.0))).summary
    assert whole.completed == 200


def test_early_stop_needs_a_query_count() -> None:
    with pytest.raises(ConfigError, match="early_stop needs a number of queries"):
        LoadSpec("poisson", queries=None, duration_s=5.0, rate=10.0, early_stop=True)
