"""What a user runs instead of sparseloom: each task's dense model on a stock runtime.

- ``vanilla-ov``: every task's dense model compiled by OpenVINO for the CPU with the
  ``THROUGHPUT`` performance hint, all tasks served concurrently through one
  ``AsyncInferQueue`` per task (as many jobs as the compiled model's optimal number of
  requests), one feeder thread per task.
- ``vanilla-ort``: one ONNX Runtime ``InferenceSession`` per task with default threading,
  one feeder thread per task calling ``run``.

The load is the runtime's (:mod:`sparseloom.runtime.load`): closed loop, batch 1, each task
keeping one request in flight, ``queries`` requests per task, eval rows drawn from a seeded
permutation, tasks joining in the arrival order after the previous one completed
``join_after`` requests. Every response is scored against its label, and the violation rule
is the run summary's (:func:`violations`).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from sparseloom.core.errors import EvaluationError
from sparseloom.core.types import SLO
from sparseloom.runtime.models import rss_bytes
from sparseloom.runtime.monitor import STATISTIC
from sparseloom.runtime.records import LatencyStats, latency_stats
from sparseloom.workload.metrics import get_metric

#: The vanilla runners, by contender name.
VANILLA_RUNNERS = ("vanilla-ov", "vanilla-ort")


@attrs.frozen
class VanillaTaskResult:
    """One task under a vanilla runner: measured metric, latency and completions."""

    task: str
    metric: str
    accuracy: float
    latency: LatencyStats
    completed: int


@attrs.frozen
class VanillaResult:
    """A vanilla run: per-task results, wall time, throughput, memory growth."""

    runner: str
    tasks: tuple[VanillaTaskResult, ...]
    wall_s: float
    throughput_rps: float
    memory_bytes: float

    def to_dict(self) -> dict[str, Any]:
        """The result as plain JSON-ready data."""
        return attrs.asdict(self)


def violations(tasks: Sequence[Any], slos: Mapping[str, SLO]) -> dict[str, str]:
    """Per task, which SLO sides it misses (``accuracy``, ``latency``, both, or ``""``).

    The run summary's rule: measured metric below the accuracy SLO, or p90 latency above the
    latency SLO. ``tasks`` hold ``task``, ``accuracy`` and ``latency`` (:class:`LatencyStats`).
    """
    out = {}
    for task in tasks:
        slo = slos[task.task]
        sides = [side for side, bad in (
            ("accuracy", not task.accuracy >= slo.accuracy),
            ("latency", not task.latency.percentile(STATISTIC) <= slo.latency_ms)) if bad]
        out[task.task] = "+".join(sides)
    return out


Infer = Callable[[dict[str, np.ndarray], Callable[[np.ndarray], None]], None]


@attrs.define(eq=False)
class _Feeder:
    """Closed loop for one task: submit, wait for the callback, submit the next."""

    task: Any
    infer: Infer
    queries: int
    rows: list[int]
    latencies: list[float] = attrs.field(factory=list)
    outputs: list[np.ndarray] = attrs.field(factory=list)
    returned: threading.Event = attrs.field(factory=threading.Event)
    joined: threading.Event = attrs.field(factory=threading.Event)

    def run(self, ready: threading.Event | None, next_joins: threading.Event | None,
            join_after: int) -> None:
        if ready is not None:
            ready.wait()
        for count in range(self.queries):
            row = self.rows[count % len(self.rows)]
            feed = {name: np.ascontiguousarray(values[row:row + 1])
                    for name, values in self.task.eval_inputs.items()}
            started = time.perf_counter()
            self.returned.clear()

            def done(output: np.ndarray, started: float = started) -> None:
                self.latencies.append((time.perf_counter() - started) * 1e3)
                self.outputs.append(np.array(output, copy=True))
                self.returned.set()

            self.infer(feed, done)
            self.returned.wait()
            if next_joins is not None and count + 1 == join_after:
                next_joins.set()
        if next_joins is not None:
            next_joins.set()

    def result(self) -> VanillaTaskResult:
        rows = [self.rows[i % len(self.rows)] for i in range(len(self.outputs))]
        accuracy = float("nan")
        if self.outputs:
            outputs = np.concatenate(self.outputs, axis=0)
            accuracy = float(get_metric(self.task.metric)(outputs, self.task.labels[rows]))
        return VanillaTaskResult(self.task.name, self.task.metric, accuracy,
                                 latency_stats(self.latencies), len(self.latencies))


def _openvino(task: Any) -> Infer:
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(str(task.model_path), "CPU", {"PERFORMANCE_HINT": "THROUGHPUT"})
    queue = ov.AsyncInferQueue(compiled, max(int(compiled.get_property(
        "OPTIMAL_NUMBER_OF_INFER_REQUESTS")), 1))
    queue.set_callback(lambda request, done: done(request.get_output_tensor(0).data))

    def infer(feed: dict[str, np.ndarray], done: Callable[[np.ndarray], None]) -> None:
        queue.start_async(feed, done)

    infer.keep = (core, compiled, queue)  # type: ignore[attr-defined]
    return infer


def _onnxruntime(task: Any) -> Infer:
    import onnxruntime as ort

    session = ort.InferenceSession(str(task.model_path), providers=["CPUExecutionProvider"])
    first = session.get_outputs()[0].name

    def infer(feed: dict[str, np.ndarray], done: Callable[[np.ndarray], None]) -> None:
        done(session.run([first], feed)[0])

    return infer


_FACTORIES: dict[str, Callable[[Any], Infer]] = {"vanilla-ov": _openvino,
                                                 "vanilla-ort": _onnxruntime}


def run_vanilla(workload: Any, runner: str, *, queries: int = 100,
                arrival_order: Sequence[str] = (), join_after: int | None = None,
                seed: int = 0) -> VanillaResult:
    """Serve every task of ``workload`` with a vanilla runner (see the module doc).

    :param runner: ``vanilla-ov`` or ``vanilla-ort``.
    :param arrival_order: tasks in the order they join (default: all start at once).
    :param join_after: completions before the next task joins (default a tenth of queries).
    :raises EvaluationError: an unknown runner or task, or a model the runtime cannot load.
    """
    if runner not in _FACTORIES:
        raise EvaluationError(f"unknown vanilla runner {runner!r}; choose "
                              f"{' or '.join(VANILLA_RUNNERS)}")
    order = list(arrival_order) or list(workload.task_names)
    unknown = [t for t in order if t not in workload.task_names]
    if unknown:
        raise EvaluationError(f"arrival order names unknown task(s) {', '.join(unknown)}; "
                              f"tasks: {', '.join(workload.task_names)}")
    rng = random.Random(seed)
    before = rss_bytes()
    feeders = []
    for name in order:
        task = workload.task(name)
        rows = list(range(task.num_eval))
        rng.shuffle(rows)
        try:
            infer = _FACTORIES[runner](task)
        except Exception as error:  # the runtimes raise their own types; name the model
            raise EvaluationError(f"{runner} could not load {task.model_path} of task "
                                  f"{name!r}: {error}") from error
        feeders.append(_Feeder(task, infer, queries, rows))
    every = max(int(join_after), 1) if join_after is not None else max(queries // 10, 1)
    staggered = bool(arrival_order)
    events = [threading.Event() for _ in feeders]
    threads = [threading.Thread(
        target=feeder.run, name=f"{runner}-{feeder.task.name}",
        args=(events[k - 1] if staggered and k else None,
              events[k] if staggered else None, every), daemon=True)
        for k, feeder in enumerate(feeders)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall_s = max(time.perf_counter() - started, 1e-9)
    tasks = tuple(feeder.result() for feeder in feeders)
    completed = sum(t.completed for t in tasks)
    return VanillaResult(runner, tasks, wall_s, completed / wall_s,
                         float(max(rss_bytes() - before, 0)))
