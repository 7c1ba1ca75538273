"""Idle lending (``Plan.wide``): a wide twin beside each subgraph, run only while the other
processors are idle, answering as plain ONNX Runtime does."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from sparseloom.core.types import SLO, StitchedVariant
from sparseloom.runtime.lending import LEND_AFTER_S, QUIET_GAPS
from tests.runtime.support import answers_in_turn


def _started(two_tasks: tuple[Any, Any], processor: str, quiet: bool = False
             ) -> tuple[Any, Any, Any]:
    """A runtime serving digits_a's (0, 0) chain wide on ``processor`` (twins preloaded;
    ``quiet``: wide only when the lenders are quiet): (runtime, the task's zoo, the workload).
    Skips on a one-core machine."""
    from sparseloom.runtime import switching
    from sparseloom.runtime.executor import Runtime
    from sparseloom.runtime.models import RuntimeTask, profile_processors
    from sparseloom.runtime.request import Route
    from sparseloom.zoo.load import load_zoo
    from sparseloom.zoo.options import zoo_directory

    workload, profile = two_tasks
    processors = profile_processors(profile)
    if len({c for p in processors for c in p.cores}) < 2:
        pytest.skip("a wide route needs a second core to borrow")
    task = "digits_a"
    zoo = load_zoo(zoo_directory(profile.meta["zoo_hashes"][task]), verify=False)
    runtime = Runtime([RuntimeTask(workload.task(task), zoo, SLO(0.0, 1000.0))], processors)
    route = Route(StitchedVariant(task, (0, 0)), (processor, processor), wide=True,
                  quiet=quiet)
    pairs = switching.route_keys(runtime, route)
    switching.load_pairs(runtime, pairs, "preload", wide=pairs)
    runtime.start_workers()
    runtime.set_route(task, route, "plan")
    return runtime, zoo, workload


def _assert_plain_onnxruntime(workload: Any, zoo: Any, answers: list[Any], rtol: float,
                              atol: float) -> None:
    """The oracle: digits_a's two subgraphs chained through plain ONNX Runtime sessions."""
    import onnxruntime as ort

    from sparseloom.zoo.stitch import stitched_paths

    first, second = (ort.InferenceSession(str(p)) for p in stitched_paths(zoo, (0, 0)))
    rows = workload.task("digits_a").eval_inputs
    for row, answer in enumerate(answers):
        feed = {k: v[row:row + 1] for k, v in rows.items()}
        middle = dict(zip([o.name for o in first.get_outputs()], first.run(None, feed),
                          strict=True))
        expected = second.run(None, {i.name: middle[i.name] for i in second.get_inputs()})[0]
        np.testing.assert_allclose(answer[second.get_outputs()[0].name], expected, rtol=rtol,
                                   atol=atol)


def test_a_wide_route_borrows_idle_cores_only_and_answers_as_plain_onnxruntime(
        two_tasks: tuple[Any, Any]) -> None:
    from sparseloom.runtime import switching

    runtime, zoo, workload = _started(two_tasks, "ort:CPU")
    task = "digits_a"
    lender = next(name for name in runtime.workers if name != "ort:CPU")
    gate = threading.Event()
    try:
        worker = runtime.workers["ort:CPU"]
        model = worker.models[(task, 0, 0)]
        own = worker.processor
        lent = switching.lent_cores(runtime, "ort:CPU")
        # The one-thread model stays; its wide twin has a thread on each lent core.
        assert model.wide and model.processor == own and lent
        assert not set(lent) & set(own.cores)
        assert model.wide_processor.threads == own.threads + len(lent)
        assert model.wide_processor.options["session.intra_op_thread_affinities"] == ";".join(
            str(c + 1) for c in lent)
        # The lender busy (a job holds its thread): every stage runs on one thread.
        runtime.workers[lender].call(lambda: gate.wait(30))
        busy = answers_in_turn(runtime, task, range(3))
        assert worker.wide_stages == 0 and worker.stages_run == 6
        assert runtime.workers[lender].lent_s == 0
        gate.set()
        runtime.drain(30)
        time.sleep(10 * LEND_AFTER_S)
        # The lender idle (for LEND_AFTER_S at least): the stages borrow its core.
        idle = answers_in_turn(runtime, task, range(3, 6))
        assert worker.wide_stages == 6
        # The loan is exclusive: while a stage holds the lender's core, the lender runs nothing
        # (a job queued there waits), and a running lender lends nothing.
        # Its core ran the six wide stages: counted as lent, not as its own calls.
        assert runtime.workers[lender].lent_s > 0 and runtime.workers[lender].stages_run == 0
        taken = runtime.borrow(worker)
        assert taken == [runtime.workers[lender]]
        ran = threading.Event()
        runtime.workers[lender].call(ran.set)
        assert not ran.wait(0.3)
        for held_lender in taken:
            held_lender.core.release()
        assert ran.wait(10)
        held, release = threading.Event(), threading.Event()
        runtime.workers[lender].call(lambda: (held.set(), release.wait(30)))
        try:
            assert held.wait(10) and runtime.borrow(worker) is None
        finally:
            release.set()
        _assert_plain_onnxruntime(workload, zoo, busy + idle, rtol=1e-5, atol=1e-6)
    finally:
        gate.set()
        runtime.drain(30)
        runtime.stop()


def test_an_openvino_chain_borrows_idle_cores_through_a_twin_pinned_to_both(
        two_tasks: tuple[Any, Any]) -> None:
    from sparseloom.runtime import switching

    runtime, zoo, workload = _started(two_tasks, "ov:CPU")
    try:
        worker = runtime.workers["ov:CPU"]
        model, own = worker.models[("digits_a", 0, 0)], worker.processor
        lent = switching.lent_cores(runtime, "ov:CPU")
        # OpenVINO's threads inherit the affinity of the thread that compiles the twin: it is
        # compiled for the processor's cores and the lent ones, with a thread for each.
        assert model.wide and model.processor == own and lent
        assert model.wide_processor.threads == own.threads + len(lent)
        assert model.wide_processor.cores == (*own.cores, *lent)
        time.sleep(10 * LEND_AFTER_S)
        answers = answers_in_turn(runtime, "digits_a", range(4))
        assert worker.wide_stages == 8
        _assert_plain_onnxruntime(workload, zoo, answers, rtol=1e-4, atol=1e-5)
    finally:
        runtime.drain(30)
        runtime.stop()


def test_a_wide_when_quiet_route_borrows_only_from_a_lender_idle_for_a_few_of_its_gaps(
        two_tasks: tuple[Any, Any]) -> None:
    runtime, zoo, workload = _started(two_tasks, "ort:CPU", quiet=True)
    task = "digits_a"
    worker = runtime.workers["ort:CPU"]
    lender = next(w for name, w in runtime.workers.items() if name != "ort:CPU")
    gap_s = 0.5
    try:
        assert runtime.states[task].route.describe().endswith("(wide when quiet)")
        # The lender's work arrives 0.5 s after it last finished, three times: its mean idle
        # gap is about that (a gap is measured from its last finish to the next arrival).
        for _ in range(3):
            time.sleep(gap_s)
            ran = threading.Event()
            lender.call(ran.set)
            assert ran.wait(10)
        assert gap_s <= lender.idle_gap_s < 3 * gap_s
        # Idle for far longer than LEND_AFTER_S but not yet for QUIET_GAPS of its gaps: the
        # stages run on one thread (a plain wide route would borrow here).
        time.sleep(10 * LEND_AFTER_S)
        assert lender.idle(10 * LEND_AFTER_S)
        early = answers_in_turn(runtime, task, range(2))
        assert not lender.quiet()  # (still: the two requests took under QUIET_GAPS × 0.5 s)
        assert worker.wide_stages == 0 and worker.stages_run == 4
        # Quiet for that long: they borrow its core.
        time.sleep(QUIET_GAPS * lender.idle_gap_s - (time.perf_counter() - lender.idle_since)
                   + 0.05)
        assert lender.quiet()
        late = answers_in_turn(runtime, task, range(2, 4))
        assert worker.wide_stages >= 4
        assert lender.lent_s > 0 and lender.stages_run == 0
        _assert_plain_onnxruntime(workload, zoo, early + late, rtol=1e-5, atol=1e-6)
    finally:
        runtime.drain(30)
        runtime.stop()
