"""``sparseloom-loaded`` against hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

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


def test_the_longest_chain_runs_wide_when_the_others_leave_cores_idle() -> None:
    from sparseloom.plugins.policies.loaded import WIDE_SPEEDUP

    # ONNX Runtime can lend cores (its backend has `widened`); the long chain, 2 × 5 ms, would
    # bound the closed-loop round at 10 ms on one processor. Wide it takes 10 / WIDE_SPEEDUP
    # and occupies both processors; the short task (2 × 1 ms) adds 2 ms on ov:CPU.
    table = ProfileTable("hand", ["ov:CPU", "ort:CPU"], {
        "long": _one_variant("long", 5.0), "short": _one_variant("short", 1.0)})
    slos = {"long": SLO(0.5, 100.0), "short": SLO(0.5, 100.0)}
    plan = LoadedPolicy(wide=True).plan(list(table.tasks), table, list(table.processors),
                                        slos)
    assert plan.wide == ("long",)
    assert plan.processors_of("long") == ("ort:CPU", "ort:CPU")
    assert set(plan.processors_of("short")) == {"ov:CPU"}
    wide_ms = 10.0 / WIDE_SPEEDUP
    # Nothing queues ahead of it on ort:CPU: the short task runs on ov:CPU's own worker.
    assert plan.estimated_latency_ms["long"] == pytest.approx(wide_ms)
    # The short one may wait for what ov:CPU's lent core takes over of one long request:
    # 10 - 10 / WIDE_SPEEDUP.
    assert plan.estimated_latency_ms["short"] == pytest.approx(2.0 + (10.0 - wide_ms))
    # Without lending (the default), the long chain stays on one processor at 10 ms.
    narrow = LoadedPolicy().plan(list(table.tasks), table, list(table.processors),
                                           slos)
    assert narrow.wide == () and len(set(narrow.processors_of("long"))) == 1


def test_short_chains_never_run_wide() -> None:
    table = ProfileTable("hand", ["ov:CPU", "ort:CPU"], {
        f"t{i}": _one_variant(f"t{i}", 0.5) for i in range(2)})
    slos = {name: SLO(0.5, 100.0) for name in table.tasks}
    plan = LoadedPolicy(wide=True).plan(list(table.tasks), table, list(table.processors),
                                        slos)
    assert plan.wide == ()
