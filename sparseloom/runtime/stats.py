"""Bounded statistics of a serving runtime: per-task counters, a ring of recent outcomes, the
recent scored outputs, and the live view :meth:`sparseloom.Server.stats` returns.

Nothing here grows with the number of requests served: each task keeps its counters, a
preallocated ring of the last :data:`RING` outcomes (end time and latency; NaN for a failed or
rejected request), the last :data:`SCORE_WINDOW` outputs of eval-set requests (to score the
served accuracy) and one counter per route it was served on. The run summary reads its
percentiles from the ring (every request of a run shorter than :data:`RING` per task), the
live view from its last :data:`LIVE_REQUESTS` entries.
"""

from __future__ import annotations

import collections
import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

if TYPE_CHECKING:
    from sparseloom.core.types import SLO
    from sparseloom.runtime.executor import Runtime
    from sparseloom.runtime.request import Request, Route

#: Outcomes kept per task (2 × 8 bytes each: 1 MiB per task, allocated and touched up front so
#: the process does not grow as the ring fills).
RING = 65536
#: Eval-set outputs kept per task to score the served accuracy (the last ones).
SCORE_WINDOW = 2048
#: Ended requests per task the live percentiles and attainment look at.
LIVE_REQUESTS = 1000
#: Seconds the live request rate is measured over.
LIVE_S = 5.0


@attrs.define(eq=False)
class TaskCounters:
    """One task's counters and recent outcomes (written under the runtime's lock).

    Attributes:
        task: the task name.
        submitted, completed, failed: requests admitted, served, and ended with an error.
        rejected: requests refused because the task's queue was full.
        latency_sum_ms: summed latency of every completed request (the mean's numerator).
        written: outcomes written to the ring so far (its cursor).
        scored: (eval row, output batch) of the last eval-set requests served.
    """

    task: str
    size: int = RING
    submitted: int = 0
    completed: int = 0
    failed: int = 0
    rejected: int = 0
    latency_sum_ms: float = 0.0
    written: int = 0
    scored: collections.deque[tuple[int, Any]] = attrs.field(
        factory=lambda: collections.deque(maxlen=SCORE_WINDOW))
    _ended_s: np.ndarray = attrs.field(init=False)
    _latency_ms: np.ndarray = attrs.field(init=False)
    _routes: dict[int, list[Any]] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        self._ended_s = np.full(self.size, np.nan)
        self._latency_ms = np.full(self.size, np.nan)

    def _write(self, ended_s: float, latency_ms: float) -> None:
        slot = self.written % self.size
        self._ended_s[slot] = ended_s
        self._latency_ms[slot] = latency_ms
        self.written += 1

    def completed_one(self, request: Request, latency_ms: float) -> None:
        """Count a served request: its latency, its route and (eval rows) its output."""
        self._write(request.finished_s, latency_ms)
        self.completed += 1
        self.latency_sum_ms += latency_ms
        route = request.route
        entry = self._routes.get(id(route))  # by identity: no hash of the route per request
        if entry is None:
            self._routes[id(route)] = [route, 1]
        else:
            entry[1] += 1
        if request.sample >= 0:
            self.scored.append((request.sample, request.output_batch))

    def failed_one(self, ended_s: float) -> None:
        """Count a request that ended with an error (a miss for attainment)."""
        self._write(ended_s, math.nan)
        self.failed += 1

    def rejected_one(self, at_s: float) -> None:
        """Count a request refused at admission (a miss for attainment)."""
        self._write(at_s, math.nan)
        self.rejected += 1

    def window(self, last: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(end times, latencies) of the last ``last`` outcomes (all kept), oldest first;
        NaN latency for failed and rejected requests. Copies: safe to keep."""
        kept = min(self.written, self.size)
        count = kept if last is None else min(last, kept)
        end = self.written % self.size
        index = (np.arange(end - count, end)) % self.size
        return self._ended_s[index].copy(), self._latency_ms[index].copy()

    def latencies(self) -> list[float]:
        """Latencies of the completed requests in the ring, oldest first."""
        _, latency = self.window()
        return [float(x) for x in latency[~np.isnan(latency)]]

    def served(self) -> dict[Route, int]:
        """Completed requests per route served (a route per plan version)."""
        return {route: count for route, count in self._routes.values()}


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


def _nearest_rank(ordered: np.ndarray, q: float) -> float:
    if not len(ordered):
        return math.nan
    return float(ordered[max(math.ceil(q / 100.0 * len(ordered)), 1) - 1])


def task_view(runtime: Runtime, name: str, serving: bool, now: float) -> TaskView:
    """The live view of task ``name`` (see :class:`TaskView`)."""
    state = runtime.states[name]
    counters = state.counters
    with runtime.lock:
        ended, latency = counters.window(LIVE_REQUESTS)
        queued = state.in_flight + len(state.held)
        counts = (counters.submitted, counters.completed, counters.failed, counters.rejected)
    slo = runtime.slos[name]
    done = np.sort(latency[~np.isnan(latency)])
    recent_s = min(LIVE_S, max(now - runtime.started_s, 1e-9))
    if len(ended) == LIVE_REQUESTS and now - ended[0] < recent_s:
        recent_s = max(now - ended[0], 1e-9)  # a fast task: the window spans less than LIVE_S
    finished = ended[~np.isnan(latency)]
    rate = float(np.count_nonzero(finished >= now - recent_s)) / recent_s
    with np.errstate(invalid="ignore"):
        attainment = float(np.mean(latency <= slo.latency_ms)) if len(latency) else math.nan
    route = state.route
    return TaskView(name, serving, route.describe() if route is not None else "-", slo,
                    *counts, queued, rate, _nearest_rank(done, 50), _nearest_rank(done, 90),
                    _nearest_rank(done, 99), attainment,
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


@contextlib.contextmanager
def periodically(call: Callable[[], None], every_s: float, name: str) -> Iterator[None]:
    """Call ``call`` every ``every_s`` seconds on a thread called ``name`` while the block
    runs (a live view, an RSS sampler); the thread is joined when the block ends."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every_s):
            call()

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
