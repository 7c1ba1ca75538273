"""Synthetic profile tables built with the real :class:`ProfileTable` class, for plan tests."""

from __future__ import annotations

import numpy as np

from sparseloom.profile.table import ProfileTable, TaskProfile


def task_profile(name: str, latency_ms: np.ndarray, accuracy: np.ndarray, *,
                 source_accuracy: np.ndarray | None = None, handoff_ms: np.ndarray | None = None,
                 memory_bytes: np.ndarray | None = None, measured: np.ndarray | None = None,
                 ) -> TaskProfile:
    """A task profile with the given (S, V, P) latencies and (V**S,) accuracies."""
    s, v, p = latency_ms.shape
    source = (np.asarray(accuracy)[[sum(i * v**k for k in range(s)) for i in range(v)]]
              if source_accuracy is None else source_accuracy)
    return TaskProfile(
        task=name, metric="accuracy", variant_names=[f"v{i}" for i in range(v)],
        variant_kinds=["dense"] + ["int8"] * (v - 1), variant_levels=np.zeros(v),
        source_accuracy=source, latency_ms=latency_ms, latency_spread_ms=np.zeros((s, v, p)),
        compile_ms=np.full((s, v, p), 10.0), load_ms=np.full((s, v, p), 1.0),
        memory_bytes=np.full((s, v, p), 100) if memory_bytes is None else memory_bytes,
        handoff_ms=np.zeros((max(s - 1, 0), p, p)) if handoff_ms is None else handoff_ms,
        accuracy_estimated=accuracy,
        accuracy_measured=np.full(v**s, np.nan) if measured is None else measured)


def random_table(tasks: int, variants: int, positions: int, processors: int,
                 seed: int = 0) -> ProfileTable:
    """Random latencies, hand-offs, memory and accuracies (T tasks, V, S, P)."""
    rng = np.random.default_rng(seed)
    profiles = {}
    for t in range(tasks):
        shape = (positions, variants, processors)
        profiles[f"t{t}"] = task_profile(
            f"t{t}", rng.uniform(1.0, 10.0, shape), rng.uniform(0.7, 0.9, variants**positions),
            handoff_ms=rng.uniform(0.0, 0.5, (positions - 1, processors, processors)),
            memory_bytes=rng.integers(1_000, 100_000, shape))
    return ProfileTable("synthetic", [f"p{i}" for i in range(processors)], profiles)


def feedback_table() -> ProfileTable:
    """Two one-variant tasks, S = 2, P = 2 ("p0", "p1"), for feedback tests.

    Stage times (ms) on p0/p1, position 0 | position 1: x 5/4 | 4/5, y 1/3 | 3/1. Chains:
    x 10 under (p0, p1) and 8 under (p1, p0); y 2 and 6. Algorithm 1's mean: (p0, p1) 6 <
    (p1, p0) 7, so p* = (p0, p1); with x 3× slower, 16 > 15 and p* = (p1, p0).
    """
    x = np.array([[[5.0, 4.0]], [[4.0, 5.0]]])
    y = np.array([[[1.0, 3.0]], [[3.0, 1.0]]])
    return ProfileTable("feedback", ["p0", "p1"], {
        "x": task_profile("x", x, np.array([0.9])), "y": task_profile("y", y, np.array([0.9]))})
