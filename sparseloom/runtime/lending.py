"""Idle lending: a wide stage borrows the cores of processors that have nothing to do.

A subgraph of a ``Plan.wide`` task has a wide twin beside it (one more thread on each core of
the other processors). A worker runs a stage on the twin only when every other processor that
is up is idle — nothing running, nothing queued, for at least :data:`LEND_AFTER_S` (a closed
loop's next request follows the last within tens of microseconds; a gap that short is not
idleness) — so a long chain borrows the cores the short tasks leave idle and never takes one a
task is waiting for. A ``Plan.wide_when_quiet`` route, whose loan would cost another task its
latency SLO if a request arrived meanwhile, borrows only from lenders idle for
:data:`QUIET_GAPS` × their mean idle gap (:meth:`Lender.quiet`). The loan is exclusive: the
wide stage holds each lender's ``core`` lock, which a worker holds while it runs anything, so a
request arriving at a lender meanwhile waits for that one stage instead of sharing the core
with it (shared, both ran slower, and the closed loop's throughput swung between rounds). A
wide stage counts as on profile in the online calibration: it is faster by design, not because
the processor is. The measurements behind each constant: docs/runtime.md, the mechanisms table.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from typing import Any, Protocol, TypeVar

#: How long a processor must have been idle before it lends its cores to a wide stage.
LEND_AFTER_S = 0.001
#: A quiet lender has been idle this many of its mean idle gaps. Where requests arrive as a
#: Poisson process, idle gaps are exponential, so e^-6 ≈ 0.25 % of a lender's idle gaps last
#: that long, and only the request ending one finds its core lent (and waits out one call).
#: Once its tasks stop arriving (a closed loop whose short tasks are done), it lends at once.
#: (3, e^-3 ≈ 5 %, cost the Poisson capacity search at k = 5 in an A/B: docs/plan.md.)
QUIET_GAPS = 6.0
#: Weight of the newest idle gap in a worker's smoothed mean idle gap.
GAP_WEIGHT = 0.1


class Lender(Protocol):
    """What lending asks of a processor's worker (:class:`~sparseloom.runtime.worker.
    ProcessorWorker`)."""

    down: bool
    core: threading.Lock
    idle_gap_s: float

    def idle(self, for_s: float = 0.0) -> bool: ...


LenderT = TypeVar("LenderT", bound=Lender)


def smoothed_gap(mean_s: float, gap_s: float) -> float:
    """The mean idle gap after one more gap of ``gap_s`` (weight :data:`GAP_WEIGHT` on the
    newest; the first gap is the mean)."""
    return mean_s + GAP_WEIGHT * (gap_s - mean_s) if mean_s > 0 else gap_s


def quiet(lender: Lender) -> bool:
    """Idle for :data:`QUIET_GAPS` × its mean idle gap (and :data:`LEND_AFTER_S`): its next
    request is unlikely to come while one wide stage holds its core."""
    return lender.idle(max(LEND_AFTER_S, QUIET_GAPS * lender.idle_gap_s))


def borrow(others: Iterable[LenderT], quiet_only: bool = False) -> list[LenderT] | None:
    """Take the ``core`` of every one of ``others`` that is up, for one wide stage: only when
    each has been idle for :data:`LEND_AFTER_S` (nothing running, nothing queued) and none
    started meanwhile (``None`` otherwise); with ``quiet_only``, only when each is
    :func:`quiet`. Returns the lenders, whose ``core`` locks the caller holds and releases
    when the stage ends."""
    lenders = [w for w in others if not w.down]
    if not all(quiet(w) if quiet_only else w.idle(LEND_AFTER_S) for w in lenders):
        return None
    taken: list[LenderT] = []
    for lender in lenders:
        if not lender.core.acquire(blocking=False):
            for held in taken:
                held.core.release()
            return None
        taken.append(lender)
    return taken


class Roamer(Protocol):
    """What :func:`roam` asks of a lane: its processor's cores (``processor.cores``)."""

    @property
    def processor(self) -> Any: ...


class ProcessorLender(Lender, Protocol):
    """A lender that :func:`roam` moves a lane onto: a processor's own worker."""

    lane_of: str | None

    @property
    def processor(self) -> Any: ...


ProcessorLenderT = TypeVar("ProcessorLenderT", bound=ProcessorLender)


def roam(lane: Roamer, workers: Iterable[ProcessorLenderT]) -> list[ProcessorLenderT] | None:
    """For one call of ``lane`` (a lane pinned to its processor's cores, on its own thread):
    the first processor's own worker among ``workers`` that is up, :func:`quiet`, on cores
    none of the lane's, and whose ``core`` is free — its ``core`` taken and the calling thread
    moved onto its cores. Returns ``[lender]`` (the caller runs the call, then
    :func:`come_home` and releases the lender's ``core``), or ``None``: the lane stays home."""
    own = set(lane.processor.cores)
    if not own or not hasattr(os, "sched_setaffinity"):
        return None
    for worker in workers:
        cores = tuple(worker.processor.cores)
        if worker.lane_of is not None or worker.down or not cores or own & set(cores) \
                or not quiet(worker) or not worker.core.acquire(blocking=False):
            continue
        os.sched_setaffinity(0, cores)
        return [worker]
    return None


def come_home(lane: Roamer) -> None:
    """Move the calling thread (``lane``'s) back onto its processor's cores after a call
    :func:`roam` sent elsewhere."""
    os.sched_setaffinity(0, tuple(lane.processor.cores))
