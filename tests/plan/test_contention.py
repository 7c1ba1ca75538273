"""The contention model and the contention-aware policy."""

from __future__ import annotations

import numpy as np
import pytest

from sparseloom.core.registry import get_registry
from sparseloom.core.types import SLO
from sparseloom.plan.contention import loaded_latency, pareto_rows, segments, visit_counts
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


def test_a_short_task_behind_a_long_one_waits_for_all_of_it() -> None:
    # FCFS without preemption: 1 ms requests queue behind a 27 ms one on the same worker; a
    # processor-sharing model would charge them only ~1 ms of waiting.
    figures = loaded_latency(np.array([[27.0], [1.0]]), np.zeros(2))
    assert figures.latency_ms[1] > 20.0
    assert figures.latency_ms[0] == pytest.approx(28.0, rel=0.05)


def test_separate_processors_do_not_interfere() -> None:
    figures = loaded_latency(np.array([[27.0, 0.0], [0.0, 1.0]]), np.zeros(2))
    assert figures.latency_ms == pytest.approx([27.0, 1.0])
    assert figures.utilisation == pytest.approx([1.0, 1.0])


def test_each_visit_waits_again() -> None:
    # Order q0, q1, q0: the task queues twice at q0 behind the other task's request.
    once = loaded_latency(np.array([[2.0, 1.0], [5.0, 0.0]]), np.zeros(2),
                          visits=np.array([[1.0, 1.0], [1.0, 0.0]]))
    twice = loaded_latency(np.array([[2.0, 1.0], [5.0, 0.0]]), np.zeros(2),
                           visits=np.array([[2.0, 1.0], [1.0, 0.0]]))
    assert twice.latency_ms[0] > once.latency_ms[0]


def test_visit_counts_and_segments_follow_the_order() -> None:
    assert visit_counts(np.array([0, 1, 0]), 3).tolist() == [2.0, 1.0, 0.0]
    assert visit_counts(np.array([1, 1, 1]), 2).tolist() == [0.0, 1.0]
    assert segments(np.array([0, 0, 1, 1, 0])).tolist() == [0, 0, 1, 1, 2]


def test_batched_solve_equals_one_by_one() -> None:
    rng = np.random.default_rng(0)
    demand, delay = rng.uniform(0.5, 5.0, (7, 4, 3)), rng.uniform(0.0, 1.0, (7, 4))
    batch = loaded_latency(demand, delay)
    for i in range(7):
        single = loaded_latency(demand[i], delay[i])
        assert batch.latency_ms[i] == pytest.approx(single.latency_ms, rel=1e-4)  # tolerance


@pytest.mark.parametrize("seed", range(5))
def test_pareto_rows_is_the_front(seed: int) -> None:
    rng = np.random.default_rng(seed)
    costs = rng.integers(0, 6, (200, 3)).astype(float)
    kept = set(pareto_rows(costs, 10**6).tolist())
    for i, row in enumerate(costs):
        dominated = any(np.all(other <= row) and (np.any(other < row) or j < i)
                        for j, other in enumerate(costs) if j != i)
        assert (i in kept) == (not dominated)
    assert len(pareto_rows(costs, 2)) == min(2, len(kept))
