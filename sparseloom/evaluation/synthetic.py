"""Profile tables that were not measured: hand-made ones (tests) and scaled-up ones (sweeps).

:func:`task_profile` builds a :class:`~sparseloom.profile.table.TaskProfile` from a latency
array alone. :func:`synthetic_profile` makes T tasks × S positions × V variants × P processors
for the simulator's scale sweeps (settings the paper does not run); its numbers are drawn from
documented distributions, not measured, and every table it makes says so in ``meta``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sparseloom.profile.table import ProfileTable, TaskProfile

#: Variant kinds of a synthetic zoo, cycled (the default zoo's mix of compressors).
SYNTHETIC_KINDS = ("dense", "unstructured", "unstructured", "structured", "structured",
                   "int8", "fp16", "unstructured+int8", "structured", "unstructured")
#: Latency factor of each kind against dense on the reference processor (drawn around these;
#: the bundled default zoo's OpenVINO-CPU profile is in the same range, see docs/evaluation.md).
KIND_LATENCY = {"dense": 1.0, "unstructured": 0.95, "structured": 0.7, "int8": 0.6,
                "fp16": 1.0, "unstructured+int8": 0.55}
#: Accuracy drop of a whole model made of one kind (split evenly over its positions).
KIND_DROP = {"dense": 0.0, "unstructured": 0.02, "structured": 0.05, "int8": 0.01,
             "fp16": 0.0, "unstructured+int8": 0.03}


def task_profile(name: str, latency_ms: np.ndarray, *, accuracy: np.ndarray | None = None,
                 handoff_ms: np.ndarray | None = None, kinds: Sequence[str] | None = None,
                 memory_bytes: np.ndarray | None = None, load_ms: float = 0.0,
                 metric: str = "accuracy") -> TaskProfile:
    """A task profile from its (S, V, P) latencies; other fields default to zero cost.

    :param accuracy: metric of every stitched variant (V**S,); default 0.9 everywhere.
    :param handoff_ms: (S-1, P, P) hand-off costs; default zero.
    :param load_ms: compile + load time of every subgraph (split evenly).
    """
    latency = np.asarray(latency_ms, dtype=float)
    s, v, p = latency.shape
    kinds = tuple(kinds or ("dense",) * v)
    stitched = np.full(v**s, 0.9) if accuracy is None else np.asarray(accuracy, dtype=float)
    originals = stitched[[int(np.ravel_multi_index((i,) * s, (v,) * s)) for i in range(v)]]
    return TaskProfile(
        task=name, metric=metric, variant_names=[f"v{i}" for i in range(v)],
        variant_kinds=kinds, variant_levels=np.zeros(v), source_accuracy=originals,
        latency_ms=latency, latency_spread_ms=np.zeros_like(latency),
        compile_ms=np.full_like(latency, load_ms / 2), load_ms=np.full_like(latency, load_ms / 2),
        memory_bytes=(np.full(latency.shape, 1 << 20, dtype=np.int64) if memory_bytes is None
                      else memory_bytes),
        handoff_ms=np.zeros((max(s - 1, 0), p, p)) if handoff_ms is None else handoff_ms,
        accuracy_estimated=stitched, accuracy_measured=np.full(v**s, np.nan),
    )


def synthetic_profile(tasks: int = 4, positions: int = 3, variants: int = 10,
                      processors: Sequence[str] = ("CPU", "GPU", "NPU"), *,
                      seed: int = 0, speed: Sequence[float] | None = None) -> ProfileTable:
    """A synthetic profile table (see the module doc): T tasks, S positions, V variants.

    Dense position latency ~ U(1, 4) ms on the reference processor; variant kind factors
    from :data:`KIND_LATENCY` × U(0.9, 1.1); processor p runs ``speed[p]`` times the
    reference latency (default 1, 0.6, 0.8, 0.9 …); hand-offs between processors 0.1 ms;
    dense accuracy ~ U(0.75, 0.95), a stitched variant losing the mean of its positions'
    drops (:data:`KIND_DROP` × U(0.5, 1.5)).
    """
    rng = np.random.default_rng(seed)
    names = tuple(processors)
    factors = np.asarray(speed if speed is not None else
                         ([1.0, 0.6, 0.8] + [0.9] * len(names))[:len(names)], dtype=float)
    kinds = [SYNTHETIC_KINDS[i % len(SYNTHETIC_KINDS)] for i in range(variants)]
    table = ProfileTable(f"synthetic-T{tasks}-S{positions}-V{variants}-P{len(names)}", names,
                         meta={"synthetic": True, "seed": seed,
                               "note": "synthetic numbers, not measured"})
    for t in range(tasks):
        dense = rng.uniform(1.0, 4.0, size=positions)
        kind_factor = np.array([KIND_LATENCY[k] for k in kinds]) * rng.uniform(0.9, 1.1,
                                                                                 variants)
        latency = dense[:, None, None] * kind_factor[None, :, None] * factors[None, None, :]
        drops = np.array([KIND_DROP[k] for k in kinds]) * rng.uniform(0.5, 1.5, variants)
        grid = np.zeros(())
        for _ in range(positions):
            grid = np.add.outer(grid, drops / positions)
        accuracy = np.clip(rng.uniform(0.75, 0.95) - grid.ravel(), 0.0, 1.0)
        handoff = np.full((max(positions - 1, 0), len(names), len(names)), 0.1)
        for j in range(max(positions - 1, 0)):
            np.fill_diagonal(handoff[j], 0.0)
        table.tasks[f"task{t}"] = task_profile(
            f"task{t}", latency, accuracy=accuracy, handoff_ms=handoff, kinds=kinds,
            load_ms=20.0)
    return table
