"""Decision quality: do plans made from the profile truly meet the SLO, and what do they lose?

For every task and every SLO σ of its grid Ψ (:func:`~sparseloom.plan.slo_grid.slo_grid`),
Algorithm 1 is run on the task alone twice:

* from the *profile* (estimated accuracies, additive latencies) — the decision sparseloom makes;
* from the *ground truth* — every stitched variant's exact metric and every (variant, order)
  chain's latency measured end to end — the decision an exhaustive profile would make.

Reported per task and overall: ``meets_rate`` (the profile's pick truly meets σ, over the σ
the ground truth can meet), ``latency_regret_ms`` (measured latency of the profile's pick minus
the truth-optimal one, over σ where both truly meet it) and ``accuracy_regret`` (the truth
pick's exact metric minus the profile pick's; negative when the profile's pick is more
accurate). Measuring needs the zoo and the processors, so :func:`measure_truth` is separate
from the pure :func:`decision_quality`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from sparseloom.core.types import SLO
from sparseloom.plan.orders import all_orders, best_per_order, latency_matrix
from sparseloom.plan.slo_grid import slo_grid
from sparseloom.profile.table import TaskProfile

#: Tasks with more (variant, order) chains than this are not validated (too long to time).
MAX_CHAINS = 4096


def _estimated_pick(profile: TaskProfile, slo: SLO, orders: np.ndarray) -> tuple[int, int]:
    rows = np.flatnonzero(profile.accuracy() >= slo.accuracy)
    best, row = best_per_order(profile, rows, orders)
    if not np.isfinite(best).any() or best.min() > slo.latency_ms:
        return -1, -1
    o = int(np.argmin(best))
    return int(row[o]), o


def _true_pick(accuracy: np.ndarray, latency: np.ndarray, slo: SLO) -> tuple[int, int]:
    ok = (accuracy[:, None] >= slo.accuracy) & (latency <= slo.latency_ms)
    if not ok.any():
        return -1, -1
    masked = np.where(ok, latency, np.inf)
    row, o = np.unravel_index(int(np.argmin(masked)), masked.shape)
    return int(row), int(o)


def decision_quality(profile: TaskProfile, true_accuracy: np.ndarray,
                     true_latency_ms: np.ndarray, grid: Sequence[SLO] | None = None
                     ) -> dict[str, Any]:
    """Quality of the profile's decisions over ``grid`` against measured truth.

    :param true_accuracy: the exact metric of every stitched variant, (V**S,).
    :param true_latency_ms: the measured latency of every variant under every order of
        :func:`~sparseloom.plan.orders.all_orders` over the profile's processors, (V**S, |Ω|).
    """
    orders = all_orders(profile.n_positions, range(profile.latency_ms.shape[2]))
    grid = tuple(grid or slo_grid(profile))
    met, reachable, latency_regret, accuracy_regret, points = 0, 0, [], [], []
    for slo in grid:
        picked, truth = _estimated_pick(profile, slo, orders), _true_pick(
            true_accuracy, true_latency_ms, slo)
        meets = picked[0] >= 0 and bool(
            true_accuracy[picked[0]] >= slo.accuracy
            and true_latency_ms[picked] <= slo.latency_ms)
        if truth[0] >= 0:
            reachable += 1
            met += int(meets)
            if meets:
                latency_regret.append(float(true_latency_ms[picked] - true_latency_ms[truth]))
                accuracy_regret.append(float(true_accuracy[truth[0]] - true_accuracy[picked[0]]))
        points.append({"accuracy": slo.accuracy, "latency_ms": slo.latency_ms,
                       "truly_meets": meets, "truth_can_meet": truth[0] >= 0})
    return {
        "slos": len(grid), "reachable": reachable,
        "meets_rate": met / reachable if reachable else None,
        "latency_regret_ms": float(np.mean(latency_regret)) if latency_regret else None,
        "accuracy_regret": float(np.mean(accuracy_regret)) if accuracy_regret else None,
        "estimated_latency_error_ms": float(np.mean(np.abs(
            latency_matrix(profile, np.arange(profile.n_stitched), orders)
            - true_latency_ms))),
        "points": points,
    }


def measure_truth(workload: Any, table: Any, processors: Sequence[Any], options: Any,
                  progress: bool = False) -> dict[str, tuple[np.ndarray, np.ndarray] | str]:
    """Exact metric of every stitched variant and measured latency of every chain, per task.

    A task with more than :data:`MAX_CHAINS` chains gets a string saying why it was skipped.
    """
    from sparseloom.profile.builder import timing_jobs, zoo_for
    from sparseloom.profile.measure import default_backend_resolver, measure_task
    from sparseloom.profile.store import ProfileStore
    from sparseloom.profile.validation import ground_truth

    store = ProfileStore(table.meta["accuracy_cache_directory"])
    result: dict[str, tuple[np.ndarray, np.ndarray] | str] = {}
    for task in workload.tasks:
        profile = table.task(task.name)
        orders = all_orders(profile.n_positions, range(len(processors)))
        if profile.n_stitched * len(orders) > MAX_CHAINS:
            result[task.name] = (f"{profile.n_stitched * len(orders)} chains exceed "
                                 f"{MAX_CHAINS}; not validated")
            continue
        zoo = zoo_for(task, processors, options, progress)
        truth = ground_truth(task, zoo, store, options.evaluation_processor, progress)
        if truth is None:
            result[task.name] = "too many stitched variants to measure exactly; not validated"
            continue
        chains = [(tuple(int(c) for c in choices), tuple(int(p) for p in order))
                  for choices in profile.choices() for order in orders]
        measured = measure_task(task.name, timing_jobs(task, zoo, options), processors,
                                default_backend_resolver, options.config, chains=chains)
        latency = measured.chain_ms.reshape(profile.n_stitched, len(orders))
        result[task.name] = (truth[0], latency)
    return result
