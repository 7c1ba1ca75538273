"""Soak: a long Poisson load served through ``sparseloom.Server``; does memory stay flat and is
every request accounted for?

Serves ``--requests`` requests in all (split evenly over the workload's tasks) as Poisson
arrivals at ``--rate`` requests/s per task — the same serving path as ``sparseloom run`` —
sampling the process's RSS every ``--sample-s`` seconds. It prints the RSS once warm (after
``--warmup`` of the requests ended: the rings of recent outcomes, the scored outputs and the
kept requests fill up by then), at the end, their growth, and the invariant
``submitted = completed + failed`` (plus the requests refused at a full queue). The goal: on
``default``, 100,000 requests grow RSS by < 5% after warm-up and lose nothing.

    .venv/bin/python benchmarks/soak_server.py                          # default, 100,000
    .venv/bin/python benchmarks/soak_server.py --workload tiny --requests 20000 --rate 400
    .venv/bin/python benchmarks/soak_server.py --out out/soak           # records streamed too

Run it on a quiet machine: other jobs slow the processors, and a load above what they serve is
refused at the queue bound (the run is then INVALID, its RSS figure still meaningful).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sparseloom.cli.run import load_profiled
from sparseloom.runtime.load import LoadSpec
from sparseloom.runtime.models import rss_bytes
from sparseloom.runtime.session import RunConfig, serve
from sparseloom.runtime.stats import periodically


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="default")
    parser.add_argument("--requests", type=int, default=100_000, help="Requests in all.")
    parser.add_argument("--rate", type=float, default=50.0, help="Requests/s per task.")
    parser.add_argument("--warmup", type=float, default=0.1,
                        help="Fraction of the requests after which the RSS baseline is taken.")
    parser.add_argument("--sample-s", type=float, default=2.0)
    parser.add_argument("--out", type=Path, default=None,
                        help="Stream requests.csv here, as sparseloom run --out does.")
    args = parser.parse_args()

    workload, profile = load_profiled(args.workload, progress=True)
    per_task = max(args.requests // len(profile.tasks), 1)
    total = per_task * len(profile.tasks)
    samples: list[tuple[float, int, int]] = []  # (seconds, requests ended, RSS bytes)

    @contextlib.contextmanager
    def sampler(server: Any) -> Iterator[None]:
        runtime, started = server.runtime, time.perf_counter()

        def sample() -> None:
            samples.append((time.perf_counter() - started, runtime.completed + runtime.failed,
                            rss_bytes()))

        sample()
        with periodically(sample, args.sample_s, "soak-rss"):
            yield
        sample()

    print(f"soak: {total} Poisson requests on {args.workload} ({per_task} per task at "
          f"{args.rate:g}/s each, about {per_task / args.rate / 60:.1f} min)")
    config = RunConfig(load=LoadSpec("poisson", queries=per_task, rate=args.rate), live=sampler,
                       records_path=args.out / "requests.csv" if args.out else None)
    summary = serve(workload, profile, config).summary
    warm = next((s for s in samples if s[1] >= args.warmup * total), samples[-1])
    end = samples[-1]
    growth = (end[2] - warm[2]) / warm[2] if warm[2] else float("nan")
    result = {
        "workload": args.workload, "requests": total, "rate_per_task": args.rate,
        "wall_s": round(summary.wall_s, 1), "submitted": summary.submitted,
        "completed": summary.completed, "failed": summary.failed, "refused": summary.rejected,
        "nothing_lost": summary.submitted == summary.completed + summary.failed
        and summary.submitted + summary.rejected == total,
        "rss_warm_mib": round(warm[2] / 2**20, 1), "rss_end_mib": round(end[2] / 2**20, 1),
        "rss_max_mib": round(max(s[2] for s in samples) / 2**20, 1),
        "rss_growth_after_warmup_pct": round(100 * growth, 2),
        "warm_after_requests": warm[1], "valid": summary.valid, "reasons": list(summary.reasons),
    }
    print(json.dumps(result, indent=2))
    print(f"RSS growth after warm-up: {100 * growth:+.2f}% ({warm[2] / 2**20:.1f} -> "
          f"{end[2] / 2**20:.1f} MiB); submitted {summary.submitted} = completed "
          f"{summary.completed} + failed {summary.failed}; refused {summary.rejected}")


if __name__ == "__main__":
    main()
