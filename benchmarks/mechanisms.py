"""Each runtime mechanism on and off, side by side: the figures of docs/runtime.md's table.

For every mechanism the runtime has (docs/runtime.md, *The runtime in one picture*), the same
workload is served with the mechanism on (``sparseloom-loaded`` and the runtime as shipped) and
off (one switch flipped: a ``LoadedPolicy`` option or a ``RuntimeOptions`` field), in
interleaved rounds — on, off, then off, on, … (``bench serve``'s rotation) — in the scenario
where the mechanism acts, through ``bench serve``'s own scenarios
(:mod:`sparseloom.evaluation.serve_scenarios`: same load generator, SLOs, scoring and run
record):

* closed loop, ``--queries`` per task, no latency SLO (the paper's makespan; throughput):
  merged chains, batch-1 models, idle lending, time-sliced lanes;
* the grid's row at k = 2 (every accuracy level; lanes) or k = 5 (overflow threads,
  earliest-deadline-first queues): the worst task's p90 over its latency SLO, the geometric
  mean over the row's runs, and the grid's violation rate beside it;
* Poisson arrivals at :data:`NEAR_CAPACITY` × the closed loop's throughput per task, k = 5
  SLOs, :data:`POISSON_S` seconds (long enough for the policy's dwell): feedback re-planning,
  the heap frozen while serving (a full collection's pause shows in the tail); and feedback
  re-planning under drift (``feedback_drift``): the same, with a process outside sparseloom
  spinning on the first processor's cores for the whole run (another program on the device),
  which the plan, made from the profile, does not know of;
* ``sparseloom demo --workload tiny --sample 30`` through the console script's ``main``
  (``python -m sparseloom``, which installs the survivor freeze) against the same command
  through ``python -c 'from sparseloom.cli import cli; cli()'`` (which installs nothing), a
  fresh process each, after one untimed run that fills the cache (the survivor freeze acts
  outside serving, in long commands; on every workload this one command).

Per mechanism it prints the metric's median on and off, the per-round gain (on ÷ off where
higher is better, off ÷ on where lower is: > 1 means the mechanism helps) with its median and
[min–max] over the rounds, the rounds, the machine and the 1-minute load average before the
first run. The process leaves CPython's collector as it is (no survivor freeze), so the heap
freeze's off side walks every object the process holds::

    .venv/bin/python benchmarks/mechanisms.py --cache /work/bench-cache --json out/mech.json
    .venv/bin/python benchmarks/mechanisms.py --mechanism lanes --rounds 5 \\
        -p 'ov:CPU?INFERENCE_PRECISION_HINT=bf16' -p ort:CPU
    .venv/bin/python benchmarks/mechanisms.py --quick        # tiny, 1 round: a smoke test

Run it on a quiet machine (1-minute load <= 0.5 before).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import attrs

#: The policy every mechanism is measured under.
POLICY = "sparseloom-loaded"
#: Poisson rate of the Poisson scenarios, as a fraction of the closed loop's throughput per
#: task: sparseloom-loaded's capacity at k = 5 was 0.83–0.88 of it on the AMX Xeon
#: (docs/results.md), but 0.75 refused requests on the AMD EPYC (2026-12-03): half is a
#: heavy load that both sides serve.
NEAR_CAPACITY = 0.5
#: Seconds of Poisson arrivals per run: the policy re-plans at most once per 2-s dwell.
POISSON_S = 8.0
#: The survivor freeze's command (its documented measurement, docs/runtime.md).
DEMO = ("demo", "--workload", "tiny", "--sample", "30")


@attrs.frozen
class Mechanism:
    """One mechanism, the switch that turns it off and the scenario where it acts."""

    name: str
    what: str
    scenario: str  # closed | grid | poisson | demo
    switch: str
    policy_option: str | None = None
    runtime_option: str | None = None
    k: float = 0.0
    #: Runtime options off on both sides, to keep another mechanism out of the comparison.
    both_off: tuple[str, ...] = ()
    #: Whether a foreign process spins on the first processor's cores during each run.
    drift: bool = False


MECHANISMS = {m.name: m for m in (
    Mechanism("merged", "merged chains", "closed", "LoadedPolicy(merge_chains=False)",
              policy_option="merge_chains"),
    Mechanism("batch_one", "batch-1 model copies", "closed",
              "RuntimeOptions(batch_one=False)", runtime_option="batch_one"),
    Mechanism("lending", "idle lending (wide twins)", "closed",
              "LoadedPolicy(lend_idle=False)", policy_option="lend_idle"),
    Mechanism("time_share", "time-sliced lanes on a shared processor", "closed",
              "LoadedPolicy(time_share=False)", policy_option="time_share"),
    # Feedback off on both sides: its re-plans (some runs switch plans, some do not) would
    # decide the tail, not the collector.
    Mechanism("heap_freeze", "heap frozen while serving", "poisson",
              "RuntimeOptions(freeze_heap=False)", runtime_option="freeze_heap", k=5.0,
              both_off=("feedback",)),
    Mechanism("lanes", "lanes", "grid", "LoadedPolicy(lanes=False)", policy_option="lanes",
              k=2.0),
    Mechanism("overflow", "overflow threads", "grid", "LoadedPolicy(overflow=False)",
              policy_option="overflow", k=5.0),
    Mechanism("edf", "earliest-deadline-first queues", "grid",
              "RuntimeOptions(deadline_queues=False)", runtime_option="deadline_queues",
              k=5.0),
    Mechanism("feedback", "feedback re-planning", "poisson", "RuntimeOptions(feedback=False)",
              runtime_option="feedback", k=5.0),
    Mechanism("feedback_drift", "feedback re-planning, a foreign process on a processor",
              "poisson", "RuntimeOptions(feedback=False)", runtime_option="feedback", k=5.0,
              drift=True),
    Mechanism("survivor_freeze", "survivor freeze (console script)", "demo",
              "python -c 'from sparseloom.cli import cli; cli()' (installs no freeze)"),
)}


@attrs.define
class Bench:
    """What every mechanism's measurement shares."""

    context: Any
    rounds: int
    queries: int
    progress: Callable[[str], None]
    #: The Poisson rate per task (``None``: :data:`NEAR_CAPACITY` × the closed loop's).
    rate: float | None = None
    #: sparseloom-loaded's closed-loop throughputs measured so far (the Poisson rate's base).
    closed_rps: list[float] = attrs.field(factory=list)


def contenders(mechanism: Mechanism) -> tuple[Any, Any]:
    """(on, off): sparseloom-loaded as shipped, and with the mechanism's switch off."""
    from sparseloom.core.registry import get_registry
    from sparseloom.evaluation.contender import Contender
    from sparseloom.runtime.options import RuntimeOptions

    base: dict[str, Any] = {name: False for name in mechanism.both_off}
    on = (Contender(f"{POLICY}-no-{'-'.join(base)}", "policy", policy=POLICY,
                    options=RuntimeOptions(**base)) if base else Contender(POLICY, "policy"))
    if mechanism.policy_option is not None:
        from loaded_ab import _Flipped  # sparseloom-loaded with one option flipped

        flipped = _Flipped(mechanism.policy_option)
        if flipped.name not in {r.name for r in get_registry().policies()}:
            get_registry().register_plugin(flipped, f"mechanisms-{mechanism.name}",
                                           distribution="benchmarks", version="0")
        return on, Contender(flipped.name, "policy")
    off = RuntimeOptions(**(base | {str(mechanism.runtime_option): False}))
    return on, Contender(f"{on.name}-no-{mechanism.name.replace('_', '-')}", "policy",
                         policy=POLICY, options=off)


def tail(run: dict[str, Any], slos: dict[str, Any]) -> float:
    """The worst task's p90 over its latency SLO in one run (``nan`` for an INVALID run);
    only the SLOs' latencies are read (the grid's levels differ in accuracy only)."""
    if not run["valid"]:
        return math.nan
    figures = run["figures"]
    return max(figures[f"p90_ms.{t}"] / slo.latency_ms for t, slo in slos.items())


def geomean(values: Sequence[float]) -> float:
    """The geometric mean of the finite, positive ``values`` (``nan`` when none)."""
    kept = [v for v in values if math.isfinite(v) and v > 0]
    return math.exp(statistics.fmean(math.log(v) for v in kept)) if kept else math.nan


def per_round(runs: Sequence[dict[str, Any]], name: str, rounds: int,
              figure: Callable[[list[dict[str, Any]]], float]) -> list[float]:
    """``figure`` of each round's runs of contender ``name``."""
    return [figure([r for r in runs if r["contender"] == name and r["round"] == index])
            for index in range(rounds)]


def measure(mechanism: Mechanism, bench: Bench) -> dict[str, Any]:
    """Serve with ``mechanism`` on and off; its figures per round."""
    if mechanism.scenario == "demo":
        return _demo(bench)
    from sparseloom.evaluation import serve_grid, serve_scenarios
    from sparseloom.evaluation.serve_figures import (
        BenchOptions,
        Recorder,
        dense_slos,
        isolated_dense_ms,
    )

    context, rounds = bench.context, bench.rounds
    on, off = contenders(mechanism)
    recorder = Recorder(bench.progress)
    result: dict[str, Any] = {}
    if mechanism.scenario == "closed":
        options = BenchOptions(rounds=rounds, queries=bench.queries)
        serve_scenarios.closed(context, [on, off], options, recorder)
        runs = recorder.runs_of("closed")

        def throughput(own: list[dict[str, Any]]) -> float:
            return own[0]["figures"]["throughput_rps"] if own and own[0]["valid"] else math.nan

        values = {c.name: per_round(runs, c.name, rounds, throughput) for c in (on, off)}
        bench.closed_rps += [v for v in values[on.name] if math.isfinite(v)]
        result |= {"metric": "throughput", "unit": "requests/s", "higher_is_better": True,
                   "load": f"closed, {bench.queries} queries per task"}
    else:
        iso = isolated_dense_ms(context)
        slos = dense_slos(context, {t: mechanism.k * ms for t, ms in iso.items()})
        if mechanism.scenario == "grid":
            grid = serve_grid.grid(context, [on, off], BenchOptions(grid_rounds=rounds),
                                        recorder, ks=(mechanism.k,))
            runs = recorder.runs_of("grid")
            axis = grid["accuracy_axis"]

            def violations(own: list[dict[str, Any]]) -> float:
                """The grid's violation rate of one round: its cells judged as the grid
                judges them, averaged."""
                rates = [serve_scenarios.judge_run(r, {t: attrs.evolve(
                    slo, accuracy=axis[t][r["level"]]) for t, slo in slos.items()})
                    for r in own if r["valid"]]
                return statistics.fmean(rates) if rates else math.nan

            violation = {c.name: per_round(runs, c.name, rounds, violations) for c in (on, off)}
            load = f"grid row k = {mechanism.k:g}, 5 accuracy levels, 100 queries per task"
            values = {c.name: per_round(runs, c.name, rounds,
                                        lambda own: geomean([tail(r, slos) for r in own]))
                      for c in (on, off)}
        else:
            rate = bench.rate or _poisson_rate(bench, on)
            hog = _first_cores(context) if mechanism.drift else None
            runs = _poisson(bench, recorder, (on, off), rate, slos, hog)
            base = "a set rate" if bench.rate else f"{NEAR_CAPACITY:g} × closed"
            load = (f"Poisson {rate:.1f} req/s per task ({base}), {POISSON_S:g} s, "
                    f"k = {mechanism.k:g}"
                    + (f", a foreign process spinning on core(s) {list(hog)}" if hog else ""))
            values = {c.name: per_round(runs, c.name, rounds,
                                        lambda own: tail(own[0], slos) if own else math.nan)
                      for c in (on, off)}
            violation = {c.name: per_round(runs, c.name, rounds, lambda own: (
                serve_scenarios.judge_run(own[0], slos) if own and own[0]["valid"]
                else math.nan)) for c in (on, off)}
        result |= {"metric": "worst p90 ÷ latency SLO", "unit": "ratio",
                   "higher_is_better": False, "load": load,
                   "violation_rate": {"on": violation.get(on.name), "off": violation.get(off.name)}}
        result["switches"] = {c.name: sum(r["summary"].switches for r in runs
                                          if r["contender"] == c.name and r.get("summary"))
                              for c in (on, off)}
    result |= _compare(values[on.name], values[off.name], result["higher_is_better"])
    result["invalid_runs"] = sum(1 for r in runs if not r["valid"])
    result["invalid_reasons"] = sorted({reason for r in runs if not r["valid"]
                                        for reason in r["reasons"]})
    result["runs"] = [{k: v for k, v in r.items() if k != "summary"} for r in runs]
    return result


def _poisson_rate(bench: Bench, on: Any) -> float:
    """:data:`NEAR_CAPACITY` × sparseloom-loaded's closed-loop throughput per task (measured
    once here when no closed mechanism ran before)."""
    from sparseloom.evaluation.serve_figures import Recorder, dense_slos
    from sparseloom.evaluation.serving import serve_contender
    from sparseloom.runtime.load import LoadSpec

    if not bench.closed_rps:
        spec = LoadSpec("closed", queries=bench.queries)
        run = Recorder(bench.progress).run("poisson-bracket", on, 0, partial(
            serve_contender, bench.context, on, spec, dense_slos(bench.context)))
        bench.closed_rps.append(run["figures"].get("throughput_rps", math.nan))
    tasks = len(bench.context.workload.task_names)
    return NEAR_CAPACITY * statistics.median(bench.closed_rps) / tasks


#: A process outside sparseloom that keeps the cores named on its command line busy.
SPIN = ("import os, sys\nos.sched_setaffinity(0, {int(c) for c in sys.argv[1:]})\n"
        "while True:\n    pass\n")


def _first_cores(context: Any) -> tuple[int, ...]:
    """The cores of the workload's first profiled processor (core 0 where it names none)."""
    from sparseloom.runtime.session import profile_processors

    served = profile_processors(context.profile)
    return tuple(served[0].cores) or (0,)


def _spinning(fn: Callable[[], Any], cores: Sequence[int]) -> Callable[[], Any]:
    """``fn`` run while a foreign process spins on each of ``cores``."""
    def run() -> Any:
        spinners = [subprocess.Popen([sys.executable, "-c", SPIN, str(core)]) for core in cores]
        try:
            return fn()
        finally:
            for spinner in spinners:
                spinner.kill()
                spinner.wait()
    return run


def _poisson(bench: Bench, recorder: Any, pair: Sequence[Any], rate: float,
             slos: dict[str, Any], hog: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """One Poisson run of each of ``pair`` per round, in ``bench serve``'s rotated order
    (with a foreign process spinning on each core of ``hog`` during each run)."""
    from sparseloom.core.types import rotated
    from sparseloom.evaluation.serving import serve_contender
    from sparseloom.runtime.load import LoadSpec

    for index in range(bench.rounds):
        spec = LoadSpec("poisson", queries=max(1, round(rate * POISSON_S)), rate=rate,
                        seed=index)
        for contender in rotated(pair, index):
            serve = partial(serve_contender, bench.context, contender, spec, slos)
            recorder.run("poisson", contender, index, _spinning(serve, hog) if hog else serve)
    return list(recorder.runs_of("poisson"))


def _demo(bench: Bench) -> dict[str, Any]:
    """``sparseloom demo`` timed through the console script and through ``python -c``."""
    from sparseloom.profile.machine_load import load_average

    commands = {"on": [sys.executable, "-m", "sparseloom", *DEMO],
                "off": [sys.executable, "-c", "from sparseloom.cli import cli; cli()", *DEMO]}
    with tempfile.TemporaryDirectory(prefix="sparseloom-mechanisms-") as out:
        def timed(side: str) -> float:
            started = time.perf_counter()
            done = subprocess.run([*commands[side], "--out", out], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
            if done.returncode:
                last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
                raise RuntimeError(f"`{' '.join(commands[side])}` exited with "
                                   f"{done.returncode}: {last}")
            return time.perf_counter() - started

        timed("on")  # warm-up, untimed: builds what the cache lacks
        seconds: dict[str, list[float]] = {"on": [], "off": []}
        runs = []
        for index in range(bench.rounds):
            for side in ("on", "off") if index % 2 == 0 else ("off", "on"):
                load = load_average()
                seconds[side].append(timed(side))
                runs.append({"side": side, "round": index, "seconds": seconds[side][-1],
                             "load_before": load})
                bench.progress(f"demo r{index + 1} {side}: {seconds[side][-1]:.1f} s")
    return {"metric": "wall time", "unit": "s", "higher_is_better": False,
            "load": f"`sparseloom {' '.join(DEMO)}`, a fresh process per run, warm cache",
            **_compare(seconds["on"], seconds["off"], False), "runs": runs}


def _compare(on: Sequence[float], off: Sequence[float], higher_is_better: bool
             ) -> dict[str, Any]:
    """Medians on and off and the per-round gain (> 1: the mechanism helps)."""
    from sparseloom.evaluation.serve_figures import spread

    gains = [(a / b if higher_is_better else b / a) if a > 0 and b > 0 else math.nan
             for a, b in zip(on, off, strict=True)]
    return {"on": {**spread(on), "rounds": list(on)}, "off": {**spread(off), "rounds": list(off)},
            "gain": {**spread(gains), "rounds": gains}}


def _number(value: float, digits: int = 2) -> str:
    return "—" if not math.isfinite(value) else f"{value:.{digits}f}"


def render(report: dict[str, Any]) -> str:
    """The report as a plain-text table, one mechanism a row."""
    lines = [f"sparseloom mechanisms on {report['workload']}: {report['rounds']} interleaved "
             f"round(s) (on, off, then off, on, …)"
             + (" — --quick: tiny, 1 round, a smoke test, not a measurement"
                if report["quick"] else ""),
             f"machine: {report['machine']['cpu']}, cores {report['machine']['cores']}, "
             f"onnxruntime {report['machine']['onnxruntime']}, openvino "
             f"{report['machine']['openvino']}; 1-minute load before "
             f"{_number(report['load_before'])}",
             "",
             f"{'mechanism':16s} {'metric':26s} {'on':>9s} {'off':>9s}  "
             f"{'gain per round: median [min–max]':34s} {'rounds':>6s}  load"]
    for name, row in report["mechanisms"].items():
        if "error" in row:
            lines.append(f"{name:16s} not measured: {row['error']}")
            continue
        digits = 1 if row["unit"] in ("requests/s", "s") else 2
        gain = row["gain"]
        spread_text = (f"{_number(gain['median'])}× [{_number(gain['min'])}–"
                       f"{_number(gain['max'])}]")
        metric = f"{row['metric']} ({row['unit']})" if row["unit"] != "ratio" else row["metric"]
        lines.append(f"{name:16s} {metric:26s} {_number(row['on']['median'], digits):>9s} "
                     f"{_number(row['off']['median'], digits):>9s}  {spread_text:34s} "
                     f"{gain['n']:>6d}  {row['load']}")
        extra = []
        if "violation_rate" in row:
            rates = row["violation_rate"]
            extra.append(f"violation rate on {_rates(rates['on'])}, off {_rates(rates['off'])}")
        if row.get("switches"):
            extra.append("switches " + ", ".join(f"{k} {v}" for k, v in row["switches"].items()))
        if row.get("invalid_runs"):
            extra.append(f"{row['invalid_runs']} INVALID run(s) left out: "
                         + "; ".join(row["invalid_reasons"]))
        if extra:
            lines.append(f"{'':16s} " + "; ".join(extra))
    lines += ["", "off = " + "; ".join(f"{n}: {MECHANISMS[n].switch}"
                                       for n in report["mechanisms"]),
              f"{report['seconds']:.0f} s in all"]
    return "\n".join(lines)


def _rates(values: Sequence[float] | None) -> str:
    finite = [v for v in values or () if v is not None and math.isfinite(v)]
    return (f"{statistics.median(finite):.2f} (rounds {', '.join(f'{v:.2f}' for v in finite)})"
            if finite else "—")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="default")
    parser.add_argument("--mechanism", action="append", choices=list(MECHANISMS), default=[],
                        help="measure only this mechanism (repeat; default every one)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--queries", type=int, default=500,
                        help="requests per task in a closed run (default 500)")
    parser.add_argument("--rate", type=float, default=None,
                        help="Poisson rate per task of feedback and heap_freeze (default "
                             f"{NEAR_CAPACITY:g} × the closed loop's throughput per task)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny, 1 round, Poisson at 500 req/s: a smoke test of the "
                             "benchmark, not a measurement")
    parser.add_argument("--cache", type=Path, default=None,
                        help="the cache folder (SPARSELOOM_CACHE_DIR) holding the built zoos "
                             "and profile")
    parser.add_argument("-p", "--processor", action="append", default=[],
                        help="a processor spec to serve on (repeat), as `sparseloom profile -p`")
    parser.add_argument("--json", type=Path, default=None, help="write the report here")
    args = parser.parse_args()
    if args.rounds < 1 or args.queries < 1:
        parser.error("--rounds and --queries take a whole number >= 1")
    if args.rate is not None and not (math.isfinite(args.rate) and args.rate > 0):
        parser.error(f"--rate takes a number of requests/s per task > 0, got {args.rate}")
    if args.cache is not None:
        os.environ["SPARSELOOM_CACHE_DIR"] = str(args.cache.resolve())
    workload_name = "tiny" if args.quick else args.workload
    rounds = 1 if args.quick else args.rounds
    queries = 100 if args.quick else args.queries
    # tiny's closed loop runs tens of thousands of requests a second: a Poisson generator
    # offering 0.75 of that fills the queues, so the smoke test takes a rate it can offer.
    rate = 500.0 if args.quick and args.rate is None else args.rate
    chosen = [MECHANISMS[n] for n in dict.fromkeys(args.mechanism)] or list(MECHANISMS.values())

    from sparseloom.evaluation.bench_serve import machine
    from sparseloom.profile.machine_load import load_average
    from sparseloom.runtime.kept import keep_loaded

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    started = time.perf_counter()
    report: dict[str, Any] = {"workload": workload_name, "quick": args.quick, "rounds": rounds,
                              "queries": queries, "processors": list(args.processor),
                              "machine": machine(), "load_before": load_average(),
                              "mechanisms": {}}
    bench = Bench(_context(workload_name, tuple(args.processor))
                  if any(m.scenario != "demo" for m in chosen) else None,
                  rounds, queries, progress, rate)
    with keep_loaded():
        for mechanism in chosen:
            progress(f"-- {mechanism.name}: {mechanism.what}, off = {mechanism.switch}")
            began = time.perf_counter()
            try:
                row = measure(mechanism, bench)
            except Exception as error:  # the other mechanisms' figures are still worth having
                row = {"error": f"{type(error).__name__}: {error}"}
                progress(f"{mechanism.name}: {row['error']}")
            report["mechanisms"][mechanism.name] = {
                "what": mechanism.what, "switch": mechanism.switch,
                "scenario": mechanism.scenario, **row,
                "seconds": time.perf_counter() - began}
    report["seconds"] = time.perf_counter() - started
    print(render(report))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, default=str))


def _context(workload: str, processors: tuple[str, ...]) -> Any:
    """The workload, its profile and zoos as ``sparseloom bench serve`` builds them (cached)."""
    from sparseloom.cli.run import load_profiled
    from sparseloom.evaluation.contenders import profile_context
    from sparseloom.zoo.load import profiled_zoos

    loaded, profile = load_profiled(workload, progress=False, processors=processors)
    return profile_context(loaded, profile, profiled_zoos(profile))


if __name__ == "__main__":
    main()
