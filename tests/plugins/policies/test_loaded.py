"""``sparseloom-loaded`` against hand-computed cases."""

from __future__ import annotations

import attrs
import numpy as np
import pytest

from sparseloom.core.errors import PlanError
from sparseloom.core.types import SLO
from sparseloom.plugins.policies.loaded import LoadedPolicy
from sparseloom.plugins.policies.sparseloom import SparseLoomPolicy
from sparseloom.profile.table import ProfileTable
from tests.plan.tables import task_profile


def _one_variant(name: str, stage_ms: float, handoff_ms: float = 0.5) -> object:
    # S = 2, V = 1, P = 2: the same stage time on either processor; a hop costs handoff_ms.
    latency = np.full((2, 1, 2), stage_ms)
    handoff = np.array([[[0.0, handoff_ms], [handoff_ms, 0.0]]])
    return task_profile(name, latency, np.array([0.9]), handoff_ms=handoff)


def _table() -> ProfileTable:
    return ProfileTable("hand", ["a", "b"], {"long": _one_variant("long", 10.0),
                                             "short1": _one_variant("short1", 1.0),
                                             "short2": _one_variant("short2", 1.0)})


def test_short_tasks_stay_off_the_long_task_processor() -> None:
    table = _table()
    slos = {"long": SLO(0.5, 100.0), "short1": SLO(0.5, 5.0), "short2": SLO(0.5, 5.0)}
    plan = LoadedPolicy().plan(list(table.tasks), table, ["a", "b"], slos)
    long_on = set(plan.processors_of("long"))
    assert len(long_on) == 1  # its chain stays put: no hop, no 0.5 ms hand-off
    for short in ("short1", "short2"):
        assert set(plan.processors_of(short)) == {"a", "b"} - long_on
    # By hand: long alone on its processor = its chain, 10 + 10; a short task waits for at
    # most one request of the other short one, whose two stages run in place: 1 + 1 + 2.
    assert plan.estimated_latency_ms["long"] == pytest.approx(20.0)
    assert plan.estimated_latency_ms["short1"] == pytest.approx(4.0)
    assert all(plan.feasible.values())
    # Algorithm 1 (the paper's) spans every task over both processors: each short task's
    # request can queue behind a 10 ms stage on each of them.
    paper = SparseLoomPolicy().plan(list(table.tasks), table, ["a", "b"], slos)
    assert all(len(set(paper.processors_of(t))) == 2 for t in table.tasks)
    # The short tasks' processor, where a request can wait for the other task's call, gets
    # an overflow thread (the runtime decides per request when it runs); the long task's,
    # which serves it alone, does not. Without the option, and with the paper's policy, none;
    # nothing else changes.
    shared = set(plan.processors_of("short1"))
    assert plan.overflow == tuple(shared) and paper.overflow == ()
    without = LoadedPolicy(overflow=False).plan(list(table.tasks), table, ["a", "b"], slos)
    assert without.overflow == () and without.variants == plan.variants
    assert without.assignment == plan.assignment


def test_a_processor_serving_one_task_gets_no_overflow_thread() -> None:
    # No other task's call to wait for: a request waits only for its own task's (an
    # overflow thread there would only take the other processors' cores for that task).
    table = ProfileTable("hand", ["a", "b"], {"x": _one_variant("x", 1.0)})
    plan = LoadedPolicy().plan(["x"], table, ["a", "b"], {"x": SLO(0.5, 100.0)})
    assert len(set(plan.processors_of("x"))) == 1 and plan.overflow == ()


def test_busiest_processor_is_balanced() -> None:
    # Four equal tasks: two per processor is the only way to a per-round makespan of 4 ms
    # (2 tasks × 2 stages × 1 ms); the paper's spread gives each processor 4 × 1 ms too but
    # pays three more hand-offs, so the loaded policy keeps every chain in place.
    table = ProfileTable("hand", ["a", "b"], {f"t{i}": _one_variant(f"t{i}", 1.0)
                                             for i in range(4)})
    slos = {name: SLO(0.5, 100.0) for name in table.tasks}
    plan = LoadedPolicy().plan(list(table.tasks), table, ["a", "b"], slos)
    placed = [plan.processors_of(t) for t in table.tasks]
    assert all(len(set(p)) == 1 for p in placed)
    assert sorted(p[0] for p in placed) == ["a", "a", "b", "b"]


def test_accuracy_is_never_given_up_for_latency() -> None:
    # S = 1, V = 2: variant 0 accurate and slow, variant 1 fast and below the accuracy SLO.
    latency = np.array([[[10.0, 10.0], [1.0, 1.0]]])
    task = task_profile("x", latency, np.array([0.9, 0.5]))
    table = ProfileTable("hand", ["a", "b"], {"x": task})
    plan = LoadedPolicy().plan(["x"], table, ["a", "b"], {"x": SLO(0.8, 2.0)})
    assert plan.variants["x"].choices == (0,)
    assert not plan.feasible["x"]
    assert plan.infeasible_reason["x"].startswith("latency unreachable under load")


def test_a_long_chain_on_a_lending_processor_borrows_idle_cores() -> None:
    # Both backends can run a stage wide (`widened`). The long chain (2 × 5 ms) runs faster
    # on ort:CPU, where it is held: it may borrow ov:CPU's core while that is idle, at run
    # time; the plan's estimates stay those of one thread. The short chain (2 × 0.5 ms) is too
    # short to gain from a second thread.
    long = _one_variant("long", 5.0)
    long.latency_ms[:, :, 0] = 8.0
    table = ProfileTable("hand", ["ov:CPU", "ort:CPU"], {
        "long": long, "short": _one_variant("short", 0.5)})
    slos = {"long": SLO(0.5, 100.0), "short": SLO(0.5, 100.0)}
    plan = LoadedPolicy().plan(list(table.tasks), table, list(table.processors), slos)
    assert plan.processors_of("long") == ("ort:CPU", "ort:CPU")
    assert plan.wide == ("long",)
    assert plan.estimated_latency_ms["long"] >= 10.0  # one thread's chain, at least
    # Off, the same plan without lending.
    narrow = LoadedPolicy(lend_idle=False).plan(list(table.tasks), table,
                                                list(table.processors), slos)
    assert narrow.wide == ()
    assert narrow.variants == plan.variants and narrow.assignment == plan.assignment


@pytest.mark.parametrize(("merge", "short_slo_ms", "lends"), [
    (False, 100.0, True), (False, 6.0, True), (False, 5.9, False),
    (True, 11.0, True), (True, 10.9, False)])
def test_lending_never_costs_another_task_its_latency_slo(merge: bool, short_slo_ms: float,
                                                          lends: bool) -> None:
    # The same two tasks. A borrowed stage holds ov:CPU's core for at most one 5 ms stage of
    # the long chain, or for its whole 10 ms chain when the chain runs merged (one call);
    # the short task there has a loaded latency of 0.5 + 0.5 = 1 ms by hand. Lending whenever
    # ov:CPU is idle is allowed while 1 + 5 (or 1 + 10) ms stays within the short task's SLO;
    # beyond, the chain borrows only while ov:CPU is quiet (Plan.wide_when_quiet), or, with
    # that option off, never.
    long = _one_variant("long", 5.0)
    long.latency_ms[:, :, 0] = 8.0
    table = ProfileTable("hand", ["ov:CPU", "ort:CPU"], {
        "long": long, "short": _one_variant("short", 0.5)})
    slos = {"long": SLO(0.5, 100.0), "short": SLO(0.5, short_slo_ms)}
    plan = LoadedPolicy(merge_chains=merge).plan(list(table.tasks), table,
                                                 list(table.processors), slos)
    assert plan.processors_of("short") == ("ov:CPU", "ov:CPU")
    assert plan.estimated_latency_ms["short"] == pytest.approx(1.0)
    assert plan.wide == ("long",)
    assert plan.wide_when_quiet == (() if lends else ("long",))
    assert plan.merged == (("long", "short") if merge else ())
    never = LoadedPolicy(merge_chains=merge, lend_when_quiet=False).plan(
        list(table.tasks), table, list(table.processors), slos)
    assert never.wide == (("long",) if lends else ()) and never.wide_when_quiet == ()
    assert never.variants == plan.variants and never.assignment == plan.assignment


def test_a_long_chain_with_no_other_processor_stays_narrow() -> None:
    table = ProfileTable("hand", ["ov:CPU", "ort:CPU"], {"long": _one_variant("long", 5.0)})
    plan = LoadedPolicy().plan(["long"], table, ["ov:CPU"], {"long": SLO(0.5, 100.0)})
    assert plan.processors_of("long") == ("ov:CPU", "ov:CPU") and plan.wide == ()


def test_short_chains_never_borrow_cores() -> None:
    table = ProfileTable("hand", ["ov:CPU", "ort:CPU"], {
        f"t{i}": _one_variant(f"t{i}", 0.5) for i in range(2)})
    slos = {name: SLO(0.5, 100.0) for name in table.tasks}
    plan = LoadedPolicy().plan(list(table.tasks), table, list(table.processors), slos)
    assert plan.wide == ()


def test_chains_kept_on_one_processor_run_merged_and_spanning_ones_do_not() -> None:
    # The table of the first test: every chain keeps to one processor, so each runs merged.
    table = _table()
    slos = {"long": SLO(0.5, 100.0), "short1": SLO(0.5, 5.0), "short2": SLO(0.5, 5.0)}
    plan = LoadedPolicy().plan(list(table.tasks), table, ["a", "b"], slos)
    assert plan.merged == ("long", "short1", "short2")
    assert LoadedPolicy(merge_chains=False).plan(list(table.tasks), table, ["a", "b"],
                                                 slos).merged == ()
    # A chain spanning both processors (its stages are faster where they sit) is not merged;
    # nor is a one-position chain (nothing to merge), nor anything the paper's policy plans.
    split = _one_variant("split", 1.0, handoff_ms=0.0)
    split.latency_ms[0, :, 1] = 9.0
    split.latency_ms[1, :, 0] = 9.0
    spanning = ProfileTable("hand", ["a", "b"], {"split": split})
    plan = LoadedPolicy().plan(["split"], spanning, ["a", "b"], {"split": SLO(0.5, 100.0)})
    assert plan.processors_of("split") == ("a", "b") and plan.merged == ()
    assert SparseLoomPolicy().plan(list(table.tasks), table, ["a", "b"], slos).merged == ()
    single = ProfileTable("hand", ["a", "b"], {"x": task_profile(
        "x", np.full((1, 1, 2), 1.0), np.array([0.9]))})
    assert LoadedPolicy().plan(["x"], single, ["a", "b"], {"x": SLO(0.5, 100.0)}).merged == ()


def _cpu_table() -> ProfileTable:
    # The first test's three tasks on two CPU processors, the short ones ten times shorter:
    # chains of 2 × 10 ms and 2 × 0.1 ms, a hop 0.5 ms.
    return ProfileTable("hand", ["ov:CPU", "ort:CPU"], {
        "long": _one_variant("long", 10.0), "short1": _one_variant("short1", 0.1),
        "short2": _one_variant("short2", 0.1)})


def test_tight_slos_put_every_task_on_a_lane_of_its_own() -> None:
    # Queued, one short task can have a processor to itself (0.2 ms) and the other waits
    # either for it (0.2 + 0.2 = 0.4 ms, by hand) or for the long one's 20 ms: one miss at
    # best. On lanes over both cores, a chain shares them with the lanes no longer than
    # itself: each short one with the other (2 lanes / 2 processors: 0.2 ms), the long one
    # with all three (1.5 × 20 = 30 ms): no miss, so the lanes are taken.
    table = _cpu_table()
    slos = {"long": SLO(0.5, 100.0), "short1": SLO(0.5, 0.3), "short2": SLO(0.5, 0.3)}
    queued = LoadedPolicy(lanes=False, time_share=False).plan(
        list(table.tasks), table, list(table.processors), slos)
    assert queued.lanes == () and sum(not f for f in queued.feasible.values()) == 1
    assert sorted(queued.estimated_latency_ms.values()) == pytest.approx([0.2, 20.2, 20.2])
    plan = LoadedPolicy().plan(list(table.tasks), table, list(table.processors), slos)
    assert plan.lanes == ("long", "short1", "short2") and all(plan.feasible.values())
    assert plan.estimated_latency_ms == pytest.approx(
        {"long": 30.0, "short1": 0.2, "short2": 0.2})
    # Whole chains, merged; nothing borrowed and no overflow thread: each lane is alone.
    assert all(len(set(plan.processors_of(t))) == 1 for t in table.tasks)
    assert plan.merged == ("long", "short1", "short2")
    assert plan.wide == plan.wide_when_quiet == plan.overflow == ()


def test_lanes_are_not_taken_where_the_queues_meet_every_slo_or_the_processors_are_not_cpus(
        ) -> None:
    # (Without time-slicing on pinned lanes, which loose SLOs take: the next tests.)
    table = _cpu_table()
    loose = {"long": SLO(0.5, 100.0), "short1": SLO(0.5, 5.0), "short2": SLO(0.5, 5.0)}
    assert LoadedPolicy(time_share=False).plan(list(table.tasks), table,
                                               list(table.processors), loose).lanes == ()
    # Processors that are not CPU core sets (a simulated SoC's): never lanes.
    hand = ProfileTable("hand", ["a", "b"], dict(table.tasks))
    tight = {"long": SLO(0.5, 100.0), "short1": SLO(0.5, 0.3), "short2": SLO(0.5, 0.3)}
    assert LoadedPolicy().plan(list(hand.tasks), hand, ["a", "b"], tight).lanes == ()
    # A lane costing a task the SLO the queues meet is no better: with the long task's SLO at
    # 25 ms, lanes miss it (30 ms) and meet the two short ones; the queues miss one short
    # one. Equal misses: the queues stay.
    equal = dict(tight, long=SLO(0.5, 25.0))
    assert LoadedPolicy(time_share=False).plan(list(table.tasks), table,
                                               list(table.processors), equal).lanes == ()


def test_tasks_sharing_a_processor_are_time_sliced_on_lanes_pinned_to_it() -> None:
    # The long task alone on one processor keeps its queue (and borrows the idle cores); the
    # two short ones share the other, each on a lane pinned to its core. By hand: equal
    # chains of 0.2 ms time-sliced two ways take 0.4 ms each, as queued.
    table = _cpu_table()
    slos = {"long": SLO(0.5, 100.0), "short1": SLO(0.5, 5.0), "short2": SLO(0.5, 5.0)}
    plan = LoadedPolicy().plan(list(table.tasks), table, list(table.processors), slos)
    assert plan.lanes == ("short1", "short2") and plan.lanes_pinned
    (shared,) = set(plan.processors_of("short1")) | set(plan.processors_of("short2"))
    assert set(plan.processors_of("long")) == set(table.processors) - {shared}
    assert plan.estimated_latency_ms == pytest.approx(
        {"long": 20.0, "short1": 0.4, "short2": 0.4})
    assert plan.wide == ("long",) and plan.overflow == ()  # no queue is shared any more
    # The long task is the only one any processor's queue serves: it gets a spare on the
    # other core, beside the lanes (its estimates do not count on it).
    assert plan.spares == ("long",) and "long" in plan.merged
    queued = LoadedPolicy(time_share=False).plan(list(table.tasks), table,
                                                 list(table.processors), slos)
    assert queued.lanes == () and not queued.lanes_pinned and queued.overflow == (shared,)
    assert queued.variants == plan.variants and queued.assignment == plan.assignment
    assert queued.spares == ()  # the short tasks' queue would wait for a spare's calls
    unspared = LoadedPolicy(spare=False).plan(list(table.tasks), table,
                                              list(table.processors), slos)
    assert unspared.spares == () and attrs.evolve(unspared, decision_seconds=0.0) == \
        attrs.evolve(plan, spares=(), decision_seconds=0.0)
    # Borrowing quiet cores is asked for, not the default; it changes nothing else, and a
    # plan without pinned lanes never borrows.
    assert not plan.lanes_borrow
    borrowing = LoadedPolicy(lanes_borrow=True).plan(list(table.tasks), table,
                                                     list(table.processors), slos)
    assert borrowing.lanes_borrow and attrs.evolve(borrowing, decision_seconds=0.0) == \
        attrs.evolve(plan, lanes_borrow=True, decision_seconds=0.0)
    assert not LoadedPolicy(lanes_borrow=True, time_share=False).plan(
        list(table.tasks), table, list(table.processors), slos).lanes_borrow


def test_time_slicing_is_not_taken_where_it_misses_an_slo_the_queue_meets() -> None:
    # A 1 ms chain and a 0.1 ms one share a processor. Queued, each waits for the other's
    # call: 1.1 ms each. Time-sliced, the short one runs as if alone (0.1 ms) and the long one
    # shares the core (2 × 1 ms = 2 ms): over its 1.5 ms SLO, which the queue meets.
    table = ProfileTable("hand", ["ov:CPU", "ort:CPU"], {
        "long": _one_variant("long", 10.0), "mid": _one_variant("mid", 0.5),
        "short": _one_variant("short", 0.05)})
    slos = {"long": SLO(0.5, 100.0), "mid": SLO(0.5, 1.5), "short": SLO(0.5, 5.0)}
    plan = LoadedPolicy().plan(list(table.tasks), table, list(table.processors), slos)
    assert plan.lanes == () and not plan.lanes_pinned and all(plan.feasible.values())
    assert plan.estimated_latency_ms == pytest.approx({"long": 20.0, "mid": 1.1, "short": 1.1})
    assert plan.spares == ()  # the other processor's queue serves mid and short
    # With the short task's SLO at 0.5 ms instead, the queue misses it and the pinned lanes
    # do not (lanes over every core would miss the long task's 25 ms: 1.5 × 20 ms).
    tight = dict(slos, long=SLO(0.5, 25.0), mid=SLO(0.5, 2.5), short=SLO(0.5, 0.5))
    sliced = LoadedPolicy().plan(list(table.tasks), table, list(table.processors), tight)
    assert sliced.lanes == ("mid", "short") and sliced.lanes_pinned
    assert sliced.estimated_latency_ms == pytest.approx({"long": 20.0, "mid": 2.0,
                                                         "short": 0.1})
    assert sliced.spares == ("long",)
    assert all(sliced.feasible.values())


@pytest.mark.parametrize(("variant_ms", "min_gain", "picked"), [
    (4.9, 0.1, (0,)),   # 2% faster than dense: within the estimate's error, dense serves
    (4.4, 0.1, (1,)),   # 12% faster: the variant serves
    (4.9, 0.0, (1,)),   # the rule off: any estimated gain takes the variant
])
def test_a_variant_replaces_dense_only_when_estimated_clearly_faster(
        variant_ms: float, min_gain: float, picked: tuple[int, ...]) -> None:
    # S = 1, V = 2 on one processor: dense 5 ms, the variant as given, both accurate enough.
    latency = np.array([[[5.0], [variant_ms]]])
    table = ProfileTable("hand", ["a"], {"x": task_profile("x", latency, np.array([0.9, 0.9]))})
    plan = LoadedPolicy(min_gain=min_gain).plan(["x"], table, ["a"], {"x": SLO(0.8, 100.0)})
    assert plan.variants["x"].choices == picked


def test_the_gain_rule_leaves_variants_alone_where_dense_misses_the_accuracy_slo() -> None:
    # Dense (0.85) misses the SLO of 0.88: the only accurate variant serves, whatever its speed.
    latency = np.array([[[5.0], [4.99], [4.0]]])
    task = task_profile("x", latency, np.array([0.85, 0.9, 0.5]))
    table = ProfileTable("hand", ["a"], {"x": task})
    plan = LoadedPolicy().plan(["x"], table, ["a"], {"x": SLO(0.88, 100.0)})
    assert plan.variants["x"].choices == (1,)


@pytest.mark.parametrize("bad", [-0.1, 1.0, 2.0])
def test_min_gain_outside_its_range_is_refused(bad: float) -> None:
    with pytest.raises(PlanError, match="min_gain must lie in"):
        LoadedPolicy(min_gain=bad)
