"""The stock runtimes: what a user runs without sparseloom, served through the same runtime.

Each task's model runs whole in its own session (ONNX Runtime ``InferenceSession`` or OpenVINO
compiled model), called by a thread of its own — one "processor" per task — and the load, the
eval rows, the scoring and the run summary are the runtime's (:mod:`sparseloom.runtime.load`,
:mod:`sparseloom.runtime.summary`): a stock contender differs from a sparseloom plan only in
what runs where, never in how it is measured.

=======================  ======================================================================
contender                configuration
=======================  ======================================================================
``stock-ort``            ONNX Runtime out of the box: default session options (intra-op threads
                         = the machine's cores, spinning on), caller thread unpinned
``stock-ov``             OpenVINO out of the box: ``PERFORMANCE_HINT=THROUGHPUT``, OpenVINO's
                         default threads, streams, pinning and precision, caller unpinned
``stock-ort-matched``    ONNX Runtime matched to sparseloom's processors: 1 intra-op thread per
                         session (a sparseloom processor's), callers confined to the cores of
                         sparseloom's processors, f32
``stock-ov-matched``     OpenVINO matched likewise: ``INFERENCE_NUM_THREADS=1``, one stream,
                         the precision of sparseloom's OpenVINO processor (f32 unless it is
                         profiled with another ``INFERENCE_PRECISION_HINT``), callers confined
                         to those cores
``picks-ort``            ``stock-ort`` serving the stitched variant a sparseloom policy chose for
                         each task, merged into one model (:mod:`sparseloom.zoo.whole`)
``stock-tuned``          configured by measurement at the start of the benchmark: per task the
                         runtime, precision, threads and cores that serve the dense model
                         fastest, batch fixed to 1 (:mod:`sparseloom.evaluation.stock_tuned`)
``picks-tuned``          the same search serving ``sparseloom-loaded``'s picks merged
=======================  ======================================================================

The untuned stock runtimes serve the model files as they are, a symbolic batch dimension
included; sparseloom's runtime and the tuned ones serve them with the batch fixed to 1
(:mod:`sparseloom.zoo.batch_one`).

Requests of one task run one after another (one session per task, one caller thread); tasks run
concurrently and the operating system time-slices them, as it does for a user's threads. Where
requests queue (Poisson arrivals: the capacity scenario; the grid is closed) the tuned runtimes
serve a task given n > 1 cores as n sessions of one thread, one per core, each request on the
least busy (``Route.replicas``): as many at once as it has cores, what OpenVINO's THROUGHPUT
streams or one ONNX Runtime session per core give a user.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs

from sparseloom.core.errors import EvaluationError
from sparseloom.core.processors import allowed_cores
from sparseloom.core.types import SLO, Processor, StitchedVariant
from sparseloom.runtime import switching
from sparseloom.runtime.executor import Runtime, RuntimeOptions
from sparseloom.runtime.load import LoadSpec, offer
from sparseloom.runtime.models import RuntimeTask, resident_bytes, rss_bytes
from sparseloom.runtime.summary import RunInterrupted, RunSummary, summarize


@attrs.frozen
class StockRuntime:
    """One way to run the tasks' models on a stock runtime (see the module doc).

    Attributes:
        name: the contender's name.
        backend: ``ort`` or ``ov``.
        matched: matched to sparseloom's processors (1 thread, their cores, f32) rather than
            out of the box.
        picks: serve a sparseloom policy's picks (merged stitched variants), not the dense
            models.
        tuned: configured by measurement at the start of each benchmark
            (:mod:`sparseloom.evaluation.stock_tuned`); this record only names it.
    """

    name: str
    backend: str
    matched: bool = False
    picks: bool = False
    tuned: bool = False

    @property
    def batch_one(self) -> bool:
        """Served with the batch fixed to 1: the tuned ones (the others serve the files as
        they are)."""
        return self.tuned

    def processor(self, task: str, cores: Sequence[int], precision: str = "f32"
                  ) -> Processor:
        """The processor (session configuration) that serves ``task``; ``precision`` is the
        inference precision of sparseloom's OpenVINO processor (what a matched one uses)."""
        device = "CPU"
        name = f"{self.backend}:{device}@{task}"
        if self.matched:
            options = {} if self.backend == "ort" else {"PERFORMANCE_HINT": "LATENCY",
                                                        "INFERENCE_PRECISION_HINT": precision}
            return Processor(name, self.backend, device, threads=1, cores=tuple(cores),
                             options=options)
        options = {"stock": "true"}
        if self.backend == "ov":
            options["PERFORMANCE_HINT"] = "THROUGHPUT"
        return Processor(name, self.backend, device, threads=len(allowed_cores()),
                         options=options)

    def replicas(self, task: str) -> list[Processor]:
        """More sessions serving ``task`` beside :meth:`processor`'s: none (one per task)."""
        return []

    def describe(self, cores: Sequence[int], precision: str = "f32") -> str:
        """The configuration in words, for the report."""
        if self.tuned:
            what = "sparseloom-loaded's picks merged" if self.picks else "dense models"
            return (f"{what}, batch 1, per task the runtime, precision, threads and cores "
                    "found fastest at the start of the benchmark (its tuning table)")
        runtime = "ONNX Runtime" if self.backend == "ort" else "OpenVINO"
        what = "sparseloom's picks merged" if self.picks else "dense models"
        if self.matched:
            extra = ("1 intra-op thread, f32" if self.backend == "ort"
                     else f"INFERENCE_NUM_THREADS=1, LATENCY hint, {precision}")
            return (f"{runtime}, {what}, one session per task, {extra}, callers on cores "
                    f"{','.join(map(str, cores))}")
        extra = ("default session options" if self.backend == "ort"
                 else "THROUGHPUT hint, OpenVINO's default threads/streams/precision")
        return f"{runtime}, {what}, one session per task, {extra}, unpinned"


#: The stock contenders, by name.
STOCK_RUNTIMES: dict[str, StockRuntime] = {s.name: s for s in (
    StockRuntime("stock-ort", "ort"),
    StockRuntime("stock-ov", "ov"),
    StockRuntime("stock-ort-matched", "ort", matched=True),
    StockRuntime("stock-ov-matched", "ov", matched=True),
    StockRuntime("picks-ort", "ort", picks=True),
    StockRuntime("stock-tuned", "tuned", tuned=True),
    StockRuntime("picks-tuned", "tuned", picks=True, tuned=True),
)}


class ServedStock(Protocol):
    """What :func:`serve_stock` serves: a :class:`StockRuntime` or a tuned runtime
    (:class:`~sparseloom.evaluation.stock_tuned.TunedRuntime`)."""

    @property
    def name(self) -> str: ...

    @property
    def picks(self) -> bool: ...

    @property
    def batch_one(self) -> bool: ...

    def processor(self, task: str, cores: Sequence[int], precision: str = "f32"
                  ) -> Processor: ...

    def replicas(self, task: str) -> list[Processor]: ...

    def describe(self, cores: Sequence[int], precision: str = "f32") -> str: ...


@attrs.frozen
class _WholePlan:
    """Each task's whole model on its own processor: what :mod:`switching` turns into routes."""

    variants: Mapping[str, StitchedVariant]
    placement: Mapping[str, str]
    replicas: Mapping[str, tuple[str, ...]]

    def processors_of(self, task: str) -> tuple[str, ...]:
        return (self.placement[task],)

    def replicas_of(self, task: str) -> tuple[str, ...]:
        return self.replicas[task]


def serve_stock(workload: Any, zoos: Mapping[str, Any] | None, stock: ServedStock,
                spec: LoadSpec, slos: Mapping[str, SLO], *, cores: Sequence[int] = (),
                picks: Mapping[str, Sequence[int]] | None = None,
                precision: str = "f32", tasks: Sequence[str] | None = None) -> RunSummary:
    """Serve every task of ``workload`` on ``stock`` under ``spec`` and summarise the run.

    With an arrival order in ``spec`` the first task starts alone and the others join as the
    load generator says (a stock runtime has nothing to re-plan: each joins on its session).

    :param zoos: each task's subgraph zoo (the picks are its stitched variants); only needed
        with picks.
    :param slos: the SLOs the run is judged by.
    :param cores: the cores of sparseloom's processors (the matched runtimes' callers).
    :param picks: with ``stock.picks``, each task's stitched variant; a task without one
        serves its dense model (a pick that is the dense model at every position).
    :param precision: the OpenVINO inference precision a matched runtime uses.
    :param tasks: serve only these tasks (default every task of ``workload``).
    :raises EvaluationError: picks missing for a picks contender.
    :raises RunInterrupted: Ctrl-C cut the load short; ``partial`` is the run's summary.
    """
    from sparseloom.zoo.whole import whole_model_zoo

    if stock.picks and (picks is None or (picks and not zoos)):
        raise EvaluationError(f"{stock.name} serves a sparseloom policy's picks and needs them "
                              f"and the tasks' zoos; {'no picks' if picks is None else 'no zoos'}"
                              f" given")
    names = list(workload.task_names if tasks is None else tasks)
    cores = tuple(cores) or allowed_cores()
    served, processors, variants, placement, replicas = [], [], {}, {}, {}
    for name in names:
        task = workload.task(name)
        chosen = [tuple(picks[name])] if stock.picks and picks and name in picks else []
        zoo = whole_model_zoo(task, zoos[name] if chosen and zoos else None, chosen)
        served.append(RuntimeTask(task, zoo, slos[name]))
        processor = stock.processor(name, cores, precision)
        more = stock.replicas(name)
        processors += [processor, *more]
        variants[name] = StitchedVariant(name, (1 if chosen else 0,))
        placement[name] = processor.name
        replicas[name] = tuple(p.name for p in more)
    plan = _WholePlan(variants, placement, replicas)
    # Untuned: the model files as a user has them, symbolic batch and all (sparseloom's own
    # runtime and the tuned ones fix it to 1, docs/evaluation.md).
    runtime = Runtime(served, processors, options=RuntimeOptions(batch_one=stock.batch_one),
                      planner=lambda active, down: plan)
    rss_before = rss_bytes()
    started = time.perf_counter()
    try:
        switching.start(runtime, plan, active=spec.arrival_order[:1] or None)
        load = offer(runtime, spec)
        settings = {"workload": workload.name, "policy": stock.name,
                    "processors": [p.name for p in processors], "queries": spec.queries,
                    "rate": spec.rate, "configuration": stock.describe(cores, precision),
                    "setup_s": load.started_s - started}
        memory = {"loaded_bytes": float(resident_bytes(runtime.workers)),
                  "rss_growth_bytes": float(max(rss_bytes() - rss_before, 0))}
        summary = summarize(runtime, load, spec, settings=settings, memory=memory)
    finally:
        runtime.stop()
    if load.interrupted:
        raise RunInterrupted(summary)
    return summary
