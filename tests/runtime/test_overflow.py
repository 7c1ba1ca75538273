"""Overflow threads (``Plan.overflow``): a request that would miss its latency SLO waiting for
a processor's running call runs on the other processors' cores, answering as plain ONNX
Runtime does; one with room to wait, or on a processor the plan does not name, waits."""

from __future__ import annotations

import threading
from concurrent.futures import Future, TimeoutError
from typing import Any

import pytest

from sparseloom.core.types import SLO, Plan, StitchedVariant
from tests.runtime.support import plain_onnxruntime

TASK = "digits_a"


def _started(two_tasks: tuple[Any, Any], latency_ms: float, overflow: bool) -> Any:
    """A runtime serving digits_a's (0, 0) chain on ``ort:CPU`` with the latency SLO
    ``latency_ms``, its plan naming ``ort:CPU`` in ``Plan.overflow`` when ``overflow``."""
    from sparseloom.runtime import switching
    from sparseloom.runtime.executor import Runtime
    from sparseloom.runtime.models import RuntimeTask, profile_processors
    from sparseloom.runtime.request import Route
    from sparseloom.zoo.load import load_zoo
    from sparseloom.zoo.options import zoo_directory

    workload, profile = two_tasks
    processors = profile_processors(profile)
    if len({c for p in processors for c in p.cores}) < 2:
        pytest.skip("an overflow thread runs on another processor's core")
    zoo = load_zoo(zoo_directory(profile.meta["zoo_hashes"][TASK]), verify=False)
    runtime = Runtime([RuntimeTask(workload.task(TASK), zoo, SLO(0.0, latency_ms))],
                      processors)
    route = Route(StitchedVariant(TASK, (0, 0)), ("ort:CPU", "ort:CPU"))
    switching.load_pairs(runtime, switching.route_keys(runtime, route), "preload")
    runtime.start_workers()
    plan = Plan("test", ("ort:CPU", "ort:CPU"), overflow=("ort:CPU",) if overflow else ())
    switching.set_overflow(runtime, plan)
    runtime.set_route(TASK, route, "plan")
    return runtime


def _blocked(runtime: Any) -> threading.Event:
    """Hold ``ort:CPU``'s own thread in a job until the returned event is set."""
    running, gate = threading.Event(), threading.Event()
    runtime.workers["ort:CPU"].call(lambda: (running.set(), gate.wait(30)))
    assert running.wait(10)
    return gate


def test_a_request_about_to_be_late_runs_on_the_overflow_thread(
        two_tasks: tuple[Any, Any]) -> None:
    runtime = _started(two_tasks, latency_ms=50.0, overflow=True)
    gate = _blocked(runtime)
    try:
        worker = runtime.workers["ort:CPU"]
        assert worker.overflow is not None and worker.overflow_on
        lent = {c for name, w in runtime.workers.items() if name != "ort:CPU"
                for c in w.processor.cores} - set(worker.processor.cores)
        assert set(worker.overflow.cores) == lent
        done: Future[Any] = Future()
        runtime.submit(TASK, 3, future=done)
        # ort:CPU's own thread stays blocked: the request is served anyway, on another core,
        # once waiting would make it late (within its 50 ms SLO, not after the job).
        answer = done.result(timeout=10)
        assert worker.overflow.stages == 2 and worker.stages_run == 0
        assert worker.overflow.busy_s > 0 and worker.busy_s == 0
        # Woken to serve it, not on a timer: a job holds the worker for about JOB_S, longer
        # than the 50 ms SLO, so the request was late as it was queued.
        assert worker.overflow.wakes >= 1
        expected = plain_onnxruntime(two_tasks, TASK, (0, 0))(
            {k: v[3:4] for k, v in two_tasks[0].task(TASK).eval_inputs.items()})
        for name, value in expected.items():
            assert answer[name] == pytest.approx(value, rel=1e-5, abs=1e-6)
    finally:
        gate.set()
        runtime.drain(30)
        runtime.stop()
    assert worker.overflow._thread is None  # stopped with its worker


@pytest.mark.parametrize("latency_ms, overflow", [(1e6, True), (50.0, False)],
                         ids=["room-to-wait", "not-in-the-plan"])
def test_a_request_waits_for_the_worker_when_it_has_room_or_no_overflow(
        two_tasks: tuple[Any, Any], latency_ms: float, overflow: bool) -> None:
    runtime = _started(two_tasks, latency_ms=latency_ms, overflow=overflow)
    gate = _blocked(runtime)
    try:
        worker = runtime.workers["ort:CPU"]
        assert (worker.overflow is not None) == overflow
        done: Future[Any] = Future()
        runtime.submit(TASK, 3, future=done)
        with pytest.raises(TimeoutError):
            done.result(timeout=0.5)  # its own thread is blocked: nobody serves it
        gate.set()
        done.result(timeout=10)
        assert worker.stages_run == 2
        # With room to wait the overflow thread was never even woken.
        assert worker.overflow is None or (worker.overflow.stages == 0
                                           and worker.overflow.wakes == 0)
    finally:
        gate.set()
        runtime.drain(30)
        runtime.stop()
