"""No policy places a subgraph on a processor that computes it differently from the profile's
accuracies (``TaskProfile.numerics_error`` over the tolerance)."""

from __future__ import annotations

import numpy as np
import pytest

from sparseloom.core.registry import get_registry
from sparseloom.core.types import SLO
from sparseloom.plan.api import make_plan
from sparseloom.plan.feasible import faithful_profile, restrict_profile
from sparseloom.profile.numerics import NUMERICS_TOLERANCE
from sparseloom.profile.table import ProfileTable
from tests.plan.tables import task_profile

BUILT_IN = sorted(r.name for r in get_registry().policies())


def _table(flag: bool) -> ProfileTable:
    """Two tasks, S = 2, V = 2, P = 2. Variant 1 is as accurate as the dense one and 4× faster
    on p0 everywhere; with ``flag``, p0 computes variant 1 differently (an int8 kernel of its
    own), so the profile's accuracy of any variant using it on p0 is not what p0 serves."""
    tasks = {}
    for name in ("a", "b"):
        latency = np.empty((2, 2, 2))
        latency[:, 0, :] = [4.0, 6.0]  # dense: p0, p1
        latency[:, 1, :] = [1.0, 5.0]  # variant 1: fast on p0 only
        profile = task_profile(name, latency, np.full(4, 0.9))
        if flag:
            profile.numerics_error[:, 1, 0] = 0.2
        tasks[name] = profile
    return ProfileTable("faithful", ["p0", "p1"], tasks)


def _unfaithful_placements(table: ProfileTable, policy: str, slos: dict[str, SLO] | None = None
                           ) -> list[tuple[str, int, int]]:
    plan = make_plan(table, policy=policy, slos=slos).plan
    found = []
    for task, variant in plan.variants.items():
        processors = plan.processors_of(task)
        for position, (choice, processor) in enumerate(zip(variant.choices, processors,
                                                           strict=True)):
            error = table.task(task).numerics_error[position, choice,
                                                    table.processors.index(processor)]
            if error > NUMERICS_TOLERANCE:
                found.append((task, position, choice))
    return found


def test_the_fast_variant_is_placed_on_p0_when_p0_computes_it_faithfully() -> None:
    # Without the flag the fast (variant 1, p0) pair is worth taking: the test can fail.
    plan = make_plan(_table(flag=False), policy="sparseloom-loaded").plan
    assert any(1 in v.choices for v in plan.variants.values())
    assert "p0" in {p for t in plan.variants for p in plan.processors_of(t)}


@pytest.mark.parametrize("policy", BUILT_IN)
def test_no_policy_places_a_subgraph_where_its_numerics_differ(policy: str) -> None:
    assert _unfaithful_placements(_table(flag=True), policy) == []


def test_faithful_profile_costs_flagged_pairs_infinite_latency() -> None:
    clean = _table(flag=False)
    assert faithful_profile(clean) is clean
    masked = faithful_profile(_table(flag=True)).task("a").latency_ms
    assert np.isinf(masked[:, 1, 0]).all() and np.isfinite(masked[:, 0, :]).all()
    assert (masked[:, 1, 1] == 5.0).all()


def test_a_position_no_processor_computes_faithfully_is_a_clear_error() -> None:
    from sparseloom.core.errors import PlanError

    table = _table(flag=True)
    table.task("b").numerics_error[0] = 0.5  # position 0: every variant, every processor
    with pytest.raises(PlanError, match=r"task 'b': every variant of position 0 .*p0, p1"):
        make_plan(table, policy="sparseloom-loaded")


def _served_table(served: float) -> ProfileTable:
    """:func:`_table` with p0's arithmetic differing for variant 1, and the stitched variant
    (1, 1) measured *as served* on p0 at ``served``."""
    table = _table(flag=True)
    for profile in table.tasks.values():
        profile.served_accuracy[profile.index([1, 1]), 0] = served
    return table


SLOS = {"a": SLO(0.85, 1000.0), "b": SLO(0.85, 1000.0)}


def test_loaded_policy_serves_a_variant_measured_as_served_where_it_is_flagged() -> None:
    plan = make_plan(_served_table(0.87), policy="sparseloom-loaded", slos=SLOS).plan
    # Both tasks want the 2 ms chain (1, 1) on p0 over 8 ms elsewhere; the loaded makespan of
    # both there (4 ms) beats any split (dense on p1: 12 ms).
    served_on_p0 = [t for t in plan.variants
                    if plan.variants[t].choices == (1, 1) and plan.processors_of(t) == ("p0",) * 2]
    assert served_on_p0  # the masked table alone never places (1, 1) on p0
    for task in served_on_p0:
        assert plan.estimated_accuracy[task] == pytest.approx(0.87)  # served, not the profile's
        assert plan.accuracy_measured[task]


def test_a_variant_served_below_its_accuracy_slo_stays_off_the_processor() -> None:
    table = _served_table(0.80)  # the profile says 0.9; p0 serves 0.80 < 0.85
    assert _unfaithful_placements(table, "sparseloom-loaded", SLOS) == []
    plan = make_plan(table, policy="sparseloom-loaded", slos=SLOS).plan
    assert all(plan.estimated_accuracy[t] == pytest.approx(0.9) for t in plan.variants)


@pytest.mark.parametrize("policy", [p for p in BUILT_IN if p != "sparseloom-loaded"])
def test_other_policies_keep_to_the_numerics_check(policy: str) -> None:
    assert _unfaithful_placements(_served_table(0.87), policy) == []


def test_restricting_the_processors_keeps_the_served_accuracies_aligned() -> None:
    table = _served_table(0.87)
    kept = restrict_profile(table, ["p0"]).task("a").served_accuracy
    assert kept.shape == (4, 1) and kept[3, 0] == np.float32(0.87)
    assert np.isnan(restrict_profile(table, ["p1"]).task("a").served_accuracy).all()
