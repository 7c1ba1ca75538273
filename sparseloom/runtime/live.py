"""The live view :meth:`sparseloom.Server.stats` returns: per task, per processor, and totals.

Each task's view reads the last :data:`LIVE_REQUESTS` outcomes of its bounded counters
(:class:`~sparseloom.runtime.stats.TaskCounters`): nearest-rank percentiles of the completed
ones, and SLO attainment with failed and rejected requests counted as misses; its rate is over
the last :data:`LIVE_S` seconds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs
import numpy as np

from sparseloom.runtime.records import percentile

if TYPE_CHECKING:
    from sparseloom.core.types import SLO
    from sparseloom.runtime.executor import Runtime

#: Ended requests per task the live percentiles and attainment look at.
LIVE_REQUESTS = 1000
#: Seconds the live request rate is measured over.
LIVE_S = 5.0


@attrs.frozen
class TaskView:
    """One task in :meth:`sparseloom.Server.stats`.

    Attributes:
        task: the task name.
        serving: whether the server accepts its requests now.
        route: ``variant @ processors`` it is served on now (``-`` when not routed).
        slo: the SLO it is served under.
        submitted, completed, failed, rejected: counts since the start.
        queued: requests admitted and not ended (waiting, running, or held for a switch).
        requests_per_s: completions per second over the last :data:`LIVE_S` seconds.
        p50_ms, p90_ms, p99_ms: nearest-rank latency percentiles of the last
            :data:`LIVE_REQUESTS` completed requests (NaN before the first).
        attainment: the fraction of the last :data:`LIVE_REQUESTS` requests that ended within
            the latency SLO; failed and rejected requests count as misses (NaN before any).
        switches: times it moved to another variant or route.
    """

    task: str
    serving: bool
    route: str
    slo: SLO
    submitted: int
    completed: int
    failed: int
    rejected: int
    queued: int
    requests_per_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    attainment: float
    switches: int


@attrs.frozen
class ProcessorView:
    """One processor in :meth:`sparseloom.Server.stats`.

    Attributes:
        processor: its name.
        utilisation: time in model calls over the wall time since the previous ``stats()``
            call (since the start on the first).
        queued: requests waiting in its queue.
        down: marked down after repeated failures.
        stages_run: model calls made since the start.
        wide_stages: of those, the ones run wide on the idle other processors' cores.
    """

    processor: str
    utilisation: float
    queued: int
    down: bool
    stages_run: int
    wide_stages: int = 0


@attrs.frozen
class ServerStats:
    """What :meth:`sparseloom.Server.stats` returns: per task, per processor, and totals."""

    uptime_s: float
    tasks: Mapping[str, TaskView]
    processors: Mapping[str, ProcessorView]
    submitted: int
    completed: int
    failed: int
    rejected: int


def task_view(runtime: Runtime, name: str, serving: bool, now: float) -> TaskView:
    """The live view of task ``name`` (see :class:`TaskView`)."""
    state = runtime.states[name]
    counters = state.counters
    with runtime.lock:
        ended, latency = counters.window(LIVE_REQUESTS)
        queued = state.in_flight + len(state.held)
        counts = (counters.submitted, counters.completed, counters.failed, counters.rejected)
    slo = runtime.slos[name]
    done = latency[~np.isnan(latency)].tolist()
    recent_s = min(LIVE_S, max(now - runtime.started_s, 1e-9))
    if len(ended) == LIVE_REQUESTS and now - ended[0] < recent_s:
        recent_s = max(now - ended[0], 1e-9)  # a fast task: the window spans less than LIVE_S
    finished = ended[~np.isnan(latency)]
    rate = float(np.count_nonzero(finished >= now - recent_s)) / recent_s
    with np.errstate(invalid="ignore"):
        attainment = float(np.mean(latency <= slo.latency_ms)) if len(latency) else math.nan
    route = state.route
    return TaskView(name, serving, route.describe() if route is not None else "-", slo,
                    *counts, queued, rate, percentile(done, 50), percentile(done, 90),
                    percentile(done, 99), attainment,
                    runtime.switch_counts[name])


def server_stats(runtime: Runtime, serving: set[str] | frozenset[str],
                 busy_since: dict[str, tuple[float, float]]) -> ServerStats:
    """Every task's and processor's live view; ``busy_since`` holds each worker's
    (time, busy seconds) at the previous call and is updated (utilisation between calls)."""
    now = time.perf_counter()
    tasks = {name: task_view(runtime, name, name in serving, now) for name in runtime.tasks}
    processors = {}
    for name, worker in runtime.workers.items():
        then, busy = busy_since.get(name, (runtime.started_s, 0.0))
        busy_now = worker.busy_s
        busy_since[name] = (now, busy_now)
        processors[name] = ProcessorView(name, (busy_now - busy) / max(now - then, 1e-9),
                                         worker.queued(), worker.down, worker.stages_run,
                                         worker.wide_stages)
    return ServerStats(now - runtime.started_s, tasks, processors, runtime.submitted,
                       runtime.completed, runtime.failed,
                       sum(t.rejected for t in tasks.values()))
