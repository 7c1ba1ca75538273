"""Load generators: closed loop and Poisson arrivals, with tasks joining in a given order.

- **closed** (the paper's run): each task keeps one request in flight and issues the next when
  it returns, from the worker that completed it (no thread wake-up on a one-processor chain).
- **poisson** (MLPerf's server scenario): each task's requests arrive at exponential intervals
  of mean ``1 / rate``, whether or not earlier ones have returned.

With an arrival order, the first task starts alone and task ``k+1`` joins once task ``k`` has
completed ``join_after`` requests; the plan is made again at every join. Requests carry eval-set
rows, drawn per task from a seeded permutation, so every response can be scored.
"""

from __future__ import annotations

import contextlib
import heapq
import random
import threading
import time
from typing import TYPE_CHECKING, Any, Literal

import attrs

from sparseloom.core.errors import ConfigError, Overloaded
from sparseloom.runtime import interrupts, switching
from sparseloom.workload.arguments import choice_field, names_attribute, number_field

if TYPE_CHECKING:
    from sparseloom.runtime.executor import Runtime
    from sparseloom.runtime.request import Request

LoadKind = Literal["closed", "poisson"]


@attrs.frozen
class LoadSpec:
    """What load to offer.

    Attributes:
        kind: ``closed`` or ``poisson``.
        queries: requests per task (``None``: until ``duration_s``).
        rate: Poisson arrivals per second per task.
        duration_s: stop issuing after this many seconds (``None``: after ``queries``).
        arrival_order: tasks in the order they join (empty: all start at once).
        join_after: completions of the last joined task before the next joins (default:
            a tenth of ``queries``, at least 1).
        seed: seeds the sample draws and the arrival times.
        early_stop: stop issuing once the run's latency verdict is certain: a task with more
            than a tenth of its ``queries`` requests already over its latency SLO misses its
            p90 whatever the rest do (MLPerf LoadGen's early stopping, in its simplest exact
            form). The run is then cut short (its summary says so). Needs ``queries``.
        min_duration_s: closed loop only: a run lasts at least this long or ``queries`` per
            task, whichever ends later (``None``: ``queries`` alone). Once every task has
            issued its ``queries`` before this many seconds have passed, every task issues
            another ``queries`` (a *pass*), and so on: every task issues the same number of
            passes, so a run's work is a whole number of passes of the same requests, however
            fast each task goes (a light task does not go on alone while a long one finishes
            its pass). A run of a few hundred sub-millisecond requests ends within one
            scheduler tick, where its rate is timer noise.
    """

    kind: LoadKind = attrs.field(default="closed", validator=choice_field("closed", "poisson"))
    queries: int | None = attrs.field(
        default=100, validator=number_field(low=1, integer=True, optional=True))
    rate: float | None = attrs.field(
        default=None, validator=number_field(low=0, low_open=True, optional=True))
    duration_s: float | None = attrs.field(
        default=None, validator=number_field(low=0, low_open=True, optional=True))
    arrival_order: tuple[str, ...] = names_attribute()
    join_after: int | None = attrs.field(
        default=None, validator=number_field(low=1, integer=True, optional=True))
    seed: int = attrs.field(default=0, validator=number_field(integer=True))
    early_stop: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    min_duration_s: float | None = attrs.field(
        default=None, validator=number_field(low=0, low_open=True, optional=True))

    def __attrs_post_init__(self) -> None:
        if self.queries is None and self.duration_s is None:
            raise ConfigError("a load needs --queries or --duration")
        if self.early_stop and self.queries is None:
            raise ConfigError("early_stop needs a number of queries per task (it stops once "
                              "a tenth of them missed the latency SLO)")
        if self.kind == "poisson" and (self.rate is None or self.rate <= 0):
            raise ConfigError("Poisson load needs a rate > 0 requests/s per task")
        if self.min_duration_s is not None and (self.kind != "closed" or self.early_stop):
            raise ConfigError("a minimum duration is for closed loads without early stopping "
                              "(a Poisson load has its duration or its queries)")

    @property
    def join_every(self) -> int:
        """Completions of the last joined task before the next one joins."""
        if self.join_after is not None:
            return max(int(self.join_after), 1)
        return max((self.queries or 100) // 10, 1)


@attrs.frozen
class LoadResult:
    """How the offered load went: wall time and whether it was cut short."""

    started_s: float
    ended_s: float
    interrupted: bool
    drained_failures: int
    stopped_early: bool = False

    @property
    def wall_s(self) -> float:
        """Seconds from the first request to the last end."""
        return self.ended_s - self.started_s


@attrs.define(eq=False)
class _Driver:
    runtime: Runtime
    spec: LoadSpec
    tasks: tuple[str, ...]
    issued: dict[str, int] = attrs.field(init=False)
    ended: dict[str, int] = attrs.field(init=False)
    samples: dict[str, list[int]] = attrs.field(init=False)
    joined: list[str] = attrs.field(factory=list)
    stop: threading.Event = attrs.field(factory=threading.Event)
    started_s: float = 0.0
    _lock: threading.RLock = attrs.field(factory=threading.RLock)
    closed: bool = attrs.field(init=False)
    queries: int | None = attrs.field(init=False)
    duration_s: float | None = attrs.field(init=False)
    ordered: bool = attrs.field(init=False)
    join_every: int = attrs.field(init=False)
    early_stop: bool = attrs.field(init=False)
    missed: dict[str, int] = attrs.field(factory=dict)
    stopped_early: bool = False
    #: Passes of ``queries`` per task opened so far (``LoadSpec.min_duration_s``).
    passes: int = 1

    def __attrs_post_init__(self) -> None:
        self.early_stop = self.spec.early_stop
        self.ordered = bool(self.spec.arrival_order)
        self.join_every = self.spec.join_every
        self.closed = self.spec.kind == "closed"
        self.queries = self.spec.queries
        self.duration_s = self.spec.duration_s
        self.issued = dict.fromkeys(self.tasks, 0)
        self.ended = dict.fromkeys(self.tasks, 0)
        rng = random.Random(self.spec.seed)
        self.samples = {}
        for name in self.tasks:
            rows = list(range(self.runtime.tasks[name].task.num_eval))
            rng.shuffle(rows)
            self.samples[name] = rows

    def may_issue(self, task: str) -> bool:
        return not self.stop.is_set() and self._wants(self.issued[task])

    def _wants(self, count: int) -> bool:
        """Whether a task that has issued ``count`` requests issues another (stop aside)."""
        spec = self.spec
        if spec.queries is not None and count >= spec.queries * self.passes:
            return False
        return spec.duration_s is None or (
            time.perf_counter() - self.started_s < spec.duration_s)

    def _next_pass(self) -> list[str]:
        """Under the lock: open another pass when every task has issued this one's requests
        and the run is shorter than its minimum; the tasks with nothing in flight, to issue
        again (the others issue from their next end)."""
        spec = self.spec
        if (spec.min_duration_s is None or spec.queries is None or self.stop.is_set()
                or any(self.issued[t] < spec.queries * self.passes for t in self.tasks)
                or time.perf_counter() - self.started_s >= spec.min_duration_s):
            return []
        self.passes += 1
        return [t for t in self.tasks if self.issued[t] == self.ended[t]]

    def issue(self, task: str) -> None:
        with self._lock:
            if not self.may_issue(task):
                return
            count = self.issued[task]
            self.issued[task] = count + 1
        rows = self.samples[task]
        # A refused request is counted by the runtime; the summary reports it.
        with contextlib.suppress(Overloaded):
            self.runtime.submit(task, rows[count % len(rows)])

    def on_finish(self, request: Request) -> None:
        """Count the ended request; in closed loop issue the task's next one from here.

        Closed loop keeps one request per task in flight; the decision to issue the next
        takes the lock, as joins, Poisson arrivals and a new pass (which issues for the
        tasks with nothing in flight) do.
        """
        task = request.task
        if self.early_stop and request.latency_ms > self.runtime.slos[task].latency_ms:
            self.missed[task] = missed = self.missed.get(task, 0) + 1
            if missed > 0.1 * (self.queries or 0):
                self.stop.set()  # this task's p90 misses its SLO whatever comes next
                self.stopped_early = True
        if self.closed:
            with self._lock:
                ended = self.ended[task] = self.ended[task] + 1
                count = self.issued[task]
                go = not self.stop.is_set() and self._wants(count)
                if go:
                    self.issued[task] = count + 1
                idle = [] if go else self._next_pass()
            if go:
                rows = self.samples[task]
                self.runtime.submit(task, rows[count % len(rows)])
            for other in idle:
                self.issue(other)
        else:
            with self._lock:
                ended = self.ended[task] = self.ended[task] + 1
        if self.ordered and ended == self.join_every and task == self.joined[-1]:
            self.join_next()

    def join_next(self) -> None:
        with self._lock:
            waiting = [t for t in self.tasks if t not in self.joined]
            if not waiting or self.stop.is_set():
                return
            task = waiting[0]
            self.joined.append(task)
        self.runtime.control.submit(lambda: switching.join(self.runtime, task))
        if self.spec.kind == "closed":
            self.issue(task)

    def finished(self) -> bool:
        if self.runtime.in_flight:
            return False
        if self.stop.is_set():
            return True
        return all(not self.may_issue(t) for t in self.tasks) or (
            len(self.joined) < len(self.tasks) and not any(self.may_issue(t) for t in self.joined)
            and self.spec.kind == "closed")


def offer(runtime: Runtime, spec: LoadSpec, *, progress: bool = False,
          drain_timeout_s: float = 60.0) -> LoadResult:
    """Offer ``spec``'s load to a started runtime until it is served; Ctrl-C stops issuing,
    drains what is in flight and returns a result marked ``interrupted`` (its callers raise
    :class:`~sparseloom.runtime.summary.RunInterrupted` from it).

    The runtime must have been started with the first task of ``spec.arrival_order`` active
    (or all tasks, without an order).
    """
    tasks = spec.arrival_order or tuple(runtime.tasks)
    driver = _Driver(runtime, spec, tuple(tasks))
    runtime.on_finish = driver.on_finish
    driver.started_s = time.perf_counter()
    first = list(tasks[:1]) if spec.arrival_order else list(tasks)
    driver.joined.extend(first)
    interrupted = False
    bar = _progress_bar(progress, spec, len(tasks))
    try:
        if spec.kind == "closed":
            for task in first:
                driver.issue(task)
            _wait(driver, bar)
        else:
            _poisson(driver, bar)
            _wait(driver, bar)
    except KeyboardInterrupt:
        interrupted = True
        driver.stop.set()
    finally:
        if bar is not None:
            bar.close()
    drained = runtime.drain(drain_timeout_s)
    runtime.control.wait_idle(drain_timeout_s)
    runtime.on_finish = None
    ended = runtime.last_finished_s or time.perf_counter()
    return LoadResult(driver.started_s, ended, interrupted, drained, driver.stopped_early)


def _wait(driver: _Driver, bar: Any) -> None:
    while not driver.finished():
        time.sleep(0.02)
        interrupts.check()  # a Ctrl-C whose exception was lost still stops the load
        _tick(driver, bar)
        if (driver.spec.kind == "closed" and driver.spec.arrival_order
                and len(driver.joined) < len(driver.tasks) and driver.runtime.in_flight == 0):
            driver.join_next()
    _tick(driver, bar)


def _poisson(driver: _Driver, bar: Any) -> None:
    rng = random.Random(driver.spec.seed + 1)
    rate = float(driver.spec.rate or 1.0)
    arrivals: list[tuple[float, str]] = []
    scheduled: set[str] = set()
    while True:
        for task in driver.joined:
            if task not in scheduled:
                scheduled.add(task)
                heapq.heappush(arrivals, (time.perf_counter() + rng.expovariate(rate), task))
        if not arrivals:
            if len(scheduled) == len(driver.tasks) or driver.stop.is_set():
                return
            if not driver.runtime.in_flight and len(driver.joined) < len(driver.tasks):
                driver.join_next()
            time.sleep(0.005)
            continue
        interrupts.check()
        due, task = heapq.heappop(arrivals)
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        if not driver.may_issue(task):
            continue
        driver.issue(task)
        heapq.heappush(arrivals, (due + rng.expovariate(rate), task))
        _tick(driver, bar)


def _progress_bar(enabled: bool, spec: LoadSpec, tasks: int) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    total = spec.queries * tasks if spec.queries is not None else None
    # delay: runs shorter than a few seconds print no bar at all.
    return tqdm(total=total, unit="req", desc="serving", delay=3.0, leave=False)


def _tick(driver: _Driver, bar: Any) -> None:
    if bar is not None:
        done = sum(driver.ended.values())
        bar.update(done - bar.n)

