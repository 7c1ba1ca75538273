"""The grid scenario of ``sparseloom bench serve``: violation rate over the paper's accuracy
axis × latency SLO = k × each task's isolated dense latency, and its floor (the cells no variant
reaches, so no contender can meet).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from sparseloom.core.types import SLO, rotated
from sparseloom.evaluation.contender import Contender
from sparseloom.evaluation.contenders import ServeContext
from sparseloom.evaluation.serve_figures import (
    BenchOptions,
    Recorder,
    family_ratios,
    isolated_dense_ms,
    ratios_per_round,
    spread,
)
from sparseloom.evaluation.serve_scenarios import ACCURACY_TOLERANCE, judge_run, table
from sparseloom.evaluation.serving import serve_contender
from sparseloom.runtime.load import LoadSpec


def accuracy_axis(context: ServeContext, points: int = 5) -> dict[str, list[float]]:
    """The paper's accuracy axis per task (:func:`~sparseloom.plan.slo_grid.slo_ranges`)."""
    from sparseloom.plan.slo_grid import slo_ranges

    out = {}
    for name in context.workload.task_names:
        (low, high), _ = slo_ranges(context.profile.task(name))
        out[name] = [float(a) for a in np.linspace(low, high, points)]
    return out


def violation_floor(context: ServeContext, axis: Mapping[str, Sequence[float]]
                    ) -> dict[str, Any]:
    """The violation rate no contender can go under on ``axis``: the cells whose accuracy SLO
    no stitched variant reaches, whether measured on the evaluation processor or as served on
    a profiled one (:attr:`~sparseloom.profile.table.TaskProfile.served_accuracy`). The dense
    model every stock runtime serves and every variant a baseline serves are stitched variants
    too, judged by the same figures (:func:`judge_run`), so none of them meets such a cell either.
    Latency plays no part: a contender may miss a reachable cell too, so this is a lower bound,
    the same at every k.

    Returns ``violation_rate`` (unreachable cells over tasks × levels), ``unreachable`` (task →
    its levels no variant reaches) and ``best_accuracy`` (task → the best accuracy any variant
    has).
    """
    table = context.profile.unmasked or context.profile
    best: dict[str, float] = {}
    unreachable: dict[str, list[int]] = {}
    for name, levels in axis.items():
        profile = table.task(name)
        measured = np.concatenate([np.ravel(profile.accuracy()),
                                   np.ravel(profile.served_accuracy)])
        measured = measured[np.isfinite(measured)]
        best[name] = float(measured.max()) if measured.size else -math.inf
        missed = [level for level, accuracy in enumerate(levels)
                  if best[name] < accuracy - ACCURACY_TOLERANCE]
        if missed:
            unreachable[name] = missed
    cells = sum(len(levels) for levels in axis.values())
    rate = sum(map(len, unreachable.values())) / cells if cells else math.nan
    return {"violation_rate": rate, "unreachable": unreachable, "best_accuracy": best}


def above_floor(values: Mapping[str, Mapping[int, float]], contenders: Sequence[Contender],
                floor: float) -> dict[str, Any]:
    """Each contender's violation rate above the grid's floor (the cells no variant reaches:
    :func:`violation_floor`), median and spread over rounds, and the lowest of the stock
    runtimes' medians (``best_stock``, with its name): what a contender's policy could still
    have won."""
    rows = {c.name: spread([v - floor for v in values.get(c.name, {}).values()])
            for c in contenders if values.get(c.name)}
    stock = {c.name: rows[c.name]["median"] for c in contenders
             if c.is_stock and c.name in rows and rows[c.name]["n"]}
    best = min(stock, key=stock.__getitem__) if stock else None
    return {"floor": floor, "contenders": rows,
            "best_stock": {"contender": best, "median": stock[best]} if best else None}


def grid(context: ServeContext, contenders: Sequence[Contender], options: BenchOptions,
         recorder: Recorder, ks: Sequence[float] = (), points: int = 5) -> dict[str, Any]:
    """Violation rate per contender at latency SLO = k × isolated dense latency (the
    profile's, :func:`isolated_dense_ms`), over the
    paper's accuracy axis (``points`` levels, every task at the same level), closed loop.

    A stock runtime serving dense models has no policy and no feedback, so its run does not
    depend on the SLOs: one run per round is judged at every cell. Everything else runs once
    per cell and round.
    """
    iso = isolated_dense_ms(context)
    axis = accuracy_axis(context, points)
    ks = tuple(ks) or options.ks
    cells = [(k, level) for k in ks for level in range(points)]
    violations: dict[str, dict[str, dict[int, list[float]]]] = {}
    for round_index in range(options.grid_rounds):
        spec = LoadSpec("closed", queries=options.queries, seed=options.seed + round_index)
        for contender in rotated(contenders, round_index):
            shared: dict[str, Any] | None = None
            for k, level in cells:
                slos = {t: SLO(axis[t][level], k * iso[t]) for t in iso}
                if contender.is_stock and shared is not None:
                    rate = judge_run(shared, slos)
                else:
                    run = recorder.run(
                        "grid", contender, round_index,
                        partial(serve_contender, context, contender, spec, slos),
                        k=k, level=level)
                    shared = run if run["valid"] else None
                    rate = judge_run(run, slos) if run["valid"] else math.nan
                if rate == rate:
                    violations.setdefault(contender.name, {}).setdefault(
                        f"{k:g}", {}).setdefault(round_index, []).append(rate)
    floor = violation_floor(context, axis)
    by_k: dict[str, Any] = {}
    for k in ks:
        values = {name: {r: float(np.mean(v)) for r, v in per_k.get(f"{k:g}", {}).items()}
                  for name, per_k in violations.items()}
        by_k[f"{k:g}"] = {"contenders": table(values, contenders, [], "violation_rate"),
                          "above_floor": above_floor(values, contenders,
                                                     floor["violation_rate"]),
                          "ratios": ratios_per_round(values, contenders,
                                                     higher_is_better=False),
                          "ratios_by_policy": family_ratios(values, contenders, False)}
    overall = {name: {r: float(np.mean([np.mean(per_k[key][r]) for key in per_k
                                        if r in per_k[key]]))
                      for r in range(options.grid_rounds) if any(r in v for v in per_k.values())}
               for name, per_k in violations.items()}
    return {"figure": "violation_rate", "unit": "fraction of tasks", "accuracy_axis": axis,
            "floor": floor, "isolated_dense_ms": iso, "k": by_k,
            "contenders": table(overall, contenders, recorder.runs_of("grid"),
                                 "violation_rate"),
            "ratios": ratios_per_round(overall, contenders, higher_is_better=False),
            "ratios_by_policy": family_ratios(overall, contenders, False)}
