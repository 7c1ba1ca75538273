"""The simulator against pipelines computed by hand, and driving the real policies."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sparseloom.core.errors import SimulationError
from sparseloom.core.types import SLO, Plan, StitchedVariant
from sparseloom.evaluation.simresult import served_accuracy
from sparseloom.evaluation.simulator import SimConfig, pipeline_bound_rps, simulate
from sparseloom.evaluation.synthetic import synthetic_profile, task_profile
from sparseloom.profile.table import ProfileTable


class _FixedPolicy:
    """Every task: variant 0 at every position, over the order (A, B)."""

    def plan(self, tasks, profile, processors, slos):
        return Plan("fixed", ("A", "B"), {t: StitchedVariant(t, (0, 0)) for t in tasks})


def _pipeline(tasks: tuple[str, ...], handoff_ms: float = 0.0) -> ProfileTable:
    # Stage 0 costs 2 ms on A, stage 1 costs 1 ms on B (the other processor's cost is unused).
    latency = np.array([[[2.0, 9.0]], [[9.0, 1.0]]])
    handoff = np.array([[[0.0, handoff_ms], [handoff_ms, 0.0]]])
    table = ProfileTable("hand", ("A", "B"))
    for name in tasks:
        table.tasks[name] = task_profile(name, latency, accuracy=np.array([0.9]),
                                         handoff_ms=handoff)
    return table


def test_one_task_pipeline_latency_is_the_chain_plus_handoffs() -> None:
    # A (2 ms), hand-off 0.5 ms, B (1 ms): the first request takes 3.5 ms. Each next one is
    # issued on B's worker and reaches A by a wake-up (the B→A hand-off, 0.5 ms): 4 ms from
    # submission to end. Five requests end at 3.5 + 4 × 4 = 19.5 ms; p50 (nearest rank) 4.
    table = _pipeline(("x",), handoff_ms=0.5)
    result = simulate(table, SimConfig(queries=5, request_overhead_ms=0,
                                       slos={"x": SLO(0.8, 3.9)}),
                      policy=_FixedPolicy())
    (task,) = result.tasks
    assert task.latency.p50_ms == pytest.approx(4.0)
    assert task.latency.mean_ms == pytest.approx(19.5 / 5)
    assert task.completed == 5
    assert result.makespan_ms == pytest.approx(19.5)
    assert result.throughput_rps == pytest.approx(5000 / 19.5)
    assert task.violated == "latency" and result.violation_rate == 1.0


def test_two_tasks_share_the_bottleneck_as_computed_by_hand() -> None:
    # X, Y closed loop over A (2 ms) then B (1 ms). By hand: X latencies 3, 4, 4, 4; Y waits
    # for X on A first: 5, 4, 4, 4; the last request ends at 17 ms; A is busy 16 of 17 ms.
    table = _pipeline(("x", "y"))
    slos = {"x": SLO(0.8, 4.5), "y": SLO(0.95, 10.0)}
    result = simulate(table, SimConfig(queries=4, slos=slos, monitor=False,
                                       request_overhead_ms=0),
                      policy=_FixedPolicy())
    by_task = {t.task: t for t in result.tasks}
    assert by_task["x"].latency.mean_ms == pytest.approx(15 / 4)
    assert by_task["y"].latency.mean_ms == pytest.approx(17 / 4)
    assert by_task["y"].latency.p99_ms == pytest.approx(5.0)
    assert result.makespan_ms == pytest.approx(17.0)
    assert result.throughput_rps == pytest.approx(8000 / 17)
    assert result.pipeline_bound_rps == pytest.approx(500.0)
    assert result.utilisation == pytest.approx({"A": 16 / 17, "B": 8 / 17})
    # x meets both SLOs; y's accuracy SLO (0.95) is above the variant's 0.9.
    assert by_task["x"].violated == "" and by_task["y"].violated == "accuracy"
    assert result.violation_rate == pytest.approx(0.5)


def test_loading_a_non_resident_subgraph_occupies_its_processor() -> None:
    table = ProfileTable("hand", ("A", "B"))
    table.tasks["x"] = task_profile("x", np.array([[[2.0, 9.0]], [[9.0, 1.0]]]),
                                    accuracy=np.array([0.9]), load_ms=10.0)
    # A budget of 0 bytes cannot hold the plan's own subgraphs.
    with pytest.raises(Exception, match="budget"):
        simulate(table, SimConfig(queries=2, memory_budget=0), policy=_FixedPolicy())
    result = simulate(table, SimConfig(queries=2, request_overhead_ms=0), policy=_FixedPolicy())
    assert result.load_ms == 0.0 and result.makespan_ms == pytest.approx(6.0)


def test_the_registered_policies_drive_the_simulation_with_joins() -> None:
    table = synthetic_profile(tasks=3, positions=2, variants=4, processors=("CPU", "GPU"))
    order = ("task2", "task0", "task1")
    for policy in ("sparseloom", "sv-lo-np", "av-p"):
        result = simulate(table, SimConfig(policy=policy, queries=30, arrival_order=order))
        assert [t.task for t in result.tasks] == list(order)
        assert all(t.completed == 30 for t in result.tasks)
        assert result.switches >= 2  # one re-plan per join
        assert 0.0 <= result.violation_rate <= 1.0
        assert 0 < result.pipeline_share <= 1.0 + 1e-9


def test_unknown_task_in_the_arrival_order_is_refused() -> None:
    table = synthetic_profile(tasks=2, positions=2, variants=3, processors=("CPU", "GPU"))
    with pytest.raises(SimulationError, match="arrival order"):
        simulate(table, SimConfig(arrival_order=("task0", "nope")))


def test_pipeline_bound_is_tasks_over_the_busiest_processor() -> None:
    table = _pipeline(("x", "y"))

    class Route:
        choices, processors = (0, 0), (0, 1)

    assert pipeline_bound_rps(table, {"x": Route(), "y": Route()}) == pytest.approx(500.0)


class _NonPartitioned:
    """Every task's whole chain (variant 0 at both positions) on the processor given."""

    def __init__(self, where: dict[str, str]) -> None:
        self.where = where

    def plan(self, tasks, profile, processors, slos):
        return Plan("np", ("A", "A"), {t: StitchedVariant(t, (0, 0)) for t in tasks},
                    assignment={t: (self.where[t],) * 2 for t in tasks})


def _np_table(stages: dict[str, tuple[float, float]], processor: dict[str, int]
              ) -> ProfileTable:
    # Each task's two stage times on its own processor; 9 ms elsewhere (unused). The
    # same-processor hand-off is 0.7 ms in the table: a chain on one processor runs its next
    # stage in place and never pays it.
    table = ProfileTable("np", ("A", "B"))
    for name, (first, second) in stages.items():
        latency = np.full((2, 1, 2), 9.0)
        latency[0, 0, processor[name]], latency[1, 0, processor[name]] = first, second
        table.tasks[name] = task_profile(name, latency, accuracy=np.array([0.9]),
                                         handoff_ms=np.full((1, 2, 2), 0.7))
    return table


def test_np_plan_with_each_task_on_its_own_processor_as_computed_by_hand() -> None:
    # x: 2 + 1 ms on A, y: 3 + 3 ms on B, 0.25 ms runtime overhead per request, 3 requests
    # each. By hand: no sharing, no hand-off: x's requests take 3.25 ms and end at 9.75 ms,
    # y's take 6.25 ms and end at 18.75 ms; 6 requests / 18.75 ms = 320 requests/s; A is
    # busy 9.75 of 18.75 ms, B all of it.
    table = _np_table({"x": (2.0, 1.0), "y": (3.0, 3.0)}, {"x": 0, "y": 1})
    result = simulate(table, SimConfig(queries=3, monitor=False, request_overhead_ms=0.25,
                                       slos={"x": SLO(0.8, 10.0), "y": SLO(0.8, 10.0)}),
                      policy=_NonPartitioned({"x": "A", "y": "B"}))
    by_task = {t.task: t for t in result.tasks}
    assert by_task["x"].processors == ("A", "A") and by_task["y"].processors == ("B", "B")
    assert by_task["x"].latency.mean_ms == pytest.approx(3.25)
    assert by_task["y"].latency.mean_ms == pytest.approx(6.25)
    assert result.makespan_ms == pytest.approx(18.75)
    assert result.throughput_rps == pytest.approx(320.0)
    assert result.utilisation == pytest.approx({"A": 9.75 / 18.75, "B": 1.0})


def test_np_plan_sharing_a_processor_serves_the_earliest_deadline_first() -> None:
    # x (1 + 1 ms, SLO 2.5 ms) and y (2 + 1 ms, SLO 100 ms) both whole on A, 3 requests each,
    # closed loop. The runtime's worker completes x's request, the load issues x's next one
    # into A's queue from that thread, then the worker takes the earliest deadline: x's new
    # request (deadline t + 2.5) before y's (0 + 100). By hand: x runs 0-2, 2-4, 4-6
    # (latencies 2, 2, 2); y 6-9, 9-12, 12-15 (latencies 9, 3, 3); 6 requests / 15 ms.
    # (Serving the queue's head first would alternate x, y and give x latencies 2, 5, 5.)
    table = _np_table({"x": (1.0, 1.0), "y": (2.0, 1.0)}, {"x": 0, "y": 0})
    slos = {"x": SLO(0.8, 2.5), "y": SLO(0.8, 100.0)}
    result = simulate(table, SimConfig(queries=3, monitor=False, request_overhead_ms=0,
                                       slos=slos),
                      policy=_NonPartitioned({"x": "A", "y": "A"}))
    by_task = {t.task: t for t in result.tasks}
    assert by_task["x"].latency.mean_ms == pytest.approx(2.0)
    assert by_task["y"].latency.mean_ms == pytest.approx(15 / 3)
    assert by_task["y"].latency.p99_ms == pytest.approx(9.0)  # nearest rank: the max
    assert result.makespan_ms == pytest.approx(15.0)
    assert result.throughput_rps == pytest.approx(400.0)
    assert result.violation_rate == 0.0
    assert result.utilisation == pytest.approx({"A": 1.0, "B": 0.0})


def test_service_times_follow_the_chosen_statistic() -> None:
    # One task on A: p25 2 + 1 ms, median 3 + 2 ms. p25: 3 ms a request; median: 5 ms.
    table = _np_table({"x": (2.0, 1.0)}, {"x": 0})
    table.tasks["x"].latency_median_ms[:, 0, 0] = (3.0, 2.0)
    policy = _NonPartitioned({"x": "A"})
    for service, per_request in (("p25", 3.0), ("median", 5.0)):
        result = simulate(table, SimConfig(queries=4, monitor=False, request_overhead_ms=0,
                                           service=service), policy=policy)
        assert result.makespan_ms == pytest.approx(4 * per_request)


def test_served_accuracy_misses_a_close_slo_as_often_as_the_binomial_says() -> None:
    # A variant right 98.4 % of the time, SLO 97.5 %, 100 requests: the served accuracy misses
    # the SLO when at most 97 are right. By hand, P(Binomial(100, 0.984) <= 97)
    # = 1 - P(98) - P(99) - P(100) = 0.216. Over 300 seeds the share of runs that violate lies
    # within 0.07 of it (about three standard errors, sqrt(0.216 · 0.784 / 300) = 0.024).
    table = ProfileTable("acc", ("A", "B"))
    table.tasks["x"] = task_profile("x", np.ones((2, 1, 2)), accuracy=np.array([0.984]))
    p_right = 0.984
    p_miss = 1 - sum(math.comb(100, k) * p_right**k * (1 - p_right)**(100 - k)
                     for k in (98, 99, 100))
    assert p_miss == pytest.approx(0.216, abs=5e-4)
    policy = _NonPartitioned({"x": "A"})
    slos = {"x": SLO(0.975, 1e9)}
    missed = [simulate(table, SimConfig(queries=100, monitor=False, slos=slos, seed=seed,
                                        score_served=True), policy=policy).violation_rate
              for seed in range(300)]
    assert np.mean(missed) == pytest.approx(p_miss, abs=0.07)
    # Without it, the profile's 98.4 % always meets the SLO.
    plain = simulate(table, SimConfig(queries=100, monitor=False, slos=slos), policy=policy)
    assert plain.violation_rate == 0.0
    assert plain.tasks[0].accuracy_served == pytest.approx(0.984)


def test_served_rows_are_drawn_as_the_runtime_draws_them() -> None:
    # 40 eval rows, 39 right (97.5 %). 80 requests: two whole passes, 78 right, exactly
    # 97.5 %. 100 requests: two passes (78 right) + 20 of the 40 rows drawn without
    # replacement, of which 19 or 20 are right (the one wrong row is drawn or not): 97 or 98 %.
    rng = np.random.default_rng(0)
    assert served_accuracy(rng, 0.975, 80, eval_rows=40) == pytest.approx(0.975)
    seen = {served_accuracy(rng, 0.975, 100, eval_rows=40) for _ in range(200)}
    assert seen == {0.97, 0.98}
