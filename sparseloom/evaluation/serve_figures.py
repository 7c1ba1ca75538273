"""What ``sparseloom bench serve`` measures and how: options, the run record, medians, ratios.

For every scenario, round ``r`` runs every contender once, in an order rotated by ``r``, on the
same processors' cores, eval rows (seeded per round), load and scoring. Per contender it
reports the median and the spread (min–max) of each figure over its VALID runs, and each ratio
— sparseloom ÷ the best stock runtime, ÷ the best baseline, ÷ its own picks on a stock runtime —
computed per round, then summarised the same way. Scenarios:

- ``closed``: the paper's throughput: ``queries`` requests per task, batch 1, one in flight per
  task, completed ÷ wall time, at equal accuracy (each task's accuracy SLO = its dense metric
  − 1 point, latency unconstrained).
- ``capacity``: MLPerf Server style: Poisson arrivals at one rate per task; the largest rate at
  which every task meets p90 ≤ k × its isolated dense latency on its fastest processor and its
  accuracy SLO over ``capacity_requests`` requests, found by bisection
  (:mod:`sparseloom.evaluation.capacity`).
- ``grid``: the violation rate under a closed loop at ``k`` × isolated dense latency × the
  paper's accuracy axis (:mod:`sparseloom.evaluation.grid`).

Only measured, VALID runs are evidence: an INVALID run is kept in the raw record and left out
of every median. The 1-minute load average is read before every run; when it was above
:data:`QUIET_LOAD` before any run the result is marked ``quiet: false`` (not a headline).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from sparseloom.core.errors import ConfigError
from sparseloom.core.types import SLO, as_tuple
from sparseloom.evaluation.contender import HEADLINE, Contender
from sparseloom.evaluation.contenders import ServeContext
from sparseloom.profile.machine_load import ForeignLoad, load_average
from sparseloom.runtime import interrupts
from sparseloom.runtime.summary import INTERRUPTED
from sparseloom.workload.arguments import number_field

#: The scenarios, in the order they run.
SCENARIOS = ("closed", "steady", "capacity", "grid")
#: 1-minute load average before the first run above which the machine was not quiet.
QUIET_LOAD = 0.5
#: Cores other processes may keep busy during a run before it is not on a quiet machine
#: (the OS, the shell, a monitor: measured 0.01–0.05 here on an idle machine).
QUIET_FOREIGN_CORES = 0.2
#: Latency SLO multipliers of the capacity and grid scenarios (Sparse-DySta's, Band's slo_scale).
KS = (2.0, 5.0, 10.0)
#: "Unconstrained" latency SLO of the closed scenario, ms.
UNCONSTRAINED_MS = 1e9


@attrs.frozen
class BenchOptions:
    """How much to measure.

    Attributes:
        scenarios: which scenarios to run.
        rounds: interleaved rounds of the closed scenario.
        capacity_rounds: bisections per contender and k (capacity).
        grid_rounds: interleaved rounds of the grid (each is 5 accuracy levels × the ks runs
            per policy contender).
        queries: requests per task in a closed run of the grid, and of the capacity
            scenario's bracket.
        closed_queries: requests per task in a run of the closed scenario, at least.
        closed_min_s: a run of the closed scenario goes on until this many seconds have
            passed, if its ``closed_queries`` ended sooner (``None``: no minimum; ``--quick``).
        capacity_requests: requests per task in a capacity probe.
        capacity_steps: bisection steps per capacity search.
        ks: latency SLO multipliers (capacity, grid).
        baseline_ks: the ks at which baselines run in the capacity search.
        seed: seeds the eval rows (``seed + round``) and arrivals.
        memory_budget: the memory budget every policy contender serves within, a fraction
            of full preloading or bytes (``RunConfig.memory_budget``).
        steady_s: seconds each run of the steady scenario keeps every task asking.
        tuning_queries: requests of each closed run that measures one configuration of one
            task for ``stock-tuned`` and ``picks-tuned``
            (:mod:`~sparseloom.evaluation.stock_tuned`).
        tuning_rounds: interleaved rounds of those runs; a configuration's latency is the
            median of its rounds.
        choose_above: points every accuracy SLO is raised by, at most to the dense model's
            selection accuracy, when a policy chooses its variants (its runs, and the picks
            ``picks-*`` serve); accuracy is still judged at the SLO itself, on the held-out
            rows — a tighter selection margin for picks that fell outside it there.
        paired_gate: keep a policy's pick only where the selection rows vouch for it beside
            dense, row by row, else plan again without it
            (:mod:`~sparseloom.plan.paired_gate`).
        tighten: where a policy's pick falls outside its margin on the held-out rows, the
            policy chooses that task's variant again under a tighter selection margin (half
            the margin, then none, then dense variants only) until every pick keeps it
            (:mod:`~sparseloom.evaluation.tightening`).
        keep_bytes: the backend-measured bytes of idle models kept loaded between runs
            (:func:`~sparseloom.runtime.kept.keep_loaded`; ``None``: every model until the
            benchmark ends). A bound trades memory for reloads between runs, which no run's
            figures include.
    """

    scenarios: tuple[str, ...] = attrs.field(default=SCENARIOS, converter=as_tuple)
    rounds: int = attrs.field(default=5, validator=attrs.validators.ge(1))
    capacity_rounds: int = attrs.field(default=3, validator=attrs.validators.ge(1))
    grid_rounds: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    queries: int = attrs.field(default=100, validator=attrs.validators.ge(1))
    closed_queries: int = attrs.field(default=2000, validator=attrs.validators.ge(1))
    closed_min_s: float | None = attrs.field(
        default=2.0, validator=number_field(low=0, low_open=True, optional=True))
    capacity_requests: int = attrs.field(default=500, validator=attrs.validators.ge(1))
    capacity_steps: int = attrs.field(default=5, validator=attrs.validators.ge(1))
    ks: tuple[float, ...] = attrs.field(default=KS, converter=as_tuple)
    baseline_ks: tuple[float, ...] = attrs.field(default=(5.0,), converter=as_tuple)
    seed: int = 0
    memory_budget: float | int = attrs.field(default=1.0, validator=attrs.validators.gt(0))
    steady_s: float = attrs.field(default=10.0, validator=attrs.validators.gt(0))
    tuning_queries: int = attrs.field(default=100, validator=attrs.validators.ge(1))
    tuning_rounds: int = attrs.field(default=3, validator=attrs.validators.ge(1))
    choose_above: float = attrs.field(default=0.0, validator=number_field(low=0))
    paired_gate: bool = True
    tighten: bool = True
    keep_bytes: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(0)))

    def __attrs_post_init__(self) -> None:
        unknown = [s for s in self.scenarios if s not in SCENARIOS]
        if unknown or not self.scenarios:
            raise ConfigError(f"unknown scenario(s) {', '.join(map(repr, unknown))}; choose "
                              f"from {', '.join(SCENARIOS)}")
        if any(not (math.isfinite(k) and k > 0) for k in (*self.ks, *self.baseline_ks)):
            raise ConfigError(f"latency multipliers must be finite and > 0, got {self.ks}")


#: A run of the closed scenario long enough to be measured: at least this many seconds or
#: ``closed_queries`` per task, whichever ends later (``--quick`` runs shorter and says so).
HEADLINE_CLOSED = (2000, 2.0)

QUICK = BenchOptions(rounds=2, capacity_rounds=1, grid_rounds=1, queries=100,
                     closed_queries=100, closed_min_s=None, steady_s=1.0,
                     capacity_requests=100, tuning_queries=100, tuning_rounds=1,
                     capacity_steps=3, ks=(5.0,))


def summary_figures(summary: Any) -> dict[str, float]:
    """The figures of one run summary that the benchmark reports.

    ``equal_accuracy`` is 1 when every task served what keeps its accuracy SLO as judged on
    the eval rows its selection never saw (``accuracy_judged``:
    :mod:`sparseloom.evaluation.judging`), or — where nothing was held out — on the selection
    rows (the profile's figure, ``accuracy_profile``). The accuracy measured on the requests
    served is reported beside it; on 100 requests its standard error is about 4 points, too
    coarse to judge a 1-point SLO."""
    figures = {"throughput_rps": float(summary.throughput_rps),
               "violation_rate": float(summary.violation_rate)}
    equal = True
    for task in summary.tasks:
        figures[f"p90_ms.{task.task}"] = float(task.latency.p90_ms)
        figures[f"accuracy.{task.task}"] = float(task.accuracy_measured)
        selection = float(task.accuracy_profile)
        if selection == selection:
            figures[f"accuracy_selection.{task.task}"] = selection
        judged = judged_accuracy(task)
        if judged == judged:
            if judged != selection:
                figures[f"accuracy_judged.{task.task}"] = judged
            equal = equal and judged >= task.slo_accuracy - 1e-9
    figures["equal_accuracy"] = float(equal)
    for name, share in summary.utilisation.items():
        figures[f"utilisation.{name}"] = float(share)
    for name, share in summary.lent.items():
        figures[f"lent.{name}"] = float(share)
    return figures


def judged_accuracy(task: Any) -> float:
    """A task result's accuracy as judged: on held-out rows where a benchmark judged it
    (``accuracy_judged``), else the profile's on the selection rows (``nan`` when neither)."""
    judged = float(getattr(task, "accuracy_judged", math.nan))
    return judged if judged == judged else float(task.accuracy_profile)


def spread(values: Sequence[float]) -> dict[str, Any]:
    """Median, min, max and count of the finite ``values`` (``nan`` when none)."""
    finite = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return {"median": math.nan, "min": math.nan, "max": math.nan, "n": 0}
    return {"median": statistics.median(finite), "min": min(finite), "max": max(finite),
            "n": len(finite)}


def dense_slos(context: ServeContext, latency_ms: Mapping[str, float] | None = None
               ) -> dict[str, SLO]:
    """Each task at equal accuracy: its dense metric − 1 point; latency as given or none."""
    out = {}
    for name in context.workload.task_names:
        dense = float(context.zoos[name].manifest["metric"]["dense"])
        latency = (latency_ms or {}).get(name, UNCONSTRAINED_MS)
        out[name] = SLO(max(dense - 0.01, 0.0), latency)
    return out


def isolated_dense_ms(context: ServeContext) -> dict[str, float]:
    """Each task's dense model, whole, on its fastest processor: the profile's summed cold
    stages (a lone request's; ``TaskProfile.latency_cold_ms``)."""
    out = {}
    for name in context.workload.task_names:
        latency = context.profile.task(name).latency_cold_ms  # (S, V, P)
        out[name] = float(latency[:, 0, :].sum(axis=0).min())
    return out


@attrs.define(eq=False)
class Recorder:
    """Every measured run of one benchmark, with the load average before it."""

    progress: Callable[[str], None] | None = None
    runs: list[dict[str, Any]] = attrs.field(factory=list)
    loads: list[float] = attrs.field(factory=list)

    def runs_of(self, scenario: str) -> list[dict[str, Any]]:
        """The runs of one scenario, in the order they ran."""
        return [r for r in self.runs if r["scenario"] == scenario]

    def run(self, scenario: str, contender: Contender, round_index: int,
            serve: Callable[[], Any], **extra: Any) -> dict[str, Any]:
        """Serve once, record the figures; a run that raises is recorded as failed, one cut
        short by Ctrl-C as interrupted, and the ``KeyboardInterrupt`` raised again."""
        interrupts.check()  # a Ctrl-C whose exception was lost still ends the benchmark
        load = load_average()
        self.loads.append(load)
        started = time.perf_counter()
        foreign = ForeignLoad()
        record: dict[str, Any] = {"scenario": scenario, "contender": contender.name,
                                  "round": round_index, "load_before": load, **extra}
        try:
            summary = serve()
        except KeyboardInterrupt as interrupt:
            # Ctrl-C ends the benchmark: this run is recorded as cut short (its figures, when
            # it served, are kept beside it but it is no evidence), then the caller stops.
            partial = getattr(interrupt, "partial", None)
            partial = getattr(partial, "summary", partial)
            record |= {"valid": False, "interrupted": True, "reasons": [INTERRUPTED],
                       "figures": summary_figures(partial) if partial is not None else {}}
            self._finish(record, started, foreign)
            raise
        except Exception as error:  # a contender that cannot serve is reported, not fatal
            record |= {"valid": False, "reasons": [f"{type(error).__name__}: {error}"],
                       "figures": {}}
        else:
            record |= {"valid": bool(summary.valid), "reasons": list(summary.reasons),
                       "figures": summary_figures(summary), "summary": summary}
        self._finish(record, started, foreign)
        return record

    def _finish(self, record: dict[str, Any], started: float, foreign: ForeignLoad) -> None:
        record["seconds"] = time.perf_counter() - started
        record["foreign_cores"] = foreign.cores()
        self.runs.append(record)
        if self.progress is not None:
            figure = record["figures"].get("throughput_rps", math.nan)
            verdict = (" INTERRUPTED" if record.get("interrupted")
                       else "" if record["valid"] else " INVALID")
            self.progress(f"{record['scenario']} r{record['round'] + 1} {record['contender']}: "
                          f"{figure:.0f} req/s{verdict} "
                          f"({record['seconds']:.1f} s, other processes "
                          f"{record['foreign_cores']:.2f} cores)")


def ratios_per_round(values: Mapping[str, Mapping[int, float]],
                     contenders: Sequence[Contender], higher_is_better: bool = True,
                     headline: str = HEADLINE) -> dict[str, dict[str, Any]]:
    """``headline`` (the sparseloom policy) ÷ best stock, ÷ best baseline, ÷ picks-ort: per
    round, then summarised.

    ``values[contender][round]`` is a VALID run's figure; rounds where either side has none
    are left out. Where lower is better (violation rates, which are often 0) the comparison is
    a difference, best other − sparseloom (> 0: sparseloom lower), not a ratio.
    """
    if not higher_is_better:
        return _differences(values, contenders, headline)
    pick = max
    groups = _groups(contenders)
    mine = values.get(headline, {})
    out = {}
    for key, names in groups.items():
        per_round = {}
        for round_index, own in mine.items():
            others = [values[n][round_index] for n in names
                      if round_index in values.get(n, {}) and values[n][round_index] > 0]
            if others and own > 0:
                per_round[round_index] = own / pick(others)
        out[key] = {"rounds": [per_round[r] for r in sorted(per_round)], **spread(
            list(per_round.values())), "against": names}
    return out


def best_stock(headline: Mapping[str, Mapping[int, float]],
               rates: Mapping[str, Mapping[int, Any]], contenders: Sequence[Contender],
               round_index: int) -> str | None:
    """The round's best stock runtime by the scenario's ``headline`` figure (throughput,
    STP) among those with a figure and task rates that round; ``None`` when none has."""
    rivals = [c.name for c in contenders if c.is_stock and round_index in headline.get(c.name, {})
              and round_index in rates.get(c.name, {})]
    return max(rivals, key=lambda n: headline[n][round_index]) if rivals else None


def _groups(contenders: Sequence[Contender]) -> dict[str, list[str]]:
    return {"vs_best_stock": [c.name for c in contenders if c.is_stock],
            "vs_best_baseline": [c.name for c in contenders if c.is_baseline],
            "vs_picks_on_stock": [c.name for c in contenders if c.name == "picks-ort"]}


def family_ratios(values: Mapping[str, Mapping[int, float]], contenders: Sequence[Contender],
                  higher_is_better: bool = True) -> dict[str, dict[str, dict[str, Any]]]:
    """:func:`ratios_per_round` for every sparseloom policy among ``contenders``."""
    return {c.name: ratios_per_round(values, contenders, higher_is_better, c.name)
            for c in contenders if c.is_sparseloom}


def factors(values: Mapping[str, Mapping[int, float]], contenders: Sequence[Contender]
            ) -> dict[str, dict[str, Any]]:
    """Per sparseloom policy, its ratio to the best stock runtime as three factors, per round:
    ``variant_choice`` (picks-tuned ÷ stock-tuned: what the variants buy on a tuned stock
    runtime), ``runtime_placement`` (the policy ÷ picks-tuned: what sparseloom's runtime and
    placement add) and ``tuning`` (stock-tuned ÷ the best stock runtime: 1 where stock-tuned is
    the best), whose product is the policy ÷ the best stock runtime. Only rounds with a VALID
    figure from each of them count; empty without both tuned contenders."""
    names = {c.name for c in contenders}
    if not {"stock-tuned", "picks-tuned"} <= names:
        return {}
    stock = [c.name for c in contenders if c.is_stock]
    out: dict[str, dict[str, Any]] = {}
    for policy in (c.name for c in contenders if c.is_sparseloom):
        rows: dict[str, dict[int, float]] = {k: {} for k in (
            "variant_choice", "runtime_placement", "tuning", "whole")}
        for round_index, own in values.get(policy, {}).items():
            tuned = values.get("stock-tuned", {}).get(round_index, 0.0)
            picks = values.get("picks-tuned", {}).get(round_index, 0.0)
            best = max((values[n][round_index] for n in stock
                        if round_index in values.get(n, {})), default=0.0)
            if min(own, tuned, picks, best) <= 0:
                continue
            rows["variant_choice"][round_index] = picks / tuned
            rows["runtime_placement"][round_index] = own / picks
            rows["tuning"][round_index] = tuned / best
            rows["whole"][round_index] = own / best
        out[policy] = {k: {"rounds": [v[r] for r in sorted(v)], **spread(list(v.values()))}
                       for k, v in rows.items()}
    return out


def _differences(values: Mapping[str, Mapping[int, float]], contenders: Sequence[Contender],
                 headline: str) -> dict[str, dict[str, Any]]:
    mine = values.get(headline, {})
    out = {}
    for key, names in _groups(contenders).items():
        per_round = {}
        for round_index, own in mine.items():
            others = [values[n][round_index] for n in names if round_index in values.get(n, {})]
            if others:
                per_round[round_index] = min(others) - own
        out[key] = {"rounds": [per_round[r] for r in sorted(per_round)], "difference": True,
                    **spread(list(per_round.values())), "against": names}
    return out
