"""``sparseloom.Server`` under trouble: a burst past the queue bound, a backend raising, a
processor going down, and closing with requests in flight — every future ends, none hangs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import CancelledError, wait
from typing import Any

import numpy as np
import pytest

from sparseloom.core.errors import BackendError, Overloaded, RequestFailed
from sparseloom.core.types import SLO
from sparseloom.runtime.executor import RuntimeOptions
from sparseloom.runtime.server import Server
from tests.runtime.support import eval_row, plain_onnxruntime, route_choices

TIMEOUT_S = 60.0
LOOSE = SLO(0.0, 1000.0)
#: A value no digit image holds: a request carrying it is the one the backend fails.
POISON = -12345.0


def _wrap_models(server: Server, wrap: Callable[[Any, Callable], Callable],
                 position: int | None = None) -> None:
    """Replace the runner of every resident subgraph (at ``position``) on every worker."""
    for worker in server.runtime.workers.values():
        for key, model in worker.models.items():
            if position is None or key[1] == position:
                model.runner = wrap(key, model.runner)


def _slow(seconds: float) -> Callable[[Any, Callable], Callable]:
    def wrap(key: Any, runner: Callable) -> Callable:
        def slow(inputs: Mapping[str, Any]) -> Any:
            time.sleep(seconds)
            return runner(inputs)
        return slow
    return wrap


def test_a_burst_past_the_bound_is_refused_with_overloaded(tiny: tuple[Any, Any]) -> None:
    workload, profile = tiny
    task = workload.task("tiny")
    with Server(workload, profile, slos={"tiny": LOOSE}, max_queued=4) as server:
        paused = threading.Event()
        for worker in server.runtime.workers.values():  # hold every worker: nothing ends
            worker.call(lambda: paused.wait(TIMEOUT_S))
        accepted, refused = [], []
        for row in range(50):
            try:
                accepted.append(server.submit("tiny", eval_row(task, row)))
            except Overloaded as error:
                refused.append(error)
        queued = server.stats().tasks["tiny"].queued
        paused.set()
        done, pending = wait(accepted, timeout=TIMEOUT_S)
        stats = server.stats().tasks["tiny"]
    assert not pending
    assert (len(accepted), len(refused), queued) == (4, 46, 4)
    assert "'tiny' has 4 requests queued" in str(refused[0])
    assert all(f.exception() is None for f in done)
    assert (stats.submitted, stats.completed, stats.rejected) == (4, 4, 46)
    assert stats.attainment == pytest.approx(4 / 50)  # a refused request is a miss


def test_a_backend_raising_fails_exactly_the_affected_futures(tiny: tuple[Any, Any]) -> None:
    workload, profile = tiny
    task = workload.task("tiny")

    def poisonous(key: Any, runner: Callable) -> Callable:
        def run(inputs: Mapping[str, Any]) -> Any:
            if any(np.asarray(v).flat[0] == POISON for v in inputs.values()):
                raise BackendError(f"the backend rejects request input {POISON}")
            return runner(inputs)
        return run

    # The paper's policy: a chain of subgraphs, whose position 0 the fault is injected into
    # (the default policy serves a one-processor chain merged into one model).
    with Server(workload, profile, slos={"tiny": LOOSE}, policy="sparseloom") as server:
        runtime = server.runtime
        # The retry finds the subgraph resident on the other processor (a retry that loads it
        # there would load an unwrapped copy).
        for key in runtime.states["tiny"].route.keys:
            for worker in runtime.workers.values():
                runtime.loader.load(key, worker, "test")
        _wrap_models(server, poisonous, position=0)
        rows = []
        for row in range(40):
            inputs = eval_row(task, row)
            if row % 5 == 2:
                next(iter(inputs.values())).flat[0] = POISON
            rows.append((row, inputs, server.submit("tiny", inputs)))
        _, pending = wait([f for *_, f in rows], timeout=TIMEOUT_S)
        stats = server.stats()
        route = stats.tasks["tiny"].route
    assert not pending
    oracle = plain_onnxruntime(tiny, "tiny", route_choices(route))
    for row, inputs, future in rows:
        if row % 5 == 2:
            error = future.exception()
            assert isinstance(error, RequestFailed), row
            assert (error.task, error.position) == ("tiny", 0)
            assert error.processor in profile.processors
            assert "task 'tiny' failed at subgraph 0" in str(error)
            assert f"on {error.processor}" in str(error) and "after a retry" in str(error)
            assert isinstance(error.__cause__, BackendError)
        else:
            np.testing.assert_allclose(future.result()["logits"], oracle(inputs)["logits"],
                                       rtol=1e-4, atol=1e-5)
    assert (stats.completed, stats.failed) == (32, 8)
    assert not any(p.down for p in stats.processors.values())


def test_a_processor_marked_down_reroutes_every_later_request(tiny: tuple[Any, Any]) -> None:
    workload, profile = tiny
    task = workload.task("tiny")
    with Server(workload, profile, slos={"tiny": LOOSE}) as probe:
        broken = probe.stats().tasks["tiny"].route.split(" @ ")[1].split(">")[0]
    options = RuntimeOptions(fault_rate=1.0, fault_processors=(broken,), down_after=2)
    with Server(workload, profile, slos={"tiny": LOOSE}, options=options) as server:
        outcomes = []
        for row in range(40):
            future = server.submit("tiny", eval_row(task, row))
            outcomes.append(future.exception(timeout=TIMEOUT_S))
        # A few early requests may fail (after their retry); the control thread re-plans
        # without the processor that went down.
        server.runtime.control.wait_idle(TIMEOUT_S)
        late = [server.submit("tiny", eval_row(task, row)) for row in range(40, 60)]
        late_errors = [f.exception(timeout=TIMEOUT_S) for f in late]
        stats = server.stats()
    assert stats.processors[broken].down
    assert broken not in stats.tasks["tiny"].route.split(" @ ")[1]
    assert late_errors == [None] * 20
    assert all(e is None or (isinstance(e, RequestFailed) and e.task == "tiny")
               for e in outcomes)
    assert stats.completed + stats.failed == stats.submitted == 60


def test_close_with_requests_in_flight_fails_the_rest_explicitly(tiny: tuple[Any, Any]
                                                                  ) -> None:
    workload, profile = tiny
    task = workload.task("tiny")
    server = Server(workload, profile, slos={"tiny": LOOSE}).start()
    paused = threading.Event()
    for worker in server.runtime.workers.values():  # stuck workers: nothing ends by itself
        worker.call(lambda: paused.wait(TIMEOUT_S))
    futures = [server.submit("tiny", eval_row(task, row)) for row in range(30)]
    closer = threading.Thread(target=server.close, kwargs={"timeout_s": 0.1})
    closer.start()
    _, pending = wait(futures, timeout=TIMEOUT_S)  # the drain gives up after 0.1 s
    paused.set()
    closer.join(TIMEOUT_S)
    assert not pending and not closer.is_alive(), "close hung with requests in flight"
    errors = [f.exception() for f in futures]
    assert all(isinstance(e, RequestFailed) and e.task == "tiny" and e.position == 0
               and "still in flight after the 0.1 s drain" in str(e) for e in errors)
    assert server.close() == 0  # a second close does nothing


def test_close_drains_requests_in_flight(tiny: tuple[Any, Any]) -> None:
    workload, profile = tiny
    task = workload.task("tiny")
    with Server(workload, profile, slos={"tiny": LOOSE}) as server:
        _wrap_models(server, _slow(0.002))
        futures = [server.submit("tiny", eval_row(task, row)) for row in range(30)]
    assert all(f.done() and f.exception() is None for f in futures)


def test_a_cancelled_future_does_not_break_the_run(tiny: tuple[Any, Any]) -> None:
    workload, profile = tiny
    task = workload.task("tiny")
    with Server(workload, profile, slos={"tiny": LOOSE}) as server:
        _wrap_models(server, _slow(0.01))
        futures = [server.submit("tiny", eval_row(task, row)) for row in range(10)]
        assert futures[-1].cancel()
        with pytest.raises(CancelledError):
            futures[-1].result(timeout=TIMEOUT_S)
        assert all(f.exception(timeout=TIMEOUT_S) is None for f in futures[:-1])
        server.runtime.drain(TIMEOUT_S)
        stats = server.stats()
    assert stats.submitted == stats.completed + stats.failed == 10
