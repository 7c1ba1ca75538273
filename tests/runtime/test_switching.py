"""SLO feedback and switching: monitors, the violation hook, real switches with loads."""

from __future__ import annotations

import time
from typing import Any

import pytest

from sparseloom.core.hookspecs import hookimpl
from sparseloom.core.types import SLO
from sparseloom.runtime import switching
from sparseloom.runtime.executor import Runtime, RuntimeOptions
from sparseloom.runtime.load import LoadSpec, offer
from sparseloom.runtime.models import RuntimeTask
from sparseloom.runtime.monitor import LatencyMonitor
from sparseloom.runtime.session import profile_processors
from tests.runtime.support import check_invariant, run


def test_monitor_gives_one_verdict_per_fresh_window() -> None:
    monitor = LatencyMonitor("t", slo_latency_ms=1.0, window=4)
    verdicts = [monitor.observe(x) for x in (0.5, 0.5, 0.5, 2.0, 0.5)]
    assert verdicts == [False, False, False, True, False]
    # p90 of (0.5, 0.5, 0.5, 2.0) is 2.0: one window over the SLO is not yet a violation.
    assert monitor.value_ms() == 2.0 and not monitor.violated()
    for x in (0.5, 0.5, 3.0):  # the next fresh window: p90 3.0, the second in a row
        monitor.observe(x)
    assert monitor.violated()
    for x in (0.5, 0.5, 0.5, 0.5):  # a window within the SLO ends the streak
        monitor.observe(x)
    assert not monitor.violated()
    for x in (2.0,) * 8:
        monitor.observe(x)
    assert monitor.violated()
    monitor.reset()
    assert not monitor.violated()


class ViolationObserver:
    """Records ``sparseloom_slo_violation`` notifications."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, float, float]] = []

    @hookimpl
    def sparseloom_slo_violation(self, task: str, latency_ms: float, slo_latency_ms: float
                                 ) -> None:
        self.seen.append((task, latency_ms, slo_latency_ms))


def test_violations_call_the_hook(tiny: tuple[Any, Any], register_plugin: Any) -> None:
    observer = ViolationObserver()
    register_plugin(observer)
    tight = {"tiny": SLO(0.0, 0.001)}
    result = run(tiny, LoadSpec("closed", queries=45), slos=tight,
                 options=RuntimeOptions(window=10))
    check_invariant(result)
    assert len(observer.seen) == 45
    assert all(slo == 0.001 and latency > slo for _, latency, slo in observer.seen)
    assert result.summary.tasks[0].violated == "latency"


def _runtime(setup: tuple[Any, Any], policy_name: str | Any, slos: dict[str, SLO],
             budget: float | None, initial: Any = None,
             options: RuntimeOptions | None = None) -> tuple[Runtime, Any]:
    """A started runtime; ``budget=None`` preloads only the plan's own subgraphs.

    ``policy_name``: a registered policy's name, or a policy object.
    ``initial``: start from this plan instead of the policy's (the policy still re-plans).
    """
    from sparseloom.core.registry import get_registry
    from sparseloom.plan.preload import preload
    from sparseloom.zoo.load import load_zoo
    from sparseloom.zoo.options import zoo_directory

    workload, profile = setup
    processors = profile_processors(profile)
    policy = (get_registry().create("policy", policy_name) if isinstance(policy_name, str)
              else policy_name)
    names = [p.name for p in processors]
    plan = initial or policy.plan(list(profile.tasks), profile, names, slos)
    tasks = [RuntimeTask(workload.task(n), load_zoo(zoo_directory(
        profile.meta["zoo_hashes"][n]), verify=False), slos[n]) for n in profile.tasks]
    runtime: Runtime

    def planner(active: tuple[str, ...], down: tuple[str, ...]) -> Any:
        return policy.plan(list(active), profile, [n for n in names if n not in down],
                           {t: runtime.slos[t] for t in active})

    runtime = Runtime(tasks, processors, profile=profile, policy=policy, planner=planner,
                      options=options or RuntimeOptions())
    if budget is None:
        own = profile.task(plan.variants[tasks[0].name].task)
        order = profile.order_indices(list(plan.processors_of(tasks[0].name)))
        budget = int(sum(own.memory_bytes[j, c, order[j]]
                         for j, c in enumerate(plan.variants[tasks[0].name].choices)))
    switching.start(runtime, plan, preload=preload(profile, plan, budget=budget))
    return runtime, plan


class ScriptedPolicy:
    """A placement policy whose answers are fixed in advance, so that what the runtime does
    with them can be checked exactly (a real policy's answer depends on measured timings):
    ``plan`` returns ``first``; ``on_feedback`` records every :class:`Feedback` it is given
    and answers ``then`` the first time, ``None`` after."""

    def __init__(self, first: Any, then: Any) -> None:
        self.first, self.then = first, then
        self.seen: list[Any] = []

    def plan(self, tasks: Any, profile: Any, processors: Any, slos: Any) -> Any:
        return self.first

    def on_feedback(self, observations: Any) -> Any:
        self.seen.append(observations)
        return self.then if len(self.seen) == 1 else None


def test_feedback_reaches_the_policy_and_its_answer_is_applied(tiny: tuple[Any, Any]) -> None:
    from sparseloom.core.types import Plan, StitchedVariant

    _, profile = tiny
    order = profile.processors[:profile.task("tiny").n_positions]
    first = Plan("scripted", order, {"tiny": StitchedVariant("tiny", (0, 0))})
    then = Plan("scripted", order, {"tiny": StitchedVariant("tiny", (1, 1))})
    policy = ScriptedPolicy(first, then)
    tight = {"tiny": SLO(0.0, 0.001)}  # every window violates it
    runtime, _ = _runtime(tiny, policy, tight, budget=None, options=RuntimeOptions(window=10))
    try:
        # Enough requests that the switch (two loads on the control thread, ~0.1 s) lands
        # while they are still being served: tiny serves 80 in a few milliseconds (2,000: 200
        # feedbacks, within the runtime's last 256 kept).
        load = offer(runtime, LoadSpec("closed", queries=2000))
        assert runtime.control.wait_idle(30)
        assert not load.interrupted and runtime.completed == 2000
    finally:
        runtime.stop()
    # on_feedback was called with exactly the feedbacks the runtime made, in order
    assert len(policy.seen) >= 2 and policy.seen == list(runtime.feedbacks)
    assert policy.seen[0].plan is first
    # Every window that held requests violated the 1 µs SLO (a feedback made on the control
    # thread just after the switch reset the monitor reads an empty window: NaN, no verdict).
    judged = [f for f in policy.seen if f.latency_ms["tiny"] == f.latency_ms["tiny"]]
    assert judged and all(f.latency_ms["tiny"] > 0.001 for f in judged)
    # A task is reported violated from its second window over the SLO in a row (monitor
    # CONFIRM = 2): the very first window is not a violation yet, later ones are (but for at
    # most the windows read across the switch, which starts the count over).
    verdicts = [f.violated["tiny"] for f in judged]
    assert not verdicts[0] and verdicts[1:].count(False) <= 2 and verdicts.count(True) >= 2
    # Its first answer was applied: one switch, for feedback, to (1,1), loading what (1,1)
    # needs (only the first plan's subgraphs were preloaded); its later None changed nothing.
    assert [(e.reason, e.from_route, e.to_route) for e in runtime.switches] == [
        ("feedback", f"tiny[0,0] @ {'>'.join(order)}", f"tiny[1,1] @ {'>'.join(order)}")]
    assert runtime.switches[0].loads == 2
    # The plan in force is that answer, its optional fields completed from the profile.
    applied = runtime.plan
    assert (applied.order, applied.variants) == (then.order, then.variants)
    assert applied.slos == tight and applied.estimated_latency_ms["tiny"] > 0
    assert all(f.plan is applied for f in policy.seen[1:])
    served = [r.route.variant.choices for r in sorted(runtime.finished,
                                                        key=lambda r: r.request_id)]
    switched_at = served.index((1, 1))
    assert set(served[:switched_at]) == {(0, 0)} and set(served[switched_at:]) == {(1, 1)}


def test_with_feedback_off_the_policy_is_never_asked_and_the_first_plan_serves(
        tiny: tuple[Any, Any]) -> None:
    from sparseloom.core.types import Plan, StitchedVariant

    _, profile = tiny
    order = profile.processors[:profile.task("tiny").n_positions]
    first = Plan("scripted", order, {"tiny": StitchedVariant("tiny", (0, 0))})
    then = Plan("scripted", order, {"tiny": StitchedVariant("tiny", (1, 1))})
    policy = ScriptedPolicy(first, then)
    # The previous test's setting, in which the policy is asked and switches after a window.
    runtime, _ = _runtime(tiny, policy, {"tiny": SLO(0.0, 0.001)}, budget=None,
                          options=RuntimeOptions(window=10, feedback=False))
    try:
        load = offer(runtime, LoadSpec("closed", queries=300))
        assert runtime.control.wait_idle(30)
        assert not load.interrupted and runtime.completed == 300
        assert runtime.states["tiny"].monitor.violated()  # every window missed the SLO
    finally:
        runtime.stop()
    assert policy.seen == [] and list(runtime.feedbacks) == [] and not runtime.switches
    assert {r.route.variant.choices for r in runtime.finished} == {(0, 0)}


def test_a_tightened_slo_switches_the_variant_and_counts_its_load(tiny: tuple[Any, Any]
                                                                  ) -> None:
    from sparseloom.core.types import Plan, StitchedVariant

    _, profile = tiny
    table = profile.task("tiny")
    accuracy = table.accuracy()
    # Serving the least accurate stitched variant, the SLO is tightened to the best accuracy,
    # which it misses: the policy must switch. (Tightening the latency instead depends on the
    # measured profile: on this AMX machine tiny's most accurate variant is also its fastest.)
    worst = StitchedVariant("tiny", tuple(table.choices([int(accuracy.argmin())])[0]))
    assert accuracy.min() < accuracy.max() - 0.05  # a trained model: near-chance variants exist
    loose = {"tiny": SLO(0.0, 1000.0)}
    tightened = SLO(float(accuracy.max()) - 1e-6, 1000.0)
    initial = Plan("sparseloom", profile.processors[:table.n_positions], {"tiny": worst})
    runtime, plan = _runtime(tiny, "sparseloom", loose, budget=None, initial=initial)
    try:
        before = plan.variants["tiny"]
        runtime.control.submit(lambda: time.sleep(0.05))
        spec = LoadSpec("poisson", queries=300, rate=600.0)
        switched = {}

        def tighten() -> None:
            time.sleep(0.1)
            switching.change_slos(runtime, {"tiny": tightened})
            switched["at"] = time.perf_counter()

        import threading

        thread = threading.Thread(target=tighten)
        thread.start()
        load = offer(runtime, spec)
        thread.join()
        assert not load.interrupted
        assert runtime.submitted == runtime.completed + runtime.failed == 300
        assert runtime.switches, "the tightened SLO made the policy choose another variant"
        event = runtime.switches[0]
        assert event.reason == "slo" and event.loads >= 1 and event.load_ms > 0
        assert runtime.plan.variants["tiny"] != before
        versions = [r.route.version for r in sorted(runtime.finished,
                                                    key=lambda r: r.request_id)]
        assert versions == sorted(versions), "no request took an older route after a newer"
        loads = [e for e in runtime.loader.events if e.reason == "switch"]
        assert len(loads) == event.loads
    finally:
        runtime.stop()


def test_routes_from_a_plan_with_a_vanished_processor_fail_clearly(
        tiny: tuple[Any, Any]) -> None:
    from sparseloom.core.errors import RuntimeServeError
    from sparseloom.core.types import Plan, StitchedVariant

    runtime, _ = _runtime(tiny, "sparseloom", {"tiny": SLO(0.0, 1000.0)}, budget=1.0)
    try:
        plan = Plan("manual", ["gpu:0", "ort:CPU"], {"tiny": StitchedVariant("tiny", (0, 0))})
        with pytest.raises(RuntimeServeError, match="gpu:0"):
            switching.routes_from_plan(runtime, plan, 1)
    finally:
        runtime.drain(5)
        runtime.stop()
