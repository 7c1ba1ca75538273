"""The run summary, in the spirit of MLPerf LoadGen's: settings, per-task results, verdicts.

A task *violates* its SLO when its measured accuracy is below the accuracy SLO or its p90
latency (:data:`~sparseloom.runtime.monitor.STATISTIC`) is above the latency SLO; the run's
violation rate is the fraction of tasks that violate (the paper's definition). The run is
VALID when every request ended exactly once (submitted = completed + failed), every task
completed at least :data:`MIN_REQUESTS` requests (a p99 needs 100 samples) and it was not
interrupted.

The summary reads the runtime's bounded counters (:mod:`sparseloom.runtime.stats`): counts over
the whole run, latency percentiles over each task's last :data:`~sparseloom.runtime.stats.RING`
requests and the measured accuracy over its last
:data:`~sparseloom.runtime.stats.SCORE_WINDOW` eval-set requests (every request of a shorter
run), so a run of any length summarises in bounded memory.
"""

from __future__ import annotations

import collections
import math
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from sparseloom.runtime.lanes import profiled_as
from sparseloom.runtime.monitor import STATISTIC
from sparseloom.runtime.records import LatencyStats, RequestRecord, latency_stats

if TYPE_CHECKING:
    from sparseloom.runtime.executor import Runtime
    from sparseloom.runtime.load import LoadResult, LoadSpec
    from sparseloom.runtime.request import Request

#: Completed requests per task below which the run is INVALID (p99 needs 100 samples).
MIN_REQUESTS = 100


@attrs.frozen
class TaskResult:
    """One task's results in a run."""

    task: str
    slo_accuracy: float
    slo_latency_ms: float
    variant: str
    served: dict[str, int]
    metric: str
    accuracy_measured: float
    accuracy_profile: float
    latency: LatencyStats
    throughput_rps: float
    submitted: int
    completed: int
    failed: int
    violated: str
    rejected: int = 0
    #: What it served, judged on eval rows selection never saw, on the selection scale
    #: (``bench serve`` fills it in: :mod:`sparseloom.evaluation.judging`); ``nan`` elsewhere.
    accuracy_judged: float = math.nan
    #: Served requests ÷ seconds from this task's first request to its last served one: its
    #: own rate. In a closed run of N requests per task a light task ends before the run does
    #: (and one that joins late starts after it), and ``throughput_rps`` (÷ the whole run)
    #: understates it; ``nan`` when none was served.
    own_throughput_rps: float = math.nan

    @property
    def met(self) -> bool:
        """Whether it met both SLOs."""
        return not self.violated


@attrs.frozen
class RunSummary:
    """A run's summary (``attrs.asdict`` gives its JSON)."""

    scenario: str
    settings: dict[str, Any]
    tasks: tuple[TaskResult, ...]
    violation_rate: float
    latency_statistic: str
    wall_s: float
    throughput_rps: float
    pipeline_bound_rps: float
    pipeline_share: float
    busiest_processor: str
    utilisation: dict[str, float]
    switches: int
    switch_loads: int
    switch_load_ms: float
    preload_ms: float
    memory: dict[str, float]
    submitted: int
    completed: int
    failed: int
    injected_faults: int
    processors_down: tuple[str, ...]
    valid: bool
    reasons: tuple[str, ...]
    notes: tuple[str, ...]
    rejected: int = 0
    #: Stages each processor ran wide, on the cores of the others while they were idle.
    wide_stages: dict[str, int] = attrs.field(factory=dict)
    #: Per processor that lent its cores, the share of the wall time they ran another
    #: processor's wide stages (beside ``utilisation``, its own calls: the two add up to how
    #: busy its cores were).
    lent: dict[str, float] = attrs.field(factory=dict)
    #: Per processor with an overflow thread that ran something, the stages it ran there
    #: (on the other processors' cores, for requests that would have been late).
    overflow_stages: dict[str, int] = attrs.field(factory=dict)
    #: Per lane pinned to its processor's cores, the calls it ran on a quiet processor's
    #: cores (``Plan.lanes_borrow``; counted in that processor's ``lent``).
    roamed: dict[str, int] = attrs.field(factory=dict)


#: The reason of a run cut short by Ctrl-C (``sparseloom run`` then exits with status 130).
INTERRUPTED = "interrupted (Ctrl-C): the load was cut short"


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C cut a run short; raised once the requests in flight have drained, so that no
    caller goes on as if it had not been pressed (a benchmark of many runs stops, where it
    once recorded one INVALID run and carried on).

    Attributes:
        partial: what the run measured until then — the ``RunResult`` of
            :func:`~sparseloom.runtime.session.serve`, the ``RunSummary`` of a stock
            runtime's run; its summary says INVALID with :data:`INTERRUPTED`.
    """

    def __init__(self, partial: Any) -> None:
        super().__init__(INTERRUPTED)
        self.partial = partial


def records(runtime: Runtime) -> list[RequestRecord]:
    """Per-request records of the ended requests the runtime keeps (its newest
    ``keep_requests``; every one of a shorter run), in submission order."""
    return [request_record(runtime, request)
            for request in sorted(runtime.finished, key=lambda r: r.request_id)]


def request_record(runtime: Runtime, request: Request) -> RequestRecord:
    """The record of one ended request."""
    route = request.route
    correct = None
    task = runtime.tasks[request.task].task
    output = request.output
    ran_on = request.ran_on
    if route is not None and route.merged:  # its one call ran every position there
        ran_on = ran_on * route.positions
    if output is not None and request.sample >= 0 and np.ndim(output) == 1 \
            and task.labels.ndim == 1:
        correct = bool(int(np.argmax(output)) == int(task.labels[request.sample]))
    return RequestRecord(
        request.request_id, request.task, request.sample, request.status,
        request.submitted_s - runtime.started_s, request.finished_s - runtime.started_s,
        request.latency_ms, ",".join(map(str, route.variant.choices)) if route else "",
        ">".join(ran_on), route.version if route else -1, request.retries, correct,
        request.reason)


def measured_accuracy(runtime: Runtime, task: str) -> float:
    """The task metric over the outputs of its last served eval-set requests (up to
    :data:`~sparseloom.runtime.stats.SCORE_WINDOW`) against their labels."""
    from sparseloom.workload.metrics import get_metric

    served = runtime.tasks[task].task
    with runtime.lock:
        done = [(sample, batch) for sample, batch in runtime.states[task].counters.scored
                if batch is not None]
    if not done:
        return math.nan
    outputs = np.stack([np.asarray(batch)[0] for _, batch in done])
    labels = served.labels[[sample for sample, _ in done]]
    return float(get_metric(served.metric)(outputs, labels))


def _profile_accuracy(runtime: Runtime, task: str, choices: tuple[int, ...]) -> float:
    if runtime.profile is None or task not in runtime.profile.tasks:
        return math.nan
    return float(runtime.profile.task(task).accuracy(list(choices)))


#: What the summary calls the load of the lanes, which share every processor's cores.
LANES = "lanes (every core)"


def _pipeline_bound(runtime: Runtime) -> tuple[float, str]:
    """Requests/s bound: T / (busiest processor's summed stage time per round), and it.

    Lanes (:mod:`sparseloom.runtime.lanes`) share every processor's cores: their stages,
    timed as on their processors, count together as one load spread over the processors
    (``lanes (every core)``); a lane pinned to its own processor's cores counts on it."""
    if runtime.profile is None:
        return math.nan, ""
    processors = list(runtime.profile.processors)
    load = {name: 0.0 for name, w in runtime.workers.items() if w.lane_of is None}
    laned = 0.0
    tasks = 0
    for name, state in runtime.states.items():
        route = state.route
        if route is None or name not in runtime.profile.tasks:
            continue
        tasks += 1
        latency = runtime.profile.task(name).latency_ms
        for position, (variant, processor) in enumerate(zip(route.variant.choices,
                                                            route.processors, strict=True)):
            base = profiled_as(runtime.workers, processor)
            if base in processors:
                ms = float(latency[position, variant, processors.index(base)])
                if base != processor and runtime.workers[processor].processor.cores != \
                        runtime.workers[base].processor.cores:
                    laned += ms
                else:
                    load[base] += ms
    if laned:
        load[LANES] = laned / max(len(load), 1)
    busiest = max(load, key=load.__getitem__)
    if not tasks or load[busiest] <= 0:
        return math.nan, busiest
    return tasks * 1e3 / load[busiest], busiest


def _task_result(runtime: Runtime, name: str, wall_s: float, started_s: float) -> TaskResult:
    state = runtime.states[name]
    counters = state.counters
    with runtime.lock:
        by_route = counters.served()
        latencies = counters.latencies()
        submitted, completed = counters.submitted, counters.completed
        own_s = counters.last_completed_s - max(counters.first_submitted_s, started_s)
    served: dict[str, int] = collections.Counter()
    counts: dict[tuple[int, ...], int] = collections.Counter()
    for route, count in by_route.items():
        served[route.describe()] += count
        counts[route.variant.choices] += count
    current = state.route
    variant = current.describe() if current else "-"
    choices = max(counts, key=counts.__getitem__) if counts else ()
    stats = latency_stats(latencies)
    slo = runtime.slos[name]
    accuracy = measured_accuracy(runtime, name)
    sides = []
    if not accuracy >= slo.accuracy:
        sides.append("accuracy")
    if not stats.percentile(STATISTIC) <= slo.latency_ms:
        sides.append("latency")
    return TaskResult(
        name, slo.accuracy, slo.latency_ms, variant, served, runtime.tasks[name].task.metric,
        accuracy, _profile_accuracy(runtime, name, choices) if choices else math.nan, stats,
        completed / wall_s if wall_s > 0 else math.nan,
        submitted, completed, submitted - completed, "+".join(sides), counters.rejected,
        own_throughput_rps=completed / own_s if completed and own_s > 0 else math.nan)


def summarize(runtime: Runtime, load: LoadResult, spec: LoadSpec, *,
              settings: dict[str, Any], memory: dict[str, float]) -> RunSummary:
    """Build the run's summary from a drained runtime."""
    wall_s = max(load.wall_s, 1e-9)
    tasks = tuple(_task_result(runtime, name, wall_s, load.started_s)
                  for name, state in runtime.states.items()
                  if state.route is not None or state.counters.written)
    bound, busiest = _pipeline_bound(runtime)
    throughput = runtime.completed / wall_s
    ids = [r.request_id for r in runtime.finished]
    reasons = []
    if runtime.submitted != runtime.completed + runtime.failed or len(set(ids)) != len(ids):
        reasons.append(f"requests lost or duplicated: submitted {runtime.submitted}, completed "
                       f"{runtime.completed}, failed {runtime.failed}, ended {len(ids)}")
    rejected = sum(t.rejected for t in tasks)
    if rejected:
        reasons.append(f"{rejected} request(s) refused: a task's queue was full (the load "
                       f"exceeds what the processors serve; lower --rate)")
    short = [t.task for t in tasks if t.completed < MIN_REQUESTS]
    if short:
        reasons.append(f"too few requests for a p99: {', '.join(short)} completed fewer than "
                       f"{MIN_REQUESTS} (use --queries {MIN_REQUESTS} or more)")
    if load.interrupted:
        reasons.append(INTERRUPTED)
    if load.stopped_early:
        reasons.append("stopped early: a task had more than a tenth of its queries over its "
                       "latency SLO, so its p90 missed it whatever came next (early_stop)")
    switch_events = [e for e in runtime.loader.events if e.reason != "preload"]
    violated = sum(1 for t in tasks if t.violated)
    return RunSummary(
        scenario=spec.kind, settings=settings, tasks=tasks,
        violation_rate=violated / len(tasks) if tasks else math.nan,
        latency_statistic=f"p{STATISTIC}", wall_s=wall_s, throughput_rps=throughput,
        pipeline_bound_rps=bound,
        pipeline_share=throughput / bound if bound == bound and bound > 0 else math.nan,
        busiest_processor=busiest,
        utilisation={n: w.busy_s / wall_s for n, w in runtime.workers.items()},
        wide_stages={n: w.wide_stages for n, w in runtime.workers.items() if w.wide_stages},
        # A lane's cores are its processor's (or every processor's): its processor reports them.
        lent={n: w.lent_s / wall_s for n, w in runtime.workers.items()
              if w.lent_s and w.lane_of is None},
        overflow_stages={n: w.overflow.stages for n, w in runtime.workers.items()
                         if w.overflow is not None and w.overflow.stages},
        roamed={n: w.roamed for n, w in runtime.workers.items() if w.roamed},
        switches=sum(runtime.switch_counts.values()), switch_loads=len(switch_events),
        switch_load_ms=sum(e.total_ms for e in switch_events),
        preload_ms=sum(e.total_ms for e in runtime.loader.events if e.reason == "preload"),
        memory=memory, submitted=runtime.submitted, completed=runtime.completed,
        failed=runtime.failed,
        injected_faults=runtime.faults.injected if runtime.faults is not None else 0,
        processors_down=tuple(dict.fromkeys(w.lane_of or n for n, w in runtime.workers.items()
                                            if w.down)),  # a lane's or spare's: its processor
        valid=not reasons, reasons=tuple(reasons),
        notes=tuple(runtime.notes) + tuple(runtime.control.errors), rejected=rejected)
