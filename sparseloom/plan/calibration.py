"""What the runtime's feedback teaches a policy about its profile (online calibration).

The profile was measured in isolation; served, a processor may run slower (another job, a
thermal limit, a co-runner) and every task queues behind the others. Two kinds of factor,
both relative to the *measured* profile (replaced, never compounded):

- **per processor** — the runtime's measured time inside model calls over what the profile
  says those calls take (``Feedback.processor_slowdown``), exponentially smoothed as Band
  smooths its profiled latencies. A processor no stage ran on since it was last measured drifts
  back toward its profile (half-life :data:`RECOVERY_HALF_LIFE_S`), so a plan that moved off a
  slow processor tries it again once it may have recovered;
- **per task** — the observed window statistic over what the running plan predicted for the
  task, once the processor factors are accounted for: the queueing an isolated profile cannot
  see. Replaced by each window (the dwell and the gain a switch must show are what keep one
  window's spike from moving the plan).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs
import numpy as np

from sparseloom.core.types import Plan
from sparseloom.profile.table import ProfileTable

#: Weight of a new processor measurement in its smoothed factor.
SMOOTHING = 0.5
#: Seconds for an unobserved processor's factor to come halfway back to its profile.
RECOVERY_HALF_LIFE_S = 2.0
#: A processor factor that moved by more than this fraction since a plan was made (slowed, or
#: recovered) is reason to plan again.
RECALIBRATE = 0.5


@attrs.define
class Calibration:
    """Per-processor and per-task factors on a profile (see the module doc)."""

    tasks: dict[str, float] = attrs.field(factory=dict)
    _processors: dict[str, tuple[float, float]] = attrs.field(factory=dict)
    half_life_s: float = attrs.field(default=RECOVERY_HALF_LIFE_S, kw_only=True)

    def processor_factor(self, processor: str, now_s: float) -> float:
        """The processor's factor now (1: as profiled)."""
        value, seen_s = self._processors.get(processor, (1.0, now_s))
        return 1.0 + (value - 1.0) * 0.5 ** (max(now_s - seen_s, 0.0) / self.half_life_s)

    def moved_since(self, planned: Calibration, processors: list[str], now_s: float) -> bool:
        """Whether a processor's factor moved by more than :data:`RECALIBRATE` since
        ``planned`` (a plan's snapshot) was taken."""
        return any(abs(self.processor_factor(p, now_s) / planned.processor_factor(p, now_s)
                       - 1.0) > RECALIBRATE for p in processors)

    def processor_factors(self, now_s: float) -> dict[str, float]:
        """Every calibrated processor's factor now."""
        return {p: self.processor_factor(p, now_s) for p in self._processors}

    def observe_processors(self, slowdown: Mapping[str, float], now_s: float) -> None:
        """Smooth in the measured slowdown of the processors that ran stages."""
        for processor, measured in slowdown.items():
            if measured > 0 and math.isfinite(measured):
                current = self.processor_factor(processor, now_s)
                self._processors[processor] = (current + SMOOTHING * (measured - current),
                                               now_s)

    def observe_task(self, table: ProfileTable, plan: Plan, task: str, observed_ms: float,
                     planned: Calibration, now_s: float) -> None:
        """Set the task's factor: observed over the plan's prediction, with the processor
        factors of now in place of those the plan was made under (``planned``)."""
        predicted = plan.estimated_latency_ms.get(task)
        if not (predicted and math.isfinite(observed_ms) and observed_ms > 0
                and task in table.tasks):
            return  # an empty window (NaN) or a task the plan does not predict
        then = chain_ms(table, plan, task, planned.processor_factors(now_s))
        now = chain_ms(table, plan, task, self.processor_factors(now_s))
        base = float(predicted) / planned.tasks.get(task, 1.0) * (now / then if then else 1.0)
        if base > 0:
            self.tasks[task] = float(observed_ms) / base

    def repredict(self, table: ProfileTable, plan: Plan, planned: Calibration, now_s: float
                  ) -> dict[str, float]:
        """``plan``'s predicted latency per task, redone with what was learned since it was
        made under ``planned``: processor factors through the task's chain, task factors as
        they are now."""
        out = {}
        for task, predicted in plan.estimated_latency_ms.items():
            if task not in table.tasks or not predicted:
                continue
            then = chain_ms(table, plan, task, planned.processor_factors(now_s))
            now = chain_ms(table, plan, task, self.processor_factors(now_s))
            ratio = now / then if then else 1.0
            out[task] = (float(predicted) * ratio * self.tasks.get(task, 1.0)
                         / planned.tasks.get(task, 1.0))
        return out

    def snapshot(self, now_s: float) -> Calibration:
        """A copy with the processor factors of now, frozen (what a plan is made under)."""
        return Calibration(dict(self.tasks), {p: (f, math.inf) for p, f in
                                              self.processor_factors(now_s).items()},
                           half_life_s=self.half_life_s)

    def scaled(self, table: ProfileTable, now_s: float) -> ProfileTable:
        """``table`` with each processor's column and each task's latencies scaled."""
        columns = np.array([self.processor_factor(p, now_s) for p in table.processors])
        if np.allclose(columns, 1.0) and all(abs(f - 1.0) < 1e-9 for f in self.tasks.values()):
            return table
        profiles = dict(table.tasks)
        for name, profile in profiles.items():
            factor = self.tasks.get(name, 1.0)
            factor = factor if factor > 0 and math.isfinite(factor) else 1.0
            profiles[name] = attrs.evolve(
                profile, latency_ms=profile.latency_ms * columns * factor,
                latency_median_ms=profile.latency_median_ms * columns * factor,
                handoff_ms=profile.handoff_ms * factor)
        return ProfileTable(table.workload, table.processors, profiles, table.meta)


def chain_ms(table: ProfileTable, plan: Plan, task: str, factors: Mapping[str, float]
             ) -> float:
    """The summed stage time of ``task``'s planned variant on its planned processors, each
    stage times its processor's factor."""
    profile = table.task(task)
    choices = plan.variants[task].choices
    total = 0.0
    for position, processor in enumerate(plan.processors_of(task)):
        if processor not in table.processors:
            continue
        index = list(table.processors).index(processor)
        total += float(profile.latency_ms[position, choices[position], index]) * factors.get(
            processor, 1.0)
    return total
