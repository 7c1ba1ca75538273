"""A discrete-event simulation of the runtime, driven by the real policy objects.

Each processor is a FIFO server. A request of task t walks its route (the plan's stitched
variant and :meth:`~sparseloom.core.types.Plan.processors_of`): at position j it queues on
processor q and is served for ``latency_ms[j, c_j, q]`` of the profile, then travels to the
next processor for ``max(handoff_ms[j, q, q'], 0)`` (a hand-off delays the request, it does
not occupy either server). A subgraph that is not resident is compiled and loaded the first
time it is served there, which occupies that processor for ``compile_ms + load_ms``.

The load, joins and re-planning follow :mod:`sparseloom.runtime.load` and
:mod:`sparseloom.runtime.switching`: closed loop (one request in flight per task, the next one
issued when it returns); with an arrival order the first task starts alone and task k+1 joins
once task k completed ``join_after`` requests, and the policy plans the active tasks again.
The runtime's :class:`~sparseloom.runtime.monitor.LatencyMonitor` judges every fresh window
and its verdict goes to the policy's ``on_feedback``, exactly as in a real run. Requests in
flight keep the route they were issued with.

A task violates its SLO when the profile's accuracy of the variant it served most is below the
accuracy SLO, or when its p90 latency is above the latency SLO (the run summary's rule).
"""

from __future__ import annotations

import collections
import heapq
import itertools
import math
from collections.abc import Mapping
from typing import Any

import attrs

from sparseloom.core.errors import SimulationError
from sparseloom.core.registry import get_registry
from sparseloom.core.types import SLO, Plan
from sparseloom.profile.table import ProfileTable
from sparseloom.runtime.monitor import STATISTIC, WINDOW, LatencyMonitor, make_feedback
from sparseloom.runtime.records import LatencyStats, latency_stats


@attrs.frozen
class SimConfig:
    """What to simulate.

    Attributes:
        policy: the registered placement policy's name.
        slos: SLO per task (others: the middle of the task's SLO grid).
        queries: requests per task (closed loop, batch 1).
        arrival_order: tasks in the order they join (empty: all start at once).
        join_after: completions of the last joined task before the next joins (default a
            tenth of ``queries``, at least 1 — the runtime's default).
        memory_budget: preloading budget, a fraction of full preloading in (0, 1] or bytes.
        processors: processors to plan on (default: the profile's).
        monitor: feed the SLO monitor's verdicts to the policy's ``on_feedback``.
        window: requests per monitor window.
    """

    policy: str = "sparseloom"
    slos: Mapping[str, SLO] = attrs.field(factory=dict, converter=dict)
    queries: int = attrs.field(default=100, validator=attrs.validators.ge(1))
    arrival_order: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    join_after: int | None = None
    memory_budget: float | int = 1.0
    processors: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    monitor: bool = True
    window: int = WINDOW

    @property
    def join_every(self) -> int:
        """Completions of the last joined task before the next one joins."""
        if self.join_after is not None:
            return max(int(self.join_after), 1)
        return max(self.queries // 10, 1)


@attrs.frozen
class SimTaskResult:
    """One task's simulated results (the run summary's fields that a simulation can give)."""

    task: str
    slo_accuracy: float
    slo_latency_ms: float
    variant: str
    processors: tuple[str, ...]
    accuracy: float
    latency: LatencyStats
    completed: int
    violated: str


@attrs.frozen
class SimResult:
    """A simulated run: per-task results, violation rate, throughput and what the policy did.

    Attributes:
        policy: the policy's name.
        tasks: per-task results.
        violation_rate: fraction of tasks that violate their SLO.
        throughput_rps: completed requests / simulated time.
        makespan_ms: simulated time from the first request to the last end.
        pipeline_bound_rps: T / (busiest processor's summed stage time), final plan.
        pipeline_share: throughput / pipeline bound.
        utilisation: busy fraction of each processor.
        switches: plan changes after the first (joins and feedback).
        load_ms: compile + load time spent on non-resident subgraphs.
        decision_seconds: summed wall time the policy took to decide.
        resident_bytes: memory of the preloaded subgraphs.
    """

    policy: str
    tasks: tuple[SimTaskResult, ...]
    violation_rate: float
    throughput_rps: float
    makespan_ms: float
    pipeline_bound_rps: float
    pipeline_share: float
    utilisation: dict[str, float]
    switches: int
    load_ms: float
    decision_seconds: float
    resident_bytes: int

    def to_dict(self) -> dict[str, Any]:
        """The result as plain JSON-ready data."""
        return attrs.asdict(self)


@attrs.frozen
class _Route:
    choices: tuple[int, ...]
    processors: tuple[int, ...]


@attrs.define(eq=False)
class _Job:
    task: str
    route: _Route
    submitted_ms: float
    position: int = 0


@attrs.define(eq=False)
class _Simulation:
    profile: ProfileTable
    config: SimConfig
    policy: Any
    slos: dict[str, SLO]
    names: list[str]
    events: list[tuple[float, int, str, Any]] = attrs.field(factory=list)
    counter: Any = attrs.field(factory=itertools.count)
    queues: dict[int, collections.deque] = attrs.field(factory=dict)
    busy: dict[int, bool] = attrs.field(factory=dict)
    busy_ms: dict[int, float] = attrs.field(factory=dict)
    resident: set[tuple[str, int, int, int]] = attrs.field(factory=set)
    routes: dict[str, _Route] = attrs.field(factory=dict)
    plan: Plan | None = None
    issued: collections.Counter = attrs.field(factory=collections.Counter)
    latencies: dict[str, list[float]] = attrs.field(factory=lambda: collections.defaultdict(list))
    served: dict[str, collections.Counter] = attrs.field(
        factory=lambda: collections.defaultdict(collections.Counter))
    monitors: dict[str, LatencyMonitor] = attrs.field(factory=dict)
    joined: list[str] = attrs.field(factory=list)
    switches: int = 0
    load_ms: float = 0.0
    decision_seconds: float = 0.0
    now_ms: float = 0.0

    def push(self, time_ms: float, kind: str, payload: Any) -> None:
        heapq.heappush(self.events, (time_ms, next(self.counter), kind, payload))

    def apply(self, plan: Plan, tasks: list[str]) -> None:
        self.plan = plan
        self.decision_seconds += float(plan.decision_seconds)
        for task in tasks:
            variant = plan.variants.get(task)
            if variant is None:
                raise SimulationError(f"policy {self.config.policy!r} did not place task "
                                      f"{task!r}; it placed {', '.join(plan.variants) or 'none'}")
            names = list(plan.processors_of(task))
            order = tuple(int(q) for q in self.profile.order_indices(names))
            self.routes[task] = _Route(tuple(variant.choices), order)
            self.monitors[task].reset()

    def issue(self, task: str) -> None:
        if self.issued[task] >= self.config.queries:
            return
        self.issued[task] += 1
        job = _Job(task, self.routes[task], self.now_ms)
        self.arrive(job.route.processors[0], job)

    def arrive(self, processor: int, job: _Job) -> None:
        self.queues[processor].append(job)
        if not self.busy[processor]:
            self.serve_next(processor)

    def serve_next(self, processor: int) -> None:
        if not self.queues[processor]:
            self.busy[processor] = False
            return
        job = self.queues[processor].popleft()
        task = self.profile.task(job.task)
        j, choice = job.position, job.route.choices[job.position]
        service = float(task.latency_ms[j, choice, processor])
        key = (job.task, j, choice, processor)
        if key not in self.resident:
            cost = float(task.compile_ms[j, choice, processor] + task.load_ms[j, choice, processor])
            self.load_ms += cost
            service += cost
            self.resident.add(key)
        self.busy[processor] = True
        self.busy_ms[processor] += service
        self.push(self.now_ms + service, "done", (processor, job))

    def done(self, processor: int, job: _Job) -> None:
        self.serve_next(processor)
        route, j = job.route, job.position
        if j + 1 < len(route.choices):
            handoff = float(self.profile.task(job.task).handoff_ms[
                j, route.processors[j], route.processors[j + 1]])
            job.position += 1
            self.push(self.now_ms + max(handoff, 0.0), "arrive", (route.processors[j + 1], job))
            return
        self.complete(job)

    def complete(self, job: _Job) -> None:
        latency = self.now_ms - job.submitted_ms
        self.latencies[job.task].append(latency)
        self.served[job.task][job.route] += 1
        fresh = self.monitors[job.task].observe(latency)
        if fresh and self.config.monitor and hasattr(self.policy, "on_feedback"):
            self.feedback()
        order = self.config.arrival_order
        last = self.joined[-1]
        if (job.task == last and len(self.joined) < len(order)
                and len(self.latencies[last]) == self.config.join_every):
            self.join(order[len(self.joined)])
        self.issue(job.task)

    def feedback(self) -> None:
        assert self.plan is not None
        active = {t: self.monitors[t] for t in self.joined}
        fresh = self.policy.on_feedback(make_feedback(self.plan, active, ()))
        if fresh is not None:
            self.switches += 1
            self.apply(fresh, [t for t in self.joined if t in fresh.variants])

    def join(self, task: str) -> None:
        self.joined.append(task)
        plan = self.policy.plan(list(self.joined), self.profile, self.names,
                                {t: self.slos[t] for t in self.joined})
        self.switches += 1
        self.apply(plan, list(self.joined))
        self.issue(task)

    def run(self) -> None:
        while self.events:
            self.now_ms, _, kind, payload = heapq.heappop(self.events)
            if kind == "done":
                self.done(*payload)
            elif kind == "arrive":
                self.arrive(*payload)


def simulate(profile: ProfileTable, config: SimConfig | None = None, *,
             policy: Any = None) -> SimResult:
    """Simulate serving every task of ``profile`` under ``config`` (see the module doc).

    :param policy: a policy object to drive (default: a fresh ``config.policy`` from the
        registry); the simulator calls its ``plan`` and ``on_feedback`` as the runtime does.
    :raises SimulationError: an arrival order naming unknown tasks, or a plan without a task.
    :raises PlanError, UnknownNameError: from planning and preloading.
    """
    from sparseloom.plan.api import resolve_slos
    from sparseloom.plan.preload import preload

    config = config or SimConfig()
    order = config.arrival_order or tuple(profile.tasks)
    unknown = [t for t in order if t not in profile.tasks]
    if unknown or len(set(order)) != len(order):
        raise SimulationError(f"arrival order {', '.join(order)} must name each task of "
                              f"{profile.workload!r} at most once; tasks: "
                              f"{', '.join(profile.tasks)}")
    policy = policy if policy is not None else get_registry().create("policy", config.policy)
    slos, _ = resolve_slos(profile, config.slos, None)
    names = list(config.processors or profile.processors)
    sim = _Simulation(profile, config, policy, slos, names)
    indices = range(len(profile.processors))
    sim.queues = {q: collections.deque() for q in indices}
    sim.busy, sim.busy_ms = dict.fromkeys(indices, False), dict.fromkeys(indices, 0.0)
    sim.monitors = {t: LatencyMonitor(t, slos[t].latency_ms, window=config.window)
                    for t in profile.tasks}
    first = policy.plan(list(profile.tasks), profile, names, slos)
    resident = preload(profile, first, budget=config.memory_budget)
    sim.resident = {(r.task, r.position, r.variant, profile.processors.index(r.processor))
                    for r in resident.resident}
    starting = list(order[:1]) if config.arrival_order else list(order)
    sim.apply(first, list(profile.tasks))
    sim.joined = starting
    for task in starting:
        sim.issue(task)
    sim.run()
    return _result(sim, resident.resident_bytes)


def _result(sim: _Simulation, resident_bytes: int) -> SimResult:
    profile = sim.profile
    tasks = []
    for name in sim.joined:
        slo, samples = sim.slos[name], sim.latencies[name]
        stats = latency_stats(samples)
        route = sim.served[name].most_common(1)[0][0] if sim.served[name] else sim.routes[name]
        accuracy = float(profile.task(name).accuracy(list(route.choices)))
        sides = [side for side, bad in (
            ("accuracy", not accuracy >= slo.accuracy),
            ("latency", not stats.percentile(STATISTIC) <= slo.latency_ms)) if bad]
        tasks.append(SimTaskResult(
            name, slo.accuracy, slo.latency_ms, ",".join(map(str, route.choices)),
            tuple(profile.processors[q] for q in route.processors), accuracy, stats,
            len(samples), "+".join(sides)))
    makespan = sim.now_ms
    completed = sum(t.completed for t in tasks)
    throughput = completed * 1e3 / makespan if makespan > 0 else math.nan
    bound = pipeline_bound_rps(profile, {n: sim.routes[n] for n in sim.joined})
    return SimResult(
        policy=sim.config.policy, tasks=tuple(tasks),
        violation_rate=sum(1 for t in tasks if t.violated) / len(tasks) if tasks else math.nan,
        throughput_rps=throughput, makespan_ms=makespan, pipeline_bound_rps=bound,
        pipeline_share=throughput / bound if bound > 0 else math.nan,
        utilisation={profile.processors[q]: (b / makespan if makespan > 0 else 0.0)
                     for q, b in sim.busy_ms.items()},
        switches=sim.switches, load_ms=sim.load_ms, decision_seconds=sim.decision_seconds,
        resident_bytes=int(resident_bytes))


def pipeline_bound_rps(profile: ProfileTable, routes: Mapping[str, Any]) -> float:
    """T / (busiest processor's summed stage time) in requests/s, for routes with ``choices``
    and processor indices ``processors``; NaN without routes."""
    load = collections.Counter()
    for name, route in routes.items():
        latency = profile.task(name).latency_ms
        for j, (choice, q) in enumerate(zip(route.choices, route.processors, strict=True)):
            load[q] += float(latency[j, choice, q])
    busiest = max(load.values(), default=0.0)
    return len(routes) * 1e3 / busiest if busiest > 0 else math.nan
