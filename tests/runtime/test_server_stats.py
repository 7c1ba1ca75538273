"""The bounded counters behind ``Server.stats()`` and the run summary, against hand-computed
figures: the ring keeps the newest outcomes in order, rates and attainment of a window."""

from __future__ import annotations

import math
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from sparseloom.core.types import SLO, StitchedVariant
from sparseloom.runtime.live import LIVE_REQUESTS, task_view
from sparseloom.runtime.request import Route
from sparseloom.runtime.stats import TaskCounters

ROUTE = Route(StitchedVariant("t", (0, 1)), ("a", "b"))


def _done(at_s: float, sample: int = -1) -> Any:
    return SimpleNamespace(finished_s=at_s, route=ROUTE, sample=sample, output_batch=[[at_s]])


def test_the_ring_keeps_the_newest_outcomes_in_order_and_counts_every_one() -> None:
    counters = TaskCounters("t", size=8)
    for i in range(20):
        if i % 5 == 4:
            counters.failed_one(float(i))
        else:
            counters.completed_one(_done(float(i), sample=i), latency_ms=10.0 + i)
    ended, latency = counters.window()
    assert list(ended) == [12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0, 19.0]
    assert math.isnan(latency[2]) and math.isnan(latency[7])  # requests 14 and 19 failed
    assert counters.latencies() == [22.0, 23.0, 25.0, 26.0, 27.0, 28.0]
    assert (counters.completed, counters.failed, counters.written) == (16, 4, 20)
    assert counters.latency_sum_ms == sum(10.0 + i for i in range(20) if i % 5 != 4)
    assert counters.served() == {ROUTE: 16}
    assert [s for s, _ in counters.scored] == [i for i in range(20) if i % 5 != 4]
    assert list(counters.window(3)[0]) == [17.0, 18.0, 19.0]


def _view(counters: TaskCounters, slo_ms: float, now: float, started: float) -> Any:
    state = SimpleNamespace(counters=counters, in_flight=2, held=[1], route=ROUTE)
    runtime = SimpleNamespace(states={"t": state}, lock=threading.Lock(),
                              slos={"t": SLO(0.5, slo_ms)}, started_s=started,
                              switch_counts={"t": 3})
    return task_view(runtime, "t", True, now)


def test_live_rate_percentiles_and_attainment_of_the_recent_window() -> None:
    counters = TaskCounters("t")
    # 10 requests/s for 20 s: latencies 1..10 ms repeating; every tenth refused.
    for i in range(200):
        if i % 10 == 9:
            counters.rejected_one(i / 10)
        else:
            counters.completed_one(_done(i / 10), latency_ms=float(i % 10 + 1))
    view = _view(counters, slo_ms=5.0, now=20.0, started=0.0)
    # The last 5 s hold 50 requests, 45 completed: 9 per second.
    assert view.requests_per_s == pytest.approx(9.0)
    # 180 completed latencies, 20 each of 1..9 ms: nearest-rank p50 = 5, p90 = 9, p99 = 9.
    assert (view.p50_ms, view.p90_ms, view.p99_ms) == (5.0, 9.0, 9.0)
    # Within 5 ms: latencies 1..5 of every 10 requests; the refused one is a miss.
    assert view.attainment == pytest.approx(0.5)
    assert (view.queued, view.switches, view.rejected, view.route) == (3, 3, 20, "t[0,1] @ a>b")


def test_a_fast_task_is_rated_over_the_span_its_window_covers() -> None:
    counters = TaskCounters("t")
    for i in range(2 * LIVE_REQUESTS):  # 1,000 requests/s for 2 s
        counters.completed_one(_done(98.0 + i / 1000), latency_ms=1.0)
    view = _view(counters, slo_ms=5.0, now=100.0, started=0.0)
    assert view.requests_per_s == pytest.approx(1000.0, rel=0.01)
