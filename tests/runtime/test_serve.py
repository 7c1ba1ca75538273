"""Serving real requests end to end: closed and Poisson load, scoring, arrival orders."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from sparseloom.runtime.load import LoadSpec
from sparseloom.runtime.report import as_json, render
from tests.runtime.support import check_invariant, exact_accuracy, run


@pytest.mark.parametrize("load", [LoadSpec("closed", queries=60),
                                  LoadSpec("poisson", queries=60, rate=400.0)],
                         ids=["closed", "poisson"])
def test_tiny_serves_every_request_and_scores_it_exactly(tiny: tuple[Any, Any],
                                                         load: LoadSpec) -> None:
    result = run(tiny, load)
    summary = result.summary
    check_invariant(result)
    assert summary.completed == summary.submitted == 60
    task = summary.tasks[0]
    assert task.accuracy_measured == pytest.approx(exact_accuracy(tiny, result, "tiny"))
    assert task.accuracy_profile == task.accuracy_profile  # the profile's figure, not NaN
    assert not summary.valid and "too few requests for a p99" in summary.reasons[0]
    assert "tiny" in render(summary) and as_json(summary)["tasks"][0]["task"] == "tiny"
    # A processor whose cores ran another's wide stages shows both shares and their sum.
    lending = attrs.evolve(summary, utilisation={"ort:CPU": 0.42}, lent={"ort:CPU": 0.5})
    assert "ort:CPU 42% (+50% lent, 92% busy)" in render(lending)
    assert "lent" not in render(attrs.evolve(lending, lent={}))


def test_tiny_with_100_queries_is_valid(tiny: tuple[Any, Any]) -> None:
    summary = run(tiny, LoadSpec("closed", queries=100)).summary
    assert summary.valid, summary.reasons
    assert summary.tasks[0].latency.count == 100
    assert summary.pipeline_bound_rps > 0 and summary.memory["loaded_bytes"] > 0


@pytest.mark.parametrize("load", [
    LoadSpec("closed", queries=40),
    LoadSpec("poisson", queries=40, rate=300.0),
    LoadSpec("closed", queries=40, arrival_order=("digits_b", "digits_a"), join_after=5),
    LoadSpec("poisson", queries=40, rate=300.0, arrival_order=("digits_a", "digits_b")),
], ids=["closed", "poisson", "closed-order", "poisson-order"])
def test_two_task_file_workload(two_tasks: tuple[Any, Any], load: LoadSpec) -> None:
    result = run(two_tasks, load)
    check_invariant(result)
    summary = result.summary
    assert summary.completed == summary.submitted == 80
    for task in summary.tasks:
        assert task.completed == 40
        assert task.accuracy_measured == pytest.approx(
            exact_accuracy(two_tasks, result, task.task))
        # Its own rate: its requests ÷ the time from its first to its last one, never below
        # its share of the whole run.
        own = [r for r in result.records if r.task == task.task]
        span = max(r.finished_s for r in own) - min(r.submitted_s for r in own)
        assert task.own_throughput_rps == pytest.approx(40 / span, rel=1e-6)
        assert task.own_throughput_rps >= task.throughput_rps * (1 - 1e-9)
    if load.arrival_order:
        first, second = load.arrival_order
        starts = {t: min(r.submitted_s for r in result.records if r.task == t)
                  for t in (first, second)}
        assert starts[first] < starts[second]


def test_a_closed_run_lasts_its_minimum_duration_or_its_queries(tiny: tuple[Any, Any]
                                                                ) -> None:
    from sparseloom.core.errors import ConfigError

    summary = run(tiny, LoadSpec("closed", queries=10, min_duration_s=0.4)).summary
    # (the last request's end is stamped just before the check that stops issuing)
    assert summary.wall_s >= 0.35 and summary.submitted == summary.completed > 10
    assert summary.completed % 10 == 0  # whole passes of the queries
    # The queries end later than the minimum: exactly the queries.
    assert run(tiny, LoadSpec("closed", queries=30, min_duration_s=1e-6)).summary.completed == 30
    with pytest.raises(ConfigError, match="minimum duration is for closed loads"):
        LoadSpec("poisson", queries=10, rate=5.0, min_duration_s=1.0)


def test_a_minimum_duration_gives_every_task_the_same_whole_passes(
        two_tasks: tuple[Any, Any]) -> None:
    # A pass of 10 requests per task ends in milliseconds: the run takes many, and no task
    # goes on alone (each task's requests are a whole number of passes, the same for all).
    summary = run(two_tasks, LoadSpec("closed", queries=10, min_duration_s=0.3)).summary
    done = {t.task: t.completed for t in summary.tasks}
    assert summary.wall_s >= 0.25 and len(set(done.values())) == 1, done
    (count,) = set(done.values())
    assert count > 10 and count % 10 == 0 and summary.submitted == summary.completed


def test_duration_stops_issuing(tiny: tuple[Any, Any]) -> None:
    summary = run(tiny, LoadSpec("poisson", queries=None, rate=100.0, duration_s=0.5)).summary
    assert 0 < summary.submitted == summary.completed + summary.failed
