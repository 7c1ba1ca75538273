"""The paper's SLO grid Ψ (SparseLoom §5.1), built the same way for any task.

For one task: the observed accuracy range of its original (unstitched) variants widened by
±2 points, and the observed latency range from 0.8× the minimum to 1.2× the maximum; five
uniformly spaced points on each, and their Cartesian product (25 SLOs), accuracy-major.

A variant's observed latency is its estimated chain latency under its fastest processor order
(every assignment of positions to the profile's processors), from the profile's cold stage
times (``TaskProfile.cold``): the latency a lone request of that variant finds on this machine.
Accuracies are clipped to [0, 1].
"""

from __future__ import annotations

import numpy as np

from sparseloom.core.errors import PlanError
from sparseloom.core.types import SLO
from sparseloom.plan.orders import all_orders, latency_matrix
from sparseloom.profile.table import TaskProfile

#: Widening of the accuracy range, in metric points (the paper's ±2 %).
ACCURACY_MARGIN = 0.02
#: Widening of the latency range (the paper's 80 % of the minimum, 120 % of the maximum).
LATENCY_LOW, LATENCY_HIGH = 0.8, 1.2


def original_rows(profile: TaskProfile) -> np.ndarray:
    """Stitched-variant rows of the V original variants (all positions from one variant)."""
    choices = np.repeat(np.arange(profile.n_variants)[:, None], profile.n_positions, axis=1)
    return np.asarray(profile.index(choices), dtype=np.int64).reshape(-1)


def original_latency_ms(profile: TaskProfile) -> np.ndarray:
    """Each original variant's latency under its fastest order, (V,). An order through a
    processor that cannot run one of its subgraphs (a NaN cell: unsupported, or crashed in
    its probe) is skipped; NaN only when no order runs it."""
    orders = all_orders(profile.n_positions, range(profile.latency_ms.shape[2]))
    cold = profile.cold()
    return np.fmin.reduce(latency_matrix(cold, original_rows(cold), orders), axis=1)


def slo_ranges(profile: TaskProfile) -> tuple[tuple[float, float], tuple[float, float]]:
    """The widened ``(accuracy_low, accuracy_high), (latency_low, latency_high)`` of a task."""
    accuracy = np.asarray(profile.source_accuracy, dtype=float)
    latency = original_latency_ms(profile)
    if not (np.all(np.isfinite(accuracy)) and np.all(np.isfinite(latency))):
        raise PlanError(f"task {profile.task!r}: the profile has non-finite accuracies or "
                        "latencies for its original variants; rebuild it with "
                        "`sparseloom profile`")
    accuracy_range = (max(0.0, float(accuracy.min()) - ACCURACY_MARGIN),
                      min(1.0, float(accuracy.max()) + ACCURACY_MARGIN))
    latency_range = (LATENCY_LOW * float(latency.min()), LATENCY_HIGH * float(latency.max()))
    return accuracy_range, latency_range


def slo_grid(profile: TaskProfile, points: int = 5) -> tuple[SLO, ...]:
    """Ψ for one task: ``points × points`` SLOs, accuracy-major (all latencies of the lowest
    accuracy first)."""
    if points < 1:
        raise PlanError(f"an SLO grid needs at least 1 point per axis, got {points}")
    (a_low, a_high), (l_low, l_high) = slo_ranges(profile)
    accuracies = np.linspace(a_low, a_high, points)
    latencies = np.linspace(max(l_low, 1e-9), l_high, points)
    return tuple(SLO(float(a), float(lat)) for a in accuracies for lat in latencies)


def grid_middle(profile: TaskProfile, points: int = 5) -> SLO:
    """The middle point of the task's grid (the default SLO when none is given)."""
    return slo_grid(profile, points)[(points * points) // 2]
