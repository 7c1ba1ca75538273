"""Merged chains (``Plan.merged``): a chain kept on one processor runs as its stitched variant
merged into one model — one call per request, the answers of the chain run subgraph by
subgraph through plain ONNX Runtime."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import numpy as np
import pytest

from sparseloom.core.errors import RequestFailed
from sparseloom.core.types import SLO, Plan, StitchedVariant
from sparseloom.runtime.executor import RuntimeOptions
from sparseloom.runtime.request import Route
from sparseloom.runtime.resident import WHOLE
from tests.runtime.support import answers_in_turn, eval_row, plain_onnxruntime

TASK = "digits_a"
#: A stitched variant of two different source variants: the merge joins distinct subgraphs.
CHOICES = (2, 0)


def _runtime(two_tasks: tuple[Any, Any], options: RuntimeOptions | None = None) -> Any:
    from sparseloom.runtime.executor import Runtime
    from sparseloom.runtime.models import RuntimeTask, profile_processors
    from sparseloom.zoo.load import load_zoo
    from sparseloom.zoo.options import zoo_directory

    workload, profile = two_tasks
    zoo = load_zoo(zoo_directory(profile.meta["zoo_hashes"][TASK]), verify=False)
    return Runtime([RuntimeTask(workload.task(TASK), zoo, SLO(0.0, 1000.0))],
                   profile_processors(profile), profile=profile, options=options)


def _plan(processors: tuple[str, ...], merged: bool = True) -> Plan:
    return Plan("hand", processors, {TASK: StitchedVariant(TASK, CHOICES)},
                merged=(TASK,) if merged else ())


@pytest.mark.parametrize("processor", ["ort:CPU", "ov:CPU"])
def test_a_merged_chain_runs_one_call_per_request_and_answers_as_the_chain(
        two_tasks: tuple[Any, Any], processor: str) -> None:
    from sparseloom.runtime import switching

    workload, _ = two_tasks
    runtime = _runtime(two_tasks)
    try:
        events = switching.start(runtime, _plan((processor, processor)))
        worker = runtime.workers[processor]
        key = (TASK, WHOLE, CHOICES)
        assert list(worker.models) == [key]  # the merged model, not its two subgraphs
        assert [(e.position, e.variant, e.processor) for e in events] == [
            (WHOLE, CHOICES, processor)]
        route = runtime.states[TASK].route
        assert route.merged and route.stages == 1 and route.positions == 2
        assert route.describe() == f"{TASK}[2,0] @ {processor}>{processor} (merged)"
        answers = answers_in_turn(runtime, TASK, range(12))
        assert worker.stages_run == 12  # one model call per request
        oracle = plain_onnxruntime(two_tasks, TASK, CHOICES)
        task = workload.task(TASK)
        for row, answer in enumerate(answers):
            expected = oracle(eval_row(task, row))
            assert set(answer) == set(expected)
            for name, value in expected.items():
                np.testing.assert_allclose(answer[name], value, rtol=1e-4, atol=1e-4)
        records = [r for r in runtime.finished]
        assert all(r.ran_on == [processor] for r in records)
        from sparseloom.runtime.summary import request_record

        record = request_record(runtime, records[0])
        assert record.processors == f"{processor}>{processor}"  # per position, as a chain's
        assert record.variant == "2,0"
    finally:
        runtime.stop()


def test_a_merged_model_stands_in_for_its_subgraphs_in_the_preloaded_set(
        two_tasks: tuple[Any, Any]) -> None:
    from sparseloom.plan.preload import Preload, ResidentSubgraph
    from sparseloom.runtime import switching

    # The preloader keeps the pick's two subgraphs and another variant's first subgraph on
    # ort:CPU. Merged, the pick's model replaces its two subgraphs (memory stays within the
    # budget); the other subgraph, a switch candidate, is loaded as the preloader chose.
    _, profile = two_tasks
    resident = tuple(ResidentSubgraph(TASK, j, c, "ort:CPU", 1)
                     for j, c in ((0, 2), (1, 0), (0, 3)))
    preload = Preload(resident, 3, 3, 3, profile)
    runtime = _runtime(two_tasks)
    try:
        switching.start(runtime, _plan(("ort:CPU", "ort:CPU")), preload=preload)
        assert set(runtime.workers["ort:CPU"].models) == {(TASK, WHOLE, CHOICES), (TASK, 0, 3)}
        unmerged = _runtime(two_tasks)
        try:
            switching.start(unmerged, _plan(("ort:CPU", "ort:CPU"), merged=False),
                            preload=preload)
            assert set(unmerged.workers["ort:CPU"].models) == {
                (TASK, 0, 2), (TASK, 1, 0), (TASK, 0, 3)}
        finally:
            unmerged.stop()
    finally:
        runtime.stop()


def test_a_split_chain_or_a_plan_that_does_not_ask_runs_subgraph_by_subgraph(
        two_tasks: tuple[Any, Any]) -> None:
    from sparseloom.runtime import switching

    runtime = _runtime(two_tasks)
    order = tuple(runtime.workers)
    for plan in (_plan(order), _plan((order[0], order[0]), merged=False)):
        route = switching.routes_from_plan(runtime, plan, 0)[TASK]
        assert not route.merged and route.stages == 2
        assert [key for key, _ in switching.route_keys(runtime, route)] == [
            (TASK, 0, 2), (TASK, 1, 0)]


def test_a_switch_merges_only_a_model_already_resident(two_tasks: tuple[Any, Any]) -> None:
    from sparseloom.runtime import switching

    runtime = _runtime(two_tasks)
    plan = _plan(("ort:CPU", "ort:CPU"))
    # A switch (version > 0) to a merged model that is not loaded takes the chain: nothing is
    # merged or compiled while the workers serve.
    assert not switching.routes_from_plan(runtime, plan, 1)[TASK].merged
    switching.load_pairs(runtime, [((TASK, WHOLE, CHOICES), "ort:CPU")], "preload")
    assert switching.routes_from_plan(runtime, plan, 1)[TASK].merged
    runtime.loader.unload_all(runtime.workers)


def test_a_dispatching_policy_never_gets_a_merged_route(two_tasks: tuple[Any, Any]) -> None:
    from sparseloom.plugins.policies.adms import AdmsPolicy
    from sparseloom.runtime import switching

    # ADMS dispatches each stage to a processor of its own choosing: stages stay stages.
    runtime = _runtime(two_tasks)
    runtime.dispatcher = AdmsPolicy()
    assert not switching.routes_from_plan(runtime, _plan(("ort:CPU", "ort:CPU")), 0)[
        TASK].merged


def test_a_merged_route_must_keep_to_one_processor() -> None:
    with pytest.raises(ValueError, match="a merged chain runs on one processor"):
        Route(StitchedVariant(TASK, CHOICES), ("ov:CPU", "ort:CPU"), merged=True)


def test_a_failed_merged_call_is_retried_elsewhere_then_named_in_the_error(
        two_tasks: tuple[Any, Any]) -> None:
    from sparseloom.runtime import switching

    # Every call fails (the fault injector): the retry loads the merged model on the other
    # processor, fails again, and the error names the merged chain.
    runtime = _runtime(two_tasks, RuntimeOptions(fault_rate=1.0, down_after=100))
    try:
        switching.start(runtime, _plan(("ort:CPU", "ort:CPU")))
        done: Future[Any] = Future()
        request = runtime.submit(TASK, 0, future=done)
        with pytest.raises(RequestFailed, match=r"its merged chain \[2, 0\]"):
            done.result(timeout=30)
        assert request.retries == 1
        other = next(name for name in runtime.workers if name != "ort:CPU")
        assert (TASK, WHOLE, CHOICES) in runtime.workers[other].models
    finally:
        runtime.stop()



@pytest.mark.parametrize("processor", ["ort:CPU", "ov:CPU"])
def test_the_runtime_serves_batch_one_copies_unless_told_not_to(
        two_tasks: tuple[Any, Any], processor: str) -> None:
    from sparseloom.runtime import switching

    workload, _ = two_tasks
    task = workload.task(TASK)
    oracle = plain_onnxruntime(two_tasks, TASK, CHOICES)
    for batch_one in (True, False):
        runtime = _runtime(two_tasks, RuntimeOptions(batch_one=batch_one))
        try:
            switching.start(runtime, _plan((processor, processor)))
            resident = runtime.workers[processor].models[(TASK, WHOLE, CHOICES)]
            source = resident.loaded.compiled.source
            # The merged model's batch is 1 in the copy the runtime serves; as it is, the
            # file keeps its named batch (what the stock runtimes of `bench serve` load).
            shapes = [spec.shape[0] for spec in source.inputs]
            assert (source.path.parent.name == "batch1") is batch_one
            assert all((s == 1) if batch_one else isinstance(s, str) for s in shapes)
            answers = answers_in_turn(runtime, TASK, range(4))
            for row, answer in enumerate(answers):
                for name, value in oracle(eval_row(task, row)).items():
                    np.testing.assert_allclose(answer[name], value, rtol=1e-4, atol=1e-4)
        finally:
            runtime.stop()
