"""How fast a closed run could have been, given the models it served: its work bound.

In the closed scenario every task has one request in flight, so a task's ``n`` requests
take at least ``n`` × the fastest hot latency its model reaches alone, and the tasks
together need at least Σ ``n`` × each model's cheapest core time (latency × threads) ÷ the
cores. The larger of the two is the makespan's floor, and the run's requests ÷ that floor the
throughput no placement of those models on those cores beats. The latencies are what the
tuned stock runtimes measured alone at the start of the benchmark (every configuration:
runtime, precision and threads, each at its fastest round; those whose accuracy the SLO
refuses left out), so the bound is over those configurations: a run that splits a model across
runtimes, or on a host running faster than while they were measured, may pass it.

Three figures follow, per round of runs at equal accuracy: a contender's **share** of its
bound (measured ÷ bound: what its runtime and placement got out of its models); a sparseloom
policy's **ceiling** (its bound ÷ the round's best stock runtime, measured): the closed ratio
it could reach with its picks on these cores; and the **variant choice's ceiling**
(``picks-tuned``'s bound ÷ ``stock-tuned``'s): what the picks buy over the dense models, each
served at its bound. A ceiling under a goal says the picks cannot meet it; one above it with
a low share says the runtime leaves the difference.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from sparseloom.core.types import SLO
from sparseloom.evaluation.contender import Contender
from sparseloom.evaluation.contenders import ServeContext
from sparseloom.evaluation.serve_figures import spread

#: Per task, the model a contender serves (``None``: the dense model).
Models = Mapping[str, tuple[int, ...] | None]


@attrs.frozen
class ModelCost:
    """What one request to a model costs, at best, served alone.

    Attributes:
        latency_ms: the fastest latency of any configuration (any thread count).
        core_ms: the cheapest latency × threads of any configuration.
    """

    latency_ms: float
    core_ms: float


def model_cost(measured: Sequence[Any], refused: Sequence[str]) -> ModelCost | None:
    """The :class:`ModelCost` of one model from its configurations ``measured`` alone
    (:class:`~sparseloom.evaluation.stock_tuned.Measured`), leaving out those ``refused``
    names a reason for and those that failed; ``None`` when none is left. A configuration
    counts at its fastest round (the median of that round's calls): a bound takes the best
    the configuration was seen to do, and a configuration's rounds can differ by more than
    half (ONNX Runtime's two-thread ``int8dyn`` ``sentiment`` read 2.13, 3.58 and 3.51 ms in
    one benchmark; AMD EPYC Zen 4, 2026-12-07)."""
    best: dict[int, float] = {}
    for m, no in zip(measured, refused, strict=True):
        if not no and not m.failure and math.isfinite(m.latency_ms):
            best[m.config.threads] = min(best.get(m.config.threads, math.inf),
                                         min(m.rounds_ms, default=m.latency_ms))
    if not best:
        return None
    return ModelCost(min(best.values()), min(ms * threads for threads, ms in best.items()))


def bound_rps(completed: Mapping[str, int], costs: Mapping[str, ModelCost],
              cores: int) -> float:
    """The closed throughput bound (requests/s) of a run that completed ``completed[task]``
    requests of each task, each at ``costs[task]``, on ``cores`` cores.

    :raises ValueError: no requests, no cores, or a task without a cost.
    """
    if cores < 1:
        raise ValueError(f"a work bound needs at least one core, not {cores}")
    missing = sorted(set(completed) - set(costs))
    if missing:
        raise ValueError(f"no cost for task(s) {', '.join(missing)}")
    total = sum(completed.values())
    if total <= 0:
        raise ValueError("a work bound needs at least one completed request")
    chain_ms = max(n * costs[t].latency_ms for t, n in completed.items())
    work_ms = sum(n * costs[t].core_ms for t, n in completed.items()) / cores
    return total * 1e3 / max(chain_ms, work_ms)


def served_models(context: ServeContext, contender: Contender, slos: Mapping[str, SLO]
                  ) -> dict[str, tuple[int, ...] | None]:
    """Per task the model ``contender`` serves under ``slos`` (``None``: dense), as the
    benchmark's judging reads it: a policy's picks, ``picks-tuned``'s compressed picks, a
    stock runtime's dense models (its picks for one that serves a policy's)."""
    from sparseloom.evaluation.stock import STOCK_RUNTIMES

    tasks = list(context.workload.task_names)
    if contender.kind == "policy":
        picks = context.without_dense(context.picks(slos, contender.policy or contender.name))
    elif STOCK_RUNTIMES[contender.name].picks:
        picks = (context.compressed_picks(slos) if STOCK_RUNTIMES[contender.name].tuned
                 else context.without_dense(context.picks(slos)))
    else:
        picks = {}
    return {t: picks.get(t) for t in tasks}


def costs_of(context: ServeContext, models: Models, slos: Mapping[str, SLO]
             ) -> dict[str, ModelCost] | None:
    """Each task's :class:`ModelCost` of ``models`` from what the tuned runtimes measured
    alone; ``None`` when one of them was not measured (no bound for that contender)."""
    from sparseloom.evaluation.stock_tuned import refusals

    measured = context.measured_alone()
    out = {}
    for task, model in models.items():
        rows = measured.get((task, model))
        if not rows:
            return None
        refused = refusals(rows, slos, {task: context.selection_accuracy(task, model)})
        cost = model_cost(rows, refused)
        if cost is None:
            return None
        out[task] = cost
    return out


def closed_bounds(context: ServeContext, contenders: Sequence[Contender],
                  slos: Mapping[str, SLO], measured: Mapping[str, Mapping[int, float]],
                  completed: Mapping[str, Mapping[int, Mapping[str, int]]]
                  ) -> dict[str, Any]:
    """The closed scenario's bounds: per contender with every model measured alone, its
    bound and share per round (median and spread), and per sparseloom policy its ceiling
    against the round's best stock runtime. ``measured[name][round]`` is a run's throughput
    at equal accuracy and ``completed[name][round]`` its requests per task. Without a tuned
    stock runtime among ``contenders`` nothing was measured alone, and nothing is bounded."""
    bounds: dict[str, dict[int, float]] = {}
    unmeasured: list[str] = []
    if not context.measured_alone():  # no tuned runtime among them: nothing to bound with
        return {"contenders": {}, "ceiling": {}, "variant_ceiling": spread([]),
                "unmeasured": [c.name for c in contenders]}
    for contender in contenders:
        costs = costs_of(context, served_models(context, contender, slos), slos)
        if costs is None:
            unmeasured.append(contender.name)
            continue
        bounds[contender.name] = {r: bound_rps(done, costs, len(context.cores))
                                  for r, done in completed.get(contender.name, {}).items()}
    rows = {name: {"bound_rps": spread(list(by_round.values())),
                   "share": spread([measured[name][r] / b for r, b in by_round.items()
                                    if b > 0])}
            for name, by_round in bounds.items()}
    stock = [c.name for c in contenders if c.is_stock]
    ceilings = {}
    for policy in (c.name for c in contenders if c.is_sparseloom and c.name in bounds):
        per_round = []
        for r, bound in bounds[policy].items():
            best = max((measured[n][r] for n in stock if r in measured.get(n, {})),
                       default=0.0)
            if best > 0:
                per_round.append(bound / best)
        ceilings[policy] = spread(per_round)
    picks, dense = bounds.get("picks-tuned", {}), bounds.get("stock-tuned", {})
    variant = spread([picks[r] / dense[r] for r in picks if dense.get(r, 0) > 0])
    return {"contenders": rows, "ceiling": ceilings, "variant_ceiling": variant,
            "unmeasured": unmeasured}


def render_bounds(bounds: Mapping[str, Any] | None) -> list[str]:
    """The report's lines for :func:`closed_bounds` (nothing without a bound)."""
    if not bounds or not bounds["contenders"]:
        return []

    def cell(figure: Mapping[str, Any], digits: int, unit: str = "") -> str:
        if not figure["n"]:
            return "-"
        return (f"{figure['median']:.{digits}f}{unit} [{figure['min']:.{digits}f}–"
                f"{figure['max']:.{digits}f}]")

    lines = ["", "Work bound: the makespan no placement of the models each contender served "
             "beats on these cores (each task's requests × its model's fastest latency alone; "
             "every request × its cheapest core time ÷ the cores; each configuration the tuned "
             "runtimes measured at its fastest round, so over those). Share: "
             "the measured throughput ÷ that bound.", "",
             "| contender | bound (requests/s) | share of it |", "|---|---|---|"]
    for name, row in bounds["contenders"].items():
        lines.append(f"| {name} | {cell(row['bound_rps'], 0)} | {cell(row['share'], 2)} |")
    for policy, ceiling in bounds["ceiling"].items():
        if ceiling["n"]:
            lines += ["", f"- {policy}'s ceiling (its bound ÷ the round's best stock runtime, "
                          f"measured): {cell(ceiling, 2, '×')} over {ceiling['n']} round(s)"]
    variant = bounds.get("variant_ceiling") or {"n": 0}
    if variant["n"]:
        lines += ["", f"- variant choice's ceiling (picks-tuned's bound ÷ stock-tuned's: what "
                      f"the picks buy over the dense models, each at its bound): "
                      f"{cell(variant, 2, '×')} over {variant['n']} round(s)"]
    if bounds["unmeasured"]:
        lines += ["", "No bound (a served model was not measured alone): "
                      + ", ".join(bounds["unmeasured"]) + "."]
    return lines
