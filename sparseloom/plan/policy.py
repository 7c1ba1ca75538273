"""The base of the built-in placement policies: what they keep to re-plan on feedback.

A subclass implements :meth:`ProfilePolicy.decide` (a profile table restricted to the usable
processors and tasks, and one SLO per task → :class:`Plan`). The base class records what
:meth:`plan` was given, times the decision, and implements ``on_feedback``:

* a processor reported down is dropped and the plan is made again without it;
* a task whose observed latency violates its SLO gets its latency estimates (every subgraph
  and hand-off of that task) scaled by observed / estimated, and the plan is made again —
  the profile was measured in isolation, the runtime's figure includes what it shares;
* ``None`` is returned when nothing is reported, or when the new plan chooses the same
  variants and processors as the running one.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from sparseloom.core.errors import PlanError
from sparseloom.core.types import SLO, Feedback, Plan
from sparseloom.plan.feasible import check_slos, restrict_profile
from sparseloom.profile.table import ProfileTable


def processor_names(processors: Sequence[Any] | None, table: ProfileTable) -> list[str]:
    """Names of ``processors`` (records or names); the table's own when ``None`` or empty."""
    if not processors:
        return list(table.processors)
    return [str(getattr(p, "name", p)) for p in processors]


def select_tasks(table: ProfileTable, tasks: Sequence[str] | None) -> ProfileTable:
    """A table holding only ``tasks`` (all when ``None`` or empty), in the given order."""
    if not tasks:
        return table
    return ProfileTable(table.workload, table.processors,
                        {name: table.task(name) for name in tasks}, table.meta)


@attrs.define(eq=False)
class ProfilePolicy:
    """A placement policy that decides from a :class:`ProfileTable` alone (subclass it)."""

    #: The registered name, recorded in every plan.
    name: str = attrs.field(default="", init=False)
    _table: ProfileTable | None = attrs.field(default=None, init=False)
    _slos: dict[str, SLO] = attrs.field(factory=dict, init=False)
    _processors: list[str] = attrs.field(factory=list, init=False)
    _current: Plan | None = attrs.field(default=None, init=False)

    def plan(self, tasks: Sequence[str], profile: ProfileTable, processors: Sequence[Any],
             slos: Mapping[str, SLO]) -> Plan:
        """Plan ``tasks`` on ``processors`` (records or names) under ``slos``."""
        if not isinstance(profile, ProfileTable):
            raise PlanError(f"policy {self.name!r} plans from a ProfileTable, got "
                            f"{type(profile).__name__}; build one with `sparseloom profile`")
        self._table = select_tasks(profile, tasks)
        self._slos = check_slos(self._table, slos)
        self._processors = processor_names(processors, profile)
        return self._replan()

    def on_feedback(self, observations: Feedback) -> Plan | None:
        """Re-plan after a violation or a processor failure; ``None`` when nothing changes."""
        if self._table is None or self._current is None:
            raise PlanError(f"policy {self.name!r} got feedback before it made a plan; call "
                            "plan() first")
        changed = False
        down = [p for p in observations.down_processors if p in self._processors]
        if down:
            self._processors = [p for p in self._processors if p not in down]
            changed = True
        for task, violated in observations.violated.items():
            observed = observations.latency_ms.get(task)
            estimated = self._current.estimated_latency_ms.get(task)
            if not violated or task not in self._table.tasks or not observed or not estimated:
                continue
            factor = float(observed) / float(estimated)
            if factor > 0 and abs(factor - 1.0) > 1e-6:
                self._table = _scaled(self._table, task, factor)
                changed = True
        if not changed:
            return None
        previous = self._current
        fresh = self._replan()
        same = (fresh.variants == previous.variants
                and all(fresh.processors_of(t) == previous.processors_of(t)
                        for t in fresh.variants))
        return None if same else fresh

    def _replan(self) -> Plan:
        assert self._table is not None
        table = restrict_profile(self._table, self._processors)
        started = time.perf_counter()
        made = self.decide(table, self._slos)
        self._current = attrs.evolve(made, policy=self.name or made.policy,
                                     decision_seconds=time.perf_counter() - started)
        return self._current

    def decide(self, table: ProfileTable, slos: Mapping[str, SLO]) -> Plan:
        """Choose the order and the variants; ``table`` holds only usable processors."""
        raise NotImplementedError


def _scaled(table: ProfileTable, task: str, factor: float) -> ProfileTable:
    profile = table.task(task)
    tasks = dict(table.tasks)
    tasks[task] = attrs.evolve(profile, latency_ms=profile.latency_ms * factor,
                               latency_median_ms=profile.latency_median_ms * factor,
                               handoff_ms=profile.handoff_ms * factor)
    return ProfileTable(table.workload, table.processors, tasks, table.meta)
