"""The runtime's state of one task: its route, a pending switch, held requests, counters —
and how a request of it is admitted, ended and answered.

Every method here runs under the runtime's lock (:attr:`Runtime.lock
<sparseloom.runtime.executor.Runtime.lock>`), except :func:`resolve_future`, which runs after
it, on the worker thread that ended the request.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from concurrent.futures import Future, InvalidStateError
from typing import Any

import attrs

from sparseloom.core.errors import Overloaded, RequestFailed, RuntimeServeError
from sparseloom.runtime.models import RuntimeTask
from sparseloom.runtime.monitor import LatencyMonitor
from sparseloom.runtime.request import Request, Route
from sparseloom.runtime.stats import TaskCounters


@attrs.define(eq=False)
class TaskState:
    """One task as the runtime serves it.

    Attributes:
        task: the task, its zoo and SLO.
        monitor: its SLO monitor window.
        route: the route new requests take (``None``: not routed; requests wait in ``held``).
        pending: the route of a switch waiting for the in-flight requests to end.
        in_flight: requests admitted on a route and not ended.
        held: requests waiting for a route (not yet routed, or a switch pending), in order.
        counters: counts and recent outcomes (:mod:`sparseloom.runtime.stats`).
        closed: why it admits no request (removed, the server closing); empty while it admits.
    """

    task: RuntimeTask
    monitor: LatencyMonitor
    route: Route | None = None
    pending: Route | None = None
    in_flight: int = 0
    held: collections.deque[Request] = attrs.field(factory=collections.deque)
    counters: TaskCounters = attrs.field(default=None)
    closed: str = ""

    def __attrs_post_init__(self) -> None:
        if self.counters is None:
            self.counters = TaskCounters(self.task.name)

    def admit(self, request: Request, bound: int | None) -> bool:
        """Admit ``request``: routed at once (``True``) or held for a route (``False``).

        :raises RuntimeServeError: the task is closed.
        :raises Overloaded: ``bound`` of its requests have not ended yet.
        """
        if self.closed:
            raise RuntimeServeError(f"task {request.task!r} is not served now: {self.closed}")
        if bound is not None and self.in_flight + len(self.held) >= bound:
            self.counters.rejected_one(request.submitted_s)
            raise Overloaded(f"task {request.task!r} has {bound} requests queued (the bound); "
                             f"this one was refused: the load exceeds what the processors "
                             f"serve. Retry later, send fewer, or raise max_queued")
        self.counters.submitted_one(request.submitted_s)
        if self.route is None or self.pending is not None:
            self.held.append(request)
            return False
        request.route = self.route
        self.in_flight += 1
        return True

    def end(self, request: Request) -> list[Request]:
        """Count ``request`` as ended; when it was the last on the old route of a pending
        switch, switch and return the held requests now routed (else an empty list)."""
        if request.route is None:
            self.held.remove(request)
        else:
            self.in_flight -= 1
        if request.status == "completed":
            self.counters.completed_one(request, request.latency_ms)
        else:
            self.counters.failed_one(request.finished_s)
        if self.pending is None or self.in_flight:
            return []
        self.route, self.pending = self.pending, None
        self.monitor.reset()
        released = self.release_held()
        if self.closed:
            self.route = None
        return released

    def close(self, reason: str) -> None:
        """Admit no request, saying ``reason`` (empty: admit again; they wait for a route).
        Those in flight or held for a switch still end; the route is cleared once nothing
        waits for a switch, so a re-plan leaves the task out."""
        self.closed = reason
        if reason and self.pending is None:
            self.route = None

    def release_held(self) -> list[Request]:
        """Route every held request on the current route; return them, in order."""
        released = list(self.held)
        self.held.clear()
        for request in released:
            request.route = self.route
            self.in_flight += 1
        return released


def resolve_future(future: Future[Any], request: Request, outputs: Mapping[str, Any]) -> None:
    """Give ``future`` the outputs, or a :class:`RequestFailed` naming where it failed."""
    try:
        if request.status == "completed":
            future.set_result(outputs)
            return
        route = request.route
        position = request.stage
        if route is not None and route.merged:
            where = f"its merged chain {list(route.variant.choices)}"
        elif route is not None and position < route.positions:
            where = f"subgraph {position} (variant {route.variant.choices[position]})"
        else:
            where = f"subgraph {position}"
        error = RequestFailed(
            f"request {request.request_id} of task {request.task!r} failed at {where} on "
            f"{request.failed_on}: {request.reason}",
            task=request.task, position=position, processor=request.failed_on,
            reason=request.reason)
        error.__cause__ = request.error
        future.set_exception(error)
    except InvalidStateError:
        pass  # the client cancelled it: the request ran, its result is dropped
