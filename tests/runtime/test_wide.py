"""A wide route (``Plan.wide``): its ONNX Runtime stages get one more thread per lent core."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import numpy as np

from sparseloom.core.types import SLO, StitchedVariant


def test_a_wide_route_runs_on_lent_cores_and_answers_as_plain_onnxruntime(
        two_tasks: tuple[Any, Any]) -> None:
    import onnxruntime as ort

    from sparseloom.runtime import switching
    from sparseloom.runtime.executor import Runtime
    from sparseloom.runtime.models import RuntimeTask, profile_processors
    from sparseloom.runtime.request import Route
    from sparseloom.zoo.load import load_zoo
    from sparseloom.zoo.options import zoo_directory
    from sparseloom.zoo.stitch import stitched_paths

    workload, profile = two_tasks
    processors = profile_processors(profile)
    if len({c for p in processors for c in p.cores}) < 2:
        import pytest

        pytest.skip("a wide route needs a second core to borrow")
    task = "digits_a"
    zoo = load_zoo(zoo_directory(profile.meta["zoo_hashes"][task]), verify=False)
    runtime = Runtime([RuntimeTask(workload.task(task), zoo, SLO(0.0, 1000.0))], processors)
    route = Route(StitchedVariant(task, (0, 0)), ("ort:CPU", "ort:CPU"), wide=True)
    try:
        switching.load_pairs(runtime, switching.route_keys(runtime, route), "preload",
                             wide=[task])
        runtime.start_workers()
        runtime.set_route(task, route, "plan")
        model = runtime.workers["ort:CPU"].models[(task, 0, 0)]
        own = runtime.workers["ort:CPU"].processor
        lent = switching.lent_cores(runtime, "ort:CPU")
        assert model.wide and lent and not set(lent) & set(own.cores)
        assert model.processor.threads == own.threads + len(lent)
        assert model.processor.options["session.intra_op_thread_affinities"] == ";".join(
            str(c + 1) for c in lent)
        rows = workload.task(task).eval_inputs
        answers = []
        for row in range(5):
            done: Future[Any] = Future()
            runtime.submit(task, row, future=done)
            answers.append(done.result(timeout=30))
        # The oracle: the same two subgraphs chained through plain ONNX Runtime sessions.
        first, second = (ort.InferenceSession(str(p)) for p in stitched_paths(zoo, (0, 0)))
        for row, answer in enumerate(answers):
            feed = {k: v[row:row + 1] for k, v in rows.items()}
            middle = dict(zip([o.name for o in first.get_outputs()],
                              first.run(None, feed), strict=True))
            expected = second.run(None, {i.name: middle[i.name]
                                         for i in second.get_inputs()})[0]
            got = answer[second.get_outputs()[0].name]
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    finally:
        runtime.drain(30)
        runtime.stop()
