"""``sparseloom.Server``: serve several DNNs to an application — your requests, futures, live
SLOs, tasks joining and leaving.

::

    with sparseloom.Server("default") as server:
        outputs = server.infer("vision", {"image": frame})        # blocking
        future = server.submit("speech", {"audio": chunk})         # concurrent.futures.Future
        server.set_slo("vision", latency_ms=20)                     # re-plans, loses nothing
        print(server.stats().tasks["vision"].p90_ms)

Entering the block plans the workload's tasks from its profile (the policy's Algorithm 1),
preloads the hot subgraphs within the memory budget and starts one worker per processor
(:mod:`sparseloom.runtime.executor`); leaving it drains what is in flight and stops. Every
request ends exactly once: its future gets the last stage's outputs, or a
:class:`~sparseloom.core.errors.RequestFailed` naming the task, subgraph and processor. A task
admits at most ``max_queued`` requests that have not ended; past that ``submit`` raises
:class:`~sparseloom.core.errors.Overloaded` instead of queueing without limit.

``sparseloom run`` and ``evaluate`` serve through this class too
(:func:`sparseloom.runtime.session.serve` drives its runtime with a load generator).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

import attrs

from sparseloom.core.errors import RuntimeServeError
from sparseloom.core.registry import DEFAULT_POLICY
from sparseloom.core.types import SLO
from sparseloom.runtime import switching
from sparseloom.runtime.arguments import check_server_arguments
from sparseloom.runtime.executor import Runtime, RuntimeOptions
from sparseloom.runtime.live import ServerStats, server_stats
from sparseloom.runtime.threads import Closing, refuse_on_serving_thread, serving_thread

#: Requests of one task admitted and not yet ended before ``submit`` raises ``Overloaded``.
#: 128 covers a switch that loads a subgraph (the GIL is held for up to ~0.9 s, docs/runtime.md)
#: at ~140 requests/s per task without refusing any, and bounds a task's backlog at 128 inputs.
DEFAULT_MAX_QUEUED = 128
#: Seconds a live change (``set_slo``, ``add_task``, ``remove_task``) may take by default.
CONTROL_TIMEOUT_S = 120.0


class Server:
    """Serves the tasks of a workload to your own requests on every processor at once.

    :param workload: a ``Workload``, or a bundled name or workload TOML path.
    :param profile: its ``ProfileTable`` (default: built, or read from the cache).
    :param policy: the placement policy (``sparseloom plugins`` lists them).
    :param slos: SLO per task; others take the workload's, else their grid middle.
    :param processors: processor names to serve on (default: the profile's).
    :param memory_budget: a fraction of full preloading in (0, 1], or bytes.
    :param tasks: the tasks served from the start (default all); others join with
        :meth:`add_task`.
    :param max_queued: per task, requests admitted and not yet ended past which
        :meth:`submit` raises ``Overloaded`` (:data:`DEFAULT_MAX_QUEUED`).
    :param options: runtime settings (monitor window, faults) — ``max_queued`` wins.
    :param progress: a progress bar on stderr while preloading.
    :param paired_gate: serve a task's stitched pick only where its selection rows vouch
        for it beside dense row by row (the low end of the 95% paired bootstrap interval of
        pick − dense within the margin its accuracy SLO leaves); a refused pick is taken out
        and the policy plans again (:mod:`sparseloom.plan.paired_gate`). It runs each
        pick and dense over the selection rows once, at start; ``False`` trusts the
        profile's accuracies alone. The refused picks are in :attr:`refused`.
    """

    def __init__(self, workload: Any, profile: Any = None, *, policy: str = DEFAULT_POLICY,
                 slos: Mapping[str, SLO] | None = None, processors: Sequence[str] = (),
                 memory_budget: float | int = 1.0, tasks: Sequence[str] | None = None,
                 max_queued: int | None = DEFAULT_MAX_QUEUED,
                 options: RuntimeOptions | None = None, progress: bool = False,
                 paired_gate: bool = True) -> None:
        checked_slos = check_server_arguments(workload, profile, policy, slos, processors,
                                              memory_budget, tasks, max_queued, options,
                                              progress, paired_gate)
        self._workload = workload
        self._profile = profile
        self._policy = policy
        self._slos = checked_slos
        self._processors = tuple(processors or ())
        self._memory_budget = memory_budget
        self._tasks = None if tasks is None else tuple(tasks)
        self._options = attrs.evolve(options or RuntimeOptions(), max_queued=max_queued)
        self._progress = progress
        self._paired_gate = paired_gate
        self._runtime: Runtime | None = None
        self._serving: frozenset[str] = frozenset()
        self._closed = False
        self._busy_since: dict[str, tuple[float, float]] = {}
        # Guards the served set and the utilisation snapshots; never held while waiting.
        self._lock = threading.Lock()
        self._closing: Closing | None = None
        #: The first plan, its preload set and where each task's SLO came from (once started).
        self.plan: Any = None
        self.preload: Any = None
        self.slo_sources: dict[str, str] = {}
        #: Per task, the picks the paired gate refused at start (choices joined by ``_``).
        self.refused: dict[str, tuple[str, ...]] = {}
        #: The subgraphs loaded at start (``LoadEvent``s).
        self.preload_events: list[Any] = []

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> Server:
        """Plan, preload and start the workers (``with Server(...)`` calls it).

        :raises RuntimeServeError: a processor that is not there, a task the plan does not
            place. :raises PlanError, UnknownNameError: from planning.
        """
        if self._runtime is not None:
            raise RuntimeServeError("this server was already started; make a new Server")
        from sparseloom.profile.builder import build_profile
        from sparseloom.runtime.startup import planned_runtime
        from sparseloom.workload.load import load_workload

        workload = self._workload
        if isinstance(workload, str | os.PathLike):
            workload = self._workload = load_workload(workload, progress=self._progress)
        if self._profile is None:
            self._profile = build_profile(workload, progress=self._progress)
        profile = self._profile
        unknown = [t for t in (self._tasks or ()) if t not in profile.tasks]
        if unknown:
            raise RuntimeServeError(f"tasks= names {', '.join(map(repr, unknown))}, which the "
                                    f"profile does not hold; tasks: {', '.join(profile.tasks)}")
        runtime, planned = planned_runtime(
            workload, profile, policy=self._policy, slos=self._slos,
            processors=self._processors, memory_budget=self._memory_budget,
            options=self._options, paired_gate=self._paired_gate, progress=self._progress)
        try:
            self.preload_events = switching.start(
                runtime, planned.plan, active=self._tasks, preload=planned.preload,
                progress=self._progress)
        except BaseException:
            runtime.stop()
            raise
        self.plan, self.preload = planned.plan, planned.preload
        self.slo_sources = dict(planned.slo_sources)
        self.refused = dict(planned.refused)
        self._serving = frozenset(self._tasks if self._tasks is not None else profile.tasks)
        self._runtime = runtime
        return self

    def close(self, timeout_s: float = 60.0) -> int:
        """Stop admitting, let the requests in flight end (those still in flight after
        ``timeout_s`` fail explicitly), then stop the workers. Returns how many the drain
        failed. Calling it again waits for the first call's close and returns 0.

        Called on one of the server's own threads (a future's done-callback runs on a worker)
        it cannot wait for the workers to stop — that thread is one of them — so it starts
        the close on a thread of its own and returns 0 at once; leaving the ``with`` block
        (or calling ``close()`` from your thread) waits for that close to finish.
        """
        runtime = self._runtime
        if runtime is None:
            return 0
        with self._lock:
            closing, first = self._closing, self._closing is None
            if closing is None:
                closing = self._closing = Closing(runtime, timeout_s)
                self._closed = True
                self._serving = frozenset()
        if first:
            closing.start()
        if serving_thread() is not None:
            return 0
        failed = closing.wait()
        return failed if first else 0

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- requests ---------------------------------------------------------------------------

    @property
    def runtime(self) -> Runtime:
        """The running runtime (load generators and benchmarks drive it directly).

        :raises RuntimeServeError: the server is not running."""
        runtime = self._runtime
        if runtime is None or self._closed:
            raise RuntimeServeError("the server is not running: use it inside `with "
                                    "Server(...) as server:` (or call start() first)")
        return runtime

    @property
    def workload(self) -> Any:
        """The served workload (a ``Workload`` once started)."""
        return self._workload

    @property
    def profile(self) -> Any:
        """The profile it was planned from (once started)."""
        return self._profile

    @property
    def tasks(self) -> tuple[str, ...]:
        """The tasks served now."""
        return tuple(sorted(self._serving))

    def _admit(self, task: str) -> Runtime:
        runtime = self.runtime
        if task not in self._serving:
            where = ("it is not served now; add it with server.add_task"
                     f"({task!r})" if task in runtime.tasks else
                     f"the profile holds {', '.join(runtime.tasks)}")
            raise RuntimeServeError(f"task {task!r} is not served by this server: {where}")
        return runtime

    def submit(self, task: str, inputs: Mapping[str, Any]) -> Future[dict[str, Any]]:
        """Queue one request (batch 1) of ``task``; the future gets its last stage's outputs
        by name. Safe from any number of threads; done-callbacks run on a worker thread.

        Inputs holding NaN or Inf are served, with one ``NonFiniteInputWarning`` per task.

        :raises RuntimeServeError: a task that is not served, or a server not running.
        :raises BackendError: inputs that do not match the task's model (a missing or extra
            name, dtype, shape).
        :raises Overloaded: ``max_queued`` requests of the task have not ended yet.
        """
        future: Future[dict[str, Any]] = Future()
        self._admit(task).submit(task, inputs=inputs, future=future)
        return future

    def submit_sample(self, task: str, sample: int) -> Future[dict[str, Any]]:
        """Queue the task's eval-set row ``sample`` (scored in the run summary).

        :raises ArgumentError: ``sample`` is not an int (a bool or a float is refused) in
            ``[0, rows)`` of the task's eval set; the message gives the range.
        """
        future: Future[dict[str, Any]] = Future()
        self._admit(task).submit(task, sample, future=future)
        return future

    def infer(self, task: str, inputs: Mapping[str, Any], timeout: float | None = None
              ) -> dict[str, Any]:
        """:meth:`submit` and wait: the outputs, or the request's exception.

        :raises TimeoutError: no answer within ``timeout`` seconds (the request goes on).
        :raises RuntimeServeError: called on one of the server's threads (a done-callback):
            waiting there would deadlock the worker that must serve it.
        """
        refuse_on_serving_thread("infer()", "use submit() and chain futures "
                                             "(future.add_done_callback) instead")
        return self.submit(task, inputs).result(timeout)

    async def ainfer(self, task: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """:meth:`infer` for asyncio: ``await server.ainfer(task, inputs)``."""
        return await asyncio.wrap_future(self.submit(task, inputs))

    # -- live control -----------------------------------------------------------------------

    def _on_control(self, job: Callable[[], Any], timeout_s: float) -> Any:
        """Run ``job`` on the control thread (after what is queued there) and wait for it;
        its exception is raised here.

        :raises RuntimeServeError: called on one of the server's threads, where waiting for
            the control thread can deadlock (it may need that very thread)."""
        refuse_on_serving_thread("a live change (set_slo, add_task, remove_task)",
                                  "call it from a thread of your own, or use "
                                  "add_task(..., wait=False)")
        runtime = self.runtime
        done = threading.Event()
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["value"] = job()
            except BaseException as error:  # handed to the caller below
                outcome["error"] = error
            finally:
                done.set()

        runtime.control.submit(run)
        if not done.wait(timeout_s):
            raise RuntimeServeError(f"a live change did not finish within {timeout_s:g} s "
                                    f"(it goes on in the background); wait longer")
        if "error" in outcome:
            raise outcome["error"]
        return outcome.get("value")

    def _replan(self, reason: str) -> None:
        """Algorithm 1 again for the routed tasks; each moves once its in-flight requests end."""
        runtime = self.runtime
        active = tuple(n for n, s in runtime.states.items() if s.route is not None)
        if not active or runtime.planner is None:
            return
        switching.apply_plan(runtime, runtime.planner(active, switching.down_processors(runtime)),
                             reason)

    def set_slo(self, task: str, *, accuracy: float | None = None,
                latency_ms: float | None = None, timeout_s: float = CONTROL_TIMEOUT_S) -> SLO:
        """Serve ``task`` under a new SLO (the parts not given stay) and re-plan; returns it.

        Requests in flight finish on their route, later ones take the new one in order.
        :raises ConfigError: an accuracy outside [0, 1] or a latency <= 0.
        """
        runtime = self._admit(task)
        before = runtime.slos[task]
        slo = SLO(before.accuracy if accuracy is None else accuracy,
                  before.latency_ms if latency_ms is None else latency_ms)

        def change() -> None:
            monitor = runtime.states[task].monitor
            runtime.slos[task] = slo
            monitor.slo_latency_ms = slo.latency_ms
            monitor.reset()
            try:
                self._replan("slo")
            except BaseException:
                runtime.slos[task] = before
                monitor.slo_latency_ms = before.latency_ms
                raise

        self._on_control(change, timeout_s)
        return slo

    def add_task(self, task: Any, *, wait: bool = True,
                 timeout_s: float = CONTROL_TIMEOUT_S) -> None:
        """A task joins (by name, or its ``Task``): the plan is made again for the tasks now
        served, and its requests are admitted at once (they wait for its route).

        ``wait=False`` returns before the re-plan is applied (from a worker thread, say).
        :raises RuntimeServeError: a task the profile does not hold — build a profile of a
            workload holding it and start the server from that.
        """
        runtime = self.runtime
        name = task if isinstance(task, str) else str(getattr(task, "name", task))
        if name not in runtime.tasks:
            raise RuntimeServeError(
                f"task {name!r} is not in the profile this server started from (it holds "
                f"{', '.join(runtime.tasks)}); profile a workload that holds it (sparseloom "
                f"profile) and start the Server with tasks=[...] naming those served first")
        if name in self._serving:
            return

        def join() -> None:
            try:
                switching.join(runtime, name)
            except BaseException as error:
                runtime.close_task(name, f"joining failed: {error}",
                                   fail_held=f"the task could not join: {error}")
                with self._lock:
                    self._serving = self._serving - {name}
                raise

        with self._lock:
            runtime.close_task(name, "")
            self._serving = self._serving | {name}
        if wait:
            self._on_control(join, timeout_s)
        else:
            runtime.control.submit(join)

    def remove_task(self, name: str, *, timeout_s: float = CONTROL_TIMEOUT_S) -> None:
        """A task leaves: no new request of it is admitted (``submit`` raises), those in
        flight end normally, and the plan is made again for the tasks that stay. Its
        subgraphs stay loaded, so it can join again quickly."""
        runtime = self._admit(name)
        with self._lock:
            self._serving = self._serving - {name}
            runtime.close_task(name, "it was removed; add it again with server.add_task"
                                     f"({name!r})")
        self._on_control(lambda: self._replan("leave"), timeout_s)

    # -- observing --------------------------------------------------------------------------

    def stats(self) -> ServerStats:
        """Per task: counts, requests/s, p50/p90/p99 and SLO attainment over its recent
        requests, the route now serving it, switches; per processor: utilisation since the
        previous call, queue length, whether it is down (:mod:`sparseloom.runtime.live`)."""
        runtime = self.runtime
        with self._lock:
            return server_stats(runtime, self._serving, self._busy_since)
