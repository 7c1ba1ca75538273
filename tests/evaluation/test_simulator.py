"""The simulator against pipelines computed by hand, and driving the real policies."""

from __future__ import annotations

import numpy as np
import pytest

from sparseloom.core.errors import SimulationError
from sparseloom.core.types import SLO, Plan, StitchedVariant
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


def test_one_task_pipeline_latency_is_the_chain_plus_handoff() -> None:
    table = _pipeline(("x",), handoff_ms=0.5)
    result = simulate(table, SimConfig(queries=5, request_overhead_ms=0,
                                       slos={"x": SLO(0.8, 3.4)}),
                      policy=_FixedPolicy())
    (task,) = result.tasks
    assert task.latency.p50_ms == pytest.approx(3.5)
    assert task.completed == 5
    assert result.makespan_ms == pytest.approx(5 * 3.5)
    assert result.throughput_rps == pytest.approx(1000 / 3.5)
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
