"""A client's bad request fails that request, at ``submit`` where it can: it never takes a
processor down. Rows are checked on every call, extra input names are refused, NaN inputs are
served with one warning per task, and a request that fails on every processor is its own
fault, not theirs."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from sparseloom.core.errors import ArgumentError, BackendError, RequestFailed
from sparseloom.core.types import SLO
from sparseloom.runtime.admission import NonFiniteInputWarning
from sparseloom.runtime.server import Server
from tests.runtime.support import eval_row, plain_onnxruntime, route_choices

TIMEOUT_S = 60.0
LOOSE = SLO(0.0, 1000.0)


def _server(tiny: tuple[Any, Any]) -> Server:
    workload, profile = tiny
    return Server(workload, profile, slos=dict.fromkeys(profile.tasks, LOOSE))


def _assert_all_up(server: Server) -> None:
    processors = server.stats().processors
    assert processors and not [name for name, view in processors.items() if view.down]


def test_bad_rows_are_refused_at_submit_on_every_call(tiny: tuple[Any, Any]) -> None:
    workload, _ = tiny
    task = workload.tasks[0]
    rows = task.num_eval
    with _server(tiny) as server:
        # A good row first: the row is checked on every call, not only a task's first.
        assert server.submit_sample(task.name, 0).result(TIMEOUT_S)
        for _ in range(12):
            with pytest.raises(ArgumentError) as refused:
                server.submit_sample(task.name, 10**6)
            assert repr(task.name) in str(refused.value)
            assert f"[0, {rows})" in str(refused.value)
        for bad in (rows, -1, 1.5, True, "3", None):
            with pytest.raises(ArgumentError, match=rf"\[0, {rows}\)"):
                server.submit_sample(task.name, bad)  # type: ignore[arg-type]
        last = server.submit_sample(task.name, np.int64(rows - 1)).result(TIMEOUT_S)
        _assert_all_up(server)
        view = server.stats().tasks[task.name]
    assert set(last) and view.failed == 0 and view.completed == view.submitted == 2


def test_an_extra_input_name_is_refused(tiny: tuple[Any, Any]) -> None:
    workload, _ = tiny
    task = workload.tasks[0]
    frame = eval_row(task, 3)
    name = next(iter(frame))
    with _server(tiny) as server:
        with pytest.raises(BackendError) as refused:
            server.submit(task.name, {**frame, "imgae": frame[name]})
        with pytest.raises(ArgumentError, match="mapping"):
            server.submit(task.name, [frame[name]])  # type: ignore[arg-type]
        with pytest.raises(ArgumentError, match="needs inputs"):
            server.submit(task.name, None)  # type: ignore[arg-type]
        served = server.infer(task.name, frame, timeout=TIMEOUT_S)
        route = route_choices(server.stats().tasks[task.name].route)
    assert "'imgae'" in str(refused.value) and repr(name) in str(refused.value)
    expected = plain_onnxruntime(tiny, task.name, route)(frame)
    for key, value in expected.items():
        np.testing.assert_allclose(served[key], value, rtol=1e-4, atol=1e-5)


def test_non_finite_inputs_are_served_with_one_warning_per_task(tiny: tuple[Any, Any]
                                                                ) -> None:
    workload, _ = tiny
    task = workload.tasks[0]
    frame = eval_row(task, 5)
    name = next(iter(frame))
    all_nan = {name: np.full_like(frame[name], np.nan)}
    one_inf = {name: frame[name].copy()}
    one_inf[name].flat[0] = np.inf
    with _server(tiny) as server, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outputs = server.infer(task.name, all_nan, timeout=TIMEOUT_S)
        server.infer(task.name, one_inf, timeout=TIMEOUT_S)
        server.infer(task.name, all_nan, timeout=TIMEOUT_S)
    flagged = [w for w in caught if issubclass(w.category, NonFiniteInputWarning)]
    assert len(flagged) == 1, [str(w.message) for w in caught]
    message = str(flagged[0].message)
    size = frame[name].size
    assert repr(task.name) in message and f"holds {size} of {size}" in message
    assert set(outputs)  # served, as `sparseloom infer` serves it


class PoisonedRequests:
    """A test double of the fault injector: the requests it names fail on every processor
    (as inputs the model rejects at run time would), every other request runs."""

    def __init__(self, request_ids: set[int]) -> None:
        self.request_ids = request_ids

    def maybe_fail(self, processor: Any, request: Any, position: int) -> None:
        if request.request_id in self.request_ids:
            raise BackendError(f"request {request.request_id} is rejected on {processor.name}")


def test_a_request_failing_on_every_processor_takes_none_down(tiny: tuple[Any, Any]) -> None:
    workload, _ = tiny
    task = workload.tasks[0]
    with _server(tiny) as server:
        runtime = server.runtime
        poison = PoisonedRequests(set())
        for worker in runtime.workers.values():
            worker.faults = poison  # type: ignore[assignment]
        assert len(runtime.workers) >= 2  # a second opinion exists on this machine
        poison.request_ids.update(range(runtime.submitted, runtime.submitted + 12))
        doomed = [server.submit_sample(task.name, row) for row in range(12)]
        for future in doomed:
            with pytest.raises(RequestFailed, match="request itself is at fault"):
                future.result(TIMEOUT_S)
        _assert_all_up(server)
        good = [server.submit_sample(task.name, row) for row in range(12, 24)]
        assert all(set(f.result(TIMEOUT_S)) for f in good)
        _assert_all_up(server)
        view = server.stats().tasks[task.name]
    assert view.failed == 12 and view.completed == 12
