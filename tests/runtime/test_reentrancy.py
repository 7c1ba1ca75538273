"""Calls made from a future's done-callback, which runs on a serving thread: those that would
wait for that very thread are refused at once (``infer``, live changes) or go on without
waiting (``close``), instead of deadlocking the worker or joining it from itself."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

import pytest

from sparseloom.core.errors import RuntimeServeError
from sparseloom.core.types import SLO
from sparseloom.runtime.server import Server
from tests.runtime.support import eval_row

#: A refusal comes at once; a deadlock would never end: this bounds the wait for either.
TIMEOUT_S = 20.0
LOOSE = SLO(0.0, 1000.0)


def _serving_threads() -> list[str]:
    return [t.name for t in threading.enumerate()
            if t.name.startswith(("sparseloom-run-", "sparseloom-overflow-")) and t.is_alive()]


def _from_callback(server: Server, task: str, frame: Any, call: Any) -> Any:
    """Run ``call()`` in the done-callback of one request; what it returned or raised."""
    outcome: list[Any] = []
    ran = threading.Event()

    def callback(_: Future[Any]) -> None:
        try:
            outcome.append(call())
        except BaseException as error:  # the test reads it
            outcome.append(error)
        finally:
            ran.set()

    server.submit(task, frame).add_done_callback(callback)
    assert ran.wait(TIMEOUT_S), "the call from the done-callback hung (a deadlock)"
    return outcome[0]


def test_infer_and_live_changes_from_a_done_callback_are_refused(tiny: tuple[Any, Any]
                                                                 ) -> None:
    workload, profile = tiny
    task = workload.tasks[0]
    frame = eval_row(task, 0)
    with Server(workload, profile, slos=dict.fromkeys(profile.tasks, LOOSE)) as server:
        refused = _from_callback(server, task.name, frame,
                                 lambda: server.infer(task.name, frame, timeout=TIMEOUT_S))
        changed = _from_callback(server, task.name, frame,
                                 lambda: server.set_slo(task.name, latency_ms=500.0))
        chained = _from_callback(server, task.name, frame,
                                 lambda: server.submit(task.name, frame))
        # the worker that ran the callbacks still serves
        assert set(server.infer(task.name, frame, timeout=TIMEOUT_S))
        assert set(chained.result(TIMEOUT_S))
    assert isinstance(refused, RuntimeServeError), refused
    assert "done-callback" in str(refused) and "submit()" in str(refused)
    assert isinstance(changed, RuntimeServeError), changed
    assert "set_slo" in str(changed)


def test_close_from_a_done_callback_closes_without_joining_itself(tiny: tuple[Any, Any]
                                                                 ) -> None:
    workload, profile = tiny
    task = workload.tasks[0]
    frame = eval_row(task, 1)
    server = Server(workload, profile, slos=dict.fromkeys(profile.tasks, LOOSE))
    with server:
        closed = _from_callback(server, task.name, frame, server.close)
        with pytest.raises(RuntimeServeError, match="not running"):
            server.submit(task.name, frame)
    assert closed == 0, closed  # not "cannot join current thread"
    assert not _serving_threads(), _serving_threads()
    assert server.close() == 0  # closing again waits for nothing
