"""``sparseloom-loaded`` with and without one of its options, side by side, interleaved.

Figures behind docs/runtime.md and docs/plan.md. Per round it prints each policy's figure,
its wide stages, switches and per-task p90s, so a round's result can be traced to the option
(``lend_idle``: idle lending; ``merge_chains``: merged chains; ``overflow``: overflow threads;
``lend_when_quiet``: lending at tight SLOs; ``lanes``: a thread per task over every core at
tight SLOs; ``time_share``: the tasks sharing a processor on lanes pinned to it;
``lanes_borrow``: those lanes running a call on a quiet processor's cores; ``spare``: a
second server of a lone long task on the other cores under Poisson arrivals; ``min_gain``: a
variant replaces the dense model only when estimated 10 % faster, against 0), on the closed
scenario, the steady state (STP and ANTT), the grid or the capacity search, on the default
processors or those given with ``-p``:

    .venv/bin/python benchmarks/loaded_ab.py --off lend_idle --rounds 8
    .venv/bin/python benchmarks/loaded_ab.py --off merge_chains --rounds 5 \
        -p 'ov:CPU?INFERENCE_PRECISION_HINT=bf16' -p ort:CPU
    .venv/bin/python benchmarks/loaded_ab.py --scenario grid --rounds 2 \
        -p 'ov:CPU?INFERENCE_PRECISION_HINT=bf16' -p ort:CPU
    .venv/bin/python benchmarks/loaded_ab.py --option overflow --scenario capacity --k 10 \
        --rounds 2 -p 'ov:CPU?INFERENCE_PRECISION_HINT=bf16' -p ort:CPU
    .venv/bin/python benchmarks/loaded_ab.py --option time_share --scenario steady --rounds 5

Run it on a quiet machine (1-minute load <= 0.5). The other policy is ``sparseloom-loaded`` with
that option flipped from its default (a threshold set to 0), registered here as
``sparseloom-loaded-no-<option>`` (an option on by default, as every one is) or
``sparseloom-loaded-with-<option>`` (one off by default).
"""

from __future__ import annotations

import argparse
import functools
import os

import numpy as np

from sparseloom.core.hookspecs import RegisterFn, hookimpl

OPTIONS = ("lanes", "lanes_borrow", "lend_idle", "lend_when_quiet", "merge_chains", "min_gain",
           "overflow", "spare", "time_share")


class _Flipped:
    """``sparseloom-loaded`` with one option flipped from its default: registered as
    ``sparseloom-loaded-no-<option>`` (on by default) or ``-with-<option>`` (off by default)."""

    def __init__(self, option: str) -> None:
        import attrs

        from sparseloom.plugins.policies.loaded import LoadedPolicy

        self.option = option
        default = next(f.default for f in attrs.fields(LoadedPolicy) if f.name == option)
        # A switch is flipped; a threshold (min_gain) is set to 0, which turns its rule off.
        self.value: bool | float = not default if isinstance(default, bool) else 0.0

    @property
    def name(self) -> str:
        return (f"sparseloom-loaded-{'with' if self.value else 'no'}-"
                f"{self.option.replace('_', '-')}")

    @hookimpl
    def sparseloom_register_policies(self, register: RegisterFn) -> None:
        from sparseloom.plugins.policies.loaded import LoadedPolicy

        register(self.name, functools.partial(LoadedPolicy, **{self.option: self.value}),
                 capabilities=("stitched", "partitioned"),
                 description=f"sparseloom-loaded with {self.option}={self.value} "
                             "(benchmarks/loaded_ab.py)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="default")
    parser.add_argument("--option", "--off", dest="option", choices=OPTIONS, default="lend_idle",
                        help="the option of sparseloom-loaded to flip from its default")
    parser.add_argument("--scenario", choices=("closed", "steady", "grid", "capacity"),
                        default="closed")
    parser.add_argument("--k", type=float, action="append", default=[],
                        help="latency SLO multiplier of the capacity search (repeat; default 5)")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("-p", "--processor", action="append", default=[])
    args = parser.parse_args()

    from sparseloom.api import build_zoos
    from sparseloom.core.registry import get_registry
    from sparseloom.evaluation import serve_grid, serve_scenarios
    from sparseloom.evaluation.contender import select_contenders
    from sparseloom.evaluation.contenders import profile_context
    from sparseloom.evaluation.serve_figures import BenchOptions, Recorder
    from sparseloom.profile.builder import build_profile
    from sparseloom.runtime.heap import SURVIVOR_FREEZE
    from sparseloom.runtime.kept import keep_loaded
    from sparseloom.workload.load import load_workload

    SURVIVOR_FREEZE.install()  # as the console script runs
    without = _Flipped(args.option)
    get_registry().register_plugin(without, "loaded-ab", distribution="benchmarks", version="0")
    workload = load_workload(args.workload, progress=False)
    zoos = build_zoos(workload, progress=False)
    profile = build_profile(workload, zoos=zoos, progress=False,
                            processors=args.processor or None)
    # As `sparseloom bench serve` judges: every pick through the paired gate (BenchOptions).
    context = profile_context(workload, profile, zoos, paired_gate=BenchOptions().paired_gate)
    recorder = Recorder(None)
    contenders = select_contenders(["sparseloom-loaded", without.name])
    print(f"1-minute load before: {os.getloadavg()[0]:.2f}")
    with keep_loaded():
        if args.scenario in ("closed", "steady"):
            run = getattr(serve_scenarios, args.scenario)
            run(context, contenders, BenchOptions(rounds=args.rounds), recorder)
        elif args.scenario == "grid":
            serve_grid.grid(context, contenders, BenchOptions(grid_rounds=args.rounds),
                                 recorder)
        else:
            ks = tuple(args.k) or (5.0,)
            result = serve_scenarios.capacity(
                context, contenders, BenchOptions(capacity_rounds=args.rounds, ks=ks,
                                                  baseline_ks=ks), recorder)
            for k, part in result["k"].items():
                for row in part["contenders"]:
                    print(f"k={k} {row['contender']:32s} capacity per round {row['rounds']}  "
                          f"median {row['median']:.1f} req/s per task")
                print(f"k={k} ratios per round: {part['ratios']}")
            return
    figure = {"closed": "throughput_rps", "steady": "stp"}.get(args.scenario, "violation_rate")
    values: dict[tuple[str, float], list[float]] = {}
    for run in recorder.runs_of(args.scenario):
        summary = run["summary"]
        value = run["figures"].get(figure, float("nan"))  # steady: nan unless equal accuracy
        values.setdefault((run["contender"], run.get("k", 0.0)), []).append(value)
        p90 = {t.task: round(t.latency.p90_ms, 2) for t in summary.tasks}
        rates = {t.task: round(t.own_throughput_rps) for t in summary.tasks}
        where = f" k={run['k']:g} level={run['level']}" if args.scenario == "grid" else ""
        antt = f" antt {run['figures']['antt']:.2f}" if "antt" in run["figures"] else ""
        print(f"round {run['round']}{where} {run['contender']:32s} {figure} {value:8.2f}{antt}"
              f"  wide stages {sum(summary.wide_stages.values()):4d}  overflow stages "
              f"{sum(summary.overflow_stages.values()):4d}  roamed calls "
              f"{sum(summary.roamed.values()):5d}  switches "
              f"{summary.switches}  p90 ms {p90}  req/s {rates}")
    if args.scenario in ("closed", "steady"):
        from sparseloom.evaluation.serve_figures import dense_slos

        for contender in contenders:  # what each served (the scenarios' SLOs)
            picks = context.picks(dense_slos(context), contender.name)
            print(f"{contender.name} picks: " + ", ".join(
                f"{task} {'_'.join(map(str, pick))}" for task, pick in picks.items()))
    for (name, k), got in values.items():
        label = f"{name} k={k:g}" if args.scenario == "grid" else name
        print(f"{label}: median {np.median(got):.2f} [{min(got):.2f}-{max(got):.2f}] {figure} "
              f"over {len(got)} runs")
    if args.scenario in ("closed", "steady"):
        on, off = (values[(c.name, 0.0)] for c in contenders)
        ratios = [a / b for a, b in zip(on, off, strict=True)]
        print(f"{contenders[0].name} ÷ {contenders[1].name} per round "
              f"{[round(r, 3) for r in ratios]}: median {np.median(ratios):.2f} "
              f"[{min(ratios):.2f}-{max(ratios):.2f}]")


if __name__ == "__main__":
    main()
