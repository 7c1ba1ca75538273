"""The hot-subgraph preloader (SparseLoom §3.4, Algorithm 2).

Hotness of subgraph s (task t, position j, source variant i) over the SLO grid Ψ:

    Hotness(s) = Σ_{σ∈Ψ} Occur(s, Θ^t(σ)) / |Θ^t(σ)|,

where Θ^t(σ) holds the stitched variants meeting σ under the plan's processors for t, and
Occur counts those using s at position j. A subgraph is hot when many feasible variants
share it or when it is one of few that can meet some SLO.

Loading: the plan's own subgraphs first (it cannot serve without them; ``pin_plan=False``
skips this, for Algorithm 2 on its own), then every other candidate in descending hotness
(ties: smaller first), each loaded when it still fits the global budget. The paper walks
tasks and positions in turn; one global ranking is used here because hotness is already
normalised per task and position (it sums to |Ψ'| over a position's variants, Ψ' the SLOs
with a non-empty Θ), so no task is favoured for coming first. A subgraph's memory is the
profile's ``memory_bytes`` on the processor the plan puts its position on.

The budget bounds the whole server, not the preloaded set alone: the plan's routes hold more
than their subgraphs where a task runs wide (its twin, ``Plan.wide``: the chain loaded again
with more threads) or on a lane (``Plan.lanes``: the chain loaded again on the lane's worker),
and those bytes (:func:`route_extra_bytes`) are reserved before any other subgraph is chosen.
A plan whose routes do not fit is reshaped by :func:`fit_plan` (no twins, then no lanes) before
it is refused. The runtime checks the same budget against what each load measured
(:mod:`sparseloom.runtime.switching`).
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from sparseloom.core.errors import BudgetError, PlanError
from sparseloom.core.types import SLO, Plan
from sparseloom.plan.slo_grid import slo_grid
from sparseloom.profile.table import ProfileTable, TaskProfile


@attrs.frozen
class ResidentSubgraph:
    """One preloaded subgraph and the memory it holds on its processor."""

    task: str
    position: int
    variant: int
    processor: str
    memory_bytes: int
    hotness: float = 0.0


@attrs.frozen
class Preload:
    """What the preloader keeps loaded, against the budget and against full preloading.

    Attributes:
        resident: the preloaded subgraphs, in loading order.
        resident_bytes: their summed memory, with ``route_bytes``.
        budget_bytes: the memory budget in bytes.
        full_bytes: the memory of preloading every candidate subgraph (full preloading), the
            routes' twins and lane copies included.
        profile: the profile the compile and load times of :meth:`switch_cost_ms` come from.
        route_bytes: what the plan's routes hold beyond their subgraphs (wide twins, lane
            copies; :func:`route_extra_bytes`), reserved within the budget.
    """

    resident: tuple[ResidentSubgraph, ...]
    resident_bytes: int
    budget_bytes: int
    full_bytes: int
    profile: ProfileTable = attrs.field(eq=False, repr=False)
    route_bytes: int = 0

    def is_resident(self, task: str, position: int, variant: int, processor: str) -> bool:
        """Whether that subgraph is preloaded on that processor."""
        return (task, position, variant, processor) in self._keys()

    def _keys(self) -> set[tuple[str, int, int, str]]:
        return {(r.task, r.position, r.variant, r.processor) for r in self.resident}

    def switch_cost_ms(self, plan: Plan) -> float:
        """Compile + load time (ms, from the profile) of ``plan``'s non-resident subgraphs."""
        keys, total = self._keys(), 0.0
        for task, variant in plan.variants.items():
            profile = self.profile.task(task)
            for position, (choice, processor) in enumerate(
                    zip(variant.choices, plan.processors_of(task), strict=True)):
                if (task, position, choice, processor) in keys:
                    continue
                q = self.profile.processors.index(processor)
                total += float(profile.compile_ms[position, choice, q]
                               + profile.load_ms[position, choice, q])
        return total


def hotness(profile: TaskProfile, order: Sequence[int] | np.ndarray, grid: Sequence[SLO]
            ) -> np.ndarray:
    """Hotness of every (position, variant) of a task under processor ``order``, (S, V)."""
    s, v = profile.n_positions, profile.n_variants
    accuracy, latency = profile.accuracy(), profile.latency_all(np.asarray(order))
    hot = np.zeros((s, v))
    for slo in grid:
        feasible = ((accuracy >= slo.accuracy) & (latency <= slo.latency_ms)).reshape((v,) * s)
        count = int(feasible.sum())
        if count == 0:
            continue
        for j in range(s):
            others = tuple(axis for axis in range(s) if axis != j)
            hot[j] += feasible.sum(axis=others) / count
    return hot


def budget_bytes(budget: float | int, full_bytes: int) -> int:
    """A budget as bytes: a float in (0, 1] is a fraction of full preloading, an int bytes."""
    if isinstance(budget, bool) or not isinstance(budget, numbers.Real):
        raise PlanError(f"memory budget must be a fraction in (0, 1] or a byte count, got "
                        f"{budget!r}")
    if isinstance(budget, numbers.Integral):
        if budget < 0:
            raise PlanError(f"memory budget must be ≥ 0 bytes, got {budget}")
        return int(budget)
    if not 0.0 < float(budget) <= 1.0:
        raise PlanError(f"memory budget fraction must lie in (0, 1], got {budget}; give a "
                        "byte count as an integer")
    return round(float(budget) * full_bytes)


def chain_bytes(profile: ProfileTable, plan: Plan, task: str) -> int:
    """The profile's memory of ``task``'s chosen subgraphs on the processors ``plan`` puts
    them on."""
    task_profile = profile.task(task)
    order = profile.order_indices(list(plan.processors_of(task)))
    return int(sum(task_profile.memory_bytes[j, choice, order[j]]
                   for j, choice in enumerate(plan.variants[task].choices)))


def route_extra_bytes(profile: ProfileTable, plan: Plan) -> dict[str, int]:
    """Per task, what its route holds beyond its own subgraphs, estimated from the profile: a
    wide twin (``Plan.wide``) is its chain loaded again, and so is a lane's copy
    (``Plan.lanes``) and a spare's (``Plan.spares``). A merged model stands in for its chain
    (the runtime does not load the chain beside it), so it adds nothing here."""
    extra: dict[str, int] = {}
    for task in plan.variants:
        copies = int(task in plan.wide) + int(task in plan.lanes) + int(task in plan.spares)
        if copies:
            extra[task] = copies * chain_bytes(profile, plan, task)
    return extra


def fit_plan(profile: ProfileTable, plan: Plan, *, budget: float | int,
             grid: Mapping[str, Sequence[SLO]] | None = None
             ) -> tuple[Plan, Preload, tuple[str, ...]]:
    """``plan`` and its preload, reshaped until its routes fit ``budget``: first without
    spares (``Plan.spares``), then without wide twins (``Plan.wide``), then without lanes;
    return what was dropped, in words.

    :raises PlanError: the budget is malformed, or below what the plan's own subgraphs need
        even without twins and lanes (the message gives the minimum).
    """
    try:
        return plan, preload(profile, plan, budget=budget, grid=grid), ()
    except BudgetError as error:
        refused = error
    dropped: list[str] = []
    for what, fields in (("spares", ("spares",)), ("wide twins", ("wide", "wide_when_quiet")),
                         ("lanes", ("lanes",))):
        if not any(getattr(plan, field) for field in fields):
            continue
        changes: dict[str, Any] = dict.fromkeys(fields, ())
        plan = attrs.evolve(plan, **changes)
        dropped.append(f"no {what}")
        try:
            return plan, preload(profile, plan, budget=budget, grid=grid), tuple(dropped)
        except BudgetError as error:
            refused = error
    raise refused


def preload(profile: ProfileTable, plan: Plan, *, budget: float | int,
            grid: Mapping[str, Sequence[SLO]] | None = None,
            pin_plan: bool = True) -> Preload:
    """Choose the resident subgraphs for ``plan`` under ``budget`` (see the module doc).

    :param budget: a fraction of full preloading in (0, 1], or bytes (an int).
    :param grid: Ψ per task; default each task's :func:`~sparseloom.plan.slo_grid.slo_grid`.
    :param pin_plan: load the plan's own subgraphs first.
    :raises PlanError: the budget is malformed. :raises BudgetError: (with ``pin_plan``) it
        is below what the plan's own subgraphs and its routes' twins and lane copies need —
        the message gives that minimum.
    """
    candidates: list[ResidentSubgraph] = []
    pinned: list[ResidentSubgraph] = []
    for task in plan.variants:
        task_profile = profile.task(task)
        names = plan.processors_of(task)
        order = profile.order_indices(list(names))
        hot = hotness(task_profile, order, (grid or {}).get(task) or slo_grid(task_profile))
        chosen = plan.variants[task].choices
        for j in range(task_profile.n_positions):
            for i in range(task_profile.n_variants):
                entry = ResidentSubgraph(task, j, i, names[j],
                                         int(task_profile.memory_bytes[j, i, order[j]]),
                                         float(hot[j, i]))
                (pinned if pin_plan and chosen[j] == i else candidates).append(entry)
    extra = sum(route_extra_bytes(profile, plan).values()) if pin_plan else 0
    full = sum(e.memory_bytes for e in candidates + pinned) + extra
    limit = budget_bytes(budget, full)
    needed = sum(e.memory_bytes for e in pinned) + extra
    if needed > limit:
        routes = f" and {extra} bytes for its wide twins and lanes" if extra else ""
        raise BudgetError(f"memory budget {limit} bytes is below the {needed} bytes the plan's "
                          f"own subgraphs{routes} need ({needed / max(full, 1):.1%} of full "
                          f"preloading, {full} bytes); the minimum budget is {needed} bytes")
    resident, used = list(pinned), needed
    for entry in sorted(candidates, key=lambda e: (-e.hotness, e.memory_bytes)):
        if used + entry.memory_bytes <= limit:
            resident.append(entry)
            used += entry.memory_bytes
    return Preload(tuple(resident), used, limit, full, profile, extra)
