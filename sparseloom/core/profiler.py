"""Latency profiling of subgraphs: every (task, position, variant, processor), batch size 1.

Every subgraph of a task is compiled and loaded once on every processor (compile time, load
time and loaded memory are recorded) and warmed up. Then it is timed in *interleaved rounds*:
each round runs every (subgraph, processor) once, each processor's runs shuffled and dealt
round-robin across processors. Two things follow. Noise (a busy neighbour, a frequency change)
hits all subgraphs alike instead of whichever ran at that moment; and consecutive runs
alternate between processors exactly as the positions of a chain do, so every timing includes
waking a processor that sat idle while the other worked — on this machine that wake-up is
0.1–0.2 ms per position, a large share of a sub-millisecond subgraph. The median and the
inter-quartile range of the rounds are kept.

The hand-off cost of boundary ``j`` for processors (a, b) is timed in the same rounds: the
dense subgraph at ``j`` on ``a`` feeding the one at ``j + 1`` on ``b``, exactly as a chain
passes its boundary tensors; the hand-off is that median minus the two subgraphs' medians.

A subgraph that fails to compile, load or run is recorded as a :class:`ProfileFailure` naming
the subgraph and processor; its cells stay NaN and everything else is kept.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from sparseloom.core.types import Processor

log = logging.getLogger(__name__)

BackendResolver = Callable[[Processor], Any]


@attrs.frozen
class ProfilerConfig:
    """How latencies are measured.

    Attributes:
        warmup: untimed runs of every subgraph before timing.
        repeats: timed rounds (one run of every subgraph and hand-off pair per round).
    """

    warmup: int = attrs.field(default=3, validator=attrs.validators.ge(0))
    repeats: int = attrs.field(default=20, validator=attrs.validators.ge(3))

    def cache_key(self) -> dict[str, int]:
        """What of this config changes the measurements (part of the profile cache key)."""
        return {"warmup": self.warmup, "repeats": self.repeats, "batch_size": 1,
                "schedule": 2}


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

    ``handoff_ms`` is (S-1, P, P); cells that could not be measured are NaN.
    """

    latency_ms: np.ndarray
    spread_ms: np.ndarray
    compile_ms: np.ndarray
    load_ms: np.ndarray
    memory_bytes: np.ndarray
    handoff_ms: np.ndarray
    failures: list[ProfileFailure]

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The arrays, for an ``.npz`` cache file."""
        return {"latency_ms": self.latency_ms, "spread_ms": self.spread_ms,
                "compile_ms": self.compile_ms, "load_ms": self.load_ms,
                "memory_bytes": self.memory_bytes, "handoff_ms": self.handoff_ms}


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


def _summary(samples: np.ndarray) -> tuple[float, float]:
    if samples.size == 0 or not np.all(np.isfinite(samples)):
        return float("nan"), float("nan")
    q25, q50, q75 = np.percentile(samples, [25, 50, 75])
    return float(q50), float(q75 - q25)


def _schedule(
    items: Sequence[tuple[int, ...]], processor_of: Callable[[tuple[int, ...]], int],
    rng: np.random.Generator,
) -> list[tuple[int, ...]]:
    """One round: each processor's items shuffled, then dealt round-robin across processors.

    Consecutive runs then alternate between processors, as the positions of a chain do, so
    each timing includes the wake-up of a processor that was idle while another worked.
    """
    queues: dict[int, list[tuple[int, ...]]] = {}
    for item in items:
        queues.setdefault(processor_of(item), []).append(item)
    for queue in queues.values():
        rng.shuffle(queue)  # type: ignore[arg-type]
    owners = [int(p) for p in rng.permutation(sorted(queues))]
    order: list[tuple[int, ...]] = []
    while any(queues.values()):
        for owner in owners:
            if queues[owner]:
                order.append(queues[owner].pop())
    return order


def measure_task(
    task: str,
    jobs: Sequence[SubgraphJob],
    processors: Sequence[Processor],
    resolve_backend: BackendResolver,
    config: ProfilerConfig,
    *,
    seed: int = 0,
    tick: Callable[[int], None] | None = None,
) -> TaskMeasurement:
    """Compile, load and time every job on every processor, and every boundary's hand-off.

    Singles ``(j, v, p)`` and dense pairs ``(j, a, b)`` (position ``j`` on ``a`` feeding
    ``j + 1`` on ``b``) are timed in the same interleaved rounds. ``tick(n)`` reports progress
    (one per loaded subgraph, one per round). Failures are recorded with the subgraph and
    processor; that subgraph's cells stay NaN and everything else is measured.
    """
    positions = 1 + max(job.position for job in jobs)
    variants = 1 + max(job.variant for job in jobs)
    count = len(processors)
    shape = (positions, variants, count)
    result = TaskMeasurement(
        *(np.full(shape, np.nan) for _ in range(4)), np.zeros(shape, dtype=np.int64),
        np.full((max(positions - 1, 0), count, count), np.nan), [])
    by_key = {(job.position, job.variant): job for job in jobs}
    tick = tick or (lambda _: None)
    loaded: dict[tuple[int, int, int], tuple[Any, Any]] = {}
    failed: set[tuple[int, ...]] = set()

    def fail(j: int, v: int, where: str, operation: str, error: BaseException) -> None:
        failure = ProfileFailure(task, j, v, where, operation, _describe(error))
        log.warning("profiling: %s", failure.describe())
        result.failures.append(failure)

    try:
        for p, processor in enumerate(processors):
            for job in jobs:
                key = (job.position, job.variant, p)
                try:
                    backend = resolve_backend(processor)
                    compiled, result.compile_ms[key] = _timed(
                        lambda b=backend, job=job, where=processor: b.compile(
                            job.model_path, where))
                    handle, result.load_ms[key] = _timed(
                        lambda b=backend, c=compiled, where=processor: b.load(c, where))
                    loaded[key] = (backend, handle)
                    result.memory_bytes[key] = int(getattr(handle, "memory_bytes", 0))
                    for _ in range(config.warmup):
                        backend.infer(handle, job.inputs)
                except Exception as error:
                    operation = "warm-up infer" if key in loaded else "compile/load"
                    fail(job.position, job.variant, processor.name, operation, error)
                    failed.add(key)
                tick(1)
        singles = [key for key in loaded if key not in failed]
        pairs = [(j, a, b, -1) for j in range(positions - 1) for a in range(count)
                 for b in range(count) if (j, 0, a) in singles and (j + 1, 0, b) in singles]
        samples: dict[tuple[int, ...], list[float]] = {item: [] for item in singles + pairs}
        rng = np.random.default_rng(seed)

        def run(item: tuple[int, ...]) -> float:
            if len(item) == 3:
                backend, handle = loaded[item]  # type: ignore[index]
                inputs = by_key[item[0], item[1]].inputs
                return _timed(lambda: backend.infer(handle, inputs))[1]
            j, a, b, _ = item
            (first_backend, first), (second_backend, second) = loaded[j, 0, a], loaded[j + 1, 0, b]
            first_inputs, second_inputs = by_key[j, 0].inputs, by_key[j + 1, 0].inputs
            return _timed(lambda: second_backend.infer(second, chain_inputs(
                first_backend.infer(first, first_inputs), second_inputs)))[1]

        for _ in range(config.repeats):
            for item in _schedule(list(samples), lambda i: i[2] if len(i) == 3 else i[1], rng):
                if item in failed:
                    continue
                try:
                    samples[item].append(run(item))
                except Exception as error:
                    j, v, where = (item[0], item[1], processors[item[2]].name) if len(
                        item) == 3 else (item[0], 0, f"{processors[item[1]].name}->"
                                                     f"{processors[item[2]].name}")
                    fail(j, v, where, "infer" if len(item) == 3 else "hand-off", error)
                    failed.add(item)
            tick(1)
        for item, values in samples.items():
            if item in failed or not values:
                continue
            if len(item) == 3:
                result.latency_ms[item], result.spread_ms[item] = _summary(np.asarray(values))
        for j, a, b, _ in pairs:
            if (j, a, b, -1) not in failed and samples[j, a, b, -1]:
                result.handoff_ms[j, a, b] = float(np.median(samples[j, a, b, -1])) - (
                    result.latency_ms[j, 0, a] + result.latency_ms[j + 1, 0, b])
    finally:
        for backend, handle in loaded.values():
            try:
                backend.unload(handle)
            except Exception as error:  # an unload failure must not lose the measurements
                log.warning("profiling: unloading failed: %s", error)
    return result


def chain_inputs(
    outputs: Mapping[str, np.ndarray], own_inputs: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Inputs of the next subgraph: the previous outputs, plus tensors it needs from before."""
    return {name: outputs.get(name, value) for name, value in own_inputs.items()}


def measure_chains(
    jobs: Sequence[SubgraphJob],
    chains: Sequence[tuple[Sequence[int], Sequence[int]]],
    processors: Sequence[Processor],
    resolve_backend: BackendResolver,
    config: ProfilerConfig,
    *,
    seed: int = 0,
    tick: Callable[[int], None] | None = None,
) -> np.ndarray:
    """End-to-end latency (median ms) of stitched variants run as chains across processors.

    ``jobs`` are the task's subgraphs (their position-0 inputs feed every chain); each chain is
    ``(choices, order)`` with one variant id and one processor index per position. Chains run
    exactly as :class:`~sparseloom.core.stitch.StitchedModel` runs a request: one synchronous
    ``infer`` per position, boundary tensors passed along. Every needed subgraph is loaded
    once and shared; chains are timed in interleaved rounds. A chain that fails is NaN.
    """
    from sparseloom.core.stitch import StitchedModel
    from sparseloom.core.types import StitchedVariant

    by_key = {(job.position, job.variant): job for job in jobs}
    needed = sorted({(j, v, p) for choices, order in chains
                     for j, (v, p) in enumerate(zip(choices, order, strict=True))})
    stages: dict[tuple[int, int, int], tuple[Any, Any]] = {}
    tick = tick or (lambda _: None)
    measured = np.full(len(chains), np.nan)
    try:
        for j, v, p in needed:
            backend = resolve_backend(processors[p])
            try:
                compiled = backend.compile(by_key[j, v].model_path, processors[p])
                stages[j, v, p] = (backend, backend.load(compiled, processors[p]))
            except Exception as error:
                log.warning("chain timing: position %d variant %d on %s failed to load: %s",
                            j, v, processors[p].name, _describe(error))
        models = {}
        for index, (choices, order) in enumerate(chains):
            keys = [(j, int(v), int(p))
                    for j, (v, p) in enumerate(zip(choices, order, strict=True))]
            if all(key in stages for key in keys):
                models[index] = StitchedModel(
                    StitchedVariant("chain", tuple(int(c) for c in choices)),
                    tuple(processors[int(p)].name for p in order), [stages[k] for k in keys])
        first_inputs = next(job.inputs for job in jobs if job.position == 0)
        samples: dict[int, list[float]] = {index: [] for index in models}
        for index in list(samples):
            try:
                for _ in range(config.warmup):
                    models[index].run_once(first_inputs)
            except Exception as error:
                log.warning("chain timing: chain %s failed: %s", chains[index], error)
                del samples[index]
        rng = np.random.default_rng(seed + 2)
        for _ in range(config.repeats):
            for index in rng.permutation(sorted(samples)):
                _, elapsed = _timed(lambda i=int(index): models[i].run_once(first_inputs))
                samples[int(index)].append(elapsed)
            tick(1)
        for index, values in samples.items():
            measured[index] = float(np.median(values))
    finally:
        for backend, handle in stages.values():
            try:
                backend.unload(handle)
            except Exception as error:
                log.warning("chain timing: unloading failed: %s", error)
    return measured
