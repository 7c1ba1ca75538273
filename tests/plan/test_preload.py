"""The hot-subgraph preloader: hotness, the budget, full preloading, switch cost."""

from __future__ import annotations

import numpy as np
import pytest

from sparseloom.core.errors import PlanError
from sparseloom.core.types import SLO
from sparseloom.plan.preload import hotness, preload
from sparseloom.plugins.policies.sparseloom import SparseLoomPolicy
from tests.plan.tables import random_table, task_profile


def planned(seed: int = 0):
    table = random_table(3, 4, 2, 2, seed=seed)
    slos = {name: SLO(0.75, 15.0) for name in table.tasks}
    return table, SparseLoomPolicy().plan(list(table.tasks), table, table.processors, slos)


def test_hotness_counts_frequency_over_feasible_set_size() -> None:
    # S = 2, V = 2, P = 1; only (0, 1) and (1, 1) meet the single SLO: position 1 always
    # uses variant 1 (2 / 2), position 0 splits (1 / 2 each).
    latency = np.ones((2, 2, 1))
    profile = task_profile("x", latency, np.array([0.5, 0.9, 0.5, 0.9]))
    hot = hotness(profile, [0, 0], [SLO(0.8, 100.0)])
    assert hot.tolist() == [[0.5, 0.5], [0.0, 1.0]]


@pytest.mark.parametrize("budget", [0.2, 0.5, 0.8])
def test_never_exceeds_the_budget_and_prefers_hot_subgraphs(budget: float) -> None:
    table, plan = planned()
    try:
        chosen = preload(table, plan, budget=budget)
    except PlanError as error:  # the plan itself does not fit: the message says the minimum
        assert "minimum budget" in str(error)
        return
    assert chosen.resident_bytes <= chosen.budget_bytes == round(budget * chosen.full_bytes)
    assert chosen.resident_bytes == sum(r.memory_bytes for r in chosen.resident)
    assert chosen.switch_cost_ms(plan) == 0.0  # the plan's own subgraphs are loaded first


def test_full_budget_loads_everything_and_bytes_are_exact() -> None:
    table, plan = planned(1)
    everything = preload(table, plan, budget=1.0)
    candidates = sum(p.n_positions * p.n_variants for p in table.tasks.values())
    assert len(everything.resident) == candidates
    assert everything.resident_bytes == everything.full_bytes
    assert preload(table, plan, budget=everything.full_bytes).resident_bytes == \
        everything.full_bytes


def test_switch_cost_counts_non_resident_subgraphs() -> None:
    table, plan = planned(2)
    alone = preload(table, plan, budget=0.01, pin_plan=False)
    assert alone.resident_bytes <= alone.budget_bytes
    missing = sum(1 for task, variant in plan.variants.items()
                  for j, c in enumerate(variant.choices)
                  if not alone.is_resident(task, j, c, plan.processors_of(task)[j]))
    assert alone.switch_cost_ms(plan) == pytest.approx(11.0 * missing)  # compile 10 + load 1


@pytest.mark.parametrize("budget", [0.0, 1.5, -3, True])
def test_bad_budgets_are_refused(budget: object) -> None:
    table, plan = planned()
    with pytest.raises(PlanError):
        preload(table, plan, budget=budget)  # type: ignore[arg-type]
