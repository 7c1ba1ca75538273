"""The hot-subgraph preloader: hotness, the budget, full preloading, switch cost."""

from __future__ import annotations

import attrs
import numpy as np
import pytest

from sparseloom.core.errors import BudgetError, PlanError
from sparseloom.core.types import SLO, Plan, StitchedVariant
from sparseloom.plan.preload import fit_plan, hotness, preload, route_extra_bytes
from sparseloom.plugins.policies.sparseloom import SparseLoomPolicy
from sparseloom.profile.table import ProfileTable
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


def memory(on_planned: list[list[int]]) -> np.ndarray:
    """(S = 2, V, P = 2) bytes: the given sizes where the plan (p0, p1) puts each position,
    1000 on the other processor (a preloader reading the wrong processor is way off)."""
    sizes = np.full((2, len(on_planned[0]), 2), 1000)
    sizes[0, :, 0], sizes[1, :, 1] = on_planned[0], on_planned[1]
    return sizes


def hot_table() -> tuple[ProfileTable, dict[str, list[SLO]]]:
    """Task x (S = 2, V = 3, P = 2, every stage 1 ms) and its SLO grid Ψ, hotness by hand.

    Accuracy of (i, j): (2,0) 0.95, (0,0) 0.85, (0,1) 0.82, (1,0) 0.81, the rest 0.5. Under
    Ψ = {SLO(0.8, 100), SLO(0.9, 100)}: Θ(0.8) = {(0,0), (0,1), (1,0), (2,0)}, Θ(0.9) =
    {(2,0)}, so Hotness = Σ_σ Occur / |Θ(σ)| is

        position 0: v0 2/4 = 0.5,  v1 1/4 = 0.25, v2 1/4 + 1/1 = 1.25
        position 1: v0 3/4 + 1/1 = 1.75, v1 1/4 = 0.25, v2 0

    Memory where the plan runs them (bytes): position 0 on p0 100 / 60 / 300, position 1 on
    p1 100 / 50 / 40; full preloading 650.
    """
    accuracy = np.full(9, 0.5)
    accuracy[[6, 0, 1, 3]] = [0.95, 0.85, 0.82, 0.81]
    x = task_profile("x", np.ones((2, 3, 2)), accuracy,
                     memory_bytes=memory([[100, 60, 300], [100, 50, 40]]))
    return (ProfileTable("hot", ["p0", "p1"], {"x": x}),
            {"x": [SLO(0.8, 100.0), SLO(0.9, 100.0)]})


def manual_plan(**choices: tuple[int, ...]) -> Plan:
    return Plan("manual", ("p0", "p1"),
                {task: StitchedVariant(task, c) for task, c in choices.items()})


def kept(chosen) -> list[tuple[str, int, int, str, int]]:
    return [(r.task, r.position, r.variant, r.processor, r.memory_bytes)
            for r in chosen.resident]


def test_hotness_of_the_hand_table() -> None:
    table, grid = hot_table()
    np.testing.assert_allclose(hotness(table.task("x"), [0, 1], grid["x"]),
                               [[0.5, 0.25, 1.25], [1.75, 0.25, 0.0]])


def test_the_hottest_subgraph_is_kept_before_cheaper_colder_ones() -> None:
    table, grid = hot_table()
    plan = manual_plan(x=(0, 0))
    # Plan's own 100 + 100 first; then (0, 2) at hotness 1.25 fills 500 exactly; the three
    # colder ones (150 bytes together) would have fitted instead but are not as hot.
    chosen = preload(table, plan, budget=500, grid=grid)
    assert kept(chosen) == [("x", 0, 0, "p0", 100), ("x", 1, 0, "p1", 100),
                            ("x", 0, 2, "p0", 300)]
    assert (chosen.resident_bytes, chosen.budget_bytes, chosen.full_bytes) == (500, 500, 650)
    assert [r.hotness for r in chosen.resident] == pytest.approx([0.5, 1.75, 1.25])
    assert chosen.switch_cost_ms(manual_plan(x=(2, 0))) == 0.0


def test_what_does_not_fit_is_skipped_and_colder_ones_still_load() -> None:
    table, grid = hot_table()
    chosen = preload(table, manual_plan(x=(0, 0)), budget=400, grid=grid)
    # (0, 2) needs 300 more than the 200 pinned: over 400, skipped. Then the 0.25 tie, smaller
    # first: (1, 1) 50, (0, 1) 60; then (1, 2) 40 at hotness 0: 350 bytes.
    assert kept(chosen)[2:] == [("x", 1, 1, "p1", 50), ("x", 0, 1, "p0", 60),
                                ("x", 1, 2, "p1", 40)]
    assert chosen.resident_bytes == 350
    # Switching to (2, 0) has to compile and load its non-resident (0, 2): 10 + 1 ms.
    assert chosen.switch_cost_ms(manual_plan(x=(2, 0))) == pytest.approx(11.0)


def test_algorithm2_alone_ranks_every_subgraph_by_hotness() -> None:
    table, grid = hot_table()
    chosen = preload(table, manual_plan(x=(0, 0)), budget=300, grid=grid, pin_plan=False)
    # 1.75 (1,0) 100; 1.25 (0,2) 300 does not fit; 0.5 (0,0) 100; 0.25 (1,1) 50; (0,1) 60
    # does not fit (310); 0 (1,2) 40: 290 bytes.
    assert [(r.position, r.variant) for r in chosen.resident] == [(1, 0), (0, 0), (1, 1),
                                                                   (1, 2)]
    assert chosen.resident_bytes == 290


def test_one_ranking_over_tasks_favours_no_task_for_coming_first() -> None:
    table, grid = hot_table()
    # y: Θ(0.8) = {(0,0), (1,0)}: position 0 v1 has hotness 1/2, more than any of x's
    # candidates but (0, 2), which does not fit.
    accuracy = np.full(9, 0.5)
    accuracy[[0, 3]] = 0.85
    y = task_profile("y", np.ones((2, 3, 2)), accuracy,
                     memory_bytes=memory([[100, 70, 500], [100, 500, 500]]))
    both = ProfileTable("hot", ["p0", "p1"], {"x": table.task("x"), "y": y})
    grid = {**grid, "y": [SLO(0.8, 100.0)]}
    chosen = preload(both, manual_plan(x=(0, 0), y=(0, 0)), budget=470, grid=grid)
    # pinned 400; then y's (0, 1) at 0.5 fills 470, before x's 0.25 ones (x comes first)
    assert kept(chosen)[4:] == [("y", 0, 1, "p0", 70)]
    assert chosen.resident_bytes == 470


def test_a_budget_below_the_plans_own_subgraphs_is_refused_with_the_minimum() -> None:
    table, grid = hot_table()
    with pytest.raises(PlanError, match="minimum budget is 200 bytes"):
        preload(table, manual_plan(x=(0, 0)), budget=199, grid=grid)
    with pytest.raises(PlanError, match="minimum budget is 200 bytes"):
        preload(table, manual_plan(x=(0, 0)), budget=0.3, grid=grid)  # 195 of 650 bytes
    assert preload(table, manual_plan(x=(0, 0)), budget=200, grid=grid).resident_bytes == 200


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


def test_a_wide_twin_and_a_lane_copy_are_reserved_in_the_budget() -> None:
    table, grid = hot_table()
    # Chain (0, 0): 100 on p0 + 100 on p1. A twin loads it again (200), a lane again (200).
    wide = attrs.evolve(manual_plan(x=(0, 0)), wide=("x",))
    assert route_extra_bytes(table, wide) == {"x": 200}
    both = attrs.evolve(wide, lanes=("x",))
    assert route_extra_bytes(table, both) == {"x": 400}
    chosen = preload(table, wide, budget=500, grid=grid)
    # 200 pinned + 200 twin = 400; the hottest candidate (0, 2), 300, no longer fits: the
    # first 0.25 one (50) does, then (0, 1) 60 would make 510: skipped; (1, 2) 40 fits: 490.
    assert chosen.route_bytes == 200
    assert kept(chosen)[2:] == [("x", 1, 1, "p1", 50), ("x", 1, 2, "p1", 40)]
    assert chosen.resident_bytes == 490 <= chosen.budget_bytes
    assert chosen.full_bytes == 650 + 200


def test_a_plan_whose_twins_do_not_fit_gives_them_up_then_its_lanes() -> None:
    table, grid = hot_table()
    plan = attrs.evolve(manual_plan(x=(0, 0)), wide=("x",), wide_when_quiet=("x",),
                        lanes=("x",))
    fitted, chosen, dropped = fit_plan(table, plan, budget=600, grid=grid)
    assert (fitted, dropped) == (plan, ())  # 200 + 400 fits
    fitted, chosen, dropped = fit_plan(table, plan, budget=450, grid=grid)
    assert dropped == ("no wide twins",) and fitted.lanes == ("x",)
    assert (fitted.wide, fitted.wide_when_quiet) == ((), ())
    assert chosen.route_bytes == 200 and chosen.resident_bytes <= 450
    fitted, chosen, dropped = fit_plan(table, plan, budget=250, grid=grid)
    assert dropped == ("no wide twins", "no lanes") and chosen.route_bytes == 0
    with pytest.raises(BudgetError, match="minimum budget is 200 bytes"):
        fit_plan(table, plan, budget=199, grid=grid)


def test_a_plan_gives_up_its_spares_before_its_twins() -> None:
    table, grid = hot_table()
    plan = attrs.evolve(manual_plan(x=(0, 0)), wide=("x",), spares=("x",))
    assert route_extra_bytes(table, plan) == {"x": 400}  # the twin's copy and the spare's
    fitted, chosen, dropped = fit_plan(table, plan, budget=600, grid=grid)
    assert (fitted, dropped) == (plan, ())  # 200 + 400 fits
    fitted, chosen, dropped = fit_plan(table, plan, budget=450, grid=grid)
    assert dropped == ("no spares",) and fitted.wide == ("x",) and fitted.spares == ()
    assert chosen.route_bytes == 200
    fitted, chosen, dropped = fit_plan(table, plan, budget=250, grid=grid)
    assert dropped == ("no spares", "no wide twins") and chosen.route_bytes == 0
