"""SparseLoom's joint optimizer (§3.3, Algorithm 1): one global order, one variant per task.

1. Θ^t: the stitched variants of task t whose accuracy meets the accuracy SLO and whose
   estimated latency under the order meets the latency SLO.
2. For every order p ∈ Ω (the paper's global orders, each processor used once:
   :func:`~sparseloom.plan.orders.paper_orders`), each task's lowest-latency member of Θ^t;
   ``L(p)`` is their mean over the tasks.
3. ``p* = argmin L(p)``; each task runs its lowest-latency member of Θ^t under p*.

Because the latency SLO depends on the order, a task may be feasible under some orders and not
others. Orders are therefore ranked first by how many *satisfiable* tasks (those feasible
under at least one order) they leave infeasible, then by ``L(p)`` over the tasks feasible
under them, then by the mean latency of every task's fastest variant (which only decides when
no task is satisfiable). With every task satisfiable under a common order this is exactly the
paper's ``argmin L(p)``. A task left infeasible gets the variant closest to its SLO
(:mod:`sparseloom.plan.feasible`), marked infeasible with the reason.

``sparseloom-repeat`` is the same optimizer over every assignment of positions to processors
(:func:`~sparseloom.plan.orders.all_orders`, repeats allowed): it minimises isolated latency,
so it may put every task's whole chain on the one fastest processor and leave the others idle.
It is not the paper's, and says so in its name.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import numpy as np

from sparseloom.core.errors import PlanError
from sparseloom.core.types import SLO, Plan
from sparseloom.plan.feasible import (
    TaskChoice,
    accuracy_rows,
    build_plan,
    closest_row,
    infeasible_reason,
    order_text,
)
from sparseloom.plan.orders import all_orders, best_per_order, paper_orders
from sparseloom.plan.policy import ProfilePolicy
from sparseloom.profile.table import ProfileTable


@attrs.frozen
class OrderScores:
    """Algorithm 1's per-order figures for T tasks and |Ω| orders.

    Attributes:
        orders: Ω as processor indices, (|Ω|, S).
        best_ms: each task's lowest latency in Θ^t under each order, ``inf`` where empty,
            (T, |Ω|).
        best_row: the stitched-variant row achieving it, ``-1`` where empty, (T, |Ω|).
        fastest_ms: each task's lowest latency of any variant under each order, (T, |Ω|).
        accurate: how many variants of each task meet its accuracy SLO, (T,).
        missed: per order, the satisfiable tasks it leaves infeasible, (|Ω|,).
        mean_ms: ``L(p)``, the mean of ``best_ms`` over the tasks feasible under p, (|Ω|,).
        chosen: the index of p* in ``orders``.
    """

    orders: np.ndarray
    best_ms: np.ndarray
    best_row: np.ndarray
    fastest_ms: np.ndarray
    accurate: np.ndarray
    missed: np.ndarray
    mean_ms: np.ndarray
    chosen: int


def common_positions(table: ProfileTable) -> int:
    """S, which a global order needs to be the same for every task."""
    positions = {p.n_positions for p in table.tasks.values()}
    if len(positions) != 1:
        raise PlanError(f"a global processor order needs the same number of positions in every "
                        f"task; the profile has {sorted(positions)}; profile the workload with "
                        "one --subgraphs value")
    return positions.pop()


def score_orders(table: ProfileTable, slos: Mapping[str, SLO],
                 orders: np.ndarray | None = None) -> OrderScores:
    """Evaluate every order of Ω for every task and pick p* (see the module doc)."""
    if orders is None:
        orders = paper_orders(common_positions(table), range(len(table.processors)))
    names = list(table.tasks)
    best = np.full((len(names), len(orders)), np.inf)
    row = np.full((len(names), len(orders)), -1, dtype=np.int64)
    fastest = np.full((len(names), len(orders)), np.inf)
    accurate = np.zeros(len(names), dtype=np.int64)
    for t, name in enumerate(names):
        profile = table.task(name)
        rows = accuracy_rows(profile, slos[name])
        accurate[t] = rows.size
        best[t], row[t] = best_per_order(profile, rows, orders)
        fastest[t] = best_per_order(profile, np.arange(profile.n_stitched), orders)[0]
    feasible = np.asarray(best <= np.array([slos[n].latency_ms for n in names])[:, None])
    satisfiable = np.asarray(feasible.any(axis=1))
    missed = (satisfiable[:, None] & ~feasible).sum(axis=0)
    counted = feasible.sum(axis=0)
    with np.errstate(invalid="ignore"):
        mean = np.where(counted > 0, np.where(feasible, best, 0.0).sum(axis=0)
                        / np.maximum(counted, 1), np.inf)
    chosen = int(np.lexsort((fastest.mean(axis=0), mean, missed))[0])
    return OrderScores(orders, best, row, fastest, accurate, missed, mean, chosen)


def algorithm1(table: ProfileTable, slos: Mapping[str, SLO],
               orders: np.ndarray | None = None) -> tuple[np.ndarray, dict[str, TaskChoice]]:
    """Algorithm 1: p* (processor indices) and each task's choice under it."""
    scores = score_orders(table, slos, orders)
    order = scores.orders[scores.chosen]
    choices: dict[str, TaskChoice] = {}
    for t, name in enumerate(table.tasks):
        profile, slo = table.task(name), slos[name]
        latency = scores.best_ms[t, scores.chosen]
        if latency <= slo.latency_ms:
            choices[name] = TaskChoice(name, scores.best_row[t, scores.chosen], order, latency)
            continue
        every = profile.latency_all(order)
        picked = closest_row(profile, slo, every)
        reason = infeasible_reason(
            profile, slo, int(scores.accurate[t]), float(scores.best_ms[t].min()),
            float(scores.fastest_ms[t].min()), float(latency), order_text(table, order))
        choices[name] = TaskChoice(name, picked, order, every[picked], False, reason)
    return order, choices


@attrs.define(eq=False)
class SparseLoomPolicy(ProfilePolicy):
    """SparseLoom's joint optimizer (Algorithm 1) over all V**S stitched variants × Ω."""

    name: str = attrs.field(default="sparseloom", init=False)
    #: Ω: the paper's orders (each processor once); ``sparseloom-repeat`` allows repeats.
    repeats: bool = attrs.field(default=False, kw_only=True)

    def decide(self, table: ProfileTable, slos: Mapping[str, SLO]) -> Plan:
        """p* = argmin mean latency over tasks; each task's fastest feasible variant under it."""
        positions = common_positions(table)
        build = all_orders if self.repeats else paper_orders
        order, choices = algorithm1(table, slos, build(positions, range(len(table.processors))))
        return build_plan(self.name, table, choices, order, slos, 0.0)


def repeat_policy() -> SparseLoomPolicy:
    """``sparseloom-repeat``: Algorithm 1 over every assignment, repeats allowed."""
    return SparseLoomPolicy(repeats=True)
