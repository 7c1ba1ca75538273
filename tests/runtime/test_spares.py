"""Spares (``Plan.spares``): a merged chain's second server on the other processors' cores,
with a model of its own, used only while the task's processor is busy with another request
and waiting for it would make a request miss its latency SLO."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import attrs
import numpy as np

from sparseloom.core.types import SLO, Plan, StitchedVariant
from sparseloom.runtime.resident import WHOLE
from tests.runtime.support import answers_in_turn, eval_row, plain_onnxruntime

TASK = "digits_a"
CHOICES = (2, 0)
SPARE = "ov:CPU@digits_a/spare"


def _runtime(two_tasks: tuple[Any, Any], latency_ms: float = 0.5) -> Any:
    from sparseloom.runtime.executor import Runtime
    from sparseloom.runtime.models import RuntimeTask, profile_processors
    from sparseloom.zoo.load import load_zoo
    from sparseloom.zoo.options import zoo_directory

    workload, profile = two_tasks
    zoo = load_zoo(zoo_directory(profile.meta["zoo_hashes"][TASK]), verify=False)
    return Runtime([RuntimeTask(workload.task(TASK), zoo, SLO(0.0, latency_ms))],
                   profile_processors(profile), profile=profile)


def _plan(spares: tuple[str, ...] = (TASK,)) -> Plan:
    return Plan("hand", ("ov:CPU", "ov:CPU"), {TASK: StitchedVariant(TASK, CHOICES)},
                merged=(TASK,), spares=spares)


def test_a_spare_serves_on_the_other_cores_only_while_the_processor_is_busy(
        two_tasks: tuple[Any, Any]) -> None:
    from sparseloom.runtime import switching

    workload, _ = two_tasks
    runtime = _runtime(two_tasks)
    own, other = runtime.workers["ov:CPU"], runtime.workers["ort:CPU"]
    try:
        switching.start(runtime, _plan())
        route = runtime.states[TASK].route
        assert route.merged and route.replicas == (SPARE,) and route.spared
        # Described as the task's own path (a stock runtime's replicas read "a|b").
        assert route.describe() == f"{TASK}[2,0] @ ov:CPU>ov:CPU (merged, spare)"
        spare = runtime.workers[SPARE]
        # OpenVINO's configuration on one thread, on the other processor's cores, and a model
        # of its own: one compiled model called from two threads runs one call at a time.
        assert (spare.processor.backend, dict(spare.processor.options)) == (
            own.processor.backend, dict(own.processor.options))
        assert spare.processor.cores == other.processor.cores and spare.processor.threads == 1
        assert spare.lane_of == "ov:CPU"
        key = (TASK, WHOLE, CHOICES)
        assert key in spare.models and spare.models[key] is not own.models[key]
        # One request in flight: every answer comes from the processor's worker.
        answers_in_turn(runtime, TASK, range(20))
        assert (own.stages_run, spare.stages_run) == (20, 0)
        # A burst queues at the processor past the 0.5 ms SLO: the spare takes some, and
        # answers as the chain.
        task = workload.task(TASK)
        answers = _burst(runtime, 60)
        assert spare.stages_run > 0 and own.stages_run > 20
        assert own.stages_run + spare.stages_run == 80
        oracle = plain_onnxruntime(two_tasks, TASK, CHOICES)
        for row, answer in enumerate(answers):
            for name, value in oracle(eval_row(task, row)).items():
                np.testing.assert_allclose(answer[name], value, rtol=1e-4, atol=1e-4)
    finally:
        runtime.stop()


def _burst(runtime: Any, count: int) -> list[Any]:
    futures: list[Future[Any]] = []
    for row in range(count):
        done: Future[Any] = Future()
        runtime.submit(TASK, row, future=done)
        futures.append(done)
    return [f.result(timeout=60) for f in futures]


def test_a_spare_leaves_requests_that_can_wait_to_the_processor(
        two_tasks: tuple[Any, Any]) -> None:
    from sparseloom.runtime import switching

    # A burst of 60 calls of well under a millisecond each queues far inside a 10 s SLO.
    runtime = _runtime(two_tasks, latency_ms=10_000.0)
    try:
        switching.start(runtime, _plan())
        own, spare = runtime.workers["ov:CPU"], runtime.workers[SPARE]
        _burst(runtime, 60)
        assert (own.stages_run, spare.stages_run) == (60, 0)
    finally:
        runtime.stop()


def test_a_plan_without_the_spare_leaves_it_idle(two_tasks: tuple[Any, Any]) -> None:
    from sparseloom.runtime import switching

    runtime = _runtime(two_tasks)
    try:
        switching.start(runtime, _plan())
        spare = runtime.workers[SPARE]
        switching.apply_plan(runtime, _plan(spares=()), "test")
        assert runtime.states[TASK].route.replicas == ()
        _burst(runtime, 30)
        assert spare.stages_run == 0
    finally:
        runtime.stop()


def test_the_memory_estimate_counts_the_spare_copy(two_tasks: tuple[Any, Any]) -> None:
    from sparseloom.plan.preload import chain_bytes, route_extra_bytes

    _, profile = two_tasks
    plan = Plan("hand", ("ov:CPU", "ov:CPU"), {TASK: StitchedVariant(TASK, CHOICES)},
                merged=(TASK,), spares=(TASK,))
    assert route_extra_bytes(profile, plan) == {TASK: chain_bytes(profile, plan, TASK)}
    assert route_extra_bytes(profile, attrs.evolve(plan, spares=())) == {}
    assert chain_bytes(profile, plan, TASK) > 0
