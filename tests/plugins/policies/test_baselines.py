"""The six §5.1 baselines on hand-built tables whose right answers are computed by hand from
the module doc of :mod:`sparseloom.plugins.policies.baselines` and docs/plan.md's table."""

from __future__ import annotations

import numpy as np
import pytest

from sparseloom.core.registry import get_registry
from sparseloom.core.types import SLO
from sparseloom.profile.table import ProfileTable
from tests.plan.tables import task_profile


def hand_table() -> ProfileTable:
    """S = 2, V = 3, P = 2 ("fast", "slow"); variant 0 dense, 1 mid, 2 light.

    Per position: dense 5/7.5 ms, mid 3/4.5 ms, light 1/1.5 ms on fast/slow. Accuracy of the
    originals: 0.90, 0.85, 0.70. The stitched variant (1, 2) would be 0.88 and 4 ms on fast.
    """
    per_variant = np.array([[5.0, 7.5], [3.0, 4.5], [1.0, 1.5]])
    latency = np.stack([per_variant, per_variant])  # (S, V, P)
    accuracy = np.full(9, 0.5)
    accuracy[[0, 4, 8]] = [0.90, 0.85, 0.70]  # rows of (0,0), (1,1), (2,2)
    accuracy[1 * 3 + 2] = 0.88
    return ProfileTable("hand", ["fast", "slow"], {
        "a": task_profile("a", latency, accuracy),
        "b": task_profile("b", latency.copy(), accuracy.copy())})


def plan(name: str, slos: dict[str, SLO]):
    table = hand_table()
    return get_registry().create("policy", name).plan(list(table.tasks), table,
                                                      table.processors, slos)


LOOSE = {"a": SLO(0.6, 100.0), "b": SLO(0.6, 100.0)}


@pytest.mark.parametrize(("name", "variant"), [("sv-ao-p", 0), ("sv-lo-p", 2)])
def test_single_variant_partitioned_ignores_the_slo(name: str, variant: int) -> None:
    for slos in (LOOSE, {"a": SLO(0.89, 3.0), "b": SLO(0.6, 100.0)}):
        made = plan(name, slos)
        # P partitions: both processors, even though the dense models are fastest all on "fast"
        assert sorted(made.order) == ["fast", "slow"]
        assert all(v.choices == (variant, variant) for v in made.variants.values())
        assert all(made.processors_of(t) == made.order for t in made.variants)


def test_not_partitioned_spreads_tasks_over_processors() -> None:
    made = plan("sv-ao-np", LOOSE)
    assert {made.processors_of("a"), made.processors_of("b")} == {("fast", "fast"),
                                                                  ("slow", "slow")}
    assert sorted(made.estimated_latency_ms.values()) == [10.0, 15.0]
    lo = plan("sv-lo-np", LOOSE)
    assert all(v.choices == (2, 2) for v in lo.variants.values())


def test_adaptive_picks_the_fastest_original_meeting_the_slo() -> None:
    slos = {"a": SLO(0.84, 8.0), "b": SLO(0.6, 100.0)}
    made = plan("av-p", slos)
    # 0.85 at 3 + 4.5 ms over the partitioned order; the stitched (1, 2) is never used
    assert made.variants["a"].choices == (1, 1)
    assert made.variants["b"].choices == (2, 2)
    assert made.feasible == {"a": True, "b": True}
    unreachable = plan("av-p", {"a": SLO(0.95, 100.0), "b": SLO(0.6, 100.0)})
    assert not unreachable.feasible["a"]
    assert "no original meets it" in unreachable.infeasible_reason["a"]


def test_adaptive_not_partitioned_avoids_a_processor_that_breaks_the_slo() -> None:
    # b must take "fast": on "slow" even the light original needs 3 ms > 2.5 ms.
    made = plan("av-np", {"a": SLO(0.6, 100.0), "b": SLO(0.6, 2.5)})
    assert made.processors_of("b") == ("fast", "fast") and made.feasible["b"]
    assert made.variants["a"].choices == (2, 2) and made.feasible["a"]


def test_baselines_never_use_stitched_variants() -> None:
    for name in ("sv-ao-p", "sv-ao-np", "sv-lo-p", "sv-lo-np", "av-p", "av-np"):
        made = plan(name, {"a": SLO(0.87, 4.5), "b": SLO(0.87, 4.5)})
        assert all(len(set(v.choices)) == 1 for v in made.variants.values()), name


def order_table() -> ProfileTable:
    """S = 2, V = 2 (v0 dense, v1 light), P = 2 ("p0", "p1"); no hand-offs.

    Stage times (ms), position 0 | position 1, on p0/p1:

    ====  =============  ============  ===========================================
    task  dense          light         whole original under (p0,p1) | (p1,p0)
    ====  =============  ============  ===========================================
    a     2/5 | 9/3      3/0.5 | 0.5/3  dense 5 | 14, light 6 | 1
    b     5/1 | 1/5      2/0.5 | 0.5/2  dense 10 | 2, light 4 | 1
    ====  =============  ============  ===========================================

    Mean dense latency per order: (p0,p0) (11+6)/2 = 8.5, (p0,p1) 7.5, (p1,p0) 8, (p1,p1)
    (8+6)/2 = 7. The P order is (p0,p1): the best of the orders that use both processors,
    though (p1,p1) keeps everything on one processor more cheaply and the light originals
    would prefer (p1,p0). Accuracy of (0,0), (0,1), (1,0), (1,1): a 0.90, 0.95, 0.80, 0.70
    (the stitched (0,1) beats both originals), b 0.90, 0.60, 0.60, 0.70.
    """
    a = np.array([[[2.0, 5.0], [3.0, 0.5]], [[9.0, 3.0], [0.5, 3.0]]])
    b = np.array([[[5.0, 1.0], [2.0, 0.5]], [[1.0, 5.0], [0.5, 2.0]]])
    return ProfileTable("order", ["p0", "p1"], {
        "a": task_profile("a", a, np.array([0.90, 0.95, 0.80, 0.70])),
        "b": task_profile("b", b, np.array([0.90, 0.60, 0.60, 0.70]))})


def plan_on(table: ProfileTable, name: str, slos: dict[str, SLO]):
    return get_registry().create("policy", name).plan(list(table.tasks), table,
                                                      table.processors, slos)


ANY = {"a": SLO(0.0, 1000.0), "b": SLO(0.0, 1000.0)}


@pytest.mark.parametrize("name", ["sv-ao-p", "sv-lo-p", "av-p"])
def test_partitioned_order_is_the_best_spread_order_for_the_dense_models(name: str) -> None:
    for slos in (ANY, {"a": SLO(0.6, 5.5), "b": SLO(0.6, 5.0)}):
        made = plan_on(order_table(), name, slos)
        assert made.order == ("p0", "p1"), slos
        assert all(made.processors_of(t) == ("p0", "p1") for t in ("a", "b"))


def test_sv_ao_p_runs_the_most_accurate_original_and_judges_it_against_the_slo() -> None:
    made = plan_on(order_table(), "sv-ao-p", {"a": SLO(0.5, 100.0), "b": SLO(0.5, 8.0)})
    # dense for both (0.90 > 0.70; a's stitched 0.95 is not an original)
    assert {t: v.choices for t, v in made.variants.items()} == {"a": (0, 0), "b": (0, 0)}
    assert made.estimated_latency_ms == pytest.approx({"a": 5.0, "b": 10.0})
    assert made.estimated_accuracy == pytest.approx({"a": 0.90, "b": 0.90})
    assert made.feasible == {"a": True, "b": False}
    assert "10.000 ms > 8.000 ms" in made.infeasible_reason["b"]


def test_sv_lo_p_runs_the_fastest_original_under_the_fixed_order() -> None:
    # Under (p0,p1) a's dense (5 ms) is faster than its light original (6 ms); b's light
    # (4 ms) is faster than its dense (10 ms). Whatever the SLO asks for.
    for slos in (ANY, {"a": SLO(0.95, 1.0), "b": SLO(0.95, 1.0)}):
        made = plan_on(order_table(), "sv-lo-p", slos)
        assert {t: v.choices for t, v in made.variants.items()} == {"a": (0, 0), "b": (1, 1)}
        assert made.estimated_latency_ms == pytest.approx({"a": 5.0, "b": 4.0})


def test_av_p_takes_the_fastest_original_meeting_the_slo_else_the_closest() -> None:
    made = plan_on(order_table(), "av-p", {"a": SLO(0.6, 5.5), "b": SLO(0.6, 5.0)})
    # a: dense 0.90 @ 5 ms meets it, light 6 ms does not; b: dense 10 ms misses, light 4 ms.
    assert {t: v.choices for t, v in made.variants.items()} == {"a": (0, 0), "b": (1, 1)}
    assert made.feasible == {"a": True, "b": True}
    # Loose: both originals meet it and the faster one is taken, here the dense one for a.
    loose = plan_on(order_table(), "av-p", ANY)
    assert loose.variants["a"].choices == (0, 0) and loose.variants["b"].choices == (1, 1)
    # b under SLO(0.95, 2 ms): no original meets it. Distance (relative shortfall + overrun):
    # dense 0.05/0.95 + (10-2)/2 = 4.05, light 0.25/0.95 + (4-2)/2 = 1.26 -> light.
    closest = plan_on(order_table(), "av-p", {"a": SLO(0.6, 5.5), "b": SLO(0.95, 2.0)})
    assert closest.variants["b"].choices == (1, 1) and not closest.feasible["b"]
    assert closest.estimated_latency_ms["b"] == pytest.approx(4.0)
    assert "no original meets it" in closest.infeasible_reason["b"]


def lpt_table() -> ProfileTable:
    """S = 1, V = 1, two identical processors; whole-model times z 2, y 2, x 3 ms, listed in
    that order so that placing them as listed differs from placing them longest first."""
    def one(name: str, ms: float):
        return task_profile(name, np.full((1, 1, 2), ms), np.array([0.9]))
    return ProfileTable("lpt", ["p0", "p1"], {"z": one("z", 2.0), "y": one("y", 2.0),
                                              "x": one("x", 3.0)})


@pytest.mark.parametrize("name", ["sv-ao-np", "sv-lo-np", "av-np"])
def test_not_partitioned_places_the_longest_task_first_by_earliest_finish(name: str) -> None:
    # Longest first: x (3) -> p0 (tie, first); y (2) -> p1 (finish 2 < 5); z (2) -> p1
    # (2 + 2 = 4 < 3 + 2 = 5). As listed instead, z -> p0, y -> p1, x -> p0 (5 = 5, first).
    made = plan_on(lpt_table(), name, {t: SLO(0.5, 100.0) for t in ("x", "y", "z")})
    assert {t: made.processors_of(t) for t in ("x", "y", "z")} == {
        "x": ("p0",), "y": ("p1",), "z": ("p1",)}
    # each task's own isolated latency, not its finish time on the shared processor
    assert made.estimated_latency_ms == pytest.approx({"x": 3.0, "y": 2.0, "z": 2.0})


@pytest.mark.parametrize("name", ["sv-lo-p", "sv-lo-np", "sv-ao-p", "av-np"])
def test_an_original_a_gate_took_out_is_never_chosen_while_another_remains(name: str) -> None:
    from sparseloom.plan.gating import excluded_profile

    table = hand_table()
    chosen = plan(name, LOOSE).variants["a"].choices[0]
    # The paired gate refused it: its rows read EXCLUDED (the latency-optimal baselines
    # ignore accuracy, and chose it again until the gate gave up; 2026-12-07).
    row = int(table.task("a").index([chosen, chosen]))
    gated = excluded_profile(table, {"a": {row}})
    made = get_registry().create("policy", name).plan(list(gated.tasks), gated,
                                                      gated.processors, LOOSE)
    assert made.variants["a"].choices[0] != chosen
    assert made.variants["b"].choices == plan(name, LOOSE).variants["b"].choices
