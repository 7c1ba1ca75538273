"""``sparseloom bench serve``: every contender against the stock runtimes, side by side.

For every scenario (:mod:`sparseloom.evaluation.serve_scenarios`), round ``r`` runs every
contender (:mod:`sparseloom.evaluation.contenders`: the registered policies and the stock
runtimes of :mod:`sparseloom.evaluation.stock`) once, in an order rotated by ``r``, on the same
processors' cores, eval rows (seeded per round), load and scoring. Per contender the report
gives the median and spread (min–max) of each figure over its VALID runs, and each ratio —
sparseloom ÷ the best stock runtime, ÷ the best baseline, ÷ its own picks on stock ONNX
Runtime — computed per round, then summarised. Only measured, VALID runs enter a median; the
1-minute load average before the first run and the cores other processes kept busy during
every run are recorded; a result whose first run started above
:data:`~sparseloom.evaluation.serve_figures.QUIET_LOAD`, or during which anything else used
more than :data:`~sparseloom.evaluation.serve_figures.QUIET_FOREIGN_CORES` cores on average, is
no headline (:func:`quiet_record`).
"""

from __future__ import annotations

import math
import platform
import time
from collections.abc import Callable, Sequence
from typing import Any

from sparseloom.evaluation.contender import select_contenders
from sparseloom.evaluation.contenders import ServeContext, profile_context
from sparseloom.evaluation.serve_figures import (
    QUIET_FOREIGN_CORES,
    QUIET_LOAD,
    BenchOptions,
    Recorder,
)


def machine() -> dict[str, Any]:
    """The CPU model, core count and runtime versions the figures were measured with."""
    import onnxruntime
    import openvino

    from sparseloom.core.processors import allowed_cores
    from sparseloom.core.processors.cores import cpu_name

    return {"cpu": cpu_name(), "cores": list(allowed_cores()), "python": platform.python_version(),
            "onnxruntime": onnxruntime.__version__, "openvino": openvino.get_version()}


def bench_serve(workload: Any, profile: Any, zoos: Any, *, contenders: Sequence[str] = (),
                options: BenchOptions | None = None,
                progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the scenarios of ``options`` for ``contenders`` (all when empty); the JSON report.

    :param workload: the served workload; ``profile`` its profile table; ``zoos`` its subgraph
        zoos by task.
    :param progress: called with one line after every run.
    :raises ConfigError: an unknown or repeated contender, or bad options.
    :raises BenchInterrupted: Ctrl-C (a ``KeyboardInterrupt``), anywhere in the benchmark: it
        stops at once and carries the report of what was measured, marked ``incomplete``.
    """
    from sparseloom.evaluation.pick_speedup import pick_speedups
    from sparseloom.runtime.kept import keep_loaded
    from sparseloom.runtime.session import profile_processors

    options = options or BenchOptions()
    chosen = select_contenders(contenders)
    context = profile_context(workload, profile, zoos, memory_budget=options.memory_budget,
                              tuning_queries=options.tuning_queries,
                              tuning_rounds=options.tuning_rounds,
                              trial_queries=options.closed_queries,
                              trial_min_s=options.closed_min_s,
                              choose_above=options.choose_above / 100,
                              paired_gate=options.paired_gate, tighten=options.tighten,
                              progress=progress)
    processors = profile_processors(profile)
    cores, precision = context.cores, context.precision
    recorder = Recorder(progress)
    report: dict[str, Any] = {"workload": workload.name, "machine": machine(),
                              "options": _options(options), "contenders": [
                                  {"contender": c.name, "kind": c.kind} for c in chosen],
                              "stock_configurations": _stock_configurations(chosen, cores,
                                                                            precision),
                              "processors": [p.name + (f" (cores {list(p.cores)}, "
                                                       f"{p.threads} thread(s)"
                                                       + "".join(f", {k}={v}" for k, v in
                                                                 p.options.items()) + ")")
                                             for p in processors],
                              "scenarios": {}}
    try:
        with keep_loaded(options.keep_bytes) as pool:
            _run_scenarios(report, context, chosen, options, recorder)
            report["kept_models"] = {"max_bytes": options.keep_bytes, "evicted": pool.evicted,
                                     "reloads": pool.reloads}
    except KeyboardInterrupt as interrupt:
        report["stock_tuning"] = context.tunings
        report["judging"] = _judging(context)
        report.setdefault("incomplete", {
            "reason": "interrupted (Ctrl-C) before the first scenario started",
            "scenario": None, "finished_scenarios": [],
            "skipped_scenarios": list(options.scenarios)})
        _close(report, recorder)
        raise BenchInterrupted(report) from interrupt
    report["stock_tuning"] = context.tunings
    report["judging"] = _judging(context)
    report["pick_speedups"] = pick_speedups(context.measured_alone(), profile, processors)
    _close(report, recorder)
    return report


def _judging(context: ServeContext) -> dict[str, Any]:
    """The report's ``judging`` section: every judgement, the paired gate's verdicts and the
    steps of :mod:`~sparseloom.evaluation.tightening`."""
    from sparseloom.evaluation.judging import judging_report

    return judging_report(list(context.judgements.values()),
                          context.gate.verdicts if context.gate else ()) | {
        "tightened": [step.to_json() for step in context.tightened]}


class BenchInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a benchmark; ``report`` is what it measured until then, marked
    ``incomplete`` (the scenario it stopped in, the runs that scenario had measured)."""

    def __init__(self, report: dict[str, Any]) -> None:
        super().__init__("interrupted (Ctrl-C): the benchmark report is incomplete")
        self.report = report


def nothing_measured(workload: str, options: BenchOptions) -> dict[str, Any]:
    """The report of a benchmark stopped by Ctrl-C before its first run (while the workload,
    its profile or its zoos were loading): incomplete, with nothing measured."""
    return {"workload": workload, "options": _options(options), "scenarios": {}, "runs": [],
            "incomplete": {"reason": "interrupted (Ctrl-C) while the workload and its profile "
                                     "were loading, before any run: nothing was measured",
                           "scenario": None, "finished_scenarios": [],
                           "skipped_scenarios": list(options.scenarios)}}


def _close(report: dict[str, Any], recorder: Recorder) -> None:
    """The load record and the raw runs: the end of every report, complete or not."""
    report["load"] = quiet_record(recorder.loads[0] if recorder.loads else math.nan,
                                  recorder.runs)
    report["runs"] = [{k: v for k, v in r.items() if k != "summary"} for r in recorder.runs]


def quiet_record(first_load: float, runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Whether the benchmark ran on a quiet machine: the 1-minute load average before its
    first run at most :data:`QUIET_LOAD`, and other processes' busy cores, averaged over the
    time every run served, at most :data:`QUIET_FOREIGN_CORES`. The largest per-run figure is
    kept too: a sub-second run reads ``/proc/stat`` in 10 ms ticks, so one tick of a shell
    command shows there as 0.2 cores."""
    timed = [(r["foreign_cores"], r["seconds"]) for r in runs
             if r["foreign_cores"] == r["foreign_cores"]]
    wall = sum(seconds for _, seconds in timed)
    mean = sum(cores * seconds for cores, seconds in timed) / wall if wall else math.nan
    return {"before_first": first_load, "foreign_cores_mean": mean,
            "foreign_cores_max": max((c for c, _ in timed), default=math.nan),
            "quiet": bool(first_load <= QUIET_LOAD and mean <= QUIET_FOREIGN_CORES),
            "threshold": QUIET_LOAD, "foreign_threshold": QUIET_FOREIGN_CORES}


def _run_scenarios(report: dict[str, Any], context: ServeContext, chosen: Sequence[Any],
                   options: BenchOptions, recorder: Recorder) -> None:
    from sparseloom.evaluation import serve_grid, serve_scenarios
    from sparseloom.evaluation.sim_check import simulated_closed

    closed_result = None
    for scenario in options.scenarios:
        started = time.perf_counter()
        try:
            if scenario == "closed":
                result = closed_result = serve_scenarios.closed(context, chosen, options,
                                                                recorder)
                # Beside, never inside, the measured figures (sparseloom.evaluation.sim_check).
                result["simulated"] = simulated_closed(context, chosen, options, result)
            elif scenario == "steady":
                result = serve_scenarios.steady(context, chosen, options, recorder)
            elif scenario == "capacity":
                result = serve_scenarios.capacity(context, chosen, options, recorder,
                                                  closed_result)
            else:
                result = serve_grid.grid(context, chosen, options, recorder)
        except KeyboardInterrupt:
            finished = [r for r in recorder.runs if r["scenario"].split("-")[0] == scenario
                        and not r.get("interrupted")]
            report["incomplete"] = {
                "reason": f"interrupted (Ctrl-C) in the {scenario} scenario after "
                          f"{time.perf_counter() - started:.1f} s and {len(finished)} finished "
                          f"run(s) of it",
                "scenario": scenario,
                "finished_scenarios": list(report["scenarios"]),
                "skipped_scenarios": [s for s in options.scenarios
                                      if s != scenario and s not in report["scenarios"]]}
            raise
        result["seconds"] = time.perf_counter() - started
        report["scenarios"][scenario] = result


def _options(options: BenchOptions) -> dict[str, Any]:
    import attrs

    return attrs.asdict(options)


def _stock_configurations(chosen: Sequence[Any], cores: Sequence[int], precision: str
                          ) -> dict[str, str]:
    from sparseloom.evaluation.stock import STOCK_RUNTIMES

    return {c.name: STOCK_RUNTIMES[c.name].describe(cores, precision) for c in chosen
            if c.kind == "stock"}
