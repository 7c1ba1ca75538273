"""The steady scenario's STP ceiling (:mod:`sparseloom.evaluation.steady_bound`), by hand."""

from __future__ import annotations

import pytest

from sparseloom.evaluation.closed_bound import ModelCost
from sparseloom.evaluation.steady_bound import render_steady_bounds, stp_bound

#: Task a: 1 ms alone on one thread; task b: 2 ms alone, or 1.5 ms on two threads (3 core-ms).
COSTS = {"a": ModelCost(1.0, 1.0), "b": ModelCost(1.5, 2.0)}
ISOLATED = {"a": 2.0, "b": 2.0}


def test_the_cores_go_to_the_task_that_buys_the_most_stp_per_core_millisecond() -> None:
    # a buys 2 STP-ms per core-ms, b 1: on one core a takes all of it, 1000 req/s.
    assert stp_bound(COSTS, ISOLATED, {}, cores=1) == pytest.approx(1000 * 2.0 / 1e3)


def test_every_task_gets_its_floor_first() -> None:
    # b's floor of 100 req/s spends 200 core-ms of each second; a takes the 800 left.
    assert stp_bound(COSTS, ISOLATED, {"b": 100.0}, cores=1) == pytest.approx(
        (800 * 2.0 + 100 * 2.0) / 1e3)


def test_one_request_in_flight_caps_a_task_and_the_rest_goes_to_the_next() -> None:
    # Two cores: a at most 1000 req/s (1 ms each, one in flight) spends 1000 core-ms;
    # b gets the other 1000 core-ms, 500 req/s, under its cap of 1000 / 1.5.
    assert stp_bound(COSTS, ISOLATED, {}, cores=2) == pytest.approx(
        (1000 * 2.0 + 500 * 2.0) / 1e3)


def test_floors_that_do_not_fit_have_no_bound() -> None:
    # a floor above one request in flight at the fastest latency
    assert stp_bound(COSTS, ISOLATED, {"a": 1001.0}, cores=4) is None
    # floors that together need more than the cores: 600 × 1 + 300 × 2 = 1200 core-ms
    assert stp_bound(COSTS, ISOLATED, {"a": 600.0, "b": 300.0}, cores=1) is None


def test_bad_inputs_say_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="at least one core"):
        stp_bound(COSTS, ISOLATED, {}, cores=0)
    with pytest.raises(ValueError, match="no isolated latency for task"):
        stp_bound(COSTS, {"a": 2.0}, {}, cores=1)


def test_the_report_names_each_policys_ceiling_and_unreachable_floors() -> None:
    bounds = {"ceiling": {"sparseloom-loaded": {"n": 3, "median": 1.17, "min": 1.05,
                                                "max": 1.30}},
              "floors_unreachable": {"sparseloom-loaded": 1}, "unmeasured": ["sparseloom"]}
    text = "\n".join(render_steady_bounds(bounds))
    assert "- sparseloom-loaded: 1.17× [1.05–1.30] over 3 round(s); in 1 round(s)" in text
    assert "0.9× its rate" in text and "No STP ceiling" in text and "sparseloom." in text
    assert render_steady_bounds({"ceiling": {}, "floors_unreachable": {},
                                 "unmeasured": []}) == []
