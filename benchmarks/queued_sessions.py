"""A task on n cores serving queued requests one at a time and on n one-thread sessions.

The figure behind docs/evaluation.md's "where requests queue" (``stock-tuned`` in the capacity
scenario). The bench's own tuning measures ``--task`` alone in every configuration; the task
is then served alone on every core of the workload's profiled processors under Poisson
arrivals at ``--rate`` requests/s (above what it serves, so requests queue), interleaved:
one at a time on its fastest n-thread configuration, and on n sessions of its fastest
one-thread configuration, one per core, each request on the least busy
(``Route.replicas``). Per round: the rate it served (its requests ÷ the seconds from the
first to the last answer) and its p90.

    .venv/bin/python benchmarks/queued_sessions.py --rounds 5
    .venv/bin/python benchmarks/queued_sessions.py --task vision --rate 20000

Run it on a quiet machine (1-minute load <= 0.5).
"""

from __future__ import annotations

import argparse
import os

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="default")
    parser.add_argument("--task", default="sentiment")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rate", type=float, default=2000.0,
                        help="Poisson arrivals per second (default 2000)")
    parser.add_argument("--queries", type=int, default=1500, help="requests per run")
    args = parser.parse_args()

    from sparseloom.cli.run import load_profiled
    from sparseloom.evaluation.contenders import profile_context
    from sparseloom.evaluation.serve_figures import dense_slos
    from sparseloom.evaluation.stock import serve_stock
    from sparseloom.evaluation.stock_tuned import Choice, Config, TunedRuntime
    from sparseloom.runtime.heap import SURVIVOR_FREEZE
    from sparseloom.runtime.load import LoadSpec
    from sparseloom.zoo.load import profiled_zoos

    SURVIVOR_FREEZE.install()  # as the console script runs
    workload, profile = load_profiled(args.workload, progress=False)
    context = profile_context(workload, profile, profiled_zoos(profile))
    slos = dense_slos(context)  # no latency SLO: the figure is the rate served
    context.tuned("stock-tuned", slos)  # measures every task alone in every configuration
    rows = [r for r in context.tunings[-1]["measured"] if r["task"] == args.task and r["usable"]]
    cores, n = context.cores, len(context.cores)

    def fastest(threads: int) -> Config:
        row = min((r for r in rows if r["threads"] == threads), key=lambda r: r["latency_ms"])
        print(f"{args.task} on {threads} thread(s): {row['backend']} {row['precision']} "
              f"{row['latency_ms']:.3f} ms")
        return Config(row["backend"], row["precision"], threads)

    choice = Choice(fastest(n), cores, float("nan"), fastest(1))
    print(f"1-minute load before: {os.getloadavg()[0]:.2f}")
    sides = {"one at a time": TunedRuntime("stock-tuned", False, {args.task: choice}),
             "per core": TunedRuntime("stock-tuned", False, {args.task: choice}, queued=True)}
    rates: dict[str, list[float]] = {side: [] for side in sides}
    for round_index in range(args.rounds):
        for side in list(sides)[round_index % 2:] + list(sides)[:round_index % 2]:
            spec = LoadSpec("poisson", queries=args.queries, rate=args.rate, seed=round_index)
            (task,) = serve_stock(workload, None, sides[side], spec, slos,
                                  tasks=[args.task]).tasks
            rates[side].append(task.own_throughput_rps)
            print(f"round {round_index} {side:14s} {task.own_throughput_rps:8.1f} req/s, "
                  f"p90 {task.latency.p90_ms:8.2f} ms, {task.completed} answered")
    ratio = np.array(rates["per core"]) / np.array(rates["one at a time"])
    for side, got in rates.items():
        print(f"{side}: {np.median(got):.1f} [{min(got):.1f}-{max(got):.1f}] req/s")
    print(f"per core / one at a time, per round: median {np.median(ratio):.2f} "
          f"[{ratio.min():.2f}-{ratio.max():.2f}]; 1-minute load after: "
          f"{os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
