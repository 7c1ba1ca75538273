"""Latency profiling of subgraphs: every (task, position, variant, processor), batch size 1.

Everything is timed the way the runtime runs it (:mod:`sparseloom.profile.pinned`): one thread
per processor, pinned to its cores, calls each loaded model *in place* (its ``runner``, as the
runtime's worker does), and boundary tensors are handed between the threads' queues.

Every subgraph of a task is compiled and loaded once on every processor (compile time, load
time and loaded memory are recorded) and warmed up on its processor's thread. Then it is timed
in *interleaved rounds*: each round runs every (subgraph, processor) once, each processor's runs
shuffled and dealt round-robin across processors, so noise (a busy neighbour, a frequency
change) hits all subgraphs alike instead of whichever ran at that moment. A **stage time** is
the model call alone, stamped on the pinned thread around it.

A **hand-off** ``handoff_ms[j, a, b]`` is timed in the same rounds as a two-stage chain (the
dense subgraph at ``j`` on ``a`` feeding the one at ``j + 1`` on ``b``): the time from the end
of the first call on ``a``'s thread to the start of the second on ``b``'s thread. For ``a != b``
that is a queue put and the wake-up of ``b``'s idle thread; for ``a == b`` the next stage runs
at once on the same thread, so it is next to nothing.

Validation chains (``chains``) are isolated requests through the same threads, timed from the
first stage's start to the last stage's end. Subgraphs, hand-offs and chains all report the
configured statistic of their rounds (:class:`ProfilerConfig`).

A subgraph that fails to compile, load or run is recorded as a :class:`ProfileFailure` naming
the subgraph and processor; its cells stay NaN and everything else is kept.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import attrs
import numpy as np

from sparseloom.core.types import Processor
from sparseloom.isolation.guard import prepare, wait_probed
from sparseloom.isolation.probe import wait_for_probes
from sparseloom.profile.pinned import ModelCall, PinnedThreads, Stage
from sparseloom.profile.rounds import (
    Cell,
    Chain,
    ChainTimingItem,
    HandoffTiming,
    SingleTiming,
    Timing,
    schedule,
    timed,
)

log = logging.getLogger(__name__)

BackendResolver = Callable[[Processor], Any]


#: Latency statistics a profile can record, by the percentile of the timed rounds they take.
STATISTICS: dict[str, float] = {"median": 50.0, "p25": 25.0, "p10": 10.0, "min": 0.0}


@attrs.frozen
class ProfilerConfig:
    """How latencies are measured.

    Attributes:
        warmup: untimed runs of every subgraph before timing.
        repeats: timed rounds (one run of every subgraph and hand-off pair per round).
        statistic: what of the rounds a latency records: ``p25`` by default, ``median``,
            ``p10`` or ``min``. Noise from other jobs is one-sided (pre-emption only ever adds
            time), and on the shared 2-core test machine the 25th percentile tracks the
            undisturbed latency far more stably than the median (latency MAPE 6.5% against 23%
            on ``vision``, ``docs/results.md``). The same statistic is used for subgraphs,
            hand-offs and validation chains; the median is recorded as well.
        burst: calls per timed sample. 1 times one *cold* call per round (the model last
            ran a round ago, as under sparse arrivals); ``n`` > 1 runs the subgraph, hand-off
            pair or chain ``n`` times back to back and takes the median of calls 2..n, a
            *hot* call (as a busy worker makes them: weights in cache, the ISA's state set).
            Cold ÷ hot differs by processor (bf16 OpenVINO 1.9×, ONNX Runtime 1.4× on
            ``default``'s ``sentiment``, Intel Xeon with AMX, docs/results.md), so the two
            rank processors and variants differently.
    """

    warmup: int = attrs.field(default=3, validator=attrs.validators.ge(0))
    repeats: int = attrs.field(default=20, validator=attrs.validators.ge(3))
    statistic: str = attrs.field(default="p25",
                                 validator=attrs.validators.in_(tuple(STATISTICS)))
    burst: int = attrs.field(default=5, validator=attrs.validators.ge(1))

    def cache_key(self) -> dict[str, Any]:
        """What of this config changes the measurements (part of the profile cache key)."""
        key = {"warmup": self.warmup, "repeats": self.repeats, "batch_size": 1,
               "batch_fixed": True, "schedule": 4, "statistic": self.statistic}
        # burst 1 keeps the key profiles had before bursts (their cold calls are reused)
        return key | ({"burst": self.burst, "cold_ms": True} if self.burst > 1 else {})

    def reduce(self, samples: np.ndarray) -> float:
        """The configured statistic of ``samples`` (NaN when empty)."""
        if samples.size == 0:
            return float("nan")
        return float(np.percentile(samples, STATISTICS[self.statistic]))


@attrs.frozen
class ProfileFailure:
    """A subgraph that could not be profiled on a processor."""

    task: str
    position: int
    variant: int
    processor: str
    operation: str
    error: str

    def describe(self) -> str:
        """One line naming the subgraph, processor, operation and error."""
        return (f"task {self.task!r} position {self.position} variant {self.variant} on "
                f"{self.processor}: {self.operation} failed: {self.error}")


@attrs.frozen
class SubgraphJob:
    """One subgraph to time: its position, variant, ONNX file and batch-1 inputs."""

    position: int
    variant: int
    model_path: str
    inputs: Mapping[str, np.ndarray] = attrs.field(hash=False, eq=False)


@attrs.define(eq=False)
class TaskMeasurement:
    """Measurements of one task's subgraphs on every processor (arrays are (S, V, P)).

    ``handoff_ms`` is (S-1, P, P); ``chain_ms`` the configured statistic of each validation
    chain's rounds and ``chain_spread_ms`` their inter-quartile range (the round-to-round
    noise of a chain); cells that could not be measured are NaN.
    """

    latency_ms: np.ndarray
    median_ms: np.ndarray
    spread_ms: np.ndarray
    compile_ms: np.ndarray
    load_ms: np.ndarray
    memory_bytes: np.ndarray
    handoff_ms: np.ndarray
    failures: list[ProfileFailure]
    chain_ms: np.ndarray = attrs.field(factory=lambda: np.zeros(0))
    chain_spread_ms: np.ndarray = attrs.field(factory=lambda: np.zeros(0))
    #: The statistic of each round's first call of a burst (a cold call), (S, V, P); empty
    #: where not recorded (:meth:`cold` then gives ``latency_ms``).
    cold_ms: np.ndarray = attrs.field(factory=lambda: np.zeros(0))

    def cold(self) -> np.ndarray:
        """Each subgraph's cold-call latency: :attr:`cold_ms`, else :attr:`latency_ms`."""
        return self.cold_ms if self.cold_ms.shape == self.latency_ms.shape else self.latency_ms

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The arrays, for an ``.npz`` cache file."""
        return {"latency_ms": self.latency_ms, "median_ms": self.median_ms,
                "spread_ms": self.spread_ms,
                "compile_ms": self.compile_ms, "load_ms": self.load_ms,
                "memory_bytes": self.memory_bytes, "handoff_ms": self.handoff_ms,
                "cold_ms": self.cold()}


def default_backend_resolver(processor: Processor) -> Any:
    """The process-wide backend instance for ``processor`` (through the registry)."""
    from sparseloom.core.processors import get_backend

    return get_backend(processor.backend)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    result = fn()
    return result, (time.perf_counter() - start) * 1e3


def _spread(samples: np.ndarray) -> float:
    """Inter-quartile range of ``samples``."""
    q25, q75 = np.percentile(samples, [25, 75])
    return float(q75 - q25)


def direct_call(backend: Any, handle: Any) -> ModelCall:
    """What the runtime's worker calls in place: the loaded model's ``runner`` when it has one
    (the built-in backends: the runtime's bare call), else ``backend.infer`` (which runs in
    place on a thread pinned to the processor's cores)."""
    runner = getattr(handle, "runner", None)
    return runner if callable(runner) else partial(backend.infer, handle)


@attrs.define(eq=False)
class _Loaded:
    """The task's loaded subgraphs and how to chain them on the pinned threads."""

    by_key: Mapping[tuple[int, int], SubgraphJob]
    models: dict[Cell, tuple[Any, Any]] = attrs.field(factory=dict)
    live: set[Cell] = attrs.field(factory=set)

    def stage(self, cell: Cell, call: ModelCall | None = None) -> Stage:
        backend, handle = self.models[cell]
        names = getattr(handle, "input_names", None) or tuple(self.by_key[cell[:2]].inputs)
        return Stage(cell[2], call or direct_call(backend, handle), tuple(names))

    def run(self, threads: PinnedThreads, item: Timing, burst: int = 1) -> tuple[float, float]:
        """``item``'s (hot, cold) sample of one round (:func:`~sparseloom.profile.rounds.
        timed`)."""
        cells = item.cells()
        stages = [self.stage(cell) for cell in cells]
        return timed(threads, item, stages, self.by_key[cells[0][:2]].inputs, burst)


def measure_task(
    task: str,
    jobs: Sequence[SubgraphJob],
    processors: Sequence[Processor],
    resolve_backend: BackendResolver,
    config: ProfilerConfig,
    *,
    chains: Sequence[Chain] = (),
    seed: int = 0,
    tick: Callable[[int], None] | None = None,
) -> TaskMeasurement:
    """Compile, load and time every job on every processor, and every boundary's hand-off.

    Timed in the same interleaved rounds, all on one pinned thread per processor with models
    called in place (:mod:`sparseloom.profile.pinned`): every subgraph alone
    (:class:`SingleTiming`), every dense hand-off pair (:class:`HandoffTiming`) and, for
    validation, every ``chains`` entry ``(choices, order)`` as an isolated request
    (:class:`ChainTimingItem`). ``tick(n)`` reports progress. Failures are recorded with the
    subgraph and processor; their cells stay NaN.
    """
    positions = 1 + max(job.position for job in jobs)
    variants = 1 + max(job.variant for job in jobs)
    count = len(processors)
    shape = (positions, variants, count)
    result = TaskMeasurement(
        latency_ms=np.full(shape, np.nan), median_ms=np.full(shape, np.nan),
        spread_ms=np.full(shape, np.nan),
        compile_ms=np.full(shape, np.nan), load_ms=np.full(shape, np.nan),
        memory_bytes=np.zeros(shape, dtype=np.int64),
        handoff_ms=np.full((max(positions - 1, 0), count, count), np.nan), failures=[],
        chain_ms=np.full(len(chains), np.nan), chain_spread_ms=np.full(len(chains), np.nan),
        cold_ms=np.full(shape, np.nan))
    loaded = _Loaded({(job.position, job.variant): job for job in jobs})
    tick = tick or (lambda _: None)

    def fail(where: tuple[int, int, str, str], error: BaseException) -> None:
        failure = ProfileFailure(task, *where, _describe(error))
        log.warning("profiling: %s", failure.describe())
        result.failures.append(failure)

    with PinnedThreads(processors) as threads:
        try:
            _load_and_warm(loaded, jobs, processors, resolve_backend, config, threads, result,
                           fail, tick)
            wait_for_probes()  # nothing is timed while a probe process works
            items = _timings(loaded.live, positions, count, chains)
            samples = _time_rounds(loaded, items, threads, config, seed, bool(chains),
                                   processors, fail, tick)
            _record(result, samples, config)
        finally:
            for backend, handle in loaded.models.values():
                try:
                    backend.unload(handle)
                except Exception as error:  # an unload failure must not lose the measurements
                    log.warning("profiling: unloading failed: %s", error)
    return result


def _load_and_warm(
    loaded: _Loaded, jobs: Sequence[SubgraphJob], processors: Sequence[Processor],
    resolve_backend: BackendResolver, config: ProfilerConfig, threads: PinnedThreads,
    result: TaskMeasurement, fail: Callable[[tuple[int, int, str, str], BaseException], None],
    tick: Callable[[int], None],
) -> None:
    """Compile and load every job on every processor, and warm each up on its pinned thread
    through ``backend.infer`` (which checks the inputs once, as the runtime does at load)."""
    _probe(jobs, processors, resolve_backend)
    for p, processor in enumerate(processors):
        for job in jobs:
            cell = (job.position, job.variant, p)
            try:
                backend = resolve_backend(processor)
                wait_probed(backend, job.model_path, processor)  # timed below: compile alone
                compiled, result.compile_ms[cell] = _timed(
                    partial(backend.compile, job.model_path, processor))
                handle, result.load_ms[cell] = _timed(partial(backend.load, compiled, processor))
                loaded.models[cell] = (backend, handle)
                result.memory_bytes[cell] = int(getattr(handle, "memory_bytes", 0))
                checked = loaded.stage(cell, partial(backend.infer, handle))
                for _ in range(config.warmup):
                    threads.run([checked], job.inputs)
                loaded.live.add(cell)
            except Exception as error:
                operation = "warm-up infer" if cell in loaded.models else "compile/load"
                fail((job.position, job.variant, processor.name, operation), error)
            tick(1)


def _probe(jobs: Sequence[SubgraphJob], processors: Sequence[Processor],
           resolve_backend: BackendResolver) -> None:
    """Start probing every job on every processor in the probe processes, side by side with
    the loads here (:mod:`sparseloom.isolation`); a processor whose backend cannot be resolved
    is left to ``_load_and_warm``, which records the failure."""
    requests = []
    for processor in processors:
        try:
            backend = resolve_backend(processor)
        except Exception:
            continue
        requests += [(backend, job.model_path, processor) for job in jobs]
    prepare(requests)


def _timings(live: set[Cell], positions: int, count: int, chains: Sequence[Chain]
             ) -> list[Timing]:
    """Everything to time each round, of the subgraphs that loaded and warmed up."""
    items: list[Timing] = [SingleTiming(*cell) for cell in sorted(live)]
    items += [HandoffTiming(j, a, b) for j in range(positions - 1) for a in range(count)
              for b in range(count) if {(j, 0, a), (j + 1, 0, b)} <= live]
    for index, (choices, order) in enumerate(chains):
        chain = ChainTimingItem(index, choices, order)
        if set(chain.cells()) <= live:
            items.append(chain)
    return items


def _time_rounds(
    loaded: _Loaded, items: list[Timing], threads: PinnedThreads, config: ProfilerConfig,
    seed: int, warm_chains: bool, processors: Sequence[Processor],
    fail: Callable[[tuple[int, int, str, str], BaseException], None],
    tick: Callable[[int], None],
) -> dict[Timing, list[tuple[float, float]]]:
    """``config.repeats`` interleaved rounds (after ``config.warmup`` untimed ones when there
    are validation chains to warm up); the (hot, cold) samples of every item that never
    failed (:meth:`_Loaded.run`)."""
    samples: dict[Timing, list[tuple[float, float]]] = {item: [] for item in items}
    failed: set[Timing] = set()
    rng = np.random.default_rng(seed)
    for round_index in range(-config.warmup if warm_chains else 0, config.repeats):
        for item in schedule(items, rng):
            if item in failed:
                continue
            try:
                elapsed = loaded.run(threads, item, config.burst)
            except Exception as error:
                fail(item.where(processors), error)
                failed.add(item)
                continue
            if round_index >= 0:
                samples[item].append(elapsed)
        tick(1)
    return {item: values for item, values in samples.items()
            if item not in failed and values}


def _record(result: TaskMeasurement, samples: Mapping[Timing, list[tuple[float, float]]],
            config: ProfilerConfig) -> None:
    """Reduce every item's samples into its cell of ``result``."""
    for item, pairs in samples.items():
        array, cold = (np.asarray(column) for column in zip(*pairs, strict=True))
        if isinstance(item, SingleTiming):
            cell = item.cells()[0]
            result.latency_ms[cell] = config.reduce(array)
            result.cold_ms[cell] = config.reduce(cold)
            result.median_ms[cell] = float(np.median(array))
            result.spread_ms[cell] = _spread(array)
        elif isinstance(item, HandoffTiming):
            result.handoff_ms[item.position, item.first, item.second] = config.reduce(array)
        elif isinstance(item, ChainTimingItem):
            result.chain_ms[item.index] = config.reduce(array)
            result.chain_spread_ms[item.index] = _spread(array)


def chain_inputs(
    outputs: Mapping[str, np.ndarray], own_inputs: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Inputs of the next subgraph: the previous outputs, plus tensors it needs from before."""
    return {name: outputs.get(name, value) for name, value in own_inputs.items()}
