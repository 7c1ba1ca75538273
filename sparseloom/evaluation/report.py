"""``evaluate_workload``: the harness, the tables and the figures of one comparison, end to end.

Writes under ``out``: ``runs/`` (the resumable run cache), ``cells.json`` (every cell),
``contenders.{json,csv}`` (Fig. 10/11), ``budget.*`` (Fig. 14), ``orders.*`` (Fig. 13),
``stitching.*`` (Fig. 3), ``validation.*`` (simulated vs measured), ``results.md`` (the
tables as Markdown, :mod:`sparseloom.evaluation.markdown`) and the five PNGs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sparseloom.core.errors import EvaluationError
from sparseloom.evaluation.harness import (
    QUICK,
    EvalConfig,
    Progress,
    evaluate,
    measured_slowdown,
    simulated_run,
    slo_configurations,
)
from sparseloom.evaluation.results import (
    budget_curve,
    order_throughput,
    per_contender,
    stitching_benefit,
    validation,
    write_tables,
)
from sparseloom.evaluation.vanilla import VANILLA_RUNNERS


def check_output(out: Path) -> Path:
    """Create ``out`` (before any long work) or say why it cannot be used."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise EvaluationError(f"cannot write the evaluation output folder {out}: "
                              f"{error.strerror or error}; choose another with --out") from error
    return out


def evaluate_workload(workload: Any, profile: Any, out: Path, config: EvalConfig = QUICK, *,
                      progress: Progress | None = None, figures: bool = True
                      ) -> dict[str, Any]:
    """Run (or resume) the comparison of ``workload`` and write its tables and figures.

    :returns: the tables by name (``contenders``, ``budget``, ``orders``, ``stitching``,
        ``validation``) plus ``files`` (what was written).
    """
    check_output(out)
    report = evaluate(workload, profile, out, config, progress=progress)
    (out / "cells.json").write_text(json.dumps(report, indent=1, default=str))
    configs = slo_configurations(profile)
    orders = report["orders"]
    simulated, calibrated = {}, {}
    for cell in report["cells"]:
        if (cell["kind"] == "grid" and cell["source"] == "measured"
                and cell["contender"] not in VANILLA_RUNNERS and cell["repeat"] == 0):
            key = (cell["contender"], cell["slo_config"], cell["order"])
            simulated[key] = simulated_run(profile, key[0], configs[key[1]], orders[key[2]],
                                           config.queries)
            slowdown = measured_slowdown(cell, simulated[key])
            if slowdown:
                calibrated[key] = simulated_run(profile, key[0], configs[key[1]],
                                                orders[key[2]], config.queries,
                                                slowdown=slowdown) | {"slowdown": slowdown}
    tables: dict[str, Any] = {
        "contenders": per_contender(report), "budget": budget_curve(report),
        "orders": order_throughput(profile, configs[_order_config(report)], config.queries,
                                   report),
        "stitching": stitching_benefit(profile, configs),
        "validation": validation(report, simulated, calibrated)}
    files = write_tables(out, tables)
    from sparseloom.evaluation.markdown import render_markdown, render_validation

    markdown = out / "results.md"
    markdown.write_text(render_markdown(tables, images="") + "\n"
                        + render_validation(tables["validation"]))
    files.append(markdown)
    if figures:
        from sparseloom.evaluation.figures import render_all

        files += render_all(out, tables)
    return tables | {"files": [str(f) for f in files], "workload": profile.workload,
                     "processors": list(profile.processors), "orders_run": orders,
                     "slo_configs_real": report["slo_configs_real"]}


def _order_config(report: dict[str, Any]) -> int:
    """The SLO configuration of the Fig. 13 runs (the grid middle when none was run)."""
    return next((c["slo_config"] for c in report["cells"] if c["kind"] == "order"), 12)
