"""The §5.1 SLO grid: ranges widened as the paper says, 5 × 5 points, accuracy-major."""

from __future__ import annotations

import numpy as np
import pytest

from sparseloom.plan.slo_grid import grid_middle, original_latency_ms, slo_grid
from tests.plan.tables import task_profile


def test_grid_widens_the_observed_ranges() -> None:
    # S = 1, V = 3, P = 2: originals at 50/120/80 ms best-processor latency.
    latency = np.array([[[50.0, 60.0], [130.0, 120.0], [80.0, 90.0]]])
    profile = task_profile("x", latency, np.array([0.85, 0.92, 0.88]))
    assert list(original_latency_ms(profile)) == [50.0, 120.0, 80.0]
    grid = slo_grid(profile)
    assert len(grid) == 25
    accuracies = sorted({slo.accuracy for slo in grid})
    latencies = sorted({slo.latency_ms for slo in grid})
    assert accuracies == pytest.approx([0.83, 0.8575, 0.885, 0.9125, 0.94])  # the paper's example
    assert latencies == pytest.approx([40.0, 66.0, 92.0, 118.0, 144.0])
    assert [s.accuracy for s in grid[:5]] == [grid[0].accuracy] * 5  # accuracy-major
    assert grid_middle(profile).accuracy == pytest.approx(0.885)
    assert grid_middle(profile).latency_ms == pytest.approx(92.0)


def test_the_latency_axis_is_a_lone_requests_the_cold_stage_times() -> None:
    import attrs

    hot = np.array([[[50.0, 60.0], [130.0, 120.0], [80.0, 90.0]]])
    profile = attrs.evolve(task_profile("x", hot, np.array([0.85, 0.92, 0.88])),
                           latency_cold_ms=hot * [[[2.0, 1.0]]])  # processor 0 cold at 2x
    # cold 100 / 60, 260 / 120, 160 / 90: the fastest processor chosen on cold calls, not
    # the hot stage times the planner adds up (50, 120, 80)
    assert list(original_latency_ms(profile)) == [60.0, 120.0, 90.0]
    assert profile.latency_ms.tolist() == hot.tolist()
    assert task_profile("y", hot, np.array([0.85, 0.92, 0.88])).cold().latency_ms.tolist() == \
        hot.tolist()  # a table without cold calls: its stage times


def test_accuracy_is_clipped_to_one() -> None:
    profile = task_profile("x", np.ones((1, 2, 1)), np.array([0.99, 0.95]))
    assert max(slo.accuracy for slo in slo_grid(profile, points=3)) == 1.0
