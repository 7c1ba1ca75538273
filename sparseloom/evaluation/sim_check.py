"""The simulator checked where it is used: simulated beside measured, per policy contender.

``bench serve``'s ``closed`` scenario measures every contender; for each *policy* contender
(stock runtimes have no plan to simulate) :func:`simulated_closed` simulates the same
workload, SLOs (:func:`~sparseloom.evaluation.serve_figures.dense_slos`) and query count with
:func:`~sparseloom.evaluation.simulator.simulate`, once per measured round (the stage-time draws
seeded by the round, as the measured eval rows are), and reports the median simulated
throughput and violation rate next to the measured medians, with the error: throughput in %
of the measured, violation in points. Simulated figures live only under
``scenarios.closed.simulated``: they never enter the measured tables, medians or ratios.

Each contender is simulated twice: from the profile alone (what the simulator predicts), and
*calibrated* with the measured runs' slowdown per processor — the measured model-call time per
request (utilisation ÷ throughput, medians over VALID runs) over the simulated one — as
``evaluate``'s validation does. The first error is the simulator's; the second separates its
queueing model (placement, deadlines, in-place stages, hand-offs) from the machine's speed
during the runs, which isolated profile timings do not hold (other jobs on a shared machine).
Both judge the accuracy SLO on the requests served (``SimConfig.score_served``), as the
measured runs do on their 100-odd eval rows: a task whose variant sits a point above its SLO
misses it in some runs, measured or simulated.

Goals, for a simulator that predicts what it is used for: throughput within
:data:`THROUGHPUT_GOAL_PCT` and violation rate within :data:`VIOLATION_GOAL_POINTS`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

#: Largest |simulated − measured| throughput, in % of the measured, that meets the goal.
THROUGHPUT_GOAL_PCT = 15.0
#: Largest |simulated − measured| violation rate, in points (percent of tasks), that does.
VIOLATION_GOAL_POINTS = 10.0


def simulated_closed(context: Any, contenders: Sequence[Any], options: Any,
                     closed: dict[str, Any]) -> dict[str, Any]:
    """The simulator's figures for the policy contenders of a finished ``closed`` scenario.

    :param context: the benchmark's :class:`~sparseloom.evaluation.contenders.ServeContext`.
    :param contenders: the contenders that ran; stock runtimes are skipped.
    :param options: the :class:`~sparseloom.evaluation.serve_figures.BenchOptions` it ran.
    :param closed: the scenario's result (its ``contenders`` rows hold the measured medians).
    :returns: ``{"note", "service", "goals", "contenders": [row, ...]}``; a contender whose
        simulation raised has an ``error`` instead of figures.
    """
    from sparseloom.evaluation.serve_figures import dense_slos
    from sparseloom.evaluation.simulator import SimConfig, simulate

    slos = dense_slos(context)
    rows_per_task = {name: int(context.workload.task(name).num_eval)
                     for name in context.workload.task_names}
    measured = {row["contender"]: row for row in closed["contenders"]}
    rows = []
    for contender in contenders:
        if contender.kind != "policy":
            continue
        row: dict[str, Any] = {"contender": contender.name}
        try:
            results = [simulate(context.profile, SimConfig(
                policy=contender.name, slos=slos, queries=options.closed_queries,
                seed=options.seed + round_index, score_served=True, eval_rows=rows_per_task))
                for round_index in range(options.rounds)]
        except Exception as error:  # a simulation that fails is reported, not fatal
            row["error"] = f"{type(error).__name__}: {error}"
            rows.append(row)
            continue
        mine = measured.get(contender.name, {})
        row |= compare(statistics.median(r.throughput_rps for r in results),
                       statistics.median(r.violation_rate for r in results), mine)
        row["simulated_utilisation"] = {
            name: statistics.median(r.utilisation[name] for r in results)
            for name in results[0].utilisation}
        slowdown = measured_slowdown(mine, row["simulated_throughput_rps"],
                                     row["simulated_utilisation"])
        row["slowdown"] = slowdown
        if slowdown:
            calibrated = [simulate(context.profile, SimConfig(
                policy=contender.name, slos=slos, queries=options.closed_queries, slowdown=slowdown,
                seed=options.seed + round_index, score_served=True, eval_rows=rows_per_task))
                for round_index in range(options.rounds)]
            again = compare(statistics.median(r.throughput_rps for r in calibrated),
                            statistics.median(r.violation_rate for r in calibrated), mine)
            row["calibrated"] = {k: v for k, v in again.items() if not k.startswith("measured")}
        rows.append(row)
    return {"note": "simulated from the profile, not measured; never part of the measured "
                    "medians or ratios",
            "service": SimConfig().service,
            "goals": {"throughput_pct": THROUGHPUT_GOAL_PCT,
                      "violation_points": VIOLATION_GOAL_POINTS},
            "contenders": rows}


def compare(simulated_rps: float, simulated_violation: float, measured_row: dict[str, Any]
            ) -> dict[str, Any]:
    """Simulated figures beside one measured ``closed`` row (median over VALID runs), with
    the errors and whether each meets its goal (``None`` when nothing was measured)."""
    measured_rps = float(measured_row.get("median", math.nan)) if measured_row.get("n") \
        else math.nan
    violation = (measured_row.get("figures") or {}).get("violation_rate") or {}
    measured_violation = float(violation["median"]) if violation.get("n") else math.nan
    rps_error = (100.0 * (simulated_rps - measured_rps) / measured_rps
                 if measured_rps > 0 else math.nan)
    points = 100.0 * (simulated_violation - measured_violation)
    return {"simulated_throughput_rps": simulated_rps, "measured_throughput_rps": measured_rps,
            "throughput_error_pct": rps_error,
            "throughput_within_goal": (abs(rps_error) <= THROUGHPUT_GOAL_PCT
                                       if math.isfinite(rps_error) else None),
            "simulated_violation_rate": simulated_violation,
            "measured_violation_rate": measured_violation, "violation_error_points": points,
            "violation_within_goal": (abs(points) <= VIOLATION_GOAL_POINTS
                                      if math.isfinite(points) else None)}


def measured_slowdown(measured_row: dict[str, Any], simulated_rps: float,
                      simulated_utilisation: dict[str, float]) -> dict[str, float]:
    """Per processor, measured model-call ms per request over simulated: (measured median
    utilisation ÷ measured median throughput) ÷ (simulated utilisation ÷ simulated
    throughput). Processors idle in either are left out (no figure to scale)."""
    figures = measured_row.get("figures") or {}
    rps = float(measured_row.get("median", math.nan)) if measured_row.get("n") else math.nan
    out = {}
    for name, share in simulated_utilisation.items():
        measured_share = (figures.get(f"utilisation.{name}") or {}).get("median", math.nan)
        if rps > 0 and simulated_rps > 0 and share > 0 and measured_share > 0:
            out[name] = (measured_share / rps) / (share / simulated_rps)
    return out


def _num(value: Any, digits: int, sign: bool = False) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:{'+' if sign else ''}.{digits}f}"


def _goal(flag: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "–"}[flag]


def render_simulated(simulated: dict[str, Any]) -> list[str]:
    """The ``Simulated (not measured)`` section of the Markdown report."""
    goals = simulated["goals"]
    lines = ["", "### Simulated (not measured)", "",
             f"The simulator's figures for the same workload, SLOs and queries (stage times: "
             f"{simulated['service']}); measured = the median above; *calibrated* = simulated "
             f"with the runs' measured per-processor slowdown. Goals: throughput within "
             f"{goals['throughput_pct']:g} %, violation within {goals['violation_points']:g} "
             f"points.", "",
             "| contender | simulated req/s | measured req/s | error % | within | "
             "simulated / measured violation % | error points | within | slowdown | "
             "calibrated req/s (error %) | calibrated violation error points |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in simulated["contenders"]:
        if "error" in row:
            lines.append(f"| {row['contender']} | simulation failed: {row['error']} "
                         f"|" + " |" * 10)
            continue
        calibrated = row.get("calibrated") or {}
        slowdown = " ".join(f"{k}={v:.2f}" for k, v in (row.get("slowdown") or {}).items())
        lines.append(
            f"| {row['contender']} | {_num(row['simulated_throughput_rps'], 1)} | "
            f"{_num(row['measured_throughput_rps'], 1)} | "
            f"{_num(row['throughput_error_pct'], 1, sign=True)} | "
            f"{_goal(row['throughput_within_goal'])} | "
            f"{_num(100 * row['simulated_violation_rate'], 0)} / "
            f"{_num(100 * row['measured_violation_rate'], 0)} | "
            f"{_num(row['violation_error_points'], 0, sign=True)} | "
            f"{_goal(row['violation_within_goal'])} | {slowdown or '–'} | "
            f"{_num(calibrated.get('simulated_throughput_rps'), 1)} "
            f"({_num(calibrated.get('throughput_error_pct'), 1, sign=True)}) | "
            f"{_num(calibrated.get('violation_error_points'), 0, sign=True)} |")
    return lines
