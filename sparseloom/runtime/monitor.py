"""Per-task SLO monitor: a window of recent request latencies and its verdict.

The monitor keeps the last :data:`WINDOW` end-to-end latencies of a task (20 requests by
default) and judges them by their nearest-rank p90 (:data:`STATISTIC`), the same statistic
the run summary judges a task by. A verdict is given once per *fresh* window: after a switch
or a verdict the window starts over, so the policy never reacts twice to the same requests and
a new variant is judged on its own requests only. A task is reported *violated* once
:data:`CONFIRM` fresh windows in a row missed its SLO: one slow window (a warm-up, a pause) is
noise, and the switch it would trigger loads models, stalling every task.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any

import attrs

from sparseloom.core.types import Feedback, Plan
from sparseloom.runtime.records import percentile

#: Requests in a task's monitor window.
WINDOW = 20
#: The percentile a window (and the summary) judges latency by.
STATISTIC = 90
#: Consecutive fresh windows over the SLO before the task is reported violated. Measured on
#: ``mix`` at a Poisson rate its plan sustains (173.9 req/s per task, k = 5): with one window,
#: 1 run in 4 still switched plans on a transient and missed its SLOs; with two, 0 in 6
#: (docs/plan.md).
CONFIRM = 2


@attrs.define(eq=False)
class LatencyMonitor:
    """The recent latencies of one task against its latency SLO.

    Attributes:
        task: the task name.
        slo_latency_ms: its latency SLO.
        window: how many recent requests the verdict looks at.
        statistic: the percentile of the window compared with the SLO.
        confirm: fresh windows in a row over the SLO before :meth:`violated` says so.
    """

    task: str
    slo_latency_ms: float
    window: int = WINDOW
    statistic: int = STATISTIC
    confirm: int = CONFIRM
    _recent: collections.deque[float] = attrs.field(init=False)
    _fresh: int = attrs.field(default=0, init=False)
    _streak: int = attrs.field(default=0, init=False)

    def __attrs_post_init__(self) -> None:
        if self.window < 1 or self.confirm < 1:
            raise ValueError(f"a monitor needs a window of at least 1 request and at least 1 "
                             f"window to confirm, got {self.window} and {self.confirm}")
        self._recent = collections.deque(maxlen=self.window)

    def observe(self, latency_ms: float) -> bool:
        """Add one request's latency; return whether a fresh window is complete."""
        self._recent.append(latency_ms)
        self._fresh += 1
        if self._fresh >= self.window:
            self._fresh = 0
            value = self.value_ms()
            self._streak = self._streak + 1 if value > self.slo_latency_ms else 0
            return True
        return False

    def value_ms(self) -> float:
        """The window's statistic (NaN before the first request)."""
        return percentile(list(self._recent), self.statistic)

    def violated(self) -> bool:
        """Whether the last :attr:`confirm` fresh windows' statistic all exceeded the SLO."""
        return self._streak >= self.confirm

    def reset(self) -> None:
        """Forget the window (after a switch the new route is judged on its own requests)."""
        self._recent.clear()
        self._fresh = self._streak = 0


def make_feedback(plan: Plan, monitors: Mapping[str, LatencyMonitor],
                  down_processors: tuple[str, ...],
                  processor_slowdown: Mapping[str, float] | None = None) -> Feedback:
    """The feedback record for ``on_feedback``: window statistic and verdict per task, and
    each processor's measured-over-profiled service time since the last feedback."""
    return Feedback(plan=plan,
                    latency_ms={t: m.value_ms() for t, m in monitors.items()},
                    violated={t: m.violated() for t, m in monitors.items()},
                    down_processors=tuple(down_processors),
                    processor_slowdown=dict(processor_slowdown or {}))


#: Profiled seconds of work a processor must have run since the last feedback before its
#: slowdown is reported (a few stages: one stage's noise is not a trend) — or four times that
#: measured, so that a processor much slower than profiled is reported as soon.
MIN_CALIBRATION_S = 0.005


def processor_slowdown(workers: Mapping[str, Any], last: dict[str, tuple[float, float]]
                       ) -> dict[str, float]:
    """Each worker's measured over profiled model time since ``last`` (updated in place);
    workers that ran too little since (:data:`MIN_CALIBRATION_S`) are left out, and so are
    lanes (:mod:`sparseloom.runtime.lanes`: time-sliced by design, not a slower processor)."""
    out = {}
    for name, worker in workers.items():
        if worker.lane_of is not None:
            continue
        busy, profiled = worker.busy_s, worker.profiled_s
        before_busy, before_profiled = last.get(name, (0.0, 0.0))
        if profiled > before_profiled and (profiled - before_profiled >= MIN_CALIBRATION_S
                                           or busy - before_busy >= 4 * MIN_CALIBRATION_S):
            out[name] = (busy - before_busy) / (profiled - before_profiled)
            last[name] = (busy, profiled)
    return out
