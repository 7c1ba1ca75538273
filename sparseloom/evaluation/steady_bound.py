"""How high a steady run's STP could have been, given the models a policy served: its ceiling.

In the steady scenario every task keeps one request in flight for a fixed time, and STP is
Σ each task's rate × its isolated dense latency (:func:`~sparseloom.evaluation.
serve_scenarios.steady`). With the models a policy serves, a task's rate is at most 1 ÷ its
model's fastest latency alone (one request in flight), and the tasks' rates together spend
at most the cores' time: Σ rate × the model's cheapest core time (latency × threads) ≤ the
cores. The goal also asks that no task run below :data:`TASK_FLOOR` × its rate under the
round's best stock runtime. The highest STP under those three limits is a fractional
knapsack, solved exactly by :func:`stp_bound`: every task at its floor, then the cores' time
left to the tasks that buy the most STP per core millisecond (isolated latency ÷ core time),
each up to its one-request limit.

Per round, a sparseloom policy's **STP ceiling** is that bound for its models ÷ the measured
STP of the round's best stock runtime: the STP ratio its picks allow on these cores without
starving a task. A ceiling under the goal says no runtime could meet it with those picks.
The costs are :mod:`~sparseloom.evaluation.closed_bound`'s (what the tuned runtimes measured
alone, each configuration at its fastest round), so the bound is over those configurations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sparseloom.core.types import SLO
from sparseloom.evaluation.closed_bound import ModelCost, costs_of, served_models
from sparseloom.evaluation.contender import Contender
from sparseloom.evaluation.contenders import ServeContext
from sparseloom.evaluation.serve_figures import best_stock, spread

#: No task may run below this share of its rate under the round's best stock runtime.
TASK_FLOOR = 0.9


def stp_bound(costs: Mapping[str, ModelCost], isolated_ms: Mapping[str, float],
              floor_rps: Mapping[str, float], cores: int) -> float | None:
    """The highest STP (Σ rate × ``isolated_ms`` ÷ 1000) of tasks served at ``costs`` on
    ``cores`` cores, one request in flight each, no task below ``floor_rps`` (requests/s;
    a task left out has none); ``None`` when the floors alone do not fit.

    :raises ValueError: no cores, or a task of ``costs`` without an isolated latency.
    """
    if cores < 1:
        raise ValueError(f"an STP bound needs at least one core, not {cores}")
    missing = sorted(set(costs) - set(isolated_ms))
    if missing:
        raise ValueError(f"no isolated latency for task(s) {', '.join(missing)}")
    budget = 1e3 * cores  # core-milliseconds per second
    rate, most = {}, {}
    for task, cost in costs.items():
        most[task] = 1e3 / cost.latency_ms
        rate[task] = floor_rps.get(task, 0.0)
        if rate[task] > most[task]:
            return None
        budget -= rate[task] * cost.core_ms
    if budget < 0:
        return None
    for task in sorted(costs, key=lambda t: -isolated_ms[t] / costs[t].core_ms):
        extra = min(most[task] - rate[task], budget / costs[task].core_ms)
        rate[task] += extra
        budget -= extra * costs[task].core_ms
    return sum(rate[t] * isolated_ms[t] for t in costs) / 1e3


def steady_bounds(context: ServeContext, contenders: Sequence[Contender],
                  slos: Mapping[str, SLO], stp: Mapping[str, Mapping[int, float]],
                  rates: Mapping[str, Mapping[int, Mapping[str, float]]],
                  isolated_ms: Mapping[str, float]) -> dict[str, Any]:
    """Per sparseloom policy with every model measured alone, its STP ceiling per round
    (median and spread; ``stp[name][round]`` and ``rates[name][round][task]`` are the runs'
    at equal accuracy) and the rounds where its floors did not fit. Without a tuned stock
    runtime among ``contenders`` nothing was measured alone, and nothing is bounded."""
    out: dict[str, Any] = {"ceiling": {}, "floors_unreachable": {}, "unmeasured": []}
    if not context.measured_alone():
        return out
    for policy in (c for c in contenders if c.is_sparseloom):
        costs = costs_of(context, served_models(context, policy, slos), slos)
        if costs is None:
            out["unmeasured"].append(policy.name)
            continue
        per_round, unreachable = [], 0
        for r in stp.get(policy.name, {}):
            best = best_stock(stp, rates, contenders, r)
            if best is None:
                continue
            floors = {t: TASK_FLOOR * v for t, v in rates[best][r].items() if v == v}
            bound = stp_bound(costs, isolated_ms, floors, len(context.cores))
            if bound is None:
                unreachable += 1
            elif stp[best][r] > 0:
                per_round.append(bound / stp[best][r])
        out["ceiling"][policy.name] = spread(per_round)
        out["floors_unreachable"][policy.name] = unreachable
    return out


def render_steady_bounds(bounds: Mapping[str, Any] | None) -> list[str]:
    """The report's lines for :func:`steady_bounds` (nothing without a bound)."""
    if not bounds or not bounds["ceiling"]:
        return []
    lines = ["", f"STP ceiling: the highest STP the models each policy served allow on these "
                 f"cores with no task below {TASK_FLOOR:g}× its rate under the round's best "
                 f"stock runtime (each task at most one request in flight at its model's "
                 f"fastest latency alone; every request's cheapest core time within the "
                 f"cores), ÷ that runtime's measured STP.", ""]
    for policy, figure in bounds["ceiling"].items():
        unreachable = bounds["floors_unreachable"].get(policy, 0)
        where = (f"{figure['median']:.2f}× [{figure['min']:.2f}–{figure['max']:.2f}] over "
                 f"{figure['n']} round(s)" if figure["n"] else "none")
        lines.append(f"- {policy}: {where}" + (
            f"; in {unreachable} round(s) its models cannot give every task its floor"
            if unreachable else ""))
    if bounds["unmeasured"]:
        lines += ["", "No STP ceiling (a served model was not measured alone): "
                      + ", ".join(bounds["unmeasured"]) + "."]
    return lines
