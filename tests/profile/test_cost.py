"""Profiling cost (the paper's Fig. 12): known unit costs give known totals and savings.

One task with S = 2 positions, V = 3 variants, P = 2 processors and these unit costs:

* a subgraph pass over the eval set 0.5 s, a subgraph deployment (compile + load) 0.25 s,
  a chain timing 4 s / 8 chains = 0.5 s;
* the estimator path's phases: fidelity 2 s (1/3 s per subgraph), latency 12 s (1 s per
  subgraph and processor), accuracy samples 5 s, fit and predict 1 s: 20 s in all.

Exhaustive profiling of V**S = 9 stitched variants under 2! = 2 orders:
9 · (S·0.5 + 2 · (S·0.25 + 0.5)) = 9 · 3 = 27 s, so the estimators save 1 − 20/27.
"""

from __future__ import annotations

import pytest

from sparseloom.profile.cost import estimator_seconds, overall_cost, placement_orders, task_cost

TIMINGS = {"fidelity": 2.0, "latency": 12.0, "accuracy_samples": 5.0, "fit_predict": 1.0,
           "seconds_per_pass": 0.5}


def known_task(**overrides: object) -> dict:
    arguments = {"n_positions": 2, "n_variants": 3, "n_processors": 2, "n_samples": 6,
                 "deploy_seconds": 0.25, "chain_seconds": 4.0, "chains_measured": 8,
                 "truth_seconds": 10.0, "truth_complete": True, **overrides}
    return task_cost(TIMINGS, **arguments)


def test_placement_orders_are_permutations_or_all_assignments() -> None:
    assert placement_orders(2, 2) == [(0, 1), (1, 0)]
    assert len(placement_orders(3, 3)) == 6 and len(set(placement_orders(3, 3))) == 6
    assert placement_orders(3, 1) == [(0,), (1,), (2,)]
    # more positions than processors: every assignment, P**S
    assert placement_orders(2, 3) == [(a, b, c) for a in (0, 1) for b in (0, 1) for c in (0, 1)]


def test_estimator_seconds_sums_the_four_phases_only() -> None:
    assert estimator_seconds(TIMINGS) == 20.0  # seconds_per_pass is a unit, not a phase
    assert estimator_seconds({"latency": 3.0}) == 3.0


def test_task_cost_from_known_units() -> None:
    cost = known_task()
    assert cost["seconds"] == pytest.approx(20.0)
    assert cost["phases"] == {"fidelity": 2.0, "latency": 12.0, "accuracy_samples": 5.0,
                              "fit_predict": 1.0}
    assert cost["orders"] == 2 and cost["stitched_variants"] == 9
    assert cost["units"] == pytest.approx({
        "seconds_per_subgraph_pass": 0.5, "seconds_per_chain_timing": 0.5,
        "seconds_per_subgraph_deploy": 0.25, "seconds_per_subgraph_profile": 1.0})
    assert cost["exhaustive_seconds_estimate"] == pytest.approx(27.0)
    assert cost["reduction"] == pytest.approx(1 - 20 / 27)
    # measured exhaustive: truth 10 s + chains 4 s + 2 orders · 9 variants · 2 deployments
    assert cost["exhaustive_seconds_measured"] == pytest.approx(10 + 4 + 2 * 9 * 2 * 0.25)
    assert known_task(truth_complete=False)["exhaustive_seconds_measured"] is None
    assert known_task(truth_seconds=None)["exhaustive_seconds_measured"] is None


def test_task_cost_extrapolates_with_the_same_units() -> None:
    cost = known_task()
    by_variants = {point["variants"]: point for point in cost["by_variants"]}
    assert sorted(by_variants) == [2, 3, 4, 6, 8, 10]
    # V = 3 is this task: measured, not extrapolated
    assert by_variants[3]["seconds_estimate"] == pytest.approx(20.0)
    assert by_variants[3]["exhaustive_seconds_estimate"] == pytest.approx(27.0)
    # V = 4: fidelity 1/3·2·4 + profile 1·2·4·2 + N = 12 samples · 2 passes · 0.5 + fit 1;
    # exhaustive 16 · 3
    assert by_variants[4]["seconds_estimate"] == pytest.approx(8 / 3 + 16 + 12 + 1)
    assert by_variants[4]["exhaustive_seconds_estimate"] == pytest.approx(48.0)
    # V = 10: N = 80; exhaustive 100 · 3
    v10 = cost["v10"]
    assert v10 == by_variants[10]
    assert v10["seconds_estimate"] == pytest.approx(20 / 3 + 40 + 80 + 1)
    assert v10["exhaustive_seconds_estimate"] == pytest.approx(300.0)
    assert v10["reduction"] == pytest.approx(1 - (20 / 3 + 121) / 300)
    # The paper's S = P = 3: 3! orders, N = 120; exhaustive 1000 · (1.5 + 6 · 1.25)
    paper = cost["paper_setting"]
    assert (paper["variants"], paper["positions"], paper["processors"]) == (10, 3, 3)
    assert paper["seconds_estimate"] == pytest.approx(10 + 90 + 120 * 3 * 0.5 + 1)
    assert paper["exhaustive_seconds_estimate"] == pytest.approx(9000.0)
    assert paper["reduction"] == pytest.approx(1 - 281 / 9000)


def test_overall_cost_sums_the_tasks() -> None:
    first = known_task()
    second = known_task(n_variants=2, truth_complete=False)
    # V = 2 exhaustive: 4 variants · 3 s; measured exhaustive unknown
    assert second["exhaustive_seconds_estimate"] == pytest.approx(12.0)
    both = overall_cost({"a": first, "b": second})
    assert both["seconds"] == pytest.approx(40.0)
    assert both["exhaustive_seconds_estimate"] == pytest.approx(39.0)
    assert both["reduction"] == pytest.approx(1 - 40 / 39)
    # one task without a measured exhaustive figure: no measured total
    assert both["exhaustive_seconds_measured"] is None and both["reduction_measured"] is None
    # At V = 2 the same phase times spread over fewer subgraphs: fidelity 1/2 s and
    # profile 3/2 s per subgraph, so at V = 10 the second task costs 1/2·20 + 3/2·40 + 80 + 1.
    assert both["v10"]["seconds_estimate"] == pytest.approx((20 / 3 + 121) + 151)
    assert both["v10"]["exhaustive_seconds_estimate"] == pytest.approx(600.0)
    paper_second = 0.5 * 30 + 1.5 * 90 + 120 * 3 * 0.5 + 1
    assert both["paper_setting"]["reduction"] == pytest.approx(
        1 - (281 + paper_second) / 18000)
    alone = overall_cost({"a": first})
    assert alone["exhaustive_seconds_measured"] == pytest.approx(23.0)
    assert alone["reduction_measured"] == pytest.approx(1 - 20 / 23)
