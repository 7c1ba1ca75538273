"""``sparseloom bench policies``: decision time of the policies on synthetic profile tables.

Tables are built with the real :class:`~sparseloom.profile.table.ProfileTable` class (random
latencies, hand-offs, memory and accuracies); SLOs are each task's grid middle. The figure is
the median over repeats of :attr:`Plan.decision_seconds` (the policy's own time, without SLO
resolution or preloading), or of the wall time of its ``plan`` call when the policy leaves that
optional field at 0.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from sparseloom.core.registry import DEFAULT_POLICY, get_registry
from sparseloom.core.types import Processor
from sparseloom.plan.slo_grid import grid_middle
from sparseloom.profile.table import ProfileTable, TaskProfile

#: (T, V, S, P) of the two benchmark tables and their decision-time goals in seconds.
SIZES: tuple[tuple[tuple[int, int, int, int], float], ...] = (
    ((4, 10, 3, 3), 0.010), ((16, 20, 4, 4), 1.0))


def synthetic_table(tasks: int, variants: int, positions: int, processors: int,
                    seed: int = 0) -> ProfileTable:
    """A random profile table of T tasks × S positions × V variants × P processors."""
    rng = np.random.default_rng(seed)
    profiles = {}
    shape = (positions, variants, processors)
    for t in range(tasks):
        stitched = variants**positions
        profiles[f"task{t}"] = TaskProfile(
            task=f"task{t}", metric="accuracy",
            variant_names=[f"v{i}" for i in range(variants)],
            variant_kinds=["dense"] + ["int8"] * (variants - 1),
            variant_levels=np.zeros(variants), source_accuracy=rng.uniform(0.7, 0.9, variants),
            latency_ms=rng.uniform(1.0, 10.0, shape), latency_spread_ms=np.zeros(shape),
            compile_ms=rng.uniform(10.0, 100.0, shape), load_ms=rng.uniform(1.0, 10.0, shape),
            memory_bytes=rng.integers(10**5, 10**7, shape),
            handoff_ms=rng.uniform(0.0, 0.5, (positions - 1, processors, processors)),
            accuracy_estimated=rng.uniform(0.7, 0.9, stitched),
            accuracy_measured=np.full(stitched, np.nan))
    return ProfileTable("synthetic", [f"proc{i}" for i in range(processors)], profiles)


def _decision_seconds(policy: Any, table: ProfileTable, processors: list[Processor],
                      slos: dict[str, Any]) -> float:
    """The plan's own decision time, else the wall time of the ``plan`` call."""
    started = time.perf_counter()
    plan = policy.plan(list(table.tasks), table, processors, slos)
    elapsed_s = time.perf_counter() - started
    return float(getattr(plan, "decision_seconds", 0.0) or elapsed_s)


def bench_policies(policies: list[str] | None = None, repeats: int = 5) -> list[dict[str, Any]]:
    """Median decision time of each policy at each of :data:`SIZES`."""
    names = policies or [DEFAULT_POLICY]
    rows = []
    for (t, v, s, p), goal in SIZES:
        table = synthetic_table(t, v, s, p)
        slos = {name: grid_middle(profile) for name, profile in table.tasks.items()}
        processors = [Processor(n, "synthetic", n) for n in table.processors]
        for name in names:
            policy = get_registry().create("policy", name)
            times = [_decision_seconds(policy, table, processors, slos) for _ in range(repeats)]
            median = statistics.median(times)
            rows.append({"policy": name, "tasks": t, "variants": v, "positions": s,
                         "processors": p, "decision_seconds": median,
                         "goal_seconds": goal, "met": median < goal})
    return rows
