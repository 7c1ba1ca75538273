"""The comparison's numbers: per-contender metrics, Fig. 3/13/14 data, simulator validation.

Everything here returns plain rows (lists of dicts) that :func:`write_tables` saves as JSON
and CSV; :mod:`sparseloom.evaluation.figures` renders them.
"""

from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from sparseloom.core.types import SLO, Plan
from sparseloom.evaluation.simulator import SimConfig, simulate


def _mean(values: Sequence[float]) -> float:
    kept = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    return sum(kept) / len(kept) if kept else math.nan


def per_contender(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Fig. 10/11 rows: violation rate (mean over SLO configurations and orders), throughput,
    pipeline share, memory; measured and simulated cells counted apart."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for cell in report["cells"]:
        if cell["kind"] == "grid":
            groups[cell["contender"]].append(cell)
    rows = []
    for name in report["contenders"]:
        cells = groups.get(name, [])
        measured = [c for c in cells if c["source"] == "measured"]
        rows.append({
            "contender": name,
            "violation_rate": _mean([c["violation_rate"] for c in cells]),
            "violation_rate_measured": _mean([c["violation_rate"] for c in measured]),
            "throughput_rps": _mean([c["throughput_rps"] for c in measured]),
            "pipeline_share": _mean([c["pipeline_share"] for c in measured]),
            "memory_bytes": _mean([c["memory_bytes"] for c in measured]),
            "cells_measured": len(measured), "cells_simulated": len(cells) - len(measured)})
    return rows


def budget_curve(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Fig. 14 rows: violation rate per memory budget (mean over the measured SLO configs)."""
    by_budget: dict[float, list[float]] = defaultdict(list)
    for cell in report["cells"]:
        if cell["kind"] == "budget":
            by_budget[cell["budget"]].append(cell["violation_rate"])
    return [{"budget": b, "violation_rate": _mean(v), "runs": len(v)}
            for b, v in sorted(by_budget.items())]


def stitching_benefit(profile: Any, configs: Sequence[Mapping[str, SLO]]) -> list[dict]:
    """Fig. 3 rows: per SLO configuration, how many tasks an original variant can satisfy and
    how many a stitched one can (profile estimates, each variant under its best order)."""
    from sparseloom.plan.orders import all_orders
    from sparseloom.plan.slo_grid import original_rows

    rows = []
    best_latency = {}
    for name, task in profile.tasks.items():
        orders = all_orders(task.n_positions, range(len(profile.processors)))
        best_latency[name] = np.min([task.latency_all(o) for o in orders], axis=0)
    for k, slos in enumerate(configs):
        original = stitched = 0
        for name, task in profile.tasks.items():
            ok = (task.accuracy() >= slos[name].accuracy) & (
                best_latency[name] <= slos[name].latency_ms)
            original += bool(ok[original_rows(task)].any())
            stitched += bool(ok.any())
        rows.append({"slo_config": k, "tasks": len(profile.tasks), "original_ok": original,
                     "stitched_ok": stitched, "only_stitched": stitched > original})
    return rows


@attrs.define(eq=False)
class FixedOrderPolicy:
    """SparseLoom's Algorithm 1 with the processor order fixed (Fig. 13's contender)."""

    order: tuple[int, ...]
    name: str = "sparseloom-fixed-order"

    def plan(self, tasks: Sequence[str], profile: Any, processors: Any,
             slos: Mapping[str, SLO]) -> Plan:
        from sparseloom.plan.feasible import build_plan
        from sparseloom.plan.policy import select_tasks
        from sparseloom.plugins.policies.sparseloom import algorithm1

        table = select_tasks(profile, tasks)
        order, choices = algorithm1(table, slos, np.array([self.order]))
        return build_plan(self.name, table, choices, order, slos, 0.0)


def order_throughput(profile: Any, slos: Mapping[str, SLO], queries: int = 100
                     ) -> list[dict[str, Any]]:
    """Fig. 13 rows: simulated throughput of Algorithm 1 under every processor order."""
    from sparseloom.plan.orders import all_orders

    positions = next(iter(profile.tasks.values())).n_positions
    rows = []
    for order in all_orders(positions, range(len(profile.processors))):
        policy = FixedOrderPolicy(tuple(int(q) for q in order))
        result = simulate(profile, SimConfig(policy=policy.name, slos=slos, queries=queries,
                                             monitor=False), policy=policy)
        rows.append({"order": "-".join(profile.processors[q] for q in order),
                     "throughput_rps": result.throughput_rps,
                     "violation_rate": result.violation_rate, "source": "simulated"})
    return rows


def validation(report: Mapping[str, Any], simulated: Mapping[tuple, Mapping[str, Any]]
               ) -> dict[str, Any]:
    """Simulated against measured, per measured policy cell: throughput error (relative) and
    violation-rate error (points), with their means and the share within the goals."""
    rows = []
    for cell in report["cells"]:
        key = (cell["contender"], cell["slo_config"], cell["order"])
        if cell["kind"] != "grid" or cell["source"] != "measured" or key not in simulated:
            continue
        sim = simulated[key]
        error = (sim["throughput_rps"] - cell["throughput_rps"]) / cell["throughput_rps"] \
            if cell["throughput_rps"] else math.nan
        rows.append({"contender": key[0], "slo_config": key[1], "order": key[2],
                     "repeat": cell["repeat"], "measured_rps": cell["throughput_rps"],
                     "simulated_rps": sim["throughput_rps"], "throughput_error": error,
                     "measured_violation": cell["violation_rate"],
                     "simulated_violation": sim["violation_rate"],
                     "violation_error_points": 100 * (sim["violation_rate"]
                                                     - cell["violation_rate"])})
    return {"rows": rows,
            "mean_abs_throughput_error": _mean([abs(r["throughput_error"]) for r in rows]),
            "mean_abs_violation_error_points": _mean([abs(r["violation_error_points"])
                                                      for r in rows]),
            "within_10pct_throughput": _mean([abs(r["throughput_error"]) <= 0.10
                                              for r in rows]),
            "within_5pt_violation": _mean([abs(r["violation_error_points"]) <= 5
                                           for r in rows])}


def write_tables(out: Path, tables: Mapping[str, Any]) -> list[Path]:
    """Write every table as ``NAME.json`` and (list tables) ``NAME.csv`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, table in tables.items():
        path = out / f"{name}.json"
        path.write_text(json.dumps(table, indent=2, default=str))
        written.append(path)
        rows = table["rows"] if isinstance(table, dict) and "rows" in table else table
        if isinstance(rows, list) and rows and isinstance(rows[0], dict):
            csv_path = out / f"{name}.csv"
            with csv_path.open("w", newline="") as handle:
                writer = csv.DictWriter(handle, fieldnames=list(rows[0]), extrasaction="ignore")
                writer.writeheader()
                writer.writerows(rows)
            written.append(csv_path)
    return written
