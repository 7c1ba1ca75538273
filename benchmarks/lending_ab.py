"""``sparseloom-loaded`` with and without idle lending on the closed scenario, interleaved.

The figures behind docs/results.md's closed section (session 8): per round, each policy's
throughput, its wide stages and sentiment's p50, so a round's speed can be traced to lending.

    .venv/bin/python benchmarks/lending_ab.py --workload default --rounds 8

Run it on a quiet machine (1-minute load <= 0.5). The policy without lending is
``sparseloom-loaded`` with ``lend_idle=False``, registered here as a plugin.
"""

from __future__ import annotations

import argparse
import functools
import os

import numpy as np

from sparseloom.core.hookspecs import RegisterFn, hookimpl


class _NoLending:
    @hookimpl
    def sparseloom_register_policies(self, register: RegisterFn) -> None:
        from sparseloom.plugins.policies.loaded import LoadedPolicy

        register("sparseloom-loaded-nolend", functools.partial(LoadedPolicy, lend_idle=False),
                 capabilities=("stitched", "partitioned"),
                 description="sparseloom-loaded without idle lending (benchmarks/lending_ab.py)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="default")
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()

    from sparseloom.api import build_zoos
    from sparseloom.core.registry import get_registry
    from sparseloom.evaluation import serve_scenarios
    from sparseloom.evaluation.contenders import ServeContext, select_contenders
    from sparseloom.evaluation.serve_figures import BenchOptions, Recorder
    from sparseloom.evaluation.stock import openvino_precision
    from sparseloom.profile.builder import build_profile
    from sparseloom.runtime.heap import SURVIVOR_FREEZE
    from sparseloom.runtime.models import keep_loaded
    from sparseloom.runtime.session import profile_processors
    from sparseloom.workload.load import load_workload

    SURVIVOR_FREEZE.install()  # as the console script runs
    get_registry().register_plugin(_NoLending(), "lending-ab", distribution="benchmarks",
                                   version="0")
    workload = load_workload(args.workload, progress=False)
    zoos = build_zoos(workload, progress=False)
    profile = build_profile(workload, zoos=zoos, progress=False)
    processors = profile_processors(profile)
    cores = tuple(sorted({c for p in processors for c in p.cores}))
    context = ServeContext(workload, profile, zoos, cores, openvino_precision(processors))
    recorder = Recorder(None)
    print(f"1-minute load before: {os.getloadavg()[0]:.2f}")
    with keep_loaded():
        serve_scenarios.closed(context, select_contenders(
            ["sparseloom-loaded", "sparseloom-loaded-nolend"]), BenchOptions(rounds=args.rounds),
            recorder)
    rates: dict[str, list[float]] = {}
    for run in recorder.runs_of("closed"):
        summary = run["summary"]
        rate = run["figures"]["throughput_rps"]
        rates.setdefault(run["contender"], []).append(rate)
        p50 = {t.task: round(t.latency.p50_ms, 2) for t in summary.tasks}
        print(f"round {run['round']} {run['contender']:26s} {rate:7.1f} req/s  "
              f"wide stages {sum(summary.wide_stages.values()):4d}  switches "
              f"{summary.switches}  p50 ms {p50}")
    for name, values in rates.items():
        print(f"{name}: {np.median(values):.1f} [{min(values):.1f}-{max(values):.1f}] req/s")


if __name__ == "__main__":
    main()
