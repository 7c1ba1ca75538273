"""Plans become routes: the preload at start, switches on feedback, joins and re-plans.

A switch is real: a route whose subgraphs are resident is used at once; a subgraph that is not
is compiled and loaded first (on the control thread, while the workers keep serving), and its
cost is timed, counted and reported. The task's in-flight requests finish on the old route;
requests that arrive meanwhile wait and then take the new one, in order
(:meth:`Runtime.set_route`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from sparseloom.core.errors import PlanError, PluginCallError, RuntimeServeError, SparseloomError
from sparseloom.core.types import SLO
from sparseloom.runtime.lanes import lane_name
from sparseloom.runtime.monitor import make_feedback, processor_slowdown
from sparseloom.runtime.records import LoadEvent
from sparseloom.runtime.replan import checked_feedback
from sparseloom.runtime.request import Route, chain_keys, merged_key
from sparseloom.runtime.resident import ModelKey

if TYPE_CHECKING:
    from sparseloom.runtime.executor import Runtime


def plan_processors(plan: Any, task: str) -> tuple[str, ...]:
    """The processor of each position of ``task`` in ``plan`` (per-task assignment when the
    plan has one, else the global order)."""
    processors_of = getattr(plan, "processors_of", None)
    if callable(processors_of):
        return tuple(processors_of(task))
    return tuple(plan.order)


def routes_from_plan(runtime: Runtime, plan: Any, version: int) -> dict[str, Route]:
    """The route of every served task that ``plan`` places.

    :raises RuntimeServeError: the plan names a processor the runtime does not have.
    """
    routes: dict[str, Route] = {}
    for task, variant in plan.variants.items():
        if task not in runtime.tasks:
            continue
        processors = plan_processors(plan, task)
        replicas_of = getattr(plan, "replicas_of", None)
        replicas = tuple(replicas_of(task)) if callable(replicas_of) else ()
        missing = [p for p in processors + replicas if p not in runtime.workers]
        if missing:
            raise RuntimeServeError(
                f"the plan places task {task!r} on {', '.join(missing)}, which this run does "
                f"not have (processors: {', '.join(runtime.workers)}); make the plan again "
                f"for these processors")
        roams = False
        if task in tuple(getattr(plan, "lanes", ())):
            pinned = bool(getattr(plan, "lanes_pinned", False))
            processors = tuple(ensure_lane(runtime, p, task, pinned) for p in processors)
            roams = pinned and bool(getattr(plan, "lanes_borrow", False))
        merged = _merges(runtime, plan, task, processors, version)
        if task in tuple(getattr(plan, "spares", ())) and (merged or len(processors) == 1) \
                and not replicas and lent_cores(runtime, processors[0]):
            replicas = (ensure_lane(runtime, processors[0], task, spare=True),)
        routes[task] = Route(variant, processors, version,
                             wide=task in tuple(getattr(plan, "wide", ())), merged=merged,
                             quiet=task in tuple(getattr(plan, "wide_when_quiet", ())),
                             replicas=replicas, roams=roams)
    return routes


def ensure_lane(runtime: Runtime, processor: str, task: str, pinned: bool = False,
                spare: bool = False) -> str:
    """The name of ``task``'s lane on ``processor``, made (and started, if the runtime
    serves) the first time: ``processor``'s configuration on one thread and one stream,
    pinned to the cores of every processor of the run (``pinned``: to ``processor``'s;
    ``spare``: to the other processors', :func:`lent_cores`)."""
    from sparseloom.runtime.worker import ProcessorWorker

    name = lane_name(processor, task, pinned, spare)
    if name in runtime.workers:
        return name
    base = runtime.workers[processor].processor
    cores = sorted(lent_cores(runtime, processor) if spare else base.cores if pinned else {
        c for w in runtime.workers.values() if w.lane_of is None for c in w.processor.cores})
    worker = ProcessorWorker(attrs.evolve(base, name=name, cores=tuple(cores), threads=1,
                                          streams=1), runtime, faults=runtime.faults,
                             lane_of=processor)
    # A new dict, not an insertion: worker threads iterate the old one (lending, overflow).
    runtime.workers = {**runtime.workers, name: worker}
    if runtime.control.running:
        worker.start()
    return name


def _merges(runtime: Runtime, plan: Any, task: str, processors: tuple[str, ...],
            version: int) -> bool:
    """Whether ``task``'s route runs merged: the plan asks (``Plan.merged``), its chain of
    more than one position is on one processor, no dispatcher moves single stages, and the
    merged model is loaded before serving starts (the first plan) or already resident — a
    switch never merges and compiles a model while the workers serve; it takes the chain,
    whose subgraphs the preloader keeps resident."""
    if task not in tuple(getattr(plan, "merged", ())) or len(processors) < 2 \
            or len(set(processors)) != 1 or runtime.dispatcher is not None:
        return False
    return version == 0 or merged_key(plan.variants[task]) in runtime.workers[processors[0]].models


def route_keys(runtime: Runtime, route: Route) -> list[tuple[ModelKey, str]]:
    """(model, processor) pairs a route needs loaded: its own placement and replicas, and
    with a dispatching policy every processor that is up (it may send the subgraph
    anywhere)."""
    pairs = []
    # A merged route has one key, on its one processor (zip stops there).
    for key, processor in zip(route.keys, route.processors, strict=False):
        targets = [processor, *route.replicas]
        if runtime.dispatcher is not None:
            targets += [n for n, w in runtime.workers.items() if not w.down and n != processor]
        pairs += [(key, target) for target in targets]
    return pairs


def _wide(runtime: Runtime, routes: Iterable[Route]) -> list[tuple[ModelKey, str]]:
    """The (model, processor) pairs of the wide ``routes``: the only ones loaded with a
    twin. A preloaded subgraph no route uses stays narrow (its twin would double its memory
    for a model nobody calls); a switch onto it loads the twin then."""
    return [(key, target) for route in routes if route.wide
            for key, target in route_keys(runtime, route) if target not in route.replicas]


def lent_cores(runtime: Runtime, processor: str) -> tuple[int, ...]:
    """The cores the other processors that are up lend a wide stage on ``processor``."""
    own = set(runtime.workers[processor].processor.cores)
    return tuple(sorted({c for name, w in runtime.workers.items()
                         if name != processor and not w.down
                         for c in w.processor.cores} - own))


def set_overflow(runtime: Runtime, plan: Any) -> None:
    """Let the processors ``plan`` names in ``Plan.overflow`` serve late requests on an
    overflow thread on the other processors' cores (:mod:`sparseloom.runtime.overflow`),
    started the first time a plan asks for it; the others' stay idle."""
    from sparseloom.runtime.overflow import Overflow

    wanted = set(getattr(plan, "overflow", ()))
    for name, worker in runtime.workers.items():
        if name in wanted and worker.overflow is None:
            cores = lent_cores(runtime, name)
            lenders = tuple(w for other, w in runtime.workers.items()
                            if other != name and set(w.processor.cores) & set(cores))
            if cores:
                worker.overflow = Overflow(worker, cores, lenders)
                worker.overflow.start()
        worker.overflow_on = name in wanted and worker.overflow is not None


def load_pairs(runtime: Runtime, pairs: Iterable[tuple[ModelKey, str]],
               reason: str, wide: Iterable[tuple[ModelKey, str]] = (), *,
               within_budget: bool = False,
               tick: Callable[[int], Any] | None = None) -> list[LoadEvent]:
    """Load every (subgraph, processor) pair that is not resident (the pairs in ``wide``
    with their wide twin, :attr:`Plan.wide`); return the loads made.

    ``within_budget``: the pairs are optional (preloaded subgraphs): each is loaded only while
    it fits the server's memory budget beside what is loaded (:func:`budget.fits`); the others
    must be loaded, and idle models are unloaded to make room (:func:`budget.make_room`).
    ``tick(1)`` is called after each pair (a progress bar's ``update``).

    :raises OverBudget: (not ``within_budget``) the budget cannot hold them.
    """
    from sparseloom.runtime import budget

    events = []
    widened = set(wide)
    loads = [(key, processor,
              lent_cores(runtime, processor) if (key, processor) in widened else ())
             for key, processor in pairs]
    if not within_budget:
        budget.make_room(runtime, [
            (key, processor, bool(lent)) for key, processor, lent in loads
            if key not in runtime.workers[processor].models])
    runtime.loader.probe((key, runtime.workers[processor], lent)
                         for key, processor, lent in loads)
    try:
        fresh: list[tuple[ModelKey, str]] = []
        for key, processor, lent in loads:
            if within_budget and key not in runtime.workers[processor].models \
                    and not budget.fits(runtime, key, processor, bool(lent)):
                runtime.loader.left_out += 1
            else:
                event = runtime.loader.load(key, runtime.workers[processor], reason, lent)
                if event is not None:
                    events.append(event)
                    fresh.append((key, processor))
                    if within_budget and not budget.fits(runtime, None, processor):
                        budget.unload(runtime, processor, key)  # measured more than planned
                        runtime.loader.left_out += 1
                        events.pop()
                        fresh.pop()
            if tick is not None:
                tick(1)
        if not within_budget:
            budget.settle(runtime, fresh)
    finally:
        from sparseloom.isolation.probe import wait_for_probes

        wait_for_probes()  # no probe process competes with serving for the cores
    return events


def start(runtime: Runtime, plan: Any, *, active: Sequence[str] | None = None,
          preload: Any = None, progress: bool = False) -> list[LoadEvent]:
    """Load the resident set (the preloader's, less the subgraphs a merged route's model
    stands in for, plus every route of ``plan``), start the workers and open the ``active``
    tasks (all the plan places when ``None``); ``progress`` shows a bar (with the time left)
    over the loads. From then on a processor marked down re-plans without it
    (:func:`replan_without_down`) and a monitor's verdict goes to the policy
    (:func:`give_feedback`)."""
    from tqdm import tqdm

    routes = routes_from_plan(runtime, plan, 0)
    # A merged route's model stands in for its subgraphs on its processor: they are not
    # loaded beside it, so the resident set stays within the preloader's memory budget.
    covered = {(key, route.processors[0]) for route in routes.values() if route.merged
               for key in chain_keys(route.variant)}
    needed: list[tuple[ModelKey, str]] = []
    for route in routes.values():
        needed += route_keys(runtime, route)
    needed = list(dict.fromkeys(needed))
    hot: list[tuple[ModelKey, str]] = []
    for item in getattr(preload, "resident", ()) or ():
        pair = ((item.task, int(item.position), int(item.variant)), item.processor)
        if item.task in runtime.tasks and item.processor in runtime.workers \
                and pair not in covered and pair not in needed:
            hot.append(pair)
    hot = list(dict.fromkeys(hot))
    # The routes first (the server cannot serve without them), then the preloaded subgraphs
    # in the preloader's order while the measured total fits the budget.
    with tqdm(total=len(needed) + len(hot), desc="preloading subgraphs", unit="model",
              disable=not progress, leave=False) as bar:
        events = load_pairs(runtime, needed, "preload", _wide(runtime, routes.values()),
                            tick=bar.update)
        events += load_pairs(runtime, hot, "preload", within_budget=True, tick=bar.update)
    if runtime.loader.left_out:
        runtime.notes.append(
            f"preload stopped at the memory budget: {runtime.loader.left_out} of {len(hot)} "
            f"preloaded subgraph(s) left unloaded (their measured neighbours took more than the "
            f"profile estimated); a switch onto one loads it then")
    runtime.plan = plan
    runtime.on_down = lambda: replan_without_down(runtime)
    runtime.on_verdict = lambda: give_feedback(runtime)
    runtime.notes += [f"processor {name} has streams={w.processor.streams}: the runtime serves "
                      f"it with one worker thread (streams apply to profiling and `infer`, "
                      f"docs/runtime.md)" for name, w in runtime.workers.items()
                      if w.processor.streams > 1]
    runtime.start_workers()
    set_overflow(runtime, plan)
    for task in routes if active is None else active:
        if task not in routes:
            raise RuntimeServeError(f"the plan does not place task {task!r}; it places "
                                    f"{', '.join(routes) or 'no task'}")
        runtime.set_route(task, routes[task], "plan")
    return events


def apply_plan(runtime: Runtime, plan: Any, reason: str,
               tasks: Iterable[str] | None = None) -> None:
    """Move the (active, or named) tasks to ``plan``'s routes, loading what is missing."""
    runtime.plan_version += 1
    routes = routes_from_plan(runtime, plan, runtime.plan_version)
    wanted = set(routes) if tasks is None else set(tasks)
    for task, route in routes.items():
        state = runtime.states[task]
        if task not in wanted or (state.route is None and tasks is None):
            continue
        if state.route is not None and state.route.same_path(route) and state.pending is None:
            continue
        try:
            events = load_pairs(runtime, route_keys(runtime, route), "switch",
                                _wide(runtime, [route]))
        except SparseloomError as error:
            runtime.notes.append(f"switch of {task!r} to {route.describe()} abandoned: {error}")
            continue
        runtime.set_route(task, route, reason, len(events), sum(e.total_ms for e in events))
    runtime.plan = plan
    set_overflow(runtime, plan)


def _active(runtime: Runtime) -> tuple[str, ...]:
    return tuple(name for name, s in runtime.states.items() if s.route is not None)


def down_processors(runtime: Runtime) -> tuple[str, ...]:
    """The processors marked down; a lane that failed takes its processor down with it
    (both run the same backend on the same device)."""
    return tuple(dict.fromkeys(w.lane_of or name for name, w in runtime.workers.items()
                               if w.down))


def give_feedback(runtime: Runtime) -> None:
    """Tell the policy the monitors' verdicts; apply the plan it returns, if any.

    A third-party ``on_feedback`` that raises, or returns what the runtime cannot serve (not a
    ``Plan``, or one breaking its contract: :func:`~sparseloom.plan.contract.checked_plan`), is
    reported once (the error leaves this call, the run's summary notes it) and not called again
    in this run: the plan in force stays. A plan that holds is completed like the first one.
    """
    on_feedback = getattr(runtime.policy, "on_feedback", None)
    if not callable(on_feedback) or getattr(runtime, "feedback_error", None) is not None:
        return
    active = _active(runtime)
    monitors = {t: runtime.states[t].monitor for t in active}
    feedback = make_feedback(runtime.plan, monitors, down_processors(runtime),
                             processor_slowdown(runtime.workers, runtime.calibration))
    runtime.feedbacks.append(feedback)
    try:
        new_plan = on_feedback(feedback)
    except PluginCallError as error:
        runtime.feedback_error = error  # type: ignore[attr-defined]
        raise PluginCallError(f"{error}; on_feedback is not called again in this run") from error
    if new_plan is None:
        return
    try:
        new_plan = checked_feedback(runtime, new_plan, active)
    except PlanError as error:
        runtime.feedback_error = error  # type: ignore[attr-defined]
        raise PlanError(f"on_feedback(): {error}; the plan in force stays, and on_feedback is "
                        f"not called again in this run") from error
    apply_plan(runtime, new_plan, "feedback")


def join(runtime: Runtime, task: str) -> None:
    """Open ``task`` (arrival order): the plan is made again for the tasks that have arrived."""
    active = (*_active(runtime), task)
    plan = runtime.plan
    if runtime.planner is not None:
        plan = runtime.planner(active, down_processors(runtime))
    runtime.plan_version += 1
    routes = routes_from_plan(runtime, plan, runtime.plan_version)
    if task not in routes:
        raise RuntimeServeError(f"the plan made when task {task!r} joined does not place it")
    for name in active:
        route = routes.get(name)
        if route is None:
            continue
        events = load_pairs(runtime, route_keys(runtime, route), "switch",
                            _wide(runtime, [route]))
        runtime.set_route(name, route, "join", len(events), sum(e.total_ms for e in events))
    runtime.plan = plan
    set_overflow(runtime, plan)


def change_slos(runtime: Runtime, slos: Mapping[str, SLO]) -> None:
    """Serve ``slos`` from now on: the monitors judge by them and the plan is made again
    (on the control thread; wait with ``runtime.control.wait_idle()``)."""
    unknown = sorted(set(slos) - set(runtime.tasks))
    if unknown:
        raise RuntimeServeError(f"no served task {', '.join(map(repr, unknown))}; served: "
                                f"{', '.join(runtime.tasks)}")
    for task, slo in slos.items():
        runtime.slos[task] = slo
        runtime.states[task].monitor.slo_latency_ms = slo.latency_ms
        runtime.states[task].monitor.reset()
    planner = runtime.planner
    if planner is not None:
        runtime.control.submit(lambda: apply_plan(
            runtime, planner(_active(runtime), down_processors(runtime)), "slo"))


def replan_without_down(runtime: Runtime) -> None:
    """Re-plan after a processor was marked down: the planner without it, else every
    position it held moves to the first processor that is still up."""
    down = down_processors(runtime)
    up = [name for name, w in runtime.workers.items()
          if name not in down and w.lane_of is None]
    if not up:
        runtime.notes.append("every processor is down; remaining requests fail")
        return
    if runtime.planner is not None:
        try:
            apply_plan(runtime, runtime.planner(_active(runtime), down), "processor-down")
            return
        except SparseloomError as error:
            runtime.notes.append(f"re-plan without {', '.join(down)} failed: {error}; "
                                 f"moving its positions to {up[0]}")
    for task in _active(runtime):
        route = runtime.states[task].route
        if route is None or not set(route.processors) & set(down):
            continue
        moved = Route(route.variant, [up[0] if p in down else p for p in route.processors],
                      route.version + 1, wide=route.wide, quiet=route.quiet)
        try:
            events = load_pairs(runtime, route_keys(runtime, moved), "replan",
                                _wide(runtime, [moved]))
        except SparseloomError as error:  # the budget cannot hold it there, say
            runtime.notes.append(f"task {task!r} could not move to {up[0]}: {error}")
            continue
        runtime.set_route(task, moved, "processor-down", len(events),
                          sum(e.total_ms for e in events))
