"""Which worker of a route with replicas (``Route.replicas``) takes a request.

A stock runtime's sessions of one task, one per core, are replicas of each other: a request
goes to the least busy (:func:`least_busy`). A task's spare (``Plan.spares``,
:mod:`sparseloom.runtime.lanes`) is a second server beside its processor's worker, on the
cores the other tasks' lanes run on: it takes a request only when waiting at the processor
would make it miss its latency SLO, and has fewer requests itself (:func:`spare_or_own`). With
one request in flight a task never leaves its processor; under Poisson arrivals the spare runs
only once the task's own processor falls behind, so the short calls it shares a core with do
not wait out its long ones while there is no need (measured on ``default`` at k = 5 on the
Intel Xeon with AMX, 2026-12-07: a spare that took every request queued behind a call put the
light tasks' p90 over their SLO at 240 requests/s per task, 1.77 ms against 1.17).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from sparseloom.runtime.lanes import is_spare

if TYPE_CHECKING:
    from sparseloom.runtime.request import Request, Route
    from sparseloom.runtime.worker import ProcessorWorker


#: A request goes to the spare when the processor's worker would end it less than this many
#: of its calls before its deadline (its queue's wait is an estimate from smoothed call times).
SPARE_MARGIN = 1.0


def replica_for(route: Route, workers: Mapping[str, ProcessorWorker],
                request: Request) -> ProcessorWorker | None:
    """The worker that takes ``request``, the next of ``route`` (one with replicas): the least
    busy replica, or the processor's worker or its spare; ``None`` when the processor of a
    spared route is down (the runtime then looks for any worker holding the model)."""
    own, more = workers[route.processors[0]], [workers[name] for name in route.replicas]
    if not route.spared:
        return least_busy([own, *more])
    return None if own.down else spare_or_own(own, more, request)


def spare_or_own(own: ProcessorWorker, spares: list[ProcessorWorker],
                 request: Request) -> ProcessorWorker:
    """``own`` (a processor's worker, up) unless it is in a model call or has requests queued,
    one of ``spares`` that is up has fewer, and ``request`` would miss its deadline waiting
    for ``own`` (:func:`late_at`; with no latency SLO, whenever the spare has fewer)."""
    spare = min(spares, key=lambda w: (w.down, w.queued() + w.calling))
    busier = own.queued() + own.calling > spare.queued() + spare.calling
    if not busier or spare.down:
        return own
    return spare if late_at(own, request, time.perf_counter()) else own


def late_at(worker: ProcessorWorker, request: Request, now: float) -> bool:
    """Whether ``request`` queued at ``worker`` now would end less than :data:`SPARE_MARGIN`
    of its calls before its deadline: the running call's expected end, then one call per
    request queued ahead and its own, each the worker's smoothed time of the model
    (``ResidentModel.took_s``, else the profile's). ``True`` when the task has no latency
    SLO or the profile has no time for the call."""
    deadline = worker.deadline(request)
    model = worker.models.get(request.routed.keys[request.stage])
    if deadline == math.inf or model is None:
        return True
    call = model.took_s if model.took_s > 0 else model.profiled_s
    if call < 0:  # not called yet: the profile's time, as the worker looks it up
        call = model.profiled_s = worker.handler.profiled_seconds(model.key, worker.name)
    if call <= 0:
        return True
    start = max(worker.call_ends, now) if worker.calling else now
    return start + (worker.queued() + 1 + SPARE_MARGIN) * call > deadline


def least_busy(workers: list[ProcessorWorker]) -> ProcessorWorker:
    """Of ``workers`` (replicas of one model, :attr:`Route.replicas
    <sparseloom.runtime.request.Route.replicas>`), the one with the fewest requests running
    and queued; the first on a tie, and the first when every one is down."""
    up = [w for w in workers if not w.down] or workers[:1]
    return min(up, key=lambda w: w.active + w.queued())


def take_spares_down(workers: Mapping[str, ProcessorWorker], processor: str) -> None:
    """Mark the spares of ``processor`` down with it: they run its backend as it is
    configured."""
    for worker in workers.values():
        if worker.lane_of == processor and is_spare(worker.name):
            worker.down = True
