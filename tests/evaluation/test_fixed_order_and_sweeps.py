"""The forced-order policy, in-place stages and slowdown in the simulator, the scale sweep."""

from __future__ import annotations

import numpy as np
import pytest

from sparseloom.core.errors import PlanError
from sparseloom.core.registry import get_registry
from sparseloom.core.types import Plan, StitchedVariant
from sparseloom.evaluation.fixed_order import FIXED_ORDER_POLICY, forced_order
from sparseloom.evaluation.harness import measured_slowdown
from sparseloom.evaluation.simulator import SimConfig, simulate
from sparseloom.evaluation.sweeps import scale_sweep
from sparseloom.evaluation.synthetic import synthetic_profile, task_profile
from sparseloom.plan.api import make_plan
from sparseloom.profile.table import ProfileTable


class _OneProcessorPolicy:
    """Every task: variant 0 at both positions, both on processor A."""

    def plan(self, tasks, profile, processors, slos):
        return Plan("one", ("A", "A"), {t: StitchedVariant(t, (0, 0)) for t in tasks})


def _two_stages_on_a(tasks: tuple[str, ...]) -> ProfileTable:
    table = ProfileTable("hand", ("A",))
    for name in tasks:
        table.tasks[name] = task_profile(name, np.ones((2, 1, 1)), accuracy=np.array([0.9]))
    return table


def test_consecutive_stages_on_one_processor_run_in_place() -> None:
    # The worker runs x's second stage at once (x: 0-2 ms), then y's two (2-4 ms); x's next
    # request waits behind y. A queue hop between stages would interleave them instead.
    table = _two_stages_on_a(("x", "y"))
    result = simulate(table, SimConfig(queries=2, monitor=False, request_overhead_ms=0),
                      policy=_OneProcessorPolicy())
    by_task = {t.task: t for t in result.tasks}
    assert by_task["x"].latency.mean_ms == pytest.approx((2 + 4) / 2)
    assert by_task["y"].latency.mean_ms == pytest.approx(4.0)
    assert result.makespan_ms == pytest.approx(8.0)


def test_slowdown_scales_every_stage_of_its_processor() -> None:
    table = _two_stages_on_a(("x",))
    result = simulate(table, SimConfig(queries=3, monitor=False, slowdown={"A": 1.5},
                                       request_overhead_ms=0),
                      policy=_OneProcessorPolicy())
    assert result.makespan_ms == pytest.approx(9.0)
    assert measured_slowdown({"utilisation": {"A": 0.5}, "wall_s": 0.018},
                             {"busy_ms": {"A": 6.0}}) == pytest.approx({"A": 1.5})
    assert measured_slowdown({"wall_s": 1.0}, {"busy_ms": {"A": 6.0}}) == {}


def test_forced_order_is_registered_for_the_block_only() -> None:
    table = synthetic_profile(tasks=2, positions=2, variants=3, processors=("CPU", "GPU"))
    with forced_order(("GPU", "CPU")) as name:
        assert name == FIXED_ORDER_POLICY
        planned = make_plan(table, policy=name)
        assert all(planned.plan.processors_of(t) == ("GPU", "CPU") for t in table.tasks)
        with pytest.raises(PlanError, match="cannot nest"), forced_order(("CPU", "CPU")):
            pass
    assert FIXED_ORDER_POLICY not in {r.name for r in get_registry().policies()}
    with forced_order(("GPU", "NPU")) as name, pytest.raises(PlanError, match="NPU"):
        make_plan(table, policy=name)


def test_scale_sweep_gives_one_row_per_case_and_policy() -> None:
    cases = {"small": synthetic_profile(tasks=2, positions=2, variants=3,
                                        processors=("CPU", "GPU"))}
    rows = scale_sweep(cases, ("sparseloom", "av-p"), queries=10)
    assert [(r["case"], r["policy"]) for r in rows] == [("small", "sparseloom"),
                                                         ("small", "av-p")]
    for row in rows:
        assert 0.0 <= row["violation_rate"] <= 1.0 and row["throughput_rps"] > 0
        assert row["decision_ms"] >= 0 and row["decisions"] >= 3
        assert (row["tasks"], row["positions"], row["variants"], row["processors"]) == (
            2, 2, 3, 2)
