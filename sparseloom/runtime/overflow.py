"""The overflow thread: a second server of one processor's queue, for requests about to be late.

A processor's worker runs one call at a time, so a short request queued behind another task's
call waits for it to end. The operating system does better when each task has a thread of its
own: it pre-empts a long call for a short one that wakes up (that is how stock ONNX Runtime,
one session and thread per task, meets tight latency SLOs on a loaded CPU). One thread per
task gives that up under a closed loop, though, where every thread is always runnable and
sharing a core stretches every call (docs/results.md, *Tried and not kept*).

So a processor named in ``Plan.overflow`` gets one more thread, pinned to the *other*
processors' cores, that serves its queue only when it must: when the first request in line
would miss its deadline waiting for the worker's running call,

    max(call_ends, now) + LATE_MARGIN × its call's time > its deadline,

and no processor whose core it would use has requests of its own waiting (a processor falling
behind lends no time), it takes that request and runs its stages on the lent core, which the
operating system time-slices with that core's own worker (a call there runs slower, and so
does the other processor's; a request with room to wait never pays for it).

It is woken only to serve: the test (:meth:`Overflow.due`, a few microseconds under the queue
lock) runs on the threads that change its terms — when a request is queued first in line
behind a running call, when the worker starts a call with requests waiting, and when it starts
a job (a load or a switch, expected to hold it :data:`~sparseloom.runtime.worker.JOB_S`) — and
the thread is notified only when it passes. It keeps no timer: a request that turns late only
because the running call overruns its expected time waits for that call. (An earlier thread woke
for every request queued behind a call and slept until each would turn late; a variant
that woke so but never served cost the Poisson capacity search 19 % at k = 5,
docs/results.md.) Under the
paper's closed loop (latency unconstrained) it never runs; under tight SLOs it is what keeps a
short task's p90 off the long stages it would queue behind. Only a model whose call is re-entrant
(``ResidentModel.reentrant``: the built-in backends') is served there, never a wide twin, and
the calls count as the overflow thread's (:attr:`Overflow.stages`, :attr:`Overflow.busy_s`),
not in the worker's utilisation or calibration.

``sparseloom-loaded`` names every processor it gives two or more tasks
(``LoadedPolicy(overflow=False)`` turns it off); the table of mechanisms in docs/runtime.md has
its measured effect on the grid, the closed loop and the capacity search.
"""

from __future__ import annotations

import heapq
import math
import os
import threading
import time
from typing import TYPE_CHECKING

import attrs

from sparseloom.runtime.threads import mark_serving
from sparseloom.runtime.worker import HORIZON_S

if TYPE_CHECKING:
    from sparseloom.runtime.worker import ProcessorWorker

#: A request is late when the worker's running call would end less than this many of its own
#: calls (the worker's smoothed time of that model) before its deadline. Its call on a lent,
#: time-sliced core takes longer than on the worker's own, with a long tail (p50 1.7×, p90
#: 5× in one traced run on the AMX Xeon). ``benchmarks/loaded_ab.py --option
#: overflow --scenario grid --rounds 2``: at k = 5, 1.5 left a level-run median violation of
#: 0.50 [0.25–1.00], 3 gave 0.25 [0.25–0.75] (0.75 [0.75–1.00] without overflow).
LATE_MARGIN = 3.0


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
        wakes: times it was notified (each when :meth:`due` held; a few find the request
            taken meanwhile by the worker).
    """

    worker: ProcessorWorker
    cores: tuple[int, ...]
    lenders: tuple[ProcessorWorker, ...] = ()
    stages: int = 0
    busy_s: float = 0.0
    wakes: int = 0
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

    def due(self, now: float) -> bool:
        """Whether the first request in line must be taken here now: waiting for the worker's
        running call would make it late, and no lender has requests of its own queued.
        Called with the worker's queue lock held."""
        worker = self.worker
        heap = worker.heap
        if not worker.overflow_on or not heap or not worker.active:
            return False  # the worker itself takes what is queued when it is free
        item = heap[0][2]
        route = getattr(item, "route", None)
        if route is None:
            return False  # a job (loads, switches) or the stop marker
        # (the request's own deadline: a first-in-first-out queue does not key by it)
        deadline = worker.deadline(item)
        if deadline == math.inf:
            return False  # no latency SLO
        model = worker.models.get(route.keys[item.stage])
        if model is None or not model.reentrant:
            return False
        own = max(model.took_s if model.took_s > 0 else model.profiled_s, 0.0)
        if max(worker.call_ends, now) + LATE_MARGIN * own <= deadline:
            return False
        return not any(lender.heap for lender in self.lenders)  # a busy lender lends nothing

    def nudge(self) -> None:
        """Notify the thread if :meth:`due` holds (called with the queue lock held)."""
        if self.due(time.perf_counter()):
            self.wakes += 1
            self.worker.urgent.notify()

    def _loop(self) -> None:
        mark_serving(f"the overflow thread of {self.worker.name}")
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
                    if self.due(perf_counter()):
                        break
                    urgent.wait(HORIZON_S)
                request = heapq.heappop(heap)[2]
                worker.active += 1
            try:
                worker.serve(request, self)
            finally:
                with worker.mutex:
                    worker.active -= 1
