"""``stock-tuned`` and ``picks-tuned``: ONNX Runtime and OpenVINO configured by measurement.

What a competent engineer gets from the stock runtimes alone, without sparseloom: each task's
model with its batch fixed to 1 (:mod:`sparseloom.zoo.batch_one`), on the runtime, precision
and thread count that serve it fastest, its threads on a set of cores of its own or shared,
the tasks' partition of the cores chosen for the closed makespan. Both are found at the start
of a benchmark, on the machine it runs on:

1. **Measure** (:func:`measure_candidates`): every task alone, in every candidate
   configuration (:func:`candidates`: ONNX Runtime f32; OpenVINO f32, and bf16 where this
   CPU computes it; 1 to n threads on the first n cores), a closed run of ``queries``
   requests through the same runtime the contest uses, in interleaved rounds (3 in ``bench
   serve``, 1 with ``--quick``); the median of its rounds' medians is the configuration's hot
   latency. A bf16 configuration counts only if the accuracy it served
   meets the task's accuracy SLO; one that fails to load or run is reported, never used.
2. **Partition** (:func:`best_partition`): per task a contiguous set of the cores, serving it
   on its fastest configuration with that many threads, minimising the closed makespan's
   bottleneck — the busiest core's summed latencies of the tasks it runs (one request of
   each task, the closed scenario's work) — by an exact branch-and-bound search that places
   the slowest task first; ties go to the least total core time.
3. **Queues** (:attr:`Choice.queued_config`): where requests queue (Poisson arrivals: capacity),
   a task given n > 1 cores serves them as n one-thread sessions, one per core, each request on
   the least busy, when its fastest one-thread configuration measured faster than n × its
   choice's latency (n at once beat one at a time on n threads); else one at a time.

``picks-tuned`` runs the same search on each task's merged stitched variant (the picks of a
sparseloom policy), so that picks-tuned ÷ stock-tuned is what the variants buy and
sparseloom ÷ picks-tuned what its runtime and placement buy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from sparseloom.core.errors import EvaluationError
from sparseloom.core.types import SLO, Processor, as_tuple, rotated
from sparseloom.runtime.load import LoadSpec


@attrs.frozen
class Config:
    """One way to run a task's model: runtime, precision and intra-op threads."""

    backend: str
    precision: str
    threads: int

    def describe(self) -> str:
        """``OpenVINO bf16, 2 threads``."""
        runtime = "ONNX Runtime" if self.backend == "ort" else "OpenVINO"
        return f"{runtime} {self.precision}, {self.threads} thread{'s' * (self.threads > 1)}"


@attrs.frozen
class Measured:
    """A configuration's figures for one task, served alone.

    Attributes:
        task: the task.
        config: the configuration.
        latency_ms: median latency of the closed run (``nan`` when it failed).
        accuracy: the accuracy it served over the run's rows (``nan`` when it failed).
        failure: why it did not run ("" when it did).
        rounds_ms: each round's median latency, in the order the rounds ran.
    """

    task: str
    config: Config
    latency_ms: float
    accuracy: float
    failure: str = ""
    rounds_ms: tuple[float, ...] = attrs.field(default=(), converter=as_tuple)

    def refusal(self, slo: SLO, f32_accuracy: float, whole_accuracy: float) -> str:
        """Why this configuration may not serve its task under ``slo`` ("" when it may).

        It failed; or its precision is not f32 and what it lost against f32 on the same
        rows (``f32_accuracy``: the model's in f32, served on them) would take the model's
        accuracy on the whole eval set (``whole_accuracy``, in f32) below the SLO. An f32
        configuration serves the model as the profile measured it.
        """
        if self.failure:
            return self.failure
        if self.config.precision == "f32":
            return ""
        lost = f32_accuracy - self.accuracy
        if not whole_accuracy - lost >= slo.accuracy - 1e-9:
            return (f"served {self.accuracy:.4f} against f32's {f32_accuracy:.4f} on the same "
                    f"rows: {whole_accuracy:.4f} on the eval set would fall below the SLO "
                    f"{slo.accuracy:.4f}")
        return ""


@attrs.frozen
class Choice:
    """How one task is served: a configuration on a set of cores."""

    config: Config
    cores: tuple[int, ...]
    latency_ms: float
    #: Where requests queue: the one-thread configuration that serves more per second on
    #: each core of :attr:`cores` than :attr:`config` does on all of them (measured), else
    #: ``None`` (the task serves queued requests one at a time, as :attr:`config`).
    queued_config: Config | None = None

    def processor(self, task: str) -> Processor:
        """The processor (session configuration) that serves ``task``."""
        options = {} if self.config.backend == "ort" else {
            "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": self.config.precision}
        return Processor(f"{self.config.backend}:CPU@{task}", self.config.backend, "CPU",
                         threads=self.config.threads, cores=self.cores, options=options)

    def queued_processors(self, task: str) -> list[Processor]:
        """The sessions that serve ``task``'s queued requests, each request on the least busy:
        one per core in :attr:`queued_config` (the first keeps :meth:`processor`'s name),
        else :meth:`processor`'s alone."""
        if self.queued_config is None:
            return [self.processor(task)]
        one = attrs.evolve(self, config=self.queued_config).processor(task)
        return [attrs.evolve(one, cores=(core,), name=one.name + (f"#{i}" if i else ""))
                for i, core in enumerate(self.cores)]


@attrs.frozen
class TunedRuntime:
    """A stock runtime configured per task (what :func:`serve_stock` serves).

    Attributes:
        name: the contender's name.
        picks: serves a sparseloom policy's picks rather than the dense models.
        choices: per task, its configuration and cores.
        makespan_ms: the search's predicted bottleneck: the busiest core's summed latencies.
    """

    name: str
    picks: bool
    choices: Mapping[str, Choice]
    makespan_ms: float = math.nan
    #: Served with the batch fixed to 1 (a user's one call to fix it).
    batch_one: bool = True
    #: Serves requests that queue (Poisson arrivals): a task whose one-thread sessions, one
    #: per core, serve more per second than its choice (:attr:`Choice.queued_config`) runs
    #: them, each request on the least busy.
    queued: bool = False

    def processor(self, task: str, cores: Sequence[int] = (), precision: str = "f32"
                  ) -> Processor:
        """The processor of ``task`` (``cores`` and ``precision`` are the search's own)."""
        if self.queued:
            return self.choices[task].queued_processors(task)[0]
        return self.choices[task].processor(task)

    def replicas(self, task: str) -> list[Processor]:
        """The sessions serving ``task`` beside :meth:`processor`'s: with :attr:`queued`, one
        per further core where :attr:`Choice.queued_config` says so; else none."""
        return self.choices[task].queued_processors(task)[1:] if self.queued else []

    def describe(self, cores: Sequence[int] = (), precision: str = "f32") -> str:
        """Each task's configuration in words, for the report."""
        what = "sparseloom's picks merged" if self.picks else "dense models"

        def each(c: Choice) -> str:
            if self.queued and c.queued_config is not None:
                return (f"{c.queued_config.describe()}, one session per core (requests "
                        f"queue)")
            return c.config.describe()

        return f"{what}, batch 1: " + "; ".join(
            f"{task} {each(c)} on core{'s' * (len(c.cores) > 1)} "
            f"{','.join(map(str, c.cores))}" for task, c in self.choices.items())


def candidates(cores: Sequence[int], bf16: bool) -> list[Config]:
    """Every configuration measured per task: ONNX Runtime f32 and OpenVINO f32 (and bf16
    when ``bf16``), each with 1 to ``len(cores)`` threads."""
    precisions = [("ort", "f32"), ("ov", "f32")] + ([("ov", "bf16")] if bf16 else [])
    return [Config(backend, precision, threads) for threads in range(1, len(cores) + 1)
            for backend, precision in precisions]


def core_sets(cores: Sequence[int]) -> list[tuple[int, ...]]:
    """The contiguous runs of ``cores`` (sorted): where one task's threads may go."""
    ordered = sorted(cores)
    return [tuple(ordered[start:end]) for start in range(len(ordered))
            for end in range(start + 1, len(ordered) + 1)]


def best_partition(latency: Mapping[str, Mapping[int, float]], cores: Sequence[int], *,
                   fixed: Mapping[str, tuple[int, ...]] | None = None
                   ) -> tuple[dict[str, tuple[int, ...]], float]:
    """Each task's core set minimising the busiest core's summed latency, and that sum.

    :param latency: per task, its best hot latency (ms) by thread count; a task may lack
        some counts (no configuration with that many threads was usable).
    :param cores: the cores to partition.
    :param fixed: tasks whose core set is given (each a contiguous run of ``cores`` with a
        usable thread count); the others' are searched.
    :raises EvaluationError: a task with no usable thread count on these cores, or a fixed
        set it cannot use.

    Exact: a depth-first search over every task's contiguous core sets, slowest task first,
    cut where the partial bottleneck already reaches the best found; ties go to the least
    total core time (Σ latency × cores), then to the first found.
    """
    sets = core_sets(cores)
    fixed = fixed or {}
    options: dict[str, list[tuple[tuple[int, ...], float]]] = {}
    for task, by_threads in latency.items():
        fitting = [(s, by_threads[len(s)]) for s in sets
                   if math.isfinite(by_threads.get(len(s), math.nan))
                   and (task not in fixed or s == fixed[task])]
        if not fitting:
            raise EvaluationError(
                f"task {task!r} has no usable configuration on cores "
                + (f"{list(fixed[task])} (fixed)" if task in fixed else
                   f"{list(cores)}: every one measured failed"))
        options[task] = sorted(fitting, key=lambda item: item[1] * len(item[0]))
    order = sorted(options, key=lambda t: -min(ms for _, ms in options[t]))
    best: list[Any] = [math.inf, math.inf, None]  # bottleneck, core time, assignment
    load = dict.fromkeys(sorted(cores), 0.0)
    chosen: dict[str, tuple[int, ...]] = {}

    def place(index: int, bottleneck: float, core_time: float) -> None:
        if (bottleneck, core_time) >= (best[0], best[1]):
            return
        if index == len(order):
            best[:] = [bottleneck, core_time, dict(chosen)]
            return
        task = order[index]
        for cores_of, ms in options[task]:
            for core in cores_of:
                load[core] += ms
            chosen[task] = cores_of
            place(index + 1, max(bottleneck, *(load[c] for c in cores_of)),
                  core_time + ms * len(cores_of))
            for core in cores_of:
                load[core] -= ms
        chosen.pop(task, None)

    place(0, 0.0, 0.0)
    return {t: best[2][t] for t in latency}, float(best[0])


def measure_candidates(serve_alone: Callable[[str, Choice], Any], task: str,
                       configs: Sequence[Config], cores: Sequence[int],
                       progress: Callable[[str], None] | None = None, *,
                       rounds: int = 1) -> list[Measured]:
    """Serve ``task`` alone in every configuration (its threads on the first cores), in
    ``rounds`` interleaved rounds (round r starts with the r-th configuration); a
    configuration's latency is the median of its rounds' medians, so one run slowed by the
    machine does not decide the choice (one such run put a 0.20 ms ONNX Runtime figure
    against its usual 0.13 ms and handed `activity` to OpenVINO; AMD EPYC, 2026-12-06).

    :param serve_alone: ``serve_alone(task, choice)`` serves ``task`` alone and returns the
        run's summary; an exception marks the configuration failed (named in the result), as
        does an invalid run in any round.
    """
    if rounds < 1:
        raise EvaluationError(f"tuning needs at least 1 round, got {rounds}")
    ordered = sorted(cores)
    runs: dict[Config, list[tuple[float, float, str]]] = {c: [] for c in configs}
    for index in range(rounds):
        for config in rotated(configs, index):
            if runs[config] and runs[config][-1][2]:
                continue  # failed in an earlier round: not run again
            runs[config].append(_serve_once(serve_alone, task, config, ordered))
    measured = []
    for config in configs:
        failures = [failure for _, _, failure in runs[config] if failure]
        latencies = tuple(latency for latency, _, _ in runs[config])
        if failures:
            item = Measured(task, config, math.nan, math.nan, failures[0], latencies)
        else:
            item = Measured(task, config, float(np.median(latencies)), runs[config][0][1],
                            "", latencies)
        measured.append(item)
        if progress:
            figure = f"{item.latency_ms:.3f} ms" if math.isfinite(item.latency_ms) else "—"
            if len(latencies) > 1 and not failures:
                figure += " (median of " + ", ".join(f"{x:.3f}" for x in latencies) + ")"
            progress(f"tuning {task}: {config.describe()}: {figure}"
                     + (f" (not used: {item.failure})" if item.failure else ""))
    return measured


def _serve_once(serve_alone: Callable[[str, Choice], Any], task: str, config: Config,
                cores: Sequence[int]) -> tuple[float, float, str]:
    """One run of ``task`` alone in ``config``: its median latency, accuracy and failure."""
    choice = Choice(config, tuple(cores[:config.threads]), math.nan)
    try:
        summary = serve_alone(task, choice)
        result = next(r for r in summary.tasks if r.task == task)
        latency, accuracy = float(result.latency.p50_ms), float(result.accuracy_measured)
        broken = broken_reasons(summary)
        if result.failed or not result.completed:
            broken.insert(0, f"{result.failed} of {result.submitted} request(s) failed")
        return latency, accuracy, "invalid run: " + "; ".join(broken) if broken else ""
    except KeyboardInterrupt:
        raise
    except Exception as error:  # reported with the configuration, never used
        return math.nan, math.nan, f"failed: {type(error).__name__}: {error}"


def broken_reasons(summary: Any) -> list[str]:
    """Why a run's figures do not count: its summary's reasons, less "too few requests" (a
    median or a throughput needs no p99: a short run is fine; lost or failed requests are
    not)."""
    return [r for r in summary.reasons if not r.startswith("too few requests")]


def refusals(measured: Sequence[Measured], slos: Mapping[str, SLO],
             whole: Mapping[str, float]) -> list[str]:
    """:meth:`Measured.refusal` of each measurement, against the accuracy its task's model
    served in f32 on the same rows (the best of its f32 configurations)."""
    f32: dict[str, float] = {}
    for m in measured:
        if not m.failure and m.config.precision == "f32":
            f32[m.task] = max(f32.get(m.task, -math.inf), m.accuracy)
    return [m.refusal(slos[m.task], f32.get(m.task, math.nan), whole[m.task])
            for m in measured]


def tune(name: str, measured: Sequence[Measured], cores: Sequence[int], picks: bool,
         slos: Mapping[str, SLO], whole: Mapping[str, float], *,
         fixed: Mapping[str, tuple[int, ...]] | None = None) -> TunedRuntime:
    """The tuned runtime from ``measured``: per task and thread count its fastest
    configuration that may serve it under ``slos`` (:func:`refusals`; ``whole``: each task's
    model's f32 accuracy on the whole eval set), the cores partitioned by
    :func:`best_partition` (``fixed``: the core sets of some tasks, given).

    :raises EvaluationError: a task none of whose configurations may serve it.
    """
    fastest: dict[str, dict[int, Measured]] = {}
    for item, refusal in zip(measured, refusals(measured, slos, whole), strict=True):
        if refusal:
            continue
        by_threads = fastest.setdefault(item.task, {})
        kept = by_threads.get(item.config.threads)
        if kept is None or item.latency_ms < kept.latency_ms:
            by_threads[item.config.threads] = item
    tasks = list(dict.fromkeys(m.task for m in measured))
    missing = [t for t in tasks if t not in fastest]
    if missing:
        raise EvaluationError(f"{name}: no configuration may serve task(s) "
                              f"{', '.join(missing)}: each failed or served below the task's "
                              f"accuracy SLO (the report's tuning table says which)")
    latency = {t: {n: m.latency_ms for n, m in fastest[t].items()} for t in tasks}
    partition, makespan = best_partition(latency, cores, fixed=fixed)
    choices = {}
    for task in tasks:
        chosen, one = fastest[task][len(partition[task])], fastest[task].get(1)
        per_core = one is not None and len(partition[task]) > 1 and \
            len(partition[task]) * chosen.latency_ms > one.latency_ms
        choices[task] = Choice(chosen.config, partition[task], chosen.latency_ms,
                               one.config if per_core and one is not None else None)
    return TunedRuntime(name, picks, choices, makespan)


def tuning_spec(queries: int, seed: int) -> LoadSpec:
    """The closed load each candidate configuration is measured under."""
    return LoadSpec("closed", queries=queries, seed=seed)


def tuning_table(measured: Sequence[Measured], slos: Mapping[str, SLO],
                 whole: Mapping[str, float]) -> list[dict[str, Any]]:
    """The measurements as report rows, each with whether it may serve under ``slos``."""
    return [{"task": m.task, "backend": m.config.backend, "precision": m.config.precision,
             "threads": m.config.threads, "latency_ms": m.latency_ms,
             "rounds_ms": list(m.rounds_ms), "accuracy": m.accuracy,
             "usable": not refusal, "reason": refusal}
            for m, refusal in zip(measured, refusals(measured, slos, whole), strict=True)]
