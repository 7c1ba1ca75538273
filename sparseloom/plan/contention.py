"""A contention model of T tasks sharing P processors: loaded latency and the bottleneck.

Algorithm 1 ranks plans by the mean of *isolated* chain latencies. When the tasks run at once
every processor is a queue shared by the stages placed on it, so a task's latency is its
service time plus the waiting at every processor it visits; and the pipeline's throughput is
bounded by the busiest processor's summed stage time (``bottleneck_ms``).

What the runtime does (``sparseloom/runtime/worker.py``), and the model follows: one worker
thread per processor takes requests from its own queue **first come, first served, without
preemption**; consecutive stages of a request on the same processor run at once (one *visit*);
each task has one request in flight and issues the next when the last completes, after an
optional think time (closed loop). So the model is a closed network with one customer class
per task (population 1), one FCFS station per processor and a delay for the hand-offs and the
think time. ``D[t, q]`` is task t's summed stage time on q, ``v[t, q]`` its visits to q per
request (runs of q in the order), ``S[t, q] = D / v`` its service time per visit. Solved with
Schweitzer-style approximate mean-value analysis for FCFS stations with class-dependent
service times:

    R[t, q] = D[t, q] + v[t, q] · Σ_{s≠t} Q[s, q] · S[s, q]    own service + work found queued
    X[t]    = 1 / (Z[t] + H[t] + Σ_q R[t, q])                  throughput of task t (1/ms)
    Q[t, q] = X[t] · R[t, q]                                   Little's law

iterated to a fixed point. Population 1 per class makes the own-class term vanish. A request
found at a station is charged its *full* visit time, not the residual: in a closed loop with
back-to-back requests an arrival is synchronised with the completion that released it, so the
other task's request has typically just started (two tasks of 4 ms on one processor: 8 ms
each, which the model gives exactly). The earlier processor-sharing form
``R = D · (1 + Σ Q)`` scaled the waiting by the *arriving* task's own demand — a 0.7 ms task
behind a 27 ms one was predicted to wait 0.7 ms; under FCFS it waits up to 27 ms (measured:
docs/results.md). Loaded latency = ``H[t] + Σ_q R[t, q]``; utilisation ``U[q] = Σ_t X[t] D[t, q]``.
Every function is vectorised over leading batch dimensions (candidate plans).
"""

from __future__ import annotations

import attrs
import numpy as np

#: Fixed-point iterations at most, and the change in queue lengths that counts as converged.
#: Queue lengths of population-1 classes are probabilities; at 1e-5 the latencies agree with
#: the converged ones to ~1e-5 relative (T=16, P=4: 25-40 iterations; T=4, P=3: ~15).
_MAX_ITERATIONS = 80
_TOLERANCE = 1e-5


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


def visit_counts(order: np.ndarray, n_processors: int) -> np.ndarray:
    """Visits per request to each processor under ``order`` (S,): runs of it, (P,)."""
    order = np.asarray(order)
    starts = np.concatenate([[True], order[1:] != order[:-1]])
    return np.bincount(order[starts], minlength=n_processors).astype(float)


def segments(order: np.ndarray) -> np.ndarray:
    """The visit (run of equal processors) each position of ``order`` (S,) belongs to, (S,)."""
    order = np.asarray(order)
    return np.cumsum(np.concatenate([[0], order[1:] != order[:-1]]))


def stage_demands(latency_ms: np.ndarray, choices: np.ndarray, order: np.ndarray,
                  n_processors: int) -> np.ndarray:
    """Per-processor service demand (ms) of stitched ``choices`` (n, S) under ``order`` (S,).

    ``latency_ms`` is the task profile's (S, V, P) array; returns (n, P).
    """
    demand = np.zeros((len(choices), n_processors))
    for position, processor in enumerate(order):
        demand[:, processor] += latency_ms[position, choices[:, position], processor]
    return demand


def visit_demands(latency_ms: np.ndarray, choices: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Service time (ms) of each visit of ``order`` for stitched ``choices`` (n, S), (n, K).

    Under a fixed order the hand-offs are the same for every variant, so a variant no worse in
    every visit is no worse for its own latency and puts no more work on any processor.
    """
    visit = segments(order)
    demand = np.zeros((len(choices), int(visit[-1]) + 1))
    for position, processor in enumerate(order):
        demand[:, visit[position]] += latency_ms[position, choices[:, position], processor]
    return demand


def pareto_rows(costs: np.ndarray, limit: int) -> np.ndarray:
    """Indices of up to ``limit`` Pareto-optimal rows of ``costs`` (n, K), least total first.

    A row is dropped when another is no larger in every column (of equal rows the first is
    kept). Exact when the front has at most ``limit`` members; otherwise its ``limit`` members
    of least total cost. The row of least total among those left is undominated, so it is
    taken and removes everything it dominates — one vectorised pass per member, on a set that
    shrinks fast (no sort of all n rows).
    """
    columns = np.ascontiguousarray(np.asarray(costs, dtype=float).T)      # (K, n)
    index = np.arange(columns.shape[1])
    total = columns.sum(axis=0)
    kept: list[int] = []
    while index.size and len(kept) < limit:
        pivot = int(np.argmin(total))
        kept.append(int(index[pivot]))
        survivors = np.any(columns < columns[:, pivot:pivot + 1], axis=0)
        columns, index, total = columns[:, survivors], index[survivors], total[survivors]
    return np.asarray(kept, dtype=np.int64)


def loaded_latency(demand_ms: np.ndarray, delay_ms: np.ndarray,
                   think_ms: np.ndarray | float = 0.0,
                   visits: np.ndarray | None = None) -> LoadedFigures:
    """Solve the closed FCFS network (see the module doc).

    :param demand_ms: summed stage time per task and processor, (..., T, P).
    :param delay_ms: per-task hand-off time, (..., T).
    :param think_ms: pause between a task's requests, scalar or (..., T).
    :param visits: visits per request per task and processor, broadcastable to (..., T, P);
        default one wherever the demand is positive.
    """
    demand = np.asarray(demand_ms, dtype=float)
    if visits is None:
        visits = (demand > 0).astype(float)
    visits = np.broadcast_to(np.asarray(visits, dtype=float), demand.shape)
    service = np.divide(demand, visits, out=np.zeros_like(demand), where=visits > 0)
    delay = np.asarray(delay_ms, dtype=float) + np.asarray(think_ms, dtype=float)
    total = demand.sum(axis=-1, keepdims=True)
    queue = np.divide(demand, total, out=np.zeros_like(demand), where=total > 0)
    residence = demand
    # A plan with no work and no delay has cycle 0; keep it finite (its queues stay 0).
    floor = np.where(delay + total[..., 0] > 0, 0.0, 1.0)
    for _ in range(_MAX_ITERATIONS):
        work = queue * service                                # work a task holds at q
        residence = demand + visits * (work.sum(axis=-2, keepdims=True) - work)
        fresh = residence / (delay + floor + residence.sum(axis=-1))[..., None]
        converged = np.max(np.abs(fresh - queue), initial=0.0) < _TOLERANCE
        queue = fresh
        if converged:
            break
    latency = np.asarray(delay_ms, dtype=float) + residence.sum(axis=-1)
    cycle = latency + np.asarray(think_ms, dtype=float)
    throughput = np.divide(1.0, cycle, out=np.zeros_like(cycle), where=cycle > 0)
    utilisation = (throughput[..., None] * demand).sum(axis=-2)
    return LoadedFigures(latency, throughput * 1e3, utilisation, demand.sum(axis=-2).max(axis=-1))
