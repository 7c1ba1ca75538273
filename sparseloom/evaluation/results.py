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

import numpy as np

from sparseloom.core.types import SLO
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


def order_throughput(profile: Any, slos: Mapping[str, SLO], queries: int = 100,
                     report: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Fig. 13 rows: throughput of Algorithm 1 under every processor order, measured where
    ``report`` holds a real run with that order forced, and simulated for every order."""
    from sparseloom.evaluation.fixed_order import FixedOrderPolicy
    from sparseloom.evaluation.harness import ORDER_PREFIX
    from sparseloom.plan.orders import all_orders

    measured = {c["contender"].removeprefix(ORDER_PREFIX): c
                for c in (report or {}).get("cells", []) if c["kind"] == "order"}
    positions = next(iter(profile.tasks.values())).n_positions
    rows = []
    for indices in all_orders(positions, range(len(profile.processors))):
        names = tuple(profile.processors[q] for q in indices)
        policy = FixedOrderPolicy(order=names)
        result = simulate(profile, SimConfig(policy=policy.name, slos=slos, queries=queries),
                          policy=policy)
        real = measured.get(">".join(names), {})
        rows.append({"order": ">".join(names),
                     "throughput_rps": real.get("throughput_rps", math.nan),
                     "violation_rate": real.get("violation_rate", math.nan),
                     "simulated_rps": result.throughput_rps,
                     "simulated_violation": result.violation_rate,
                     "source": "measured" if real else "simulated"})
    return rows


def validation(report: Mapping[str, Any], simulated: Mapping[tuple, Mapping[str, Any]],
               calibrated: Mapping[tuple, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """Simulated against measured, per measured policy cell: throughput error (relative) and
    violation-rate error (points), with their means and the share within the goals (10 %,
    5 points). ``calibrated``: the same cells simulated with each real run's measured stage
    slowdown per processor (``calibrated_*`` columns): what is left is the simulator's own
    model error, the rest is the machine's contention, which the profile does not hold."""
    rows = []
    for cell in report["cells"]:
        key = (cell["contender"], cell["slo_config"], cell["order"])
        if cell["kind"] != "grid" or cell["source"] != "measured" or key not in simulated:
            continue
        row = {"contender": key[0], "slo_config": key[1], "order": key[2],
               "repeat": cell["repeat"], "measured_rps": cell["throughput_rps"],
               "measured_violation": cell["violation_rate"],
               "load_average": cell.get("load_average", math.nan)}
        for prefix, source in (("", simulated), ("calibrated_", calibrated or {})):
            sim = source.get(key)
            rps = sim["throughput_rps"] if sim else math.nan
            violation = sim["violation_rate"] if sim else math.nan
            row |= {f"{prefix}simulated_rps": rps, f"{prefix}simulated_violation": violation,
                    f"{prefix}throughput_error": (rps - cell["throughput_rps"])
                    / cell["throughput_rps"] if cell["throughput_rps"] else math.nan,
                    f"{prefix}violation_error_points": 100 * (violation
                                                              - cell["violation_rate"])}
        slowdown = (calibrated or {}).get(key, {}).get("slowdown", {})
        row["slowdown"] = " ".join(f"{p}={v:.2f}" for p, v in slowdown.items())
        rows.append(row)
    summary: dict[str, Any] = {"rows": rows}
    for prefix in ("", "calibrated_"):
        throughput = [abs(r[f"{prefix}throughput_error"]) for r in rows]
        points = [abs(r[f"{prefix}violation_error_points"]) for r in rows]
        summary |= {f"{prefix}mean_abs_throughput_error": _mean(throughput),
                    f"{prefix}mean_abs_violation_error_points": _mean(points),
                    f"{prefix}within_10pct_throughput": _mean(
                        [e <= 0.10 for e in throughput if not math.isnan(e)]),
                    f"{prefix}within_5pt_violation": _mean(
                        [e <= 5 for e in points if not math.isnan(e)])}
    return summary


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
