"""Serving one contender of a benchmark: a sparseloom policy through sparseloom's runtime, or
a stock runtime as :mod:`sparseloom.evaluation.stock` configures it, each run's summary
carrying the accuracies of what it served, judged on the held-out rows."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from sparseloom.core.errors import ConfigError
from sparseloom.core.types import SLO
from sparseloom.evaluation.contender import TUNED_PICKS_POLICY, Contender
from sparseloom.evaluation.contenders import ServeContext
from sparseloom.evaluation.judging import judged_precision
from sparseloom.evaluation.stock import STOCK_RUNTIMES, serve_stock
from sparseloom.runtime.load import LoadSpec
from sparseloom.runtime.options import RuntimeOptions
from sparseloom.runtime.summary import RunSummary


def serve_contender(context: ServeContext, contender: Contender, spec: LoadSpec,
                    slos: Mapping[str, SLO]) -> RunSummary:
    """Serve ``context``'s workload with ``contender`` under ``spec`` and ``slos``."""
    if contender.kind == "policy":
        from sparseloom.runtime.session import RunConfig, serve

        policy = contender.policy or contender.name
        chosen = context.picks(slos, policy)  # first: they may tighten the SLOs it plans with
        summary = serve(context.workload, context.profile_for(slos, policy),
                        RunConfig(policy=policy, slos=context.choosing(slos, policy), load=spec,
                                  options=contender.options or RuntimeOptions(),
                                  memory_budget=context.memory_budget,
                                  # the context's table is gated already (profile_for)
                                  paired_gate=False)).summary
        return _with_judged_accuracy(context, summary, chosen,
                                     context.served_precisions(slos, policy), slos)
    if contender.name not in STOCK_RUNTIMES:
        raise ConfigError(f"unknown stock runtime {contender.name!r}")
    stock = STOCK_RUNTIMES[contender.name]
    from sparseloom.core.processors import openvino_precision

    if stock.tuned:
        picks = context.picks(slos, TUNED_PICKS_POLICY) if stock.picks else None
        # Where requests queue, a task serves as many at once as it has cores.
        tuned = attrs.evolve(context.tuned(stock.name, slos), queued=spec.kind == "poisson")
        summary = serve_stock(context.workload, context.zoos, tuned, spec, slos,
                              picks=context.compressed_picks(slos) if stock.picks else None)
        precisions = {t: judged_precision(openvino_precision([tuned.processor(t)]))
                      for t in summary_tasks(summary)}
        return _with_judged_accuracy(context, summary, picks, precisions, slos)
    picks = context.picks(slos) if stock.picks else None
    summary = serve_stock(context.workload, context.zoos, stock, spec, slos,
                          cores=context.cores, picks=picks, precision=context.precision)
    precisions = {t: judged_precision(openvino_precision(
        [stock.processor(t, context.cores, context.precision)])) for t in summary_tasks(summary)}
    return _with_judged_accuracy(context, summary, picks, precisions, slos)


def summary_tasks(summary: RunSummary) -> list[str]:
    """The tasks a run summary reports."""
    return [task.task for task in summary.tasks]


def _with_judged_accuracy(context: ServeContext, summary: RunSummary,
                          picks: Mapping[str, tuple[int, ...]] | None,
                          precisions: Mapping[str, str], slos: Mapping[str, SLO]
                          ) -> RunSummary:
    """``summary`` with each task's accuracies of what it served: on the selection rows
    (``accuracy_profile``: the zoo's record of dense, or the profile's of the pick) and as
    judged on the held-out rows in the precision it was served in (``accuracy_judged``, on
    the selection scale: :meth:`~sparseloom.evaluation.judging.Judged.judged_accuracy`) — so
    every contender is judged by the same accuracies, whatever it measured while serving."""
    tasks = []
    for task in summary.tasks:
        pick = picks.get(task.task) if picks is not None else None
        dense = context.selection_accuracy(task.task, None)
        judged = context.judged(task.task, pick, precisions[task.task],
                                slos[task.task].accuracy)
        tasks.append(attrs.evolve(
            task, slo_accuracy=slos[task.task].accuracy,  # judged at the SLO, not above it
            accuracy_profile=context.selection_accuracy(task.task, pick),
            accuracy_judged=judged.judged_accuracy(dense)))
    return attrs.evolve(summary, tasks=tuple(tasks))
