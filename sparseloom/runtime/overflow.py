"""The overflow thread: a second server of one processor's queue, for requests about to be late.

A processor's worker runs one call at a time, so a short request queued behind another task's
call waits for it to end. The operating system does better when each task has a thread of its
own: it pre-empts a long call for a short one that wakes up (that is how stock ONNX Runtime,
one session and thread per task, meets tight latency SLOs on a loaded CPU). One thread per
task gives that up under a closed loop, though, where every thread is always runnable and
sharing a core stretches every call (docs/results.md, *lanes*).

So a processor named in ``Plan.overflow`` gets one more thread, pinned to the *other*
processors' cores, that serves its queue only when it must: when the first request in line
would miss its deadline waiting for the worker's running call,

    max(call_ends, now) + LATE_MARGIN × its call's time > its deadline,

and no processor whose core it would use has requests of its own waiting (a processor falling
behind lends no time), it takes that request and runs its stages on the lent core, which the
operating system time-slices with that core's own worker (a call there runs slower, and so
does the other processor's; a request with room to wait never pays for it). Otherwise it
sleeps until the request would turn late, or until a new one arrives first in line. Under the
paper's closed loop (latency unconstrained) it never runs; under tight SLOs it is what keeps a
short task's p90 off the long stages it would queue behind. Only a model whose call is re-entrant
(``ResidentModel.reentrant``: the built-in backends') is served there, never a wide twin, and
the calls count as the overflow thread's (:attr:`Overflow.stages`, :attr:`Overflow.busy_s`),
not in the worker's utilisation or calibration.

It is an option (``LoadedPolicy(overflow=True)``), off by default: measured side by side
(docs/results.md, *Overflow threads*), it lowered the grid's violation rate at k = 5 from 0.75
to 0.25 per level, and cost the Poisson capacity search 12–25 % of its sustainable rate, even
in a run where it woke but never served (its wake-ups take the interpreter lock and a share of
the core the bottleneck processor computes on).
"""

from __future__ import annotations

import heapq
import math
import os
import threading
import time
from typing import TYPE_CHECKING

import attrs

from sparseloom.runtime.worker import HORIZON_S

if TYPE_CHECKING:
    from sparseloom.runtime.worker import ProcessorWorker

#: A request is late when the worker's running call would end less than this many of its own
#: calls (the worker's smoothed time of that model) before its deadline. Its call on a lent,
#: time-sliced core takes longer than on the worker's own, with a long tail (p50 1.7×, p90
#: 5× in one traced run on the AMX Xeon of session 12). ``benchmarks/loaded_ab.py --option
#: overflow --scenario grid --rounds 2``: at k = 5, 1.5 left a level-run median violation of
#: 0.50 [0.25–1.00], 3 gave 0.25 [0.25–0.75] (0.75 [0.75–1.00] without overflow).
LATE_MARGIN = 3.0
#: How soon it looks again when a late request waits but a lender has requests of its own
#: queued: taking that lender's core then slows the processor that is falling behind.
BACKLOG_POLL_S = 0.0002


@attrs.define(eq=False)
class Overflow:
    """The overflow thread of one worker (module doc).

    Attributes:
        worker: the processor whose queue it serves.
        cores: where it runs (the other processors' cores).
        lenders: the workers of those processors: it takes nothing while any has a request
            waiting (a processor falling behind lends no time).
        stages: calls it made.
        busy_s: seconds in those calls.
        wake_at: ``time.perf_counter()`` when it next looks at the queue (``inf``: only when
            woken); a request due earlier wakes it.
    """

    worker: ProcessorWorker
    cores: tuple[int, ...]
    lenders: tuple[ProcessorWorker, ...] = ()
    stages: int = 0
    busy_s: float = 0.0
    wake_at: float = math.inf
    _closing: bool = False
    _thread: threading.Thread | None = attrs.field(default=None, init=False)

    def start(self) -> None:
        """Start the thread (pinned to :attr:`cores`)."""
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name=f"sparseloom-overflow-{self.worker.name}")
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop at once (requests still queued are the worker's) and wait for the thread."""
        with self.worker.urgent:
            self._closing = True
            self.worker.urgent.notify()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def count(self, took_s: float) -> None:
        """Account one call of ``took_s`` seconds made here."""
        self.stages += 1
        self.busy_s += took_s

    def delay(self, now: float) -> float:
        """Seconds until the first request in line must be taken here (0: now; ``inf``:
        nothing to take). Called with the worker's queue lock held."""
        worker = self.worker
        heap = worker.heap
        if not worker.overflow_on or not heap or not worker.active:
            return math.inf  # the worker itself takes what is queued when it is free
        deadline, _, item = heap[0]
        route = getattr(item, "route", None)
        if route is None or deadline == math.inf:
            return math.inf  # a job (loads, switches), the stop marker, or no deadline
        model = worker.models.get(route.keys[item.stage])
        if model is None or not model.reentrant:
            return math.inf
        own = max(model.took_s if model.took_s > 0 else model.profiled_s, 0.0)
        latest_start = deadline - LATE_MARGIN * own
        if max(worker.call_ends, now) <= latest_start:
            return latest_start - now  # the worker's call may overrun: look again then
        if any(lender.heap for lender in self.lenders):
            return BACKLOG_POLL_S  # a lender has work waiting: its core is not spare
        return 0.0

    def _loop(self) -> None:
        if self.cores and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, self.cores)
        worker = self.worker
        urgent, heap = worker.urgent, worker.heap
        perf_counter = time.perf_counter
        while True:
            with urgent:
                while True:
                    if self._closing:
                        return
                    now = perf_counter()
                    wait = self.delay(now)
                    if wait <= 0:
                        break
                    wait = min(wait, HORIZON_S)
                    self.wake_at = now + wait
                    urgent.wait(wait)
                self.wake_at = math.inf
                request = heapq.heappop(heap)[2]
                worker.active += 1
            try:
                worker.serve(request, self)
            finally:
                with worker.mutex:
                    worker.active -= 1
