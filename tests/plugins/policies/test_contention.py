"""``sparseloom-contention`` against a brute-force search over the same objective."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from sparseloom.core.types import SLO
from sparseloom.plugins.policies import contention
from sparseloom.plugins.policies.contention import ContentionPolicy
from sparseloom.plugins.policies.sparseloom import SparseLoomPolicy
from sparseloom.profile.table import ProfileTable
from tests.plan.tables import random_table


def plan_key(policy: ContentionPolicy, table: ProfileTable, order: tuple[int, ...],
             rows: list[int], slos: dict[str, SLO]) -> tuple:
    """The policy's ranking key of one plan, computed from the table's own latency API."""
    p = len(table.processors)
    demand = np.zeros((1, len(table.tasks), p))
    delay = np.zeros((1, len(table.tasks)))
    for t, (name, profile) in enumerate(table.tasks.items()):
        choice = profile.choices([rows[t]])[0]
        for j, q in enumerate(order):
            demand[0, t, q] += profile.latency_ms[j, choice[j], q]
        delay[0, t] = table.latency(name, choice, np.array(order)) - demand[0, t].sum()
    visits = np.zeros(p)
    for j, q in enumerate(order):
        if j == 0 or order[j - 1] != q:
            visits[q] += 1
    limit = np.array([slos[n].latency_ms for n in table.tasks])
    return tuple(policy._keys(demand, delay, visits, limit)[0].tolist())


def brute_force(policy: ContentionPolicy, table: ProfileTable, slos: dict[str, SLO]) -> tuple:
    """Least key over every order × every combination of accuracy-feasible variants."""
    s = next(iter(table.tasks.values())).n_positions
    pools = []
    for name, profile in table.tasks.items():
        rows = np.flatnonzero(profile.accuracy() >= slos[name].accuracy)
        pools.append(rows if rows.size else [int(np.argmax(profile.accuracy()))])
    return min(plan_key(policy, table, order, list(rows), slos)
               for order in itertools.product(range(len(table.processors)), repeat=s)
               for rows in itertools.product(*pools))


def planned_key(policy: ContentionPolicy, table: ProfileTable, slos: dict[str, SLO]) -> tuple:
    plan = policy.plan(list(table.tasks), table, table.processors, slos)
    order = tuple(table.processors.index(p) for p in plan.order)
    rows = [int(table.task(n).index(plan.variants[n].choices)) for n in table.tasks]
    return plan_key(policy, table, order, rows, slos)


def slos_for(table: ProfileTable, seed: int) -> dict[str, SLO]:
    rng = np.random.default_rng(seed + 100)
    return {name: SLO(rng.uniform(0.72, 0.84), rng.uniform(10.0, 40.0)) for name in table.tasks}


@pytest.mark.parametrize(("variants", "positions", "processors"), [(3, 2, 2), (2, 3, 2)])
def test_matches_brute_force_on_small_tables(variants: int, positions: int,
                                             processors: int) -> None:
    # Every order is refined (|Ω| <= REFINED_ORDERS + 1) and every pool product is small, so
    # the only approximation left is the Pareto pruning; see the module doc.
    policy = ContentionPolicy()
    gaps = []
    for seed in range(12):
        table = random_table(3, variants, positions, processors, seed=seed)
        slos = slos_for(table, seed)
        found, best = planned_key(policy, table, slos), brute_force(policy, table, slos)
        assert found[:1] == best[:1]                              # same number of misses
        gaps.append(0.0 if found <= best else
                    max(abs(f - b) / max(abs(b), 1e-9) for f, b in zip(found, best, strict=True)))
    assert sum(g == 0.0 for g in gaps) >= 10                      # optimal on most tables
    assert max(gaps) < 0.05                                       # and close on the rest


def test_descent_path_is_close_to_brute_force(monkeypatch: pytest.MonkeyPatch) -> None:
    # Force steepest descent instead of the exhaustive pass: still at or near the optimum.
    monkeypatch.setattr(contention, "EXHAUSTIVE", 1)
    policy = ContentionPolicy()
    for seed in range(6):
        table = random_table(3, 3, 2, 2, seed=seed)
        slos = slos_for(table, seed)
        found, best = planned_key(policy, table, slos), brute_force(policy, table, slos)
        assert found[0] == best[0]
        assert found[1] <= best[1] * 1.10 + 1e-9


@pytest.mark.parametrize("seed", range(3))
def test_never_worse_than_algorithm1_under_the_model(seed: int) -> None:
    table = random_table(6, 4, 3, 3, seed=seed)
    slos = slos_for(table, seed)
    policy = ContentionPolicy()
    ours = planned_key(policy, table, slos)
    theirs = SparseLoomPolicy().plan(list(table.tasks), table, table.processors, slos)
    order = tuple(table.processors.index(p) for p in theirs.order)
    rows = [int(table.task(n).index(theirs.variants[n].choices)) for n in table.tasks]
    assert ours <= plan_key(policy, table, order, rows, slos)


def test_spent_budget_falls_back_to_the_warm_start() -> None:
    table = random_table(6, 4, 3, 3, seed=1)
    slos = slos_for(table, 1)
    hurried = ContentionPolicy(budget_s=1e-9)
    plan = hurried.plan(list(table.tasks), table, table.processors, slos)
    assert set(plan.variants) == set(table.tasks)
    # The fallback is a plan the model ranks no better than a full search's.
    assert planned_key(ContentionPolicy(), table, slos) <= planned_key(hurried, table, slos)


def test_reports_loaded_latency_and_feasibility_against_it() -> None:
    table = random_table(4, 3, 2, 2, seed=3)
    slos = {name: SLO(0.0, 1e6) for name in table.tasks}
    plan = ContentionPolicy().plan(list(table.tasks), table, table.processors, slos)
    assert all(plan.feasible.values())
    for name in table.tasks:
        isolated = table.latency(name, np.array(plan.variants[name].choices),
                                 np.array([table.processors.index(p)
                                           for p in plan.processors_of(name)]))
        assert plan.estimated_latency_ms[name] >= isolated - 1e-9
    tight = {name: SLO(0.0, 1e-3) for name in table.tasks}
    plan = ContentionPolicy().plan(list(table.tasks), table, table.processors, tight)
    assert not any(plan.feasible.values()) and all(plan.infeasible_reason.values())
