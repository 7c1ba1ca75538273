"""Which worker of a route with replicas (``Route.replicas``) takes a request.

A stock runtime's sessions of one task, one per core, are replicas of each other: a request
goes to the least busy (:func:`least_busy`). A task's spare (``Plan.spares``,
:mod:`sparseloom.runtime.lanes`) is a second server beside its processor's worker: it takes a
request only while that worker is in a model call or has requests queued, and has fewer itself
(:func:`spare_or_own`), so with one request in flight a task never leaves its processor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from sparseloom.runtime.lanes import is_spare

if TYPE_CHECKING:
    from sparseloom.runtime.request import Route
    from sparseloom.runtime.worker import ProcessorWorker


def replica_for(route: Route, workers: Mapping[str, ProcessorWorker]) -> ProcessorWorker | None:
    """The worker that takes the next request of ``route`` (one with replicas): the least
    busy replica, or the processor's worker or its spare; ``None`` when the processor of a
    spared route is down (the runtime then looks for any worker holding the model)."""
    own, more = workers[route.processors[0]], [workers[name] for name in route.replicas]
    if not route.spared:
        return least_busy([own, *more])
    return None if own.down else spare_or_own(own, more)


def spare_or_own(own: ProcessorWorker, spares: list[ProcessorWorker]) -> ProcessorWorker:
    """``own`` (a processor's worker, up) unless it is in a model call or has requests queued
    and one of ``spares`` that is up has fewer (an answer comes after its call ends)."""
    spare = min(spares, key=lambda w: (w.down, w.queued() + w.calling))
    busier = own.queued() + own.calling > spare.queued() + spare.calling
    return spare if busier and not spare.down else own


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
