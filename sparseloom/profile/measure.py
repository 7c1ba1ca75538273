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
from functools import partial
from typing import Any

import attrs
import numpy as np

from sparseloom.core.types import Processor

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
    """

    warmup: int = attrs.field(default=3, validator=attrs.validators.ge(0))
    repeats: int = attrs.field(default=20, validator=attrs.validators.ge(3))
    statistic: str = attrs.field(default="p25",
                                 validator=attrs.validators.in_(tuple(STATISTICS)))

    def cache_key(self) -> dict[str, Any]:
        """What of this config changes the measurements (part of the profile cache key)."""
        return {"warmup": self.warmup, "repeats": self.repeats, "batch_size": 1,
                "schedule": 2, "statistic": self.statistic}

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

    ``handoff_ms`` is (S-1, P, P); ``chain_ms`` the median of each validation chain; cells
    that could not be measured are NaN.
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

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The arrays, for an ``.npz`` cache file."""
        return {"latency_ms": self.latency_ms, "median_ms": self.median_ms,
                "spread_ms": self.spread_ms,
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


def _spread(samples: np.ndarray) -> float:
    """Inter-quartile range of ``samples``."""
    q25, q75 = np.percentile(samples, [25, 75])
    return float(q75 - q25)


def _handoff(pair: dict[int, float], first: dict[int, float], second: dict[int, float],
             config: ProfilerConfig) -> float:
    """Hand-off cost: what the chained pair takes beyond its two subgraphs alone.

    For the median, the median over rounds of ``pair − first − second`` of the same round
    (which cancels the load level each round ran under); for a low percentile, that
    percentile of the pair minus those of the two subgraphs (a percentile of differences
    would mix a fast run of one with a slow run of the other).
    """
    if config.statistic != "median":
        return config.reduce(np.asarray(list(pair.values()))) - config.reduce(
            np.asarray(list(first.values()))) - config.reduce(np.asarray(list(second.values())))
    residuals = [value - first[r] - second[r] for r, value in pair.items()
                 if r in first and r in second]
    return config.reduce(np.asarray(residuals)) if residuals else float("nan")


Item = tuple[Any, ...]
Chain = tuple[Sequence[int], Sequence[int]]


def _schedule(
    items: Sequence[Item], processor_of: Callable[[Item], int], rng: np.random.Generator
) -> list[Item]:
    """One round: each processor's items shuffled, then dealt round-robin across processors.

    Consecutive runs then alternate between processors, as the positions of a chain do, so
    each timing includes the wake-up of a processor that was idle while another worked.
    """
    queues: dict[int, list[Item]] = {}
    for item in items:
        queues.setdefault(processor_of(item), []).append(item)
    for queue in queues.values():
        rng.shuffle(queue)  # type: ignore[arg-type]
    owners = [int(p) for p in rng.permutation(sorted(queues))]
    order: list[Item] = []
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
    chains: Sequence[Chain] = (),
    seed: int = 0,
    tick: Callable[[int], None] | None = None,
) -> TaskMeasurement:
    """Compile, load and time every job on every processor, and every boundary's hand-off.

    Items timed in the same interleaved rounds: singles ``("s", j, v, p)``; dense hand-off
    pairs ``("h", j, a, b)`` (position ``j`` on ``a`` feeding ``j + 1`` on ``b``); and, for
    validation, whole ``chains`` ``(choices, order)`` run exactly as
    :class:`~sparseloom.zoo.stitch.StitchedModel` runs a request. ``tick(n)`` reports
    progress. Failures are recorded with the subgraph and processor; their cells stay NaN.
    """
    from sparseloom.core.types import StitchedVariant
    from sparseloom.zoo.stitch import StitchedModel

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
        chain_ms=np.full(len(chains), np.nan))
    by_key = {(job.position, job.variant): job for job in jobs}
    tick = tick or (lambda _: None)
    loaded: dict[tuple[int, int, int], tuple[Any, Any]] = {}
    failed: set[Item] = set()

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
                        partial(backend.compile, job.model_path, processor))
                    handle, result.load_ms[key] = _timed(
                        partial(backend.load, compiled, processor))
                    loaded[key] = (backend, handle)
                    result.memory_bytes[key] = int(getattr(handle, "memory_bytes", 0))
                    for _ in range(config.warmup):
                        backend.infer(handle, job.inputs)
                except Exception as error:
                    operation = "warm-up infer" if key in loaded else "compile/load"
                    fail(job.position, job.variant, processor.name, operation, error)
                    failed.add(("s", *key))
                tick(1)
        live = {key for key in loaded if ("s", *key) not in failed}
        items: list[Item] = [("s", *key) for key in sorted(live)]
        items += [("h", j, a, b) for j in range(positions - 1) for a in range(count)
                  for b in range(count) if {(j, 0, a), (j + 1, 0, b)} <= live]
        models: dict[int, Any] = {}
        for index, (choices, order) in enumerate(chains):
            keys = [(j, int(v), int(p))
                    for j, (v, p) in enumerate(zip(choices, order, strict=True))]
            if set(keys) <= live:
                models[index] = StitchedModel(
                    StitchedVariant(task, choices),
                    tuple(processors[int(p)].name for p in order), [loaded[k] for k in keys])
                items.append(("c", index, int(order[0])))
        first_inputs = by_key[0, 0].inputs

        def run(item: Item) -> float:
            if item[0] == "s":
                backend, handle = loaded[item[1:]]
                inputs = by_key[item[1], item[2]].inputs
                return _timed(lambda: backend.infer(handle, inputs))[1]
            if item[0] == "c":
                return _timed(lambda: models[item[1]].run_once(first_inputs))[1]
            _, j, a, b = item
            (first_backend, first), (second_backend, second) = loaded[j, 0, a], loaded[j + 1, 0, b]
            first_feed, second_feed = by_key[j, 0].inputs, by_key[j + 1, 0].inputs
            return _timed(lambda: second_backend.infer(second, chain_inputs(
                first_backend.infer(first, first_feed), second_feed)))[1]

        samples: dict[Item, dict[int, float]] = {item: {} for item in items}
        rng = np.random.default_rng(seed)
        for round_index in range(-config.warmup if chains else 0, config.repeats):
            for item in _schedule(items, lambda i: i[-1] if i[0] != "h" else i[2], rng):
                if item in failed:
                    continue
                try:
                    elapsed = run(item)
                except Exception as error:
                    fail(*_where(item, chains, processors), error)
                    failed.add(item)
                    continue
                if round_index >= 0:  # negative rounds warm the chains up
                    samples[item][round_index] = elapsed
            tick(1)
        for item, by_round in samples.items():
            values = np.asarray(list(by_round.values()))
            if item in failed or not values.size:
                continue
            if item[0] == "s":
                result.latency_ms[item[1:]] = config.reduce(values)
                result.median_ms[item[1:]] = float(np.median(values))
                result.spread_ms[item[1:]] = _spread(values)
            elif item[0] == "c":
                result.chain_ms[item[1]] = config.reduce(values)
        for item, by_round in samples.items():
            if item[0] == "h" and item not in failed and by_round:
                _, j, a, b = item
                result.handoff_ms[j, a, b] = _handoff(
                    by_round, samples.get(("s", j, 0, a), {}), samples.get(("s", j + 1, 0, b), {}),
                    config)
    finally:
        for backend, handle in loaded.values():
            try:
                backend.unload(handle)
            except Exception as error:  # an unload failure must not lose the measurements
                log.warning("profiling: unloading failed: %s", error)
    return result


def _where(item: Item, chains: Sequence[Chain], processors: Sequence[Processor]
           ) -> tuple[int, int, str, str]:
    """(position, variant, processor, operation) of a failed item, for its failure record."""
    if item[0] == "s":
        return item[1], item[2], processors[item[3]].name, "infer"
    if item[0] == "h":
        return item[1], 0, f"{processors[item[2]].name}->{processors[item[3]].name}", "hand-off"
    choices, order = chains[item[1]]
    names = "->".join(processors[int(p)].name for p in order)
    return 0, int(choices[0]), names, f"chain {list(map(int, choices))}"


def chain_inputs(
    outputs: Mapping[str, np.ndarray], own_inputs: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Inputs of the next subgraph: the previous outputs, plus tensors it needs from before."""
    return {name: outputs.get(name, value) for name, value in own_inputs.items()}
