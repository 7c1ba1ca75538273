"""A processor's queue serves the earliest deadline first (submission + the task's latency SLO),
or first in, first out with ``RuntimeOptions(deadline_queues=False)``.

Real runtime, real models: two digit tasks whose whole chains run on one processor; the worker
is held busy while requests of both tasks queue, then released.
"""

from __future__ import annotations

import threading
from typing import Any

from sparseloom.core.types import SLO, StitchedVariant


def _runtime_on_one_processor(two_tasks: tuple[Any, Any], slos: dict[str, SLO],
                              options: Any = None) -> Any:
    from sparseloom.runtime import switching
    from sparseloom.runtime.executor import Runtime
    from sparseloom.runtime.models import RuntimeTask
    from sparseloom.runtime.request import Route
    from sparseloom.runtime.session import profile_processors
    from sparseloom.zoo.load import load_zoo
    from sparseloom.zoo.options import zoo_directory

    workload, profile = two_tasks
    processors = profile_processors(profile)
    tasks = [RuntimeTask(workload.task(name), load_zoo(zoo_directory(
        profile.meta["zoo_hashes"][name]), verify=False), slos[name]) for name in profile.tasks]
    runtime = Runtime(tasks, processors, options=options)
    where = processors[0].name
    routes = {name: Route(StitchedVariant(name, (0, 0)), (where, where))
              for name in profile.tasks}
    for route in routes.values():
        switching.load_pairs(runtime, switching.route_keys(runtime, route), "preload")
    runtime.start_workers()
    for name, route in routes.items():
        runtime.set_route(name, route, "plan")
    return runtime, where


def test_the_request_with_the_earliest_deadline_runs_first(two_tasks: tuple[Any, Any]) -> None:
    relaxed, urgent = "digits_a", "digits_b"
    slos = {relaxed: SLO(0.5, 10_000.0), urgent: SLO(0.5, 1.0)}
    runtime, where = _runtime_on_one_processor(two_tasks, slos)
    gate = threading.Event()
    try:
        runtime.workers[where].call(lambda: gate.wait(10))  # the processor is busy meanwhile
        early = [runtime.submit(relaxed, row) for row in range(3)]
        late = [runtime.submit(urgent, row) for row in range(3)]
        gate.set()
        assert runtime.drain(30) == 0
        order = sorted(early + late, key=lambda r: r.finished_s)
        # Queued last, but due first: every urgent request ends before any relaxed one, and
        # each task's requests keep their submission order.
        assert [r.task for r in order] == [urgent] * 3 + [relaxed] * 3
        assert [r.request_id for r in order[:3]] == [r.request_id for r in late]
        assert [r.request_id for r in order[3:]] == [r.request_id for r in early]
        assert all(r.status == "completed" for r in order)
    finally:
        runtime.stop()


def test_equal_deadlines_are_served_in_submission_order(two_tasks: tuple[Any, Any]) -> None:
    slos = {"digits_a": SLO(0.5, 50.0), "digits_b": SLO(0.5, 50.0)}
    runtime, where = _runtime_on_one_processor(two_tasks, slos)
    gate = threading.Event()
    try:
        runtime.workers[where].call(lambda: gate.wait(10))
        submitted = [runtime.submit(task, row) for row in range(3)
                     for task in ("digits_a", "digits_b")]
        gate.set()
        assert runtime.drain(30) == 0
        order = sorted(submitted, key=lambda r: r.finished_s)
        assert [r.request_id for r in order] == [r.request_id for r in submitted]
    finally:
        runtime.stop()


def test_with_deadline_queues_off_the_queue_is_first_in_first_out(
        two_tasks: tuple[Any, Any]) -> None:
    from sparseloom.runtime.executor import RuntimeOptions

    relaxed, urgent = "digits_a", "digits_b"
    slos = {relaxed: SLO(0.5, 10_000.0), urgent: SLO(0.5, 1.0)}
    runtime, where = _runtime_on_one_processor(two_tasks, slos,
                                               RuntimeOptions(deadline_queues=False))
    gate = threading.Event()
    try:
        runtime.workers[where].call(lambda: gate.wait(10))
        early = [runtime.submit(relaxed, row) for row in range(3)]
        late = [runtime.submit(urgent, row) for row in range(3)]
        gate.set()
        assert runtime.drain(30) == 0
        order = sorted(early + late, key=lambda r: r.finished_s)
        # The same requests as the earliest-deadline test: the urgent ones, queued last,
        # now wait behind every relaxed one.
        assert [r.request_id for r in order] == [r.request_id for r in early + late]
        assert all(r.status == "completed" for r in order)
    finally:
        runtime.stop()
