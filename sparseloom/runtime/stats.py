"""Bounded statistics of a serving runtime: per-task counters, a ring of recent outcomes and
the recent scored outputs; the live view :meth:`sparseloom.Server.stats` returns reads them
(:mod:`sparseloom.runtime.live`).

Nothing here grows with the number of requests served: each task keeps its counters, a
preallocated ring of the last :data:`RING` outcomes (end time and latency; NaN for a failed or
rejected request), the last :data:`SCORE_WINDOW` outputs of eval-set requests (to score the
served accuracy) and one counter per route it was served on. The run summary reads its
percentiles from the ring (every request of a run shorter than :data:`RING` per task), the
live view from its last :data:`~sparseloom.runtime.live.LIVE_REQUESTS` entries.
"""

from __future__ import annotations

import collections
import contextlib
import math
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

if TYPE_CHECKING:
    from sparseloom.runtime.request import Request, Route

#: Outcomes kept per task (2 × 8 bytes each: 1 MiB per task, allocated and touched up front so
#: the process does not grow as the ring fills).
RING = 65536
#: Eval-set outputs kept per task to score the served accuracy (the last ones).
SCORE_WINDOW = 2048


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
        first_submitted_s: ``time.perf_counter()`` at its first admitted request (inf: none).
        last_completed_s: ``time.perf_counter()`` when its last served request ended (0: none).
    """

    task: str
    size: int = RING
    submitted: int = 0
    completed: int = 0
    failed: int = 0
    rejected: int = 0
    latency_sum_ms: float = 0.0
    written: int = 0
    first_submitted_s: float = math.inf
    last_completed_s: float = 0.0
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

    def submitted_one(self, submitted_s: float) -> None:
        """Count an admitted request (``submitted_s``: when it was submitted)."""
        self.submitted += 1
        self.first_submitted_s = min(self.first_submitted_s, submitted_s)

    def completed_one(self, request: Request, latency_ms: float) -> None:
        """Count a served request: its latency, its route and (eval rows) its output."""
        self._write(request.finished_s, latency_ms)
        self.completed += 1
        self.latency_sum_ms += latency_ms
        self.last_completed_s = max(self.last_completed_s, request.finished_s)
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
