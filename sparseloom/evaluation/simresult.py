"""What a simulation returns: :class:`SimResult` per run, :class:`SimTaskResult` per task,
and the pipeline bound the run summary also reports."""

from __future__ import annotations

import collections
import math
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from sparseloom.profile.table import ProfileTable
from sparseloom.runtime.monitor import STATISTIC
from sparseloom.runtime.records import LatencyStats, latency_stats


@attrs.frozen
class SimTaskResult:
    """One task's simulated results (the run summary's fields that a simulation can give).

    ``accuracy`` is the profile's metric of the variant served most; with
    ``SimConfig.score_served`` the accuracy SLO is judged, as a real run judges it, on the
    requests served: ``accuracy_served`` is then a seeded draw of Binomial(completed,
    accuracy) / completed (each served eval row right with the variant's probability) — or,
    where ``SimConfig.eval_rows`` gives the task's eval-set size N, the runtime's own draw:
    whole passes over the N rows, then the rest without replacement (hypergeometric) — else
    equal to ``accuracy``.
    """

    task: str
    slo_accuracy: float
    slo_latency_ms: float
    variant: str
    processors: tuple[str, ...]
    accuracy: float
    latency: LatencyStats
    completed: int
    violated: str
    accuracy_served: float = math.nan


@attrs.frozen
class SimResult:
    """A simulated run: per-task results, violation rate, throughput and what the policy did.

    Attributes:
        policy: the policy's name.
        tasks: per-task results.
        violation_rate: fraction of tasks that violate their SLO.
        throughput_rps: completed requests / simulated time.
        makespan_ms: simulated time from the first request to the last end.
        pipeline_bound_rps: T / (busiest processor's summed stage time), final plan.
        pipeline_share: throughput / pipeline bound.
        utilisation: busy fraction of each processor.
        switches: plan changes after the first (joins and feedback).
        load_ms: compile + load time spent on non-resident subgraphs.
        decision_seconds: summed wall time the policy took to decide.
        resident_bytes: memory of the preloaded subgraphs.
    """

    policy: str
    tasks: tuple[SimTaskResult, ...]
    violation_rate: float
    throughput_rps: float
    makespan_ms: float
    pipeline_bound_rps: float
    pipeline_share: float
    utilisation: dict[str, float]
    switches: int
    load_ms: float
    decision_seconds: float
    resident_bytes: int

    def to_dict(self) -> dict[str, Any]:
        """The result as plain JSON-ready data."""
        return attrs.asdict(self)


def sim_result(sim: Any, resident_bytes: int) -> SimResult:
    """The results of a finished simulation (``simulator._Simulation``)."""
    profile = sim.profile
    tasks = []
    rng = np.random.default_rng(sim.config.seed)
    for name in sim.joined:
        slo, samples = sim.slos[name], sim.latencies[name]
        stats = latency_stats(samples)
        route = sim.served[name].most_common(1)[0][0] if sim.served[name] else sim.routes[name]
        accuracy = float(profile.task(name).accuracy(list(route.choices)))
        served = accuracy
        if sim.config.score_served and samples and 0.0 <= accuracy <= 1.0:
            served = served_accuracy(rng, accuracy, len(samples),
                                     int(sim.config.eval_rows.get(name, 0)))
        sides = [side for side, bad in (
            ("accuracy", not served >= slo.accuracy),
            ("latency", not stats.percentile(STATISTIC) <= slo.latency_ms)) if bad]
        tasks.append(SimTaskResult(
            name, slo.accuracy, slo.latency_ms, ",".join(map(str, route.choices)),
            tuple(profile.processors[q] for q in route.processors), accuracy, stats,
            len(samples), "+".join(sides), served))
    makespan = sim.now_ms
    completed = sum(t.completed for t in tasks)
    throughput = completed * 1e3 / makespan if makespan > 0 else math.nan
    bound = pipeline_bound_rps(profile, {n: sim.routes[n] for n in sim.joined})
    return SimResult(
        policy=sim.config.policy, tasks=tuple(tasks),
        violation_rate=sum(1 for t in tasks if t.violated) / len(tasks) if tasks else math.nan,
        throughput_rps=throughput, makespan_ms=makespan, pipeline_bound_rps=bound,
        pipeline_share=throughput / bound if bound > 0 else math.nan,
        utilisation={profile.processors[q]: (b / makespan if makespan > 0 else 0.0)
                     for q, b in sim.busy_ms.items()},
        switches=sim.switches, load_ms=sim.load_ms, decision_seconds=sim.decision_seconds,
        resident_bytes=int(resident_bytes))


def served_accuracy(rng: np.random.Generator, accuracy: float, served: int,
                    eval_rows: int = 0) -> float:
    """The accuracy of ``served`` requests of a variant right with probability ``accuracy``.

    With ``eval_rows`` = N > 0, as the runtime serves them: rows of a shuffled N-row eval
    set in turn, ``round(accuracy · N)`` of them right — whole passes, then the rest drawn
    without replacement. Without: each request right independently (binomial)."""
    if eval_rows <= 0:
        return float(rng.binomial(served, accuracy)) / served
    right = round(accuracy * eval_rows)
    passes, rest = divmod(served, eval_rows)
    drawn = int(rng.hypergeometric(right, eval_rows - right, rest)) if rest else 0
    return float(passes * right + drawn) / served


def pipeline_bound_rps(profile: ProfileTable, routes: Mapping[str, Any]) -> float:
    """T / (busiest processor's summed stage time) in requests/s, for routes with ``choices``
    and processor indices ``processors``; NaN without routes."""
    load: dict[int, float] = collections.defaultdict(float)
    for name, route in routes.items():
        latency = profile.task(name).latency_ms
        for j, (choice, q) in enumerate(zip(route.choices, route.processors, strict=True)):
            load[q] += float(latency[j, choice, q])
    busiest = max(load.values(), default=0.0)
    return len(routes) * 1e3 / busiest if busiest > 0 else math.nan
