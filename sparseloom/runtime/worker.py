"""One worker per processor: a thread pinned to the processor's cores, with its own queue.

The worker calls each loaded model *in place* on its own thread (``LoadedModel.runner`` for the
built-in backends, which is the runtime's bare call; ``backend.infer`` for others, which runs in
place on a pinned caller). No per-call input check: inputs were checked once, when the model
was loaded. When the next stage of a request is on the same processor it runs at once, without
a queue hop; otherwise the request goes to the next processor's queue.

A processor is a queue, and its discipline is a scheduling decision: each worker serves the
waiting request with the **earliest deadline** first (its submission time + its task's latency
SLO, as Band's deadline schedulers do), so a short task's stage no longer waits behind another
task's long stage queued before it when its SLO is the tighter one. Requests of one task keep
their order (same SLO: deadline order is submission order); with
``RuntimeOptions(deadline_queues=False)`` each queue is first in, first out instead. Jobs
queued with :meth:`call` (loads, switches) go before any request; stop goes after every
request already queued.

**Idle lending** (:mod:`sparseloom.runtime.lending`): a stage of a ``Plan.wide`` task runs
on its wide twin, on the cores of the other processors, only while every one of them is idle.

**Overflow.** A processor the plan names in ``Plan.overflow`` has a second server of its
queue, pinned to the other processors' cores (:mod:`sparseloom.runtime.overflow`): it takes the
first waiting request only when waiting for this worker's running call would make it miss its
deadline, and the operating system time-slices that core with its own worker.
"""

from __future__ import annotations

import heapq
import itertools
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from sparseloom.core.types import Processor
from sparseloom.runtime import lending
from sparseloom.runtime.lanes import profiled_as
from sparseloom.runtime.resident import ModelKey, ResidentModel
from sparseloom.runtime.threads import mark_serving

if TYPE_CHECKING:
    from sparseloom.runtime.faults import FaultInjector
    from sparseloom.runtime.request import Request

#: The overflow thread looks at its queue at least this often (it is woken sooner when it must
#: serve); an idle gap longer than this counts as this long.
HORIZON_S = 1.0
#: How long a job (a load or a switch) is expected to hold a worker, for the overflow thread's
#: test: building an ONNX Runtime session or compiling an OpenVINO model took 50–390 ms.
JOB_S = 0.4

class OverflowThread(Protocol):
    """What a worker (and its run's summary) asks of its overflow thread
    (:class:`~sparseloom.runtime.overflow.Overflow`, which imports this module)."""

    stages: int  # calls it made

    def nudge(self) -> None: ...
    def stop(self, timeout_s: float = 10.0) -> None: ...
    def count(self, took_s: float) -> None: ...


class StageHandler:
    """What a worker reports to (the runtime implements it).

    ``workers`` (processor name → worker) are the processors a wide stage may borrow from.
    ``slos`` (task → SLO, read live) gives each request its deadline in the worker's queue;
    a task without an SLO there is served after every task with one; with
    ``deadline_queues`` off the queues are first in, first out. ``profile`` (a
    ``ProfileTable``, or ``None``) gives each model's profiled time, which the worker's measured
    time is calibrated against.
    """

    slos: Mapping[str, Any] = {}
    deadline_queues: bool = True
    profile: Any = None
    workers: Mapping[str, ProcessorWorker] = {}

    def stage_done(self, request: Request, worker: ProcessorWorker) -> ProcessorWorker | None:
        """A stage finished; return the worker of the next stage (``None``: request done)."""
        raise NotImplementedError

    def borrow(self, worker: ProcessorWorker, quiet: bool = False
               ) -> list[ProcessorWorker] | None:
        """Take the :attr:`~ProcessorWorker.core` of every other processor of :attr:`workers`
        that is up, for one wide stage of ``worker`` (:func:`~sparseloom.runtime.lending.
        borrow`; ``None``: not all of them are idle, or quiet with ``quiet``)."""
        return lending.borrow((w for w in self.workers.values() if w is not worker), quiet)

    def roam(self, lane: ProcessorWorker) -> list[ProcessorWorker] | None:
        """Move ``lane``'s thread onto a quiet processor's cores for one call
        (:func:`~sparseloom.runtime.lending.roam`; ``None``: it stays home)."""
        return lending.roam(lane, self.workers.values())

    def profiled_seconds(self, key: ModelKey, processor: str) -> float:
        """The profile's time of one call of model ``key`` on ``processor`` (0: unknown); a
        merged model's is its chain's, the sum of its subgraphs' (what it replaces); a lane's
        is its processor's."""
        profile, processor = self.profile, profiled_as(self.workers, processor)
        if profile is None or processor not in profile.processors or key[0] not in \
                profile.tasks:
            return 0.0
        task, position, variant = key
        index = list(profile.processors).index(processor)
        latency = profile.task(task).latency_ms
        if isinstance(variant, tuple):
            return float(sum(latency[j, c, index] for j, c in enumerate(variant))) * 1e-3
        return float(latency[position, variant, index]) * 1e-3

    def stage_failed(self, request: Request, worker: ProcessorWorker, error: BaseException
                     ) -> None:
        """A stage raised; retry or fail the request."""
        raise NotImplementedError


_STOP = object()


@attrs.define(eq=False)
class ProcessorWorker:
    """The serving thread of one processor.

    Attributes:
        processor: the processor it serves (its thread is pinned to ``processor.cores``).
        handler: the runtime, told of every finished or failed stage.
        models: the subgraphs resident on this processor.
        faults: an optional fault injector (tests and demos).
        busy_s: seconds spent inside model calls (its utilisation over the run).
        profiled_s: what the profile says those calls take; ``busy_s / profiled_s`` over a
            window is how much slower (or faster) the processor runs than profiled.
        stages_run: model calls made.
        failures: stage failures on this processor.
        consecutive_failures: failures blamed on this processor since it last ran a stage (a
            failure is blamed once another processor ran the stage: ``Runtime.stage_failed``).
        down: marked down after repeated blamed failures (the policy re-plans without it).
        pending_ms: the expected work queued here, from profiled stage times (for dispatch).
        active: threads running a request's stages, or a queued job, here now (its own
            thread and its overflow thread).
        idle_since: ``time.perf_counter()`` when it last finished something.
        idle_gap_s: its idle gaps (from finishing everything to the next arrival), smoothed
            (:func:`~sparseloom.runtime.lending.smoothed_gap`; 0 before the first).
        wide_stages: stages run wide, on cores the idle other processors lent.
        lent_s: seconds its cores ran another processor's wide stages (lent while idle; not
            in ``busy_s``, which is its own model calls).
        core: held while this worker runs anything, and by a wide stage borrowing its cores.
        overflow: its overflow thread (``None``: none started); it serves only while
            ``overflow_on`` (the plan names this processor in ``Plan.overflow``).
        call_ends: ``time.perf_counter()`` when its own thread's running call is expected to
            end (start + the model's ``took_s``, else its profiled time): what the overflow
            thread's urgency test and a spare's routing
            (:func:`~sparseloom.runtime.replicas.spare_or_own`) compare a waiting request's
            deadline with.
        lane_of: the processor this worker is a lane of (:mod:`sparseloom.runtime.lanes`);
            ``None`` for a processor's own worker.
        roamed: calls this lane ran on a quiet processor's cores (``Plan.lanes_borrow``).
        calling: its own thread is in a model call (what sends a request to a spare,
            :func:`sparseloom.runtime.replicas.spare_or_own`).
    """

    processor: Processor
    handler: StageHandler
    models: dict[ModelKey, ResidentModel] = attrs.field(factory=dict)
    faults: FaultInjector | None = None
    busy_s: float = 0.0
    profiled_s: float = 0.0
    stages_run: int = 0
    failures: int = 0
    consecutive_failures: int = 0
    down: bool = False
    pending_ms: float = 0.0
    active: int = 0
    idle_since: float = 0.0
    idle_gap_s: float = 0.0
    wide_stages: int = 0
    lent_s: float = 0.0
    overflow: OverflowThread | None = None
    overflow_on: bool = False
    call_ends: float = 0.0
    lane_of: str | None = None
    calling: bool = False
    roamed: int = 0
    _heap: list[tuple[float, int, Any]] = attrs.field(factory=list, init=False)
    mutex: threading.Lock = attrs.field(factory=threading.Lock, init=False)
    _ready: threading.Condition = attrs.field(init=False)
    urgent: threading.Condition = attrs.field(init=False)
    _order: Any = attrs.field(factory=itertools.count, init=False)
    _thread: threading.Thread | None = attrs.field(default=None, init=False)
    _pending_lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)
    core: threading.Lock = attrs.field(factory=threading.Lock, init=False)

    def __attrs_post_init__(self) -> None:
        # One lock for the queue: its own thread waits on _ready, the overflow thread on urgent.
        self._ready = threading.Condition(self.mutex)
        self.urgent = threading.Condition(self.mutex)

    @property
    def name(self) -> str:
        """The processor's name."""
        return self.processor.name

    @property
    def heap(self) -> list[tuple[float, int, Any]]:
        """The queue: ``(deadline, order, request or job)``, earliest deadline first."""
        return self._heap

    def start(self) -> None:
        """Start the serving thread (pinned to the processor's cores)."""
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name=f"sparseloom-run-{self.processor.name}")
        self._thread.start()

    def put(self, request: Request) -> None:
        """Queue ``request`` to run its current stage here, by its deadline (in arrival
        order where the handler's ``deadline_queues`` is off: every key equal, the tie-break
        counter orders them)."""
        self._push(self.deadline(request) if self.handler.deadline_queues else 0.0, request)

    def deadline(self, request: Request) -> float:
        """``request``'s deadline: its submission + its task's latency SLO (``inf``: none)."""
        slo = self.handler.slos.get(request.task)
        return request.submitted_s + slo.latency_ms * 1e-3 if slo is not None else math.inf

    def call(self, fn: Callable[[], Any]) -> None:
        """Queue ``fn`` to run on this worker's thread before the requests waiting."""
        self._push(-math.inf, fn)

    def _push(self, key: float, item: Any) -> None:
        with self._ready:
            heapq.heappush(self._heap, (key, next(self._order), item))
            self._ready.notify()
            overflow = self.overflow
            # Only a request first in line behind a running call may need it now (one pushed
            # to a free worker is its own; the next call's start looks at those behind it).
            if overflow is not None and self.overflow_on and self.active \
                    and self._heap[0][2] is item:
                overflow.nudge()

    def add_pending(self, ms: float) -> None:
        """Account expected work queued (+) or finished (-) here."""
        with self._pending_lock:
            self.pending_ms = max(self.pending_ms + ms, 0.0)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop after the requests already queued; wait for the thread (and the overflow
        thread, which stops at once)."""
        if self.overflow is not None:
            self.overflow.stop(timeout_s)
        if self._thread is not None:
            self._push(math.inf, _STOP)
            self._thread.join(timeout_s)
            self._thread = None

    def queued(self) -> int:
        """Items waiting in the queue (approximate)."""
        return len(self._heap)

    def _loop(self) -> None:
        mark_serving(f"the worker of {self.processor.name}")
        cores = tuple(self.processor.cores)
        if cores and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, cores)
        heap, ready, pop = self._heap, self._ready, heapq.heappop
        while True:
            with ready:
                if not heap:
                    while not heap:
                        ready.wait()
                    if self.idle_since > 0:  # an idle gap ended (one over a second counts as one)
                        gap = min(time.perf_counter() - self.idle_since, HORIZON_S)
                        self.idle_gap_s = lending.smoothed_gap(self.idle_gap_s, gap)
                item = pop(heap)[2]
                if item is _STOP:
                    return
                self.active += 1  # a load or switch holds the core as a request does
                if self.overflow_on and callable(item) and self.overflow is not None:
                    self.call_ends = time.perf_counter() + JOB_S
                    self.overflow.nudge()  # those queued behind a job may not wait it out
            try:
                with self.core:  # waits while a wide stage has borrowed it
                    if callable(item):
                        item()
                    else:
                        self.serve(item)
            finally:
                self.idle_since = time.perf_counter()
                with self.mutex:
                    self.active -= 1

    def idle(self, for_s: float = 0.0) -> bool:
        """Nothing running and nothing queued here (for at least ``for_s`` seconds)."""
        return (not self.active and not self._heap
                and time.perf_counter() - self.idle_since >= for_s)

    def quiet(self) -> bool:
        """Idle long enough to lend its cores to a ``Plan.wide_when_quiet`` stage
        (:func:`sparseloom.runtime.lending.quiet`)."""
        return lending.quiet(self)

    def serve(self, request: Request, overflow: OverflowThread | None = None) -> None:
        """Run ``request``'s stages while they are on this processor (on the ``overflow``
        thread when given: no wide twin, and its calls counted there, not as this worker's).

        The hot path: per stage one dict lookup by the route's prebuilt key, the inputs picked
        from the carried tensors, the model call, and the hand-off; nothing else allocates.
        """
        models = self.models
        perf_counter = time.perf_counter
        faults = self.faults
        handler = self.handler
        name = self.processor.name
        while True:
            position = request.stage
            route = request.route
            assert route is not None  # admitted requests carry theirs (Runtime.submit)
            model = models.get(route.keys[position])
            carried = request.carried
            try:
                if model is None:
                    what = "the merged model" if route.merged else f"subgraph {position}"
                    raise LookupError(f"{what} of {route.variant} is not loaded on {name}")
                if faults is not None:
                    faults.maybe_fail(self.processor, request, position)
                runner = model.runner
                twin = model.wide_runner if overflow is None else None
                lenders = handler.borrow(self, route.quiet) if twin is not None else \
                    handler.roam(self) if route.roams and overflow is None else None
                wide = twin is not None and lenders is not None
                if twin is not None and wide:  # the lenders are idle: their cores are lent
                    runner = twin
                profiled = model.profiled_s
                if profiled < 0:
                    profiled = model.profiled_s = handler.profiled_seconds(model.key, name)
                # (the overflow thread and the spare's routing read call_ends and took_s)
                timed = overflow is None
                start = perf_counter()
                if timed:
                    self.call_ends = start + (model.took_s if model.took_s > 0 else profiled)
                    heap = self._heap  # those waiting behind this call, due soon: late now?
                    # (first-in-first-out queues key every request 0: always looked at)
                    if heap and heap[0][0] < start + HORIZON_S and self.overflow_on \
                            and self.overflow is not None:
                        with self.mutex:
                            self.overflow.nudge()
                if overflow is None:
                    self.calling = True
                try:
                    outputs = runner({key: carried[key] for key in model.input_names})
                finally:
                    if overflow is None:
                        self.calling = False
                    if lenders and not wide:  # a lane's call on a quiet processor's cores
                        lending.come_home(self)
                        self.roamed += 1
                    for lender in lenders or ():
                        lender.core.release()
                took = perf_counter() - start
                if overflow is not None:
                    # On another processor's core, time-sliced with its worker: counted by
                    # the overflow thread, not as this worker's calls or calibration.
                    overflow.count(took)
                else:
                    if timed:
                        model.took_s = (took if model.took_s < 0
                                        else 0.8 * model.took_s + 0.2 * took)
                    for lender in lenders or ():
                        lender.lent_s += took
                    self.busy_s += took
                    # Online calibration (Band's smoothed service times): measured vs
                    # profiled. A wide stage is faster than profiled by design, not because
                    # the processor is: it counts as on profile.
                    if wide:
                        profiled = took
                        self.wide_stages += 1
                    self.profiled_s += profiled
                    self.stages_run += 1
            except Exception as error:
                with self.mutex:  # (the overflow thread may fail a stage at the same time)
                    self.failures += 1
                handler.stage_failed(request, self, error)
                return
            self.consecutive_failures = 0
            request.carried = outputs
            request.ran_on.append(name)
            request.stage = position + 1
            following = handler.stage_done(request, self)
            if following is not self:
                if following is not None:
                    following.put(request)
                return

