"""Tuned stock runtimes where requests queue: one session per core where that serves more per
second (measured), each request on the least busy session (``Route.replicas``)."""

from __future__ import annotations

from typing import Any

import pytest

from sparseloom.core.types import SLO, StitchedVariant
from sparseloom.evaluation.stock_tuned import Choice, Config, Measured, TunedRuntime, tune
from sparseloom.runtime.request import Route


def test_replicas_serve_a_route_of_one_processor_beside_it() -> None:
    variant = StitchedVariant("t", (0,))
    route = Route(variant, ("ort:CPU@t",), replicas=("ort:CPU@t#1",))
    assert route.describe() == f"{variant} @ ort:CPU@t|ort:CPU@t#1"
    assert not route.same_path(Route(variant, ("ort:CPU@t",)))
    with pytest.raises(ValueError, match="never it again"):
        Route(variant, ("ort:CPU@t",), replicas=("ort:CPU@t",))
    with pytest.raises(ValueError, match="serve a route of one processor"):
        Route(StitchedVariant("t", (0, 1)), ("ov:CPU", "ort:CPU"), replicas=("x",))


@pytest.mark.parametrize(("one_ms", "per_core"), [(1.5, True), (2.5, False)])
def test_a_task_on_two_cores_queues_on_one_session_per_core_only_where_measured_faster(
        one_ms: float, per_core: bool) -> None:
    one, two = Config("ov", "f32", 1), Config("ov", "f32", 2)
    measured = [Measured("a", one, one_ms, 0.9), Measured("a", two, 1.0, 0.9)]
    tuned = tune("stock-tuned", measured, (0, 1), picks=False, slos={"a": SLO(0.0, 10.0)},
                 whole={"a": 0.9})
    # Alone on two cores, two threads serve one request fastest.
    assert tuned.choices["a"].cores == (0, 1) and tuned.choices["a"].config == two
    # Two one-thread sessions serve 2 / one_ms requests a millisecond, two threads 1 / 1.0.
    assert (tuned.choices["a"].queued_config == one) is per_core
    assert tuned.processor("a").threads == 2 and tuned.replicas("a") == []
    queued = TunedRuntime(tuned.name, False, tuned.choices, queued=True)
    first, more = queued.processor("a"), queued.replicas("a")
    if per_core:
        assert (first.name, first.cores, first.threads) == ("ov:CPU@a", (0,), 1)
        assert [(p.name, p.cores, p.threads) for p in more] == [("ov:CPU@a#1", (1,), 1)]
        assert more[0].options["INFERENCE_PRECISION_HINT"] == "f32"
        assert "one session per core" in queued.describe()
    else:
        assert (first.cores, first.threads, more) == ((0, 1), 2, [])


@pytest.fixture(scope="module")
def tiny() -> Any:
    import sparseloom

    return sparseloom.load_workload("tiny", progress=False)


def test_queued_requests_run_on_every_session_and_answer_as_one_session_does(tiny: Any
                                                                           ) -> None:
    from sparseloom.evaluation.stock import serve_stock
    from sparseloom.runtime.load import LoadSpec

    task = tiny.task_names[0]
    choice = Choice(Config("ort", "f32", 2), (0, 1), 1.0, Config("ort", "f32", 1))
    slos = {task: SLO(0.0, 1000.0)}
    # A burst far above one session's rate: requests queue, and both sessions serve them.
    spec = LoadSpec("poisson", queries=400, rate=50_000.0, seed=3)
    runs = {queued: serve_stock(tiny, None, TunedRuntime("stock-tuned", False, {task: choice},
                                                         queued=queued), spec, slos)
            for queued in (True, False)}
    sessions = runs[True].utilisation
    assert set(sessions) == {f"ort:CPU@{task}", f"ort:CPU@{task}#1"}
    assert all(share > 0 for share in sessions.values()), sessions
    assert set(runs[False].utilisation) == {f"ort:CPU@{task}"}
    (queued_task,), (one_task,) = runs[True].tasks, runs[False].tasks
    assert queued_task.completed == one_task.completed == 400
    # The same rows through the same f32 model: the same accuracy, whichever session ran them.
    assert queued_task.accuracy_measured == one_task.accuracy_measured


def test_a_request_goes_to_the_least_busy_replica_that_is_up(tiny: Any) -> None:
    from sparseloom.core.types import Processor
    from sparseloom.runtime.executor import Runtime
    from sparseloom.runtime.models import RuntimeTask
    from sparseloom.runtime.replicas import least_busy
    from sparseloom.zoo.whole import whole_model_zoo

    task = tiny.task(tiny.task_names[0])
    runtime = Runtime([RuntimeTask(task, whole_model_zoo(task), SLO(0.0, 1000.0))],
                      [Processor(f"ort:CPU@t{i}", "ort", "CPU", cores=(i,)) for i in (0, 1)])
    first, second = runtime.workers.values()
    assert least_busy([first, second]) is first  # a tie: the first
    first.active = 1  # one request running on the first, none on the second
    assert least_busy([first, second]) is second
    second.active = 2
    assert least_busy([first, second]) is first
    first.down = True  # a replica marked down takes nothing while another is up
    assert least_busy([first, second]) is second
    second.down = True  # every one down: the first (its failure then says why)
    assert least_busy([first, second]) is first
