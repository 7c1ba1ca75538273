"""The base of the built-in placement policies: what they keep to re-plan on feedback.

A subclass implements :meth:`ProfilePolicy.decide` (a profile table restricted to the usable
processors and tasks, and one SLO per task → :class:`Plan`). The base class records what
:meth:`plan` was given, times the decision, and implements ``on_feedback``. Every decision
sees the profile through :func:`~sparseloom.plan.feasible.faithful_profile`: a subgraph a
processor computes differently from the evaluation processor costs infinite latency there, so
the accuracy a plan reads is the accuracy it serves.

* a processor reported down is dropped and the plan is made again without it;
* each processor's measured service time against its profile, and every task's observed
  window statistic against what the running plan predicted, set factors on the measured
  profile (:mod:`sparseloom.plan.calibration`; replaced, never compounded, so they fall when
  the load does) — the profile was measured in isolation, the runtime's figure includes what
  it shares;
* a violation re-plans with those factors, at most once per :data:`DWELL_S`, and the new plan
  is taken only when it predicts a violating task :data:`MIN_GAIN` faster than observed;
* ``None`` is returned when nothing is reported, or when the new plan chooses the same
  variants and processors as the running one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from sparseloom.core.errors import PlanError
from sparseloom.core.types import SLO, Feedback, Plan
from sparseloom.plan.calibration import RECOVERY_HALF_LIFE_S, Calibration
from sparseloom.plan.feasible import check_slos, faithful_profile, restrict_profile
from sparseloom.profile.table import ProfileTable

#: Seconds a plan serves before feedback may replace it (hysteresis: windows of 20 requests
#: come every few ms on the bundled tasks, and a switch that loads models costs 50–390 ms).
DWELL_S = 2.0
#: A re-plan is taken only when it predicts a violating task at least this much faster than
#: observed ...
MIN_GAIN = 0.1
#: ... or, without a violation, the tasks' mean latency this much lower than the running
#: plan's (a switch costs loads and a drained route; noise must not pay for one).
MIN_GAIN_UNFORCED = 0.25

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
    _previous: Plan | None = attrs.field(default=None, init=False)
    #: Seconds for an unobserved processor's factor to come halfway back to its profile.
    recovery_half_life_s: float = attrs.field(default=RECOVERY_HALF_LIFE_S, kw_only=True)
    _calibration: Calibration = attrs.field(init=False, default=attrs.Factory(
        lambda self: Calibration(half_life_s=self.recovery_half_life_s), takes_self=True))
    _planned: Calibration = attrs.field(factory=Calibration, init=False)
    _since_s: float = attrs.field(factory=time.monotonic, init=False)
    #: When a re-plan was last made and not taken: the next waits :data:`DWELL_S` from then.
    _looked_s: float = attrs.field(default=-math.inf, init=False)
    #: Whether the running plan has had feedback yet: its dwell starts with the first.
    _serving: bool = attrs.field(default=False, init=False)

    def plan(self, tasks: Sequence[str], profile: ProfileTable, processors: Sequence[Any],
             slos: Mapping[str, SLO]) -> Plan:
        """Plan ``tasks`` on ``processors`` (records or names) under ``slos``."""
        if not isinstance(profile, ProfileTable):
            raise PlanError(f"policy {self.name!r} plans from a ProfileTable, got "
                            f"{type(profile).__name__}; build one with `sparseloom profile`")
        self._table = select_tasks(profile, tasks)
        self._slos = check_slos(self._table, slos)
        self._processors = processor_names(processors, profile)
        self._since_s, self._serving = time.monotonic(), False  # it serves its dwell too
        return self._replan()

    def on_feedback(self, observations: Feedback) -> Plan | None:
        """Re-plan after a violation or a processor failure; ``None`` when nothing changes.

        Like is compared with like (:mod:`sparseloom.plan.calibration`): each processor's
        measured service time against its profile, smoothed, and each task's observed window
        statistic against what the running plan predicted for it, both as factors on the
        *measured* profile (replaced, never compounded; they fall again when the load does).
        A violation, or a processor whose factor moved by more than
        :data:`~sparseloom.plan.calibration.RECALIBRATE` since the plan was made (it slowed
        down, or recovered), re-plans — only after the running plan has served
        :data:`DWELL_S` (counted from its first feedback: loading its models is not serving),
        and at most once per :data:`DWELL_S` while re-plans are not taken;
        the new plan is taken only when it predicts a
        violating task at least :data:`MIN_GAIN` faster than observed, or the tasks' mean
        latency :data:`MIN_GAIN_UNFORCED` lower than the running plan's re-predicted with what
        was learned since. One slow window does not move the plan, and two plans never
        alternate window by window.
        """
        if self._table is None or self._current is None:
            raise PlanError(f"policy {self.name!r} got feedback before it made a plan; call "
                            "plan() first")
        down = [p for p in observations.down_processors if p in self._processors]
        if down:
            self._processors = [p for p in self._processors if p not in down]
            return self._switch_to(self._replan())
        now = time.monotonic()
        if not self._serving:  # loading the plan's models took no part of its dwell
            self._since_s, self._serving = now, True
        self._calibration.observe_processors(observations.processor_slowdown, now)
        for task, observed in observations.latency_ms.items():
            self._calibration.observe_task(self._table, self._current, task, observed,
                                           self._planned, now)
        violating = [t for t, bad in observations.violated.items()
                     if bad and t in self._table.tasks]
        moved = self._calibration.moved_since(self._planned, self._processors, now)
        if not (violating or moved) or now - max(self._since_s, self._looked_s) < DWELL_S:
            return None
        running = (self._current, self._previous, self._planned)
        expected = self._calibration.repredict(self._table, running[0], running[2], now)
        fresh = self._replan()
        gains = [task for task in violating
                 if fresh.estimated_latency_ms.get(task, math.inf)
                 <= (1 - MIN_GAIN) * observations.latency_ms[task]]
        better = _mean(fresh.estimated_latency_ms, expected) <= (
            1 - MIN_GAIN_UNFORCED) * _mean(expected, expected)
        if not (gains or better) or _same_paths(fresh, running[0]):
            # Keep predicting what really runs, with the factors it was planned under; and do
            # not plan again for a dwell (planning runs on the serving process: on an open
            # load a violation may recur every window, and each plan holds the GIL).
            self._current, self._previous, self._planned = running
            self._looked_s = now
            return None
        return self._switch_to(fresh)

    def _switch_to(self, fresh: Plan) -> Plan | None:
        self._since_s, self._serving = time.monotonic(), False
        return None if _same_paths(fresh, self._previous) else fresh

    def _replan(self) -> Plan:
        assert self._table is not None
        now = time.monotonic()
        table = faithful_profile(restrict_profile(self._calibration.scaled(self._table, now),
                                                  self._processors))
        started = time.perf_counter()
        made = self.decide(table, self._slos)
        self._previous = self._current
        self._planned = self._calibration.snapshot(now)
        self._current = attrs.evolve(made, policy=self.name or made.policy,
                                     decision_seconds=time.perf_counter() - started)
        return self._current

    def decide(self, table: ProfileTable, slos: Mapping[str, SLO]) -> Plan:
        """Choose the order and the variants; ``table`` holds only usable processors."""
        raise NotImplementedError


def _mean(values: Mapping[str, float], tasks: Mapping[str, float]) -> float:
    """The mean of ``values`` over the tasks of ``tasks`` (``inf`` when one is missing)."""
    picked = [float(values.get(t, math.inf)) for t in tasks]
    return sum(picked) / len(picked) if picked else math.inf


def _same_paths(one: Plan | None, other: Plan | None) -> bool:
    """Whether two plans run the same variants on the same processors."""
    if one is None or other is None:
        return False
    return one.variants == other.variants and all(
        one.processors_of(t) == other.processors_of(t) for t in one.variants)
