"""The six §5.1 baselines on a hand-built table whose right answers are known."""

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


def test_every_baseline_docstring_names_published_systems() -> None:
    for name in ("sv-ao-p", "sv-ao-np", "sv-lo-p", "sv-lo-np", "av-p", "av-np"):
        doc = get_registry().get_policy(name).factory.__doc__
        assert any(system in doc for system in ("Pipe-it", "Band", "Tango", "Hetero2Pipe"))
