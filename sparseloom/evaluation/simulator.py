"""A discrete-event simulation of the runtime, driven by the real policy objects.

Each processor is one server (the runtime's one worker thread per processor) whose queue
serves the **earliest deadline first**, as :mod:`sparseloom.runtime.worker` does: a request's
deadline is its submission time + its task's latency SLO (ties: the order queued). A request of
task t walks its route (the plan's stitched variant and
:meth:`~sparseloom.core.types.Plan.processors_of`): at position j it queues on processor q and
is served for a stage time of subgraph (j, c_j) on q drawn by
:class:`~sparseloom.evaluation.service_time.ServiceTimes` (``SimConfig.service``: by default a
seeded draw with the profile's measured p25, median and spread). When the next position is on
the same processor it runs at once, without a queue hop (the worker runs consecutive stages in
place); otherwise the request travels for ``max(handoff_ms[j, q, q'], 0)`` (a hand-off delays
the request, it occupies neither server) and joins the next processor's queue.

Completion follows the runtime's order. The worker that ends a request completes it on its own
thread — the closed loop issues that task's next request from there, into its first stage's
queue — and only then takes its next request. So on a non-partitioned (``*-np``) plan, whose
chain starts and ends on the same processor, the task's next request competes for that
processor with those already waiting, by deadline: a task with the tighter SLO keeps its
processor. (Serving the queue's head first, as this simulator once did, is the runtime's order
only under FIFO or equal SLOs.) When the first stage is on another processor, that next request
reaches it by a wake-up of its worker, the hand-off the profile measured between those two
processors (its mean over the task's boundaries): a partitioned chain pays one more hand-off
per request than its stages show, a one-processor chain none.

The load, joins and re-planning follow :mod:`sparseloom.runtime.load` and
:mod:`sparseloom.runtime.switching`: closed loop (one request in flight per task, the next one
issued when it returns); with an arrival order the first task starts alone and task k+1 joins
once task k completed ``join_after`` requests. The runtime plans a join (and a feedback
re-plan) on its control thread while the workers go on serving: here the new routes take
effect after the policy's measured decision time plus the compile + load time of the
subgraphs the new routes need that are not resident (loaded off the serving path, as the
runtime's loader does); a joining task's requests wait for its first route. The resident set
is the preloader's plus every route of the first plan (what ``switching.start`` loads). The
runtime's :class:`~sparseloom.runtime.monitor.LatencyMonitor` judges every fresh window and
its verdict goes to the policy's ``on_feedback``, exactly as in a real run. Requests in flight
keep the route they were issued with.

A task violates its SLO when the profile's accuracy of the variant it served most is below the
accuracy SLO (with ``score_served``: the accuracy of a seeded draw of its served requests, each
right with that probability, as a real run scores real rows), or when its p90 latency is above
the latency SLO (the run summary's rule).
"""

from __future__ import annotations

import collections
import heapq
import itertools
import time
from collections.abc import Mapping
from typing import Any

import attrs

from sparseloom.core.errors import SimulationError
from sparseloom.core.registry import get_registry
from sparseloom.core.types import SLO, Plan, Processor, as_dict
from sparseloom.evaluation.service_time import SERVICE_MODELS, ServiceTimes
from sparseloom.evaluation.simresult import (
    SimResult,
    SimTaskResult,
    pipeline_bound_rps,
    sim_result,
)
from sparseloom.plan.contract import checked_plan
from sparseloom.profile.table import ProfileTable
from sparseloom.runtime.monitor import WINDOW, LatencyMonitor, make_feedback
from sparseloom.workload.arguments import names_attribute, number_field

#: The runtime's bookkeeping per request outside model calls. Measured on a one-processor
#: (``av-np``) closed loop of two tiny-model tasks on ort:CPU, where it is on the critical path:
#: 18,914 requests/s at 77 % model-call utilisation leaves 0.23 × 52.9 µs = 12 µs per request
#: (load average 1.1). The 0.05 ms it replaces was measured on an older runtime.
REQUEST_OVERHEAD_MS = 0.012
#: The most requests per task a simulation takes: it keeps every request's latency, and one
#: task at 10^6 took 13 s and 60 MB (tiny workload, one policy), so 10^7 is minutes and under a
#: GB; 10^9 ran out of memory without a word.
MAX_SIMULATED_QUERIES = 10**7

__all__ = ["SimConfig", "SimResult", "SimTaskResult", "pipeline_bound_rps", "simulate"]


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
        slowdown: a factor on every stage time per processor name (default 1): what a real
            run's measured busy time says its stages took against the profile (validation).
        request_overhead_ms: the runtime's own work per request (admission, completion,
            scoring, the monitor, issuing the next one), done on the worker of the last stage.
        service: stage times: ``sampled`` (default), ``median`` or ``p25`` of the profile
            (:mod:`sparseloom.evaluation.service_time`).
        seed: seeds the ``sampled`` stage times and the served-accuracy draws.
        score_served: judge the accuracy SLO on the requests served, as a real run does (each
            one right with the variant's profiled probability: a seeded binomial draw), not
            on the profile's accuracy: with 100 queries a variant at 98.4 % misses a 97.5 %
            SLO in about one run of five (P(Binomial(100, 0.984) ≤ 97) = 0.22).
        eval_rows: eval-set size per task: served rows are drawn as the runtime draws them
            (passes over a shuffled set; fewer rows, less spread); absent: binomial.
    """

    policy: str = "sparseloom"
    slos: Mapping[str, SLO] = attrs.field(factory=dict, converter=as_dict)
    queries: int = attrs.field(default=100, validator=number_field(
        low=1, high=MAX_SIMULATED_QUERIES, integer=True))
    arrival_order: tuple[str, ...] = names_attribute()
    join_after: int | None = attrs.field(
        default=None, validator=number_field(low=1, integer=True, optional=True))
    memory_budget: float | int = attrs.field(default=1.0,
                                             validator=number_field(low=0, low_open=True))
    processors: tuple[str, ...] = names_attribute()
    monitor: bool = True
    window: int = attrs.field(default=WINDOW, validator=number_field(low=1, integer=True))
    slowdown: Mapping[str, float] = attrs.field(factory=dict, converter=as_dict)
    request_overhead_ms: float = attrs.field(default=REQUEST_OVERHEAD_MS,
                                             validator=attrs.validators.ge(0.0))
    service: str = attrs.field(default="sampled", validator=attrs.validators.in_(SERVICE_MODELS))
    seed: int = 0
    score_served: bool = False
    eval_rows: Mapping[str, int] = attrs.field(factory=dict, converter=as_dict)

    @property
    def join_every(self) -> int:
        """Completions of the last joined task before the next one joins."""
        if self.join_after is not None:
            return max(int(self.join_after), 1)
        return max(self.queries // 10, 1)


@attrs.frozen
class _Route:
    choices: tuple[int, ...]
    processors: tuple[int, ...]


@attrs.define(eq=False)
class _Job:
    task: str
    route: _Route | None
    submitted_ms: float
    position: int = 0


@attrs.define(eq=False)
class _Simulation:
    profile: ProfileTable
    config: SimConfig
    policy: Any
    slos: dict[str, SLO]
    #: The processors a policy plans on, as records (what the protocol promises it).
    processors: list[Processor]
    events: list[tuple[float, int, str, Any]] = attrs.field(factory=list)
    counter: Any = attrs.field(factory=itertools.count)
    queues: dict[int, list[tuple[float, int, _Job]]] = attrs.field(factory=dict)
    service: Any = None
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
    held: dict[str, list[_Job]] = attrs.field(factory=lambda: collections.defaultdict(list))
    switches: int = 0
    load_ms: float = 0.0
    decision_seconds: float = 0.0
    now_ms: float = 0.0

    def push(self, time_ms: float, kind: str, payload: Any) -> None:
        heapq.heappush(self.events, (time_ms, next(self.counter), kind, payload))

    def decide(self, make: Any) -> tuple[Plan | None, float]:
        """Call the policy (``make()``); the plan and its wall time in ms."""
        started = time.perf_counter()
        plan = make()
        elapsed = time.perf_counter() - started
        self.decision_seconds += elapsed
        return plan, 1e3 * elapsed

    def route_of(self, plan: Plan, task: str) -> _Route:
        variant = plan.variants.get(task)
        if variant is None:
            raise SimulationError(f"policy {self.config.policy!r} did not place task "
                                  f"{task!r}; it placed {', '.join(plan.variants) or 'none'}")
        order = self.profile.order_indices(list(plan.processors_of(task)))
        return _Route(tuple(variant.choices), tuple(int(q) for q in order))

    def load_missing(self, plan: Plan, tasks: list[str]) -> float:
        """Mark the routes' subgraphs resident; the compile + load ms of those that were not."""
        cost = 0.0
        for task in tasks:
            route, table = self.route_of(plan, task), self.profile.task(task)
            for j, (choice, q) in enumerate(zip(route.choices, route.processors, strict=True)):
                if (task, j, choice, q) not in self.resident:
                    self.resident.add((task, j, choice, q))
                    cost += float(table.compile_ms[j, choice, q] + table.load_ms[j, choice, q])
        self.load_ms += cost
        return cost

    def switch_later(self, plan: Plan, tasks: list[str], decision_ms: float) -> None:
        """Apply ``plan`` to ``tasks`` once it is decided and its subgraphs are loaded."""
        self.switches += 1
        delay_ms = decision_ms + self.load_missing(plan, tasks)
        self.push(self.now_ms + delay_ms, "switch", (plan, tasks))

    def apply(self, plan: Plan, tasks: list[str]) -> None:
        self.plan = plan
        for task in tasks:
            self.routes[task] = self.route_of(plan, task)
            self.monitors[task].reset()
            for job in self.held.pop(task, []):
                job.route = self.routes[task]
                self.arrive(job.route.processors[0], job)

    def issue(self, task: str, from_processor: int | None = None) -> None:
        """Submit ``task``'s next request; ``from_processor``: the worker that issues it (the
        closed loop's), which hands it to another processor's worker by a wake-up."""
        if self.issued[task] >= self.config.queries:
            return
        self.issued[task] += 1
        job = _Job(task, self.routes.get(task), self.now_ms)
        if job.route is None:  # a joining task waits for the plan that places it
            self.held[task].append(job)
            return
        first = job.route.processors[0]
        if from_processor is None or from_processor == first:
            self.arrive(first, job)
            return
        handoff = self.profile.task(task).handoff_ms[:, from_processor, first]
        wake_ms = max(float(handoff.mean()), 0.0) if handoff.size else 0.0
        self.push(self.now_ms + wake_ms, "arrive", (first, job))

    def arrive(self, processor: int, job: _Job) -> None:
        deadline = job.submitted_ms + self.slos[job.task].latency_ms
        heapq.heappush(self.queues[processor], (deadline, next(self.counter), job))
        if not self.busy[processor]:
            self.serve_next(processor)

    def start_stage(self, processor: int, job: _Job) -> None:
        assert job.route is not None
        task = self.profile.task(job.task)
        j, choice = job.position, job.route.choices[job.position]
        service = self.service.stage_ms(job.task, j, choice, processor) * \
            self.config.slowdown.get(self.profile.processors[processor], 1.0)
        if j + 1 == len(job.route.choices):
            service += self.config.request_overhead_ms
        key = (job.task, j, choice, processor)
        if key not in self.resident:  # only a route the loader missed: loaded in place
            cost = float(task.compile_ms[j, choice, processor] + task.load_ms[j, choice, processor])
            self.load_ms += cost
            service += cost
            self.resident.add(key)
        self.busy[processor] = True
        self.busy_ms[processor] += service
        self.push(self.now_ms + service, "done", (processor, job))

    def serve_next(self, processor: int) -> None:
        if not self.queues[processor]:
            self.busy[processor] = False
            return
        self.start_stage(processor, heapq.heappop(self.queues[processor])[2])

    def done(self, processor: int, job: _Job) -> None:
        route, j = job.route, job.position
        assert route is not None
        if j + 1 < len(route.choices) and route.processors[j + 1] == processor:
            job.position += 1  # the worker runs the next stage in place
            self.start_stage(processor, job)
            return
        if j + 1 < len(route.choices):
            self.serve_next(processor)
            handoff = float(self.profile.task(job.task).handoff_ms[
                j, route.processors[j], route.processors[j + 1]])
            job.position += 1
            self.push(self.now_ms + max(handoff, 0.0), "arrive", (route.processors[j + 1], job))
            return
        # The runtime's order: complete (and issue the next request) while this server is
        # still busy, then take the earliest deadline waiting — possibly that new request.
        self.complete(job, processor)
        self.serve_next(processor)

    def complete(self, job: _Job, processor: int) -> None:
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
        self.issue(job.task, processor)

    def feedback(self) -> None:
        assert self.plan is not None
        active = {t: self.monitors[t] for t in self.joined}
        fresh, decision_ms = self.decide(
            lambda: self.policy.on_feedback(make_feedback(self.plan, active, ())))
        if fresh is not None:
            replanned = [t for t in self.joined if t in getattr(fresh, "variants", {})]
            fresh = checked_plan(fresh, self.profile, self.config.policy, replanned)
            self.switch_later(fresh, replanned, decision_ms)

    def join(self, task: str) -> None:
        self.joined.append(task)
        joined = list(self.joined)
        plan, decision_ms = self.decide(lambda: self.policy.plan(
            joined, self.profile, self.processors, {t: self.slos[t] for t in joined}))
        self.switch_later(checked_plan(plan, self.profile, self.config.policy, joined), joined,
                          decision_ms)
        self.issue(task)

    def run(self) -> None:
        while self.events:
            self.now_ms, _, kind, payload = heapq.heappop(self.events)
            if kind == "done":
                self.done(*payload)
            elif kind == "arrive":
                self.arrive(*payload)
            elif kind == "switch":
                self.apply(*payload)


def simulate(profile: ProfileTable, config: SimConfig | None = None, *,
             policy: Any = None) -> SimResult:
    """Simulate serving every task of ``profile`` under ``config`` (see the module doc).

    :param policy: a policy object to drive (default: a fresh ``config.policy`` from the
        registry); the simulator calls its ``plan`` and ``on_feedback`` as the runtime does.
    :raises SimulationError: an arrival order naming unknown tasks.
    :raises PlanError, UnknownNameError: from planning and preloading, and a plan the policy
        returned that cannot be served (:func:`~sparseloom.plan.contract.checked_plan`).
    """
    from sparseloom.plan.api import profiled_processors, resolve_slos
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
    processors = profiled_processors(profile, config.processors or None)
    sim = _Simulation(profile, config, policy, slos, processors)
    indices = range(len(profile.processors))
    sim.queues = {q: [] for q in indices}
    sim.service = ServiceTimes(profile, config.service, config.seed)
    sim.busy, sim.busy_ms = dict.fromkeys(indices, False), dict.fromkeys(indices, 0.0)
    sim.monitors = {t: LatencyMonitor(t, slos[t].latency_ms, window=config.window)
                    for t in profile.tasks}
    planned, _ = sim.decide(lambda: policy.plan(list(profile.tasks), profile, processors, slos))
    first = checked_plan(planned, profile, config.policy, list(profile.tasks))
    resident = preload(profile, first, budget=config.memory_budget)
    sim.resident = {(r.task, r.position, r.variant, profile.processors.index(r.processor))
                    for r in resident.resident}
    sim.load_missing(first, list(profile.tasks))
    sim.load_ms = 0.0  # loaded before the load starts, as switching.start does
    starting = list(order[:1]) if config.arrival_order else list(order)
    sim.apply(first, starting)
    sim.joined = starting
    for task in starting:
        sim.issue(task)
    sim.run()
    return sim_result(sim, resident.resident_bytes)
