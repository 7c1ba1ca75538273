"""The runtime: workers per processor, pipelined requests, retries, switches and the invariant.

A request of task ``t`` walks its route: stage ``j`` runs on the worker of ``route.processors[j]``
(or the processor a policy's ``dispatch`` picks, or one of its replicas, :mod:`.replicas`); its
boundary tensors then go to the next stage's worker queue, so requests of different tasks and
positions overlap on processors. Every request ends once, completed or failed with its reason (only
:meth:`Runtime._finish` ends one): ``submitted == completed + failed``, and its future is resolved
there. Memory is bounded: rings and counters per task (:mod:`sparseloom.runtime.stats`), the newest
``keep_requests`` ended requests, ``record_sink`` streams the rest; a task refuses more than
``max_queued``.
"""

from __future__ import annotations

import collections
import itertools
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from sparseloom.core.errors import RuntimeServeError
from sparseloom.core.registry import get_registry
from sparseloom.core.types import Processor
from sparseloom.runtime.admission import RequestChecks
from sparseloom.runtime.control import ControlThread
from sparseloom.runtime.faults import FaultInjector
from sparseloom.runtime.heap import SERVING_HEAP
from sparseloom.runtime.models import ModelLoader, RuntimeTask
from sparseloom.runtime.monitor import LatencyMonitor
from sparseloom.runtime.options import DOWN_AFTER as DOWN_AFTER  # re-export
from sparseloom.runtime.options import RuntimeOptions as RuntimeOptions  # re-export
from sparseloom.runtime.records import SwitchEvent
from sparseloom.runtime.replicas import replica_for, take_spares_down
from sparseloom.runtime.request import RELEASED, Request, Route
from sparseloom.runtime.taskstate import TaskState, resolve_future
from sparseloom.runtime.worker import ModelKey, ProcessorWorker, StageHandler

#: GIL switch interval while serving. CPython's 5 ms default let a control-thread job in
#: Python (on_feedback, planning) keep a worker that returned from its model call waiting up
#: to 5 ms per call (the workers release the GIL inside every call); 0.5 ms bounds that wait
#: at a tenth of the smallest bundled stage while costing the workers nothing measurable.
SWITCH_INTERVAL_S = 0.0005
#: Least seconds between two feedbacks. A window ends every 20 requests of a task (hundreds a
#: second on sub-millisecond tasks); each feedback is Python on the control thread, and a
#: worker back from its model call waits for the GIL meanwhile: feedback on every window
#: raised short tasks' p90 0.31 → 0.52 ms (docs/runtime.md). The policy's dwell is 2 s.
FEEDBACK_EVERY_S = 0.1


class Runtime(StageHandler):
    """Serves requests of several tasks on one worker per processor.

    Build it, :meth:`start` it with a plan (:mod:`sparseloom.runtime.switching` turns plans
    into routes and loads), :meth:`submit` requests, :meth:`drain`, then :meth:`stop`.
    ``on_finish`` (a load generator) and ``record_sink`` (a record stream) are called on the
    worker thread that ended a request.
    """

    def __init__(self, tasks: Sequence[RuntimeTask], processors: Sequence[Processor], *,
                 profile: Any = None, policy: Any = None,
                 planner: Callable[[tuple[str, ...], tuple[str, ...]], Any] | None = None,
                 options: RuntimeOptions | None = None) -> None:
        self.options = options or RuntimeOptions()
        self.tasks = {task.name: task for task in tasks}
        self.profile = profile
        self.policy = policy
        self.planner = planner
        self.dispatcher = policy if callable(getattr(policy, "dispatch", None)) else None
        faults = (FaultInjector(self.options.fault_rate, self.options.fault_seed,
                                self.options.fault_processors)
                  if self.options.fault_rate > 0 else None)
        self.faults = faults
        self.workers = {p.name: ProcessorWorker(p, self, faults=faults) for p in processors}
        self.states = {name: TaskState(task, LatencyMonitor(name, task.slo.latency_ms,
                                                            self.options.window))
                       for name, task in self.tasks.items()}
        self.loader = ModelLoader(self.tasks, batch_one=self.options.batch_one)
        self.control = ControlThread()
        self.slos: dict[str, Any] = {name: task.slo for name, task in self.tasks.items()}
        self.deadline_queues = self.options.deadline_queues
        # The newest feedbacks and switch events (bounded), and every task's switch count.
        self.feedbacks: collections.deque[Any] = collections.deque(maxlen=256)
        self.switches: collections.deque[SwitchEvent] = collections.deque(maxlen=1024)
        self.switch_counts: collections.Counter[str] = collections.Counter()
        # Per processor, (busy_s, profiled_s) at the last feedback (online calibration).
        self.calibration: dict[str, tuple[float, float]] = {}
        self.notes: list[str] = []
        self._finished: collections.deque[Request] = collections.deque(
            maxlen=self.options.keep_requests)
        self.last_finished_s = 0.0
        self.record_sink: Callable[[Request], None] | None = None
        self.plan: Any = None
        self.plan_version = 0
        self.submitted = self.completed = self.failed = 0
        self.on_finish: Callable[[Request], None] | None = None
        self.started_s = self.loader.started_s
        self._ids = itertools.count()
        self.lock = self._lock = threading.Lock()  # admission, ending, the task counters
        self._idle = threading.Condition(self._lock)
        self._in_flight: dict[int, Request] = {}
        self._draining = False
        self._stage_ms: dict[tuple[str, int, int, str], float] = {}
        self.checks = RequestChecks(self.tasks, self.notes)
        self._output_names = {name: task.output_name for name, task in self.tasks.items()}
        self._switch_interval: float | None = None
        self._next_feedback_s = 0.0
        # Run on the control thread when a processor is marked down and when a verdict is due
        # (installed by switching.start: this module does not import the layer above).
        self.on_down: Callable[[], None] = lambda: None
        self.on_verdict: Callable[[], None] = lambda: None

    # -- lifecycle --------------------------------------------------------------------------

    def start_workers(self) -> None:
        """Start every worker thread and the control thread.

        While the runtime serves, the GIL switch interval is :data:`SWITCH_INTERVAL_S` (a worker
        back from a model call waits at most that long for the control thread, not CPython's
        5 ms) and the heap is frozen unless ``options.freeze_heap`` is off (:mod:`.heap`).
        """
        if self._switch_interval is None:
            self._switch_interval = sys.getswitchinterval()
            sys.setswitchinterval(min(SWITCH_INTERVAL_S, self._switch_interval))
            SERVING_HEAP.enter(freeze=self.options.freeze_heap)
        for worker in self.workers.values():
            worker.start()
        self.control.start()

    def stop(self) -> None:
        """Stop the control thread and the workers, then unload every model."""
        self.control.stop()
        for worker in self.workers.values():
            worker.stop()
        self.loader.unload_all(self.workers)
        if self._switch_interval is not None:
            sys.setswitchinterval(self._switch_interval)
            self._switch_interval = None
            SERVING_HEAP.leave()

    @property
    def finished(self) -> list[Request]:
        """The newest ``options.keep_requests`` ended requests, in the order they ended."""
        with self._lock:
            return list(self._finished)

    @property
    def in_flight(self) -> int:
        """Requests submitted and not yet ended."""
        return self.submitted - self.completed - self.failed

    def drain(self, timeout_s: float = 60.0) -> int:
        """Wait for every request to end; fail those left after ``timeout_s``, return how many."""
        deadline = time.monotonic() + timeout_s
        with self._idle:
            self._draining = True
            while self.in_flight and time.monotonic() < deadline:
                self._idle.wait(min(0.2, max(deadline - time.monotonic(), 0.01)))
            self._draining = False
            leftovers = list(self._in_flight.values())
            leftovers += [r for s in self.states.values() for r in s.held]
        for request in leftovers:
            self._fail(request, f"still in flight after the {timeout_s:g} s drain at stop")
        return len(leftovers)

    def close_task(self, task: str, reason: str, fail_held: str = "") -> None:
        """Admit no more requests of ``task`` (``submit`` raises, giving ``reason``), or again
        when ``reason`` is empty (:meth:`TaskState.close`); ``fail_held``: fail the requests
        waiting for a route with this reason (no route will come)."""
        with self._lock:
            self.states[task].close(reason)
            held = list(self.states[task].held) if fail_held else []
        for request in held:
            self._fail(request, fail_held)

    # -- requests ---------------------------------------------------------------------------

    def submit(self, task: str, sample: int | None = None,
               inputs: Mapping[str, Any] | None = None,
               future: Future[Any] | None = None) -> Request:
        """Submit one request of ``task``: eval-set row ``sample`` or your own ``inputs``.

        Every request is checked here, before it can reach a processor
        (:mod:`sparseloom.runtime.admission`): a row's type and range on every call, inputs'
        names, dtype and shape. ``future`` gets the last stage's outputs, or the failure.

        :raises RuntimeServeError: an unknown or closed task.
        :raises Overloaded: ``options.max_queued`` requests of the task have not ended yet.
        :raises ArgumentError: a row that is not an int in range (or neither row nor inputs).
        :raises BackendError: inputs that do not match the task's model.
        """
        if task not in self.tasks:
            raise RuntimeServeError(f"task {task!r} is not served by this runtime; served: "
                                    f"{', '.join(self.tasks)}")
        arrays = self.checks.arrays(task, sample, inputs)
        row = -1 if inputs is not None else int(sample)  # type: ignore[arg-type]
        request = Request(next(self._ids), task, row, arrays, time.perf_counter(),
                          None, 0, arrays, [], future=future)
        with self._lock:
            routed = self.states[task].admit(request, self.options.max_queued)
            self.submitted += 1
            self._in_flight[request.request_id] = request
        if routed:
            self._enqueue(self._worker_for(request, None), request)
        return request

    def _worker_for(self, request: Request, previous: ProcessorWorker | None
                    ) -> ProcessorWorker:
        route = request.routed
        position = request.stage
        if route.replicas and (replica := replica_for(route, self.workers, request)) is not None:
            return replica
        worker = self.workers[route.processors[position]]
        if self.dispatcher is None and not worker.down:
            return worker
        key = route.keys[position]
        held = {n: w.pending_ms for n, w in self.workers.items() if not w.down and key in w.models}
        if not held or self.dispatcher is None:
            return self.workers[min(held, key=held.__getitem__)] if held else worker
        chosen = self.dispatcher.dispatch(request.task, position, key[2], held,
                                          previous.name if previous is not None else None)
        return self.workers.get(chosen, worker)

    def _enqueue(self, worker: ProcessorWorker, request: Request) -> None:
        if self.dispatcher is not None:
            worker.add_pending(self._expected_ms(request, worker))
        worker.put(request)

    def _expected_ms(self, request: Request, worker: ProcessorWorker) -> float:
        position = request.stage
        key = (request.task, position, request.routed.variant.choices[position], worker.name)
        value = self._stage_ms.get(key)
        if value is None:
            value = self._stage_ms[key] = 1e3 * self.profiled_seconds(key[:3], worker.name)
        return value

    def stage_done(self, request: Request, worker: ProcessorWorker) -> ProcessorWorker | None:
        """Hand a request to its next stage's worker, or complete it (called by workers)."""
        suspect = request.suspect
        if suspect is not None:  # a retried stage ran here: the processor that failed it is
            request.suspect = None  # to blame, not the request
            self._blame(suspect)
        if self.dispatcher is not None:
            request.stage -= 1
            worker.add_pending(-self._expected_ms(request, worker))
            request.stage += 1
        if request.stage == request.routed.stages:
            self._complete(request)
            return None
        following = self._worker_for(request, worker)
        if following is not worker and self.dispatcher is not None:
            following.add_pending(self._expected_ms(request, following))
        return following

    def stage_failed(self, request: Request, worker: ProcessorWorker, error: BaseException
                     ) -> None:
        """Retry the failed stage once on another processor, else fail the request.

        The retry also says whose fault the failure was: when it succeeds, the first
        processor's (:meth:`_blame`: ``down_after`` blames in a row mark it down); when it
        fails too, the request's own (it fails on two processors), and neither is blamed.
        Without a second processor to ask nobody is blamed, so a client's bad requests never
        take a processor down.
        """
        get_registry().notify_backend_error(worker.processor, "infer", error)
        if self.dispatcher is not None:
            worker.add_pending(-self._expected_ms(request, worker))
        reason = f"{type(error).__name__}: {error}"
        request.error = error
        first, request.suspect = request.suspect, None
        if request.retries >= 1:
            whose = (f" (first on {first.name}): it fails on two processors, so the request "
                     f"itself is at fault and neither is marked down for it"
                     if first is not None and first is not worker else "")
            self._fail(request, f"failed again after a retry on {worker.name}{whose}: {reason}",
                       worker.name)
            return
        position = request.stage
        key = request.routed.keys[position]
        others = [w for w in self.workers.values() if w is not worker and not w.down]
        holding = [w for w in others if key in w.models]
        request.retries += 1
        if others:
            request.suspect = worker
        if holding:
            self._enqueue(min(holding, key=lambda w: w.pending_ms), request)
        elif others:
            self.control.submit(lambda: self._load_and_retry(request, key, others[0], reason))
        else:
            self._fail(request, f"{reason}; no other processor is up to retry it on",
                       worker.name)

    def _blame(self, worker: ProcessorWorker) -> None:
        """Count a failure that was the processor's (another one ran the stage): down after
        ``options.down_after`` in a row (a stage it runs resets the count)."""
        with worker.mutex:
            worker.consecutive_failures += 1
            down = not worker.down and worker.consecutive_failures >= self.options.down_after
            worker.down = worker.down or down
        if down:
            take_spares_down(self.workers, worker.name)
            self.notes.append(f"processor {worker.name} marked down after "
                              f"{worker.consecutive_failures} consecutive failures")
            self.control.submit(self.on_down)

    def _load_and_retry(self, request: Request, key: ModelKey,
                        worker: ProcessorWorker, reason: str) -> None:
        try:
            self.loader.load(key, worker, "retry")
        except Exception as error:  # the request ends with both reasons
            self._fail(request, f"{reason}; loading it on {worker.name} for a retry failed: "
                                f"{error}", worker.name)
            return
        self._enqueue(worker, request)

    # -- ending requests --------------------------------------------------------------------

    def _complete(self, request: Request) -> None:
        request.output_batch = request.carried.get(self._output_names[request.task])
        request.finished_s = time.perf_counter()
        if self._finish(request, "completed"):
            monitor = self.states[request.task].monitor
            latency_ms = request.latency_ms
            if latency_ms > monitor.slo_latency_ms:
                get_registry().notify_slo_violation(request.task, latency_ms,
                                                    monitor.slo_latency_ms)
            if monitor.observe(latency_ms) and self.policy is not None \
                    and request.finished_s >= self._next_feedback_s and self.options.feedback:
                self._next_feedback_s = request.finished_s + FEEDBACK_EVERY_S
                self.control.submit(self.on_verdict)

    def _fail(self, request: Request, reason: str, processor: str | None = None) -> None:
        request.finished_s = time.perf_counter()
        request.reason = reason
        route = request.route
        request.failed_on = processor or (route.processors[request.stage] if route is not None
                                          and request.stage < route.stages else "-")
        self._finish(request, "failed")

    def _finish(self, request: Request, status: str) -> bool:
        """End ``request`` once (a second end is ignored): count it, release held requests,
        resolve its future, tell ``on_finish`` and ``record_sink``."""
        with self._lock:
            if request.status != "pending":
                return False
            request.status = status
            del self._in_flight[request.request_id]
            if status == "completed":
                self.completed += 1
            else:
                self.failed += 1
            released = self.states[request.task].end(request)
            self._finished.append(request)
            self.last_finished_s = request.finished_s
            if self._draining and not self.in_flight:
                self._idle.notify_all()
        outputs = request.carried
        request.carried = RELEASED
        request.inputs = RELEASED
        for held in released:
            self._enqueue(self._worker_for(held, None), held)
        future = request.future
        if future is not None:
            request.future = None
            resolve_future(future, request, outputs)
        on_finish = self.on_finish
        if on_finish is not None:
            on_finish(request)
        sink = self.record_sink
        if sink is not None:
            sink(request)
        return True

    def set_route(self, task: str, route: Route, reason: str, loads: int = 0,
                  load_ms: float = 0.0) -> None:
        """Switch ``task`` to ``route``: at once when none of its requests is in flight, else
        once they have ended (requests arriving meanwhile wait, in order)."""
        released: list[Request] = []
        with self._lock:
            state = self.states[task]
            before = state.route
            if before is not None and before.same_path(route) and state.pending is None:
                return
            if before is not None:
                self.switch_counts[task] += 1
                self.switches.append(SwitchEvent(
                    task, before.describe(), route.describe(), reason, loads, load_ms,
                    time.perf_counter() - self.started_s))
            if state.in_flight == 0:
                state.route, state.pending = route, None
                state.monitor.reset()
                released = state.release_held()
            else:
                state.pending = route
        for request in released:
            self._enqueue(self._worker_for(request, None), request)

