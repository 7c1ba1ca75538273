"""The contention model and the contention-aware policy."""

from __future__ import annotations

import numpy as np
import pytest

from sparseloom.core.registry import get_registry
from sparseloom.core.types import SLO
from sparseloom.plan.contention import loaded_latency
from tests.plan.tables import random_table


def test_one_task_alone_sees_no_waiting() -> None:
    figures = loaded_latency(np.array([[3.0, 2.0]]), np.array([0.5]))
    assert figures.latency_ms[0] == pytest.approx(5.5)
    assert figures.bottleneck_ms == pytest.approx(3.0)


def test_two_tasks_on_one_processor_wait_for_each_other() -> None:
    # Closed loop, both on one processor with 4 ms each: each waits for the other's request.
    figures = loaded_latency(np.array([[4.0], [4.0]]), np.zeros(2))
    assert figures.latency_ms == pytest.approx([8.0, 8.0], rel=0.05)
    assert figures.utilisation[0] == pytest.approx(1.0, rel=0.05)
    assert figures.bottleneck_ms == pytest.approx(8.0)


def test_contention_policy_does_not_load_the_bottleneck_more_than_algorithm1() -> None:
    table = random_table(4, 4, 2, 2, seed=5)
    slos = {name: SLO(0.72, 200.0) for name in table.tasks}
    plans = {name: get_registry().create("policy", name).plan(
        list(table.tasks), table, table.processors, slos)
        for name in ("sparseloom", "sparseloom-contention")}

    def bottleneck(plan) -> float:
        load = np.zeros(len(table.processors))
        for task, variant in plan.variants.items():
            profile = table.task(task)
            for j, (c, p) in enumerate(zip(variant.choices, plan.processors_of(task), strict=True)):
                load[table.processors.index(p)] += profile.latency_ms[j, c,
                                                                      table.processors.index(p)]
        return float(load.max())

    assert bottleneck(plans["sparseloom-contention"]) <= bottleneck(plans["sparseloom"]) + 1e-9
    assert all(plans["sparseloom-contention"].feasible.values())
