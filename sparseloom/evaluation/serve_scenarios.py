"""The scenarios of ``sparseloom bench serve``: closed, steady and capacity (the grid is
:mod:`sparseloom.evaluation.serve_grid`).

Each takes the shared :class:`~sparseloom.evaluation.contenders.ServeContext`, the contenders
and a :class:`~sparseloom.evaluation.bench_serve.Recorder`, runs its interleaved rounds, and
returns its part of the report: per contender the median and spread of its headline figure
over VALID runs, and the ratios computed per round (:func:`ratios_per_round`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import attrs
import numpy as np

from sparseloom.core.types import SLO, rotated
from sparseloom.evaluation.closed_bound import closed_bounds
from sparseloom.evaluation.contender import Contender
from sparseloom.evaluation.contenders import ServeContext
from sparseloom.evaluation.serve_figures import (
    HEADLINE_CLOSED,
    BenchOptions,
    Recorder,
    best_stock,
    dense_slos,
    factors,
    family_ratios,
    isolated_dense_ms,
    judged_accuracy,
    ratios_per_round,
    spread,
)
from sparseloom.evaluation.serving import serve_contender
from sparseloom.evaluation.steady_bound import steady_bounds
from sparseloom.runtime.load import LoadSpec

#: How far under an accuracy SLO a served accuracy may fall and still meet it (float noise).
ACCURACY_TOLERANCE = 1e-9


def table(values: dict[str, dict[int, float]], contenders: Sequence[Contender],
          runs: list[dict[str, Any]], figure: str) -> list[dict[str, Any]]:
    """Per contender: the median and spread of its per-round ``values``, its rounds, its
    INVALID runs and their reasons, and the spread of every figure of its VALID ``runs``."""
    rows = []
    for contender in contenders:
        mine = values.get(contender.name, {})
        own = [r for r in runs if r["contender"] == contender.name]
        figures: dict[str, list[float]] = {}
        for run in own:
            if run["valid"]:
                for key, value in run["figures"].items():
                    figures.setdefault(key, []).append(value)
        rows.append({"contender": contender.name, "kind": contender.kind, "figure": figure,
                     **spread(list(mine.values())),
                     "rounds": [mine.get(r) for r in sorted({x["round"] for x in own})],
                     "invalid_runs": sum(1 for r in own if not r["valid"]),
                     "reasons": sorted({reason for r in own for reason in r["reasons"]}),
                     "figures": {k: spread(v) for k, v in sorted(figures.items())}})
    return rows


def closed(context: ServeContext, contenders: Sequence[Contender], options: BenchOptions,
           recorder: Recorder) -> dict[str, Any]:
    """Throughput at equal accuracy, closed loop: each run ``options.closed_queries`` per task
    and at least ``options.closed_min_s`` seconds (whichever ends later).

    A run whose served variants miss an accuracy SLO on the whole eval set (a baseline that
    serves the fastest original whatever the SLO) is tabled but left out of the ratios: they
    compare throughput at equal accuracy.

    The headline is a makespan (N requests per task, until the last ends). Beside it, each
    task's own rate (its N ÷ the time from its first request to its last,
    :attr:`~sparseloom.runtime.summary.TaskResult.own_throughput_rps`) per contender
    (``task_rates``), and per sparseloom policy and round its lowest task rate ÷ that task's
    rate under the round's fastest stock runtime (``worst_task``): a policy that wins the
    makespan by making one task wait shows there. And the makespan's floor the served models
    set (``bounds``, :mod:`~sparseloom.evaluation.closed_bound`): each contender's share of
    it, and each policy's ceiling against the best stock runtime.
    """
    slos = dense_slos(context)
    values: dict[str, dict[int, float]] = {}
    equal: dict[str, dict[int, float]] = {}
    rates: dict[str, dict[int, dict[str, float]]] = {}
    completed: dict[str, dict[int, dict[str, int]]] = {}
    for round_index in range(options.rounds):
        spec = LoadSpec("closed", queries=options.closed_queries,
                        min_duration_s=options.closed_min_s, seed=options.seed + round_index)
        for contender in rotated(contenders, round_index):
            run = recorder.run("closed", contender, round_index,
                               partial(serve_contender, context, contender, spec, slos))
            if run["valid"]:
                values.setdefault(contender.name, {})[round_index] = \
                    run["figures"]["throughput_rps"]
                if run["figures"].get("equal_accuracy", 1.0) >= 1:
                    equal.setdefault(contender.name, {})[round_index] = \
                        run["figures"]["throughput_rps"]
                    rates.setdefault(contender.name, {})[round_index] = {
                        t.task: float(t.own_throughput_rps) for t in run["summary"].tasks}
                    completed.setdefault(contender.name, {})[round_index] = {
                        t.task: t.completed for t in run["summary"].tasks}
    return {"figure": "throughput_rps", "unit": "requests/s",
            "run_length": run_length(options),
            "slos": {t: [s.accuracy, None] for t, s in slos.items()},
            "contenders": table(values, contenders, recorder.runs_of("closed"),
                                 "throughput_rps"),
            "ratios": ratios_per_round(equal, contenders),
            "ratios_by_policy": family_ratios(equal, contenders),
            "factors": factors(equal, contenders),
            "task_rates": task_rates(rates),
            "worst_task": _worst_task(equal, rates, contenders),
            "bounds": closed_bounds(context, contenders, slos, equal, completed)}


def steady(context: ServeContext, contenders: Sequence[Contender], options: BenchOptions,
           recorder: Recorder) -> dict[str, Any]:
    """The steady state: every task keeps asking for ``options.steady_s`` seconds at once.

    The closed scenario is a makespan — the run lasts until the slowest task's last request,
    so the light tasks finish early and lend their cores. Here every task asks until the end
    (a closed loop, one request per task in flight, for a fixed time), and each run is judged
    as the multi-DNN literature does: **STP** (system throughput, Σ each task's rate ÷ its
    isolated rate; higher is better) and **ANTT** (average normalized turnaround time, the
    mean over tasks of its mean latency ÷ its isolated latency; lower is better). A task's
    isolated latency is its dense model's, alone on the benchmark's cores, in its fastest
    stock configuration (``stock-tuned``'s measurements): one reference for every contender.
    Only VALID runs at equal accuracy count. Per round, each sparseloom policy's every task's
    rate is compared with its rate under the round's best stock runtime (by STP): the worst
    of them is ``worst_task`` (a policy that starves a task for the sum shows there). Each
    policy's STP ceiling (``stp_bounds``, :mod:`~sparseloom.evaluation.steady_bound`) says
    what STP ratio its models allow on these cores with every task at its floor.
    """
    slos = dense_slos(context)
    iso = context.isolated_hot_ms(slos)
    stp: dict[str, dict[int, float]] = {}
    antt: dict[str, dict[int, float]] = {}
    rates: dict[str, dict[int, dict[str, float]]] = {}
    for round_index in range(options.rounds):
        spec = LoadSpec("closed", queries=None, duration_s=options.steady_s,
                        seed=options.seed + round_index)
        for contender in rotated(contenders, round_index):
            run = recorder.run("steady", contender, round_index,
                               partial(serve_contender, context, contender, spec, slos))
            summary = run.get("summary")
            if (not run["valid"] or summary is None
                    or run["figures"].get("equal_accuracy", 1.0) < 1):
                continue
            per_task = {t.task: float(t.throughput_rps) for t in summary.tasks}
            stp.setdefault(contender.name, {})[round_index] = sum(
                per_task[t] * iso[t] / 1e3 for t in iso)
            antt.setdefault(contender.name, {})[round_index] = float(np.mean(
                [t.latency.mean_ms / iso[t.task] for t in summary.tasks]))
            rates.setdefault(contender.name, {})[round_index] = per_task
            run["figures"] |= {"stp": stp[contender.name][round_index],
                               "antt": antt[contender.name][round_index]}
    runs = recorder.runs_of("steady")
    return {"figure": "stp", "unit": "Σ task rate ÷ its isolated rate",
            "duration_s": options.steady_s, "isolated_hot_ms": iso,
            "slos": {t: [s.accuracy, None] for t, s in slos.items()},
            "contenders": table(stp, contenders, runs, "stp"),
            "antt": table(antt, contenders, runs, "antt"),
            "task_rates": task_rates(rates),
            "worst_task": _worst_task(stp, rates, contenders),
            "ratios": ratios_per_round(stp, contenders),
            "ratios_by_policy": family_ratios(stp, contenders),
            "stp_bounds": steady_bounds(context, contenders, slos, stp, rates, iso)}


def task_rates(rates: Mapping[str, Mapping[int, Mapping[str, float]]]
               ) -> dict[str, dict[str, dict[str, float]]]:
    """Per contender and task, the median and spread of the task's rate over the rounds."""
    return {name: {task: spread([r[task] for r in by_round.values() if task in r])
                   for task in sorted({t for r in by_round.values() for t in r})}
            for name, by_round in rates.items()}


def _worst_task(headline: Mapping[str, Mapping[int, float]],
                rates: Mapping[str, Mapping[int, Mapping[str, float]]],
                contenders: Sequence[Contender]) -> dict[str, dict[str, Any]]:
    """Per sparseloom policy and round, its lowest task rate ÷ that task's rate under the
    round's best stock runtime (by the scenario's ``headline`` figure: STP, throughput), and
    which task it was."""
    out: dict[str, dict[str, Any]] = {}
    for policy in (c.name for c in contenders if c.is_sparseloom):
        per_round: dict[int, float] = {}
        tasks: list[str] = []
        for round_index, own in rates.get(policy, {}).items():
            best = best_stock(headline, rates, contenders, round_index)
            if best is None:
                continue
            theirs = rates[best][round_index]
            compared = [(own[t] / theirs[t], t) for t in own
                        if theirs.get(t, 0) > 0 and own[t] == own[t]]  # nan: nothing served
            if not compared:
                continue
            ratio, task = min(compared)
            per_round[round_index] = ratio
            tasks.append(task)
        out[policy] = {"rounds": [per_round[r] for r in sorted(per_round)], "tasks": tasks,
                       **spread(list(per_round.values()))}
    return out


def run_length(options: BenchOptions) -> str:
    """How long each closed run lasts, in words; a run shorter than a headline's says so."""
    queries, seconds = HEADLINE_CLOSED
    text = f"each run {options.closed_queries} requests per task" + (
        f" and at least {options.closed_min_s:g} s, whichever ends later"
        if options.closed_min_s else "")
    if options.closed_queries < queries and (options.closed_min_s or 0) < seconds:
        text += (f" — shorter than a headline's ({queries} requests per task or {seconds:g} s, "
                 f"whichever ends later): a quick look, not a headline")
    return text


@attrs.define
class Bisection:
    """The largest rate in [0, ``high``] that meets the SLOs, halving the bracket per probe.

    ``capacity`` is the largest rate probed that met every SLO (0 until one does); after n
    probes the true capacity lies within ``high / 2**n`` above it, when meeting the SLOs is
    monotone in the rate.
    """

    high: float
    low: float = 0.0
    capacity: float = 0.0
    #: Every probe met the SLOs: the capacity is at least what was found, perhaps beyond the
    #: bracket.
    never_missed: bool = True

    def next_rate(self) -> float:
        """The rate to probe next: the middle of the bracket."""
        return (self.low + self.high) / 2

    def record(self, rate: float, met: bool) -> None:
        """A probe at ``rate`` met the SLOs (raise the floor) or not (lower the ceiling)."""
        if met:
            self.low = self.capacity = max(self.capacity, rate)
        else:
            self.high, self.never_missed = rate, False


def _meets(run: dict[str, Any], slos: dict[str, SLO]) -> bool:
    """A VALID run in which every task met its SLOs (:func:`judge_run`)."""
    return bool(run["valid"] and run.get("summary") is not None and judge_run(run, slos) == 0)


def capacity(context: ServeContext, contenders: Sequence[Contender], options: BenchOptions,
             recorder: Recorder, closed_result: dict[str, Any] | None = None
             ) -> dict[str, Any]:
    """The largest Poisson rate per task at which every task meets its SLOs (latency: k × its
    isolated dense latency from the profile, :func:`isolated_dense_ms`), by bisection.

    Not k × the hot latency of the fastest stock configuration
    (:meth:`ServeContext.isolated_hot_ms`, what the steady scenario divides by): on ``default``
    those SLOs (10 × 0.086 ms for ``vision``) are shorter than one call of ``sentiment`` on a
    core the light tasks share, and at k = 5 and 10 no contender sustained any rate
    (2026-12-03, AMD EPYC).

    The bracket is [0, 1.5 × closed-loop throughput ÷ tasks] (a rate above the closed-loop
    throughput cannot be sustained), the throughput the closed scenario measured or, without
    it, one closed run at the closed scenario's SLOs (equal accuracy, latency unconstrained:
    the plan for throughput; under a k's tight latency SLOs a policy may plan for latency and
    run the closed loop slower, which once capped sparseloom-loaded's capacity at k = 10 below
    what it sustained); ``capacity_steps`` halvings leave a tolerance of
    1.5 / 2**steps of it. A probe stops as soon as its verdict is certain (``early_stop``:
    a task with a tenth of its requests over the SLO), so failing probes cost seconds. A
    contender's capacity is the largest rate probed that met every SLO
    (0 when none did). Baselines run only at ``baseline_ks``.
    """
    tasks = len(context.workload.task_names)
    iso = isolated_dense_ms(context)
    brackets: dict[str, float] = {}
    if closed_result is not None:
        for row in closed_result["contenders"]:
            if row["n"]:
                brackets[row["contender"]] = 1.5 * row["median"] / tasks
    by_k: dict[str, Any] = {}
    for k in options.ks:
        slos = dense_slos(context, {t: k * iso[t] for t in iso})
        playing = [c for c in contenders if not c.is_baseline or k in options.baseline_ks]
        values: dict[str, dict[int, float]] = {}
        topped: set[str] = set()
        for round_index in range(options.capacity_rounds):
            for contender in playing:
                if contender.name not in brackets:
                    run = recorder.run("capacity-bracket", contender, round_index,
                                       partial(serve_contender, context, contender,
                                               LoadSpec("closed", queries=options.queries,
                                                        seed=options.seed),
                                               dense_slos(context)))
                    rate = run["figures"].get("throughput_rps", math.nan)
                    brackets[contender.name] = 1.5 * rate / tasks if rate == rate else 100.0
            searches = {c.name: Bisection(brackets[c.name]) for c in playing}
            for step in range(options.capacity_steps):
                for contender in rotated(playing, round_index + step):
                    search = searches[contender.name]
                    rate = search.next_rate()
                    spec = LoadSpec("poisson", queries=options.capacity_requests, rate=rate,
                                    seed=options.seed + round_index, early_stop=True)
                    run = recorder.run(
                        "capacity", contender, round_index,
                        partial(serve_contender, context, contender, spec, slos),
                        k=k, rate=rate, step=step)
                    run["met"] = _meets(run, slos)
                    search.record(rate, run["met"])
            for contender in playing:
                search = searches[contender.name]
                values.setdefault(contender.name, {})[round_index] = search.capacity
                if search.never_missed:
                    topped.add(contender.name)
        runs = [r for r in recorder.runs_of("capacity") if r.get("k") == k]
        by_k[f"{k:g}"] = {
            "slo_latency_ms": {t: k * iso[t] for t in iso},
            "contenders": table(values, playing, runs, "rate_rps_per_task"),
            "ratios": ratios_per_round(values, playing),
            "ratios_by_policy": family_ratios(values, playing),
            "at_bracket_top": sorted(topped)}
    headline = by_k.get("5") or next(iter(by_k.values()))
    return {"figure": "rate_rps_per_task", "unit": "requests/s per task",
            "isolated_dense_ms": iso, "k": by_k,
            "contenders": headline["contenders"], "ratios": headline["ratios"],
            "ratios_by_policy": headline["ratios_by_policy"]}


def judge_run(run: dict[str, Any], slos: dict[str, SLO]) -> float:
    """The run's violation rate under ``slos``: a task misses when its p90 is above its
    latency SLO, or when what it served falls short of its accuracy SLO as judged (on the
    held-out rows, else the selection rows: :func:`~serve_figures.judged_accuracy`; the dense
    model's for a stock runtime). The accuracy of the few hundred requests a run serves has a
    standard error of 2–4 points: judged on them, a dense model would "miss" a dense − 1
    point SLO about one run in four."""
    summary = run["summary"]

    def accuracy(task: Any) -> float:
        judged = judged_accuracy(task)
        return judged if judged == judged else float(task.accuracy_measured)

    missed = [t for t in summary.tasks
              if not (accuracy(t) >= slos[t.task].accuracy - ACCURACY_TOLERANCE
                      and t.latency.p90_ms <= slos[t.task].latency_ms)]
    return len(missed) / len(summary.tasks) if summary.tasks else math.nan
