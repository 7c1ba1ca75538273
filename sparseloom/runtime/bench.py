"""``sparseloom bench runtime``: the runtime's per-request cost against a bare loop.

For each task, on one processor, in one run: N requests through the runtime (closed loop, all
positions on that processor, the dense variant) against a bare loop that calls the *same*
loaded runtime sessions (ONNX Runtime ``InferenceSession.run`` / OpenVINO
``InferRequest.infer``) stage by stage on the *same* pinned worker thread. Rounds alternate
between the two so machine noise hits both alike; the medians per request are compared.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from sparseloom.core.types import SLO, Plan, StitchedVariant
from sparseloom.runtime import switching
from sparseloom.runtime.executor import Runtime
from sparseloom.runtime.load import LoadSpec, offer
from sparseloom.runtime.models import RuntimeTask
from sparseloom.runtime.resident import ResidentModel
from sparseloom.runtime.session import profile_processors


def _bare_call(model: ResidentModel) -> Callable[[Mapping[str, Any]], Mapping[str, Any]]:
    """The runtime session's own call, without anything sparseloom adds."""
    loaded = model.loaded
    backend = getattr(getattr(loaded, "compiled", None), "backend", "")
    if backend == "ort":
        session, names = loaded.handle, list(loaded.output_names)
        return lambda feeds: dict(zip(names, session.run(None, feeds), strict=True))
    if backend == "ov":
        request = loaded.handle.create_infer_request()
        ports = [(spec.name, loaded.handle.output(spec.name)) for spec in loaded.outputs]

        def infer(feeds: Mapping[str, Any]) -> dict[str, Any]:
            results = request.infer(feeds)
            return {name: results[port] for name, port in ports}

        return infer
    return model.runner


def _bare_round(runtime: Runtime, worker_name: str, task: RuntimeTask,
                samples: list[int]) -> float:
    """Seconds per request of the bare loop, run on the processor's worker thread."""
    worker = runtime.workers[worker_name]
    route = runtime.states[task.name].route
    assert route is not None
    calls = [(_bare_call(worker.models[key]), worker.models[key].input_names)
             for key in route.keys]
    eval_inputs = task.task.eval_inputs
    rows: list[Mapping[str, Any]] = [{name: eval_inputs[name][s:s + 1] for name in eval_inputs}
                                     for s in samples]
    done = threading.Event()
    elapsed: list[float] = []

    def loop() -> None:
        start = time.perf_counter()
        for carried in rows:
            for call, names in calls:
                carried = call({name: carried[name] for name in names})
        elapsed.append(time.perf_counter() - start)
        done.set()

    worker.call(loop)
    done.wait()
    return elapsed[0] / len(rows)


def _offered(runtime: Runtime, spec: LoadSpec) -> Any:
    """:func:`offer`, whose Ctrl-C (drained, reported as ``interrupted``) stops the benchmark
    rather than counting as one short round."""
    result = offer(runtime, spec)
    if result.interrupted:
        raise KeyboardInterrupt
    return result


def benchmark_runtime(workload: Any, profile: Any, *, processor: str | None = None,
                      requests: int = 200, rounds: int = 5) -> dict[str, Any]:
    """Overhead of the runtime over a bare loop, per task of ``workload`` (see module doc)."""
    from sparseloom.zoo.load import load_zoo
    from sparseloom.zoo.options import zoo_directory

    chosen = profile_processors(profile, [processor] if processor else ())[:1]
    name = chosen[0].name
    results = []
    for task_name in profile.tasks:
        zoo = load_zoo(zoo_directory(profile.meta["zoo_hashes"][task_name]), verify=False)
        task = RuntimeTask(workload.task(task_name), zoo, SLO(0.0, 1e9))
        runtime = Runtime([task], chosen, profile=profile)
        dense = StitchedVariant(task_name, (0,) * zoo.positions)
        switching.start(runtime, Plan("bench", [name] * zoo.positions, {task_name: dense}))
        samples = list(range(min(requests, task.task.num_eval)))
        try:
            _offered(runtime, LoadSpec("closed", queries=20))  # warm-up
            _bare_round(runtime, name, task, samples[:20])
            served, bare = [], []
            for _ in range(rounds):
                result = _offered(runtime, LoadSpec("closed", queries=len(samples)))
                served.append(result.wall_s / len(samples))
                bare.append(_bare_round(runtime, name, task, samples))
        finally:
            runtime.stop()
        runtime_ms = statistics.median(served) * 1e3
        bare_ms = statistics.median(bare) * 1e3
        # Each round's runtime pass is paired with the bare pass right after it, so noise from
        # other work on the machine (slow drifts) cancels within a pair; the spread of the
        # paired overheads says how far one run's figure can be trusted.
        paired = sorted(100.0 * (s / b - 1) for s, b in zip(served, bare, strict=True))
        results.append({"task": task_name, "processor": name, "positions": zoo.positions,
                        "requests": len(samples), "rounds": rounds, "runtime_ms": runtime_ms,
                        "bare_ms": bare_ms, "overhead_pct": 100.0 * (runtime_ms / bare_ms - 1),
                        "paired_overhead_pct": statistics.median(paired),
                        "paired_min_pct": paired[0], "paired_max_pct": paired[-1],
                        "python_us_per_request": (runtime_ms - bare_ms) * 1e3,
                        "goal_pct": 5.0})
    return {"workload": workload.name, "processor": name, "tasks": results}
