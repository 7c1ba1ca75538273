"""Lanes (``Plan.lanes``): each task on a worker of its own, on every core, answering as the
processor it is a lane of; and feedback at most every ``FEEDBACK_EVERY_S``."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import pytest

from sparseloom.core.types import SLO, Plan, StitchedVariant
from tests.runtime.support import answers_in_turn

PLACED = {"digits_a": "ort:CPU", "digits_b": "ov:CPU"}


def _runtime(two_tasks: tuple[Any, Any]) -> Any:
    from sparseloom.runtime.executor import Runtime
    from sparseloom.runtime.models import RuntimeTask, profile_processors
    from sparseloom.zoo.load import load_zoo
    from sparseloom.zoo.options import zoo_directory

    workload, profile = two_tasks
    tasks = [RuntimeTask(workload.task(name), load_zoo(zoo_directory(
        profile.meta["zoo_hashes"][name]), verify=False), SLO(0.0, 1000.0))
        for name in PLACED]
    return Runtime(tasks, profile_processors(profile), profile=profile)


def _plan(lanes: tuple[str, ...], pinned: bool = False, borrow: bool = False) -> Plan:
    return Plan("hand", ("ort:CPU", "ort:CPU"),
                variants={t: StitchedVariant(t, (0, 0)) for t in PLACED},
                assignment={t: (p, p) for t, p in PLACED.items()}, lanes=lanes,
                lanes_pinned=pinned, lanes_borrow=borrow)


def test_each_laned_task_runs_on_its_own_worker_over_every_core(
        two_tasks: tuple[Any, Any]) -> None:
    import onnxruntime as ort

    from sparseloom.runtime import switching
    from sparseloom.runtime.monitor import processor_slowdown
    from sparseloom.zoo.stitch import stitched_paths

    workload, _ = two_tasks
    runtime = _runtime(two_tasks)
    bases = {name: w.processor for name, w in runtime.workers.items()}
    every_core = tuple(sorted({c for p in bases.values() for c in p.cores}))
    try:
        switching.start(runtime, _plan(tuple(PLACED)))
        answers = {t: answers_in_turn(runtime, t, range(12)) for t in PLACED}
        for task, base in PLACED.items():
            lane = f"{base}@{task}"
            assert runtime.states[task].route.processors == (lane, lane)
            processor = runtime.workers[lane].processor
            # The base processor's backend, device and options, one thread, every core.
            assert (processor.backend, processor.device, dict(processor.options)) == (
                bases[base].backend, bases[base].device, dict(bases[base].options))
            assert processor.threads == 1 and processor.cores == every_core
            # Both stages ran on the lane; the processor's own worker ran none.
            assert runtime.workers[lane].stages_run == 2 * 12
            assert runtime.workers[base].stages_run == 0
            # The profile's time of a call on a lane is its processor's.
            key = (task, 0, 0)
            assert runtime.profiled_seconds(key, lane) == runtime.profiled_seconds(key, base) > 0
        # A lane's calls are time-sliced by design: never reported as a processor slowdown.
        assert not [n for n in processor_slowdown(runtime.workers, {}) if "@" in n]
        # The pipeline bound counts the lanes' stages as one load over both processors.
        from sparseloom.runtime.summary import LANES, _pipeline_bound

        work = sum(float(runtime.profile.task(t).latency_ms[j, 0, list(
            runtime.profile.processors).index(p)]) for t, p in PLACED.items() for j in (0, 1))
        bound, busiest = _pipeline_bound(runtime)
        assert busiest == LANES and bound == pytest.approx(2 * 1e3 / (work / 2))
        # The same plan again makes no second lane.
        count = len(runtime.workers)
        switching.apply_plan(runtime, _plan(tuple(PLACED)), "test")
        assert len(runtime.workers) == count == len(bases) + len(PLACED)
    finally:
        runtime.stop()
    # The oracle: the ONNX Runtime lane answers as the chain through plain sessions does.
    zoo = runtime.tasks["digits_a"].zoo
    first, second = (ort.InferenceSession(str(p)) for p in stitched_paths(zoo, (0, 0)))
    rows = workload.task("digits_a").eval_inputs
    for row, answer in enumerate(answers["digits_a"]):
        feed = {k: v[row:row + 1] for k, v in rows.items()}
        middle = dict(zip([o.name for o in first.get_outputs()], first.run(None, feed),
                          strict=True))
        expected = second.run(None, {i.name: middle[i.name] for i in second.get_inputs()})[0]
        np.testing.assert_allclose(answer[second.get_outputs()[0].name], expected, rtol=1e-5,
                                   atol=1e-6)


def test_a_pinned_lane_runs_on_its_own_processor_cores_beside_its_worker(
        two_tasks: tuple[Any, Any]) -> None:
    from sparseloom.runtime import switching
    from sparseloom.runtime.summary import LANES, _pipeline_bound

    runtime = _runtime(two_tasks)
    base = runtime.workers["ort:CPU"].processor
    try:
        switching.start(runtime, _plan(("digits_a",), pinned=True))
        lane = "ort:CPU@digits_a/pinned"
        assert runtime.states["digits_a"].route.processors == (lane, lane)
        assert runtime.states["digits_b"].route.processors == ("ov:CPU", "ov:CPU")
        answers_in_turn(runtime, "digits_a", range(5))
        processor = runtime.workers[lane].processor
        # Its processor's backend, options and cores, one thread; the lane ran both stages.
        assert (processor.backend, dict(processor.options), processor.cores) == (
            base.backend, dict(base.options), base.cores)
        assert processor.threads == 1 and runtime.workers[lane].lane_of == "ort:CPU"
        assert runtime.workers[lane].stages_run == 10
        assert runtime.workers["ort:CPU"].stages_run == 0
        # Its stages load its own processor in the pipeline bound, not "every core".
        names = list(runtime.profile.processors)
        work = {p: sum(float(runtime.profile.task(t).latency_ms[j, 0, names.index(p)])
                       for j in (0, 1)) for t, p in PLACED.items()}
        bound, busiest = _pipeline_bound(runtime)
        assert busiest != LANES and busiest == max(work, key=work.__getitem__)
        assert bound == pytest.approx(2 * 1e3 / max(work.values()))
        # An every-core lane of the same task is another worker, not this one.
        switching.apply_plan(runtime, _plan(("digits_a",)), "test")
        assert runtime.states["digits_a"].route.processors == ("ort:CPU@digits_a",) * 2
    finally:
        runtime.stop()


def test_a_borrowing_pinned_lane_runs_on_a_quiet_processors_cores_and_comes_home(
        two_tasks: tuple[Any, Any]) -> None:
    import threading

    from sparseloom.runtime import switching
    from sparseloom.runtime.lending import LEND_AFTER_S

    runtime = _runtime(two_tasks)
    own, other = runtime.workers["ort:CPU"], runtime.workers["ov:CPU"]
    if set(own.processor.cores) & set(other.processor.cores):
        runtime.stop()
        pytest.skip("the two processors share a core on this machine: nowhere to roam")
    lane = "ort:CPU@digits_a/pinned"
    try:
        switching.start(runtime, _plan(("digits_a",), pinned=True))
        plain = answers_in_turn(runtime, "digits_a", range(6))
        assert not runtime.states["digits_a"].route.roams
        assert runtime.workers[lane].roamed == 0  # a plan without lanes_borrow stays home
        switching.apply_plan(runtime, _plan(("digits_a",), pinned=True, borrow=True), "test")
        assert runtime.states["digits_a"].route.roams
        # ov:CPU's worker busy in a call: not quiet, so the lane stays on its own cores.
        release, started = threading.Event(), threading.Event()
        other.call(lambda: (started.set(), release.wait(10)))
        assert started.wait(10)
        held = answers_in_turn(runtime, "digits_a", range(6))
        assert runtime.workers[lane].roamed == 0
        release.set()
        time.sleep(20 * LEND_AFTER_S)  # idle since: quiet (its gaps are those of two calls)
        assert other.quiet()
        roamed = answers_in_turn(runtime, "digits_a", range(6))
        worker = runtime.workers[lane]
        # Each of its calls ran on ov:CPU's cores (counted as lent there), none of ov:CPU's
        # own stages ran, and the answers are the lane's own.
        assert worker.roamed == 2 * 6 and other.lent_s > 0
        assert other.stages_run == 0 and own.stages_run == 0
        for a, b, c in zip(plain, held, roamed, strict=True):
            for name in a:
                np.testing.assert_array_equal(a[name], b[name])
                np.testing.assert_array_equal(a[name], c[name])
        # Its thread is back on its own processor's cores between calls.
        assert worker._thread is not None
        assert os.sched_getaffinity(worker._thread.native_id) == set(own.processor.cores)
    finally:
        runtime.stop()


def test_a_plan_without_lanes_moves_tasks_back_to_their_processors(
        two_tasks: tuple[Any, Any]) -> None:
    from sparseloom.runtime import switching

    runtime = _runtime(two_tasks)
    try:
        switching.start(runtime, _plan(("digits_a",)))
        assert runtime.states["digits_a"].route.processors == ("ort:CPU@digits_a",) * 2
        assert runtime.states["digits_b"].route.processors == ("ov:CPU",) * 2
        switching.apply_plan(runtime, _plan(()), "test")
        answers_in_turn(runtime, "digits_a", range(3))
        assert runtime.states["digits_a"].route.processors == ("ort:CPU",) * 2
        assert runtime.workers["ort:CPU"].stages_run == 6
    finally:
        runtime.stop()


def test_a_failing_lane_takes_its_processor_down_for_the_planner(
        two_tasks: tuple[Any, Any]) -> None:
    from sparseloom.runtime import switching

    runtime = _runtime(two_tasks)
    try:
        switching.start(runtime, _plan(("digits_a",)))
        runtime.workers["ort:CPU@digits_a"].down = True
        # The planner knows processors, not lanes: the lane's processor is the one down.
        assert switching.down_processors(runtime) == ("ort:CPU",)
    finally:
        runtime.stop()


def test_feedback_comes_at_most_every_feedback_interval(two_tasks: tuple[Any, Any]) -> None:
    from sparseloom.runtime.executor import FEEDBACK_EVERY_S, RuntimeOptions
    from sparseloom.runtime.server import Server

    workload, profile = two_tasks
    # A window of one request: every answered request ends a window.
    with Server(workload, profile, policy="sparseloom-loaded",
                options=RuntimeOptions(window=1)) as server:
        started = time.perf_counter()
        for request in range(200):
            row = request % 100
            server.infer("digits_a", {k: v[row:row + 1] for k, v in
                                      workload.task("digits_a").eval_inputs.items()})
        elapsed = time.perf_counter() - started
        server.runtime.control.wait_idle(10)
        feedbacks = len(server.runtime.feedbacks)
    assert 1 <= feedbacks <= elapsed / FEEDBACK_EVERY_S + 2, (feedbacks, elapsed)
    assert feedbacks < 200 / 2


def test_feedback_still_reaches_the_policy_after_the_interval(
        two_tasks: tuple[Any, Any]) -> None:
    from sparseloom.runtime.executor import FEEDBACK_EVERY_S, RuntimeOptions
    from sparseloom.runtime.server import Server

    workload, profile = two_tasks
    row = {k: v[:1] for k, v in workload.task("digits_a").eval_inputs.items()}
    with Server(workload, profile, policy="sparseloom-loaded",
                options=RuntimeOptions(window=1)) as server:
        server.infer("digits_a", row)
        server.runtime.control.wait_idle(10)
        first = len(server.runtime.feedbacks)
        time.sleep(FEEDBACK_EVERY_S * 1.5)
        server.infer("digits_a", row)
        server.runtime.control.wait_idle(10)
        assert first == 1 and len(server.runtime.feedbacks) == 2


def test_a_processor_named_like_a_lane_is_not_one(two_tasks: tuple[Any, Any]) -> None:
    import attrs

    from sparseloom.runtime import switching
    from sparseloom.runtime.executor import Runtime
    from sparseloom.runtime.models import profile_processors

    # Stock runtimes name their per-task processors <processor>@<task>: only a worker made by
    # ensure_lane (its lane_of) is a lane, and reports its processor when it fails.
    _, profile = two_tasks
    named = [attrs.evolve(p, name=f"{p.name}@x") for p in profile_processors(profile)]
    runtime = Runtime([], named, profile=profile)
    runtime.workers["ort:CPU@x"].down = True
    assert switching.down_processors(runtime) == ("ort:CPU@x",)
    assert runtime.profiled_seconds(("digits_a", 0, 0), "ort:CPU@x") == 0.0
