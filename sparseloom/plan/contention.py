"""A contention model of T tasks sharing P processors: loaded latency and the bottleneck.

Algorithm 1 ranks plans by the mean of *isolated* chain latencies. When the tasks run at once
every processor is a queue shared by the stages placed on it, so a task's latency is its
service time plus the waiting at every processor it visits; and the pipeline's throughput is
bounded by the busiest processor's summed stage time (``bottleneck_ms``).

The runtime drives tasks closed-loop — each task has one request in flight and issues the
next when the last completes, after an optional think time — so the model is a closed
product-form network: one customer class per task (population 1), one queueing station per
processor (service demand ``D[t, q]`` = the task's summed stage time on ``q``), plus a delay
for the hand-offs and the think time. It is solved with Schweitzer's approximate mean-value
analysis (Bard–Schweitzer AMVA):

    R[t, q] = D[t, q] · (1 + Σ_{s≠t} Q[s, q])       residence time: own service + the queue
    X[t]    = 1 / (Z[t] + H[t] + Σ_q R[t, q])        throughput of task t (requests / ms)
    Q[t, q] = X[t] · R[t, q]                         Little's law

iterated to a fixed point. Population 1 per class makes the own-class term vanish, so the
approximation error is only in how other classes' queues are seen on arrival — small at these
populations. Loaded latency = ``H[t] + Σ_q R[t, q]``; utilisation ``U[q] = Σ_t X[t] D[t, q]``.
Every function is vectorised over leading batch dimensions (candidate plans).
"""

from __future__ import annotations

import attrs
import numpy as np

#: Fixed-point iterations at most, and the relative change that counts as converged.
_MAX_ITERATIONS = 200
_TOLERANCE = 1e-7


@attrs.frozen
class LoadedFigures:
    """The contention model's answer for a batch of plans (leading dims ``...``).

    Attributes:
        latency_ms: each task's loaded end-to-end latency, (..., T).
        throughput_per_s: each task's completed requests per second, (..., T).
        utilisation: each processor's busy fraction, (..., P).
        bottleneck_ms: the busiest processor's summed stage time over one request of every
            task, (...,); the pipeline completes at most T requests per this many ms.
    """

    latency_ms: np.ndarray
    throughput_per_s: np.ndarray
    utilisation: np.ndarray
    bottleneck_ms: np.ndarray


def stage_demands(latency_ms: np.ndarray, choices: np.ndarray, order: np.ndarray,
                  n_processors: int) -> np.ndarray:
    """Per-processor service demand (ms) of stitched ``choices`` (n, S) under ``order`` (S,).

    ``latency_ms`` is the task profile's (S, V, P) array; returns (n, P).
    """
    demand = np.zeros((len(choices), n_processors))
    for position, processor in enumerate(order):
        demand[:, processor] += latency_ms[position, choices[:, position], processor]
    return demand


def loaded_latency(demand_ms: np.ndarray, delay_ms: np.ndarray,
                   think_ms: np.ndarray | float = 0.0) -> LoadedFigures:
    """Solve the closed network for demands (..., T, P) and per-task delays (..., T)."""
    demand = np.asarray(demand_ms, dtype=float)
    delay = np.asarray(delay_ms, dtype=float) + np.asarray(think_ms, dtype=float)
    total = demand.sum(axis=-1, keepdims=True)
    queue = np.divide(demand, total, out=np.zeros_like(demand), where=total > 0)
    residence = demand
    for _ in range(_MAX_ITERATIONS):
        others = queue.sum(axis=-2, keepdims=True) - queue
        residence = demand * (1.0 + others)
        cycle = delay + residence.sum(axis=-1)
        throughput = np.divide(1.0, cycle, out=np.zeros_like(cycle), where=cycle > 0)
        fresh = throughput[..., None] * residence
        if np.max(np.abs(fresh - queue), initial=0.0) < _TOLERANCE:
            queue = fresh
            break
        queue = fresh
    latency = np.asarray(delay_ms, dtype=float) + residence.sum(axis=-1)
    cycle = latency + np.asarray(think_ms, dtype=float)
    throughput = np.divide(1.0, cycle, out=np.zeros_like(cycle), where=cycle > 0)
    utilisation = (throughput[..., None] * demand).sum(axis=-2)
    return LoadedFigures(latency, throughput * 1e3, utilisation, demand.sum(axis=-2).max(axis=-1))
