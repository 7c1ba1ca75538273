"""What crash isolation costs a first profile: `sparseloom profile WORKLOAD` from a cache that
holds the built workload and zoos but nothing compiled, probed or profiled, with isolation on
(every combination probed in the probe process first) and off (``SPARSELOOM_ISOLATION=off``),
in interleaved rounds (on, off, then off, on, ...). Prints each run's wall time, the per-round
ratio on ÷ off, and their median and spread (docs/backends.md, "Native crashes are
contained").

    .venv/bin/python benchmarks/probe_cost.py default --rounds 3 --cache /work/bench-cache

The cache must hold the workload and its zoos already (``sparseloom zoo build WORKLOAD`` with
the same ``SPARSELOOM_CACHE_DIR``); each run deletes its compiled models (``ort/``, ``ov/``,
``batch1/``), probe outcomes (``probes/``) and profiles (``profiles/``) first. Run it on a quiet
machine (1-minute load <= 0.5).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

#: What a first profile finds missing: everything compiled, probed or measured.
FIRST_RUN_FOLDERS = ("ort", "ov", "batch1", "probes", "profiles")


def one_run(workload: str, cache: Path, isolation: bool, extra: list[str]) -> float:
    """Seconds of one first profile."""
    for folder in FIRST_RUN_FOLDERS:
        shutil.rmtree(cache / folder, ignore_errors=True)
    env = dict(os.environ, SPARSELOOM_CACHE_DIR=str(cache),
               SPARSELOOM_ISOLATION="on" if isolation else "off")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "sparseloom", "profile", workload, *extra],
                          env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"profile failed ({done.returncode}): {done.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cache", type=Path, required=True,
                        help="a sparseloom cache holding the built workload and zoos")
    parser.add_argument("extra", nargs="*", help="more `sparseloom profile` options (after --)")
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()[0]:.2f}; CPU: {_cpu()}", flush=True)
    ratios, times = [], {True: [], False: []}
    for index in range(args.rounds):
        order = (True, False) if index % 2 == 0 else (False, True)
        measured = {mode: one_run(args.workload, args.cache, mode, args.extra) for mode in order}
        for mode, seconds in measured.items():
            times[mode].append(seconds)
        ratios.append(measured[True] / measured[False])
        print(f"round {index + 1}: on {measured[True]:.1f} s, off {measured[False]:.1f} s, "
              f"on / off {ratios[-1]:.3f}", flush=True)
    print(f"on: median {statistics.median(times[True]):.1f} s; off: median "
          f"{statistics.median(times[False]):.1f} s; on / off per round: median "
          f"{statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]; "
          f"load after: {os.getloadavg()[0]:.2f}")


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    main()
