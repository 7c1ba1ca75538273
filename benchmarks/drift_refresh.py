"""Drift and ``--refresh`` measured: a profile cached at one load, refreshed at another.

    .venv/bin/python benchmarks/drift_refresh.py [--workload tiny] [--tasks vision]
        [--burn-core 1] [--burner cpu|memory] [--direction quiet-to-busy|busy-to-quiet]
        [--sample 4] [--json OUT]

1. profile the workload into a scratch cache (``--cache``; never the user's cache), at the
   first load level, and refresh it once at once (the first refresh calibrates: it re-times
   the table and times the reference sample);
2. change the load: start (or stop) a burner pinned with ``taskset`` to ``--burn-core``
   (core 1 is ``ort:CPU``'s by default): ``python -c 'while 1: pass'`` (``--burner cpu``) or
   a loop streaming 2 × 128 MiB through the caches (``--burner memory``);
3. ``refresh_profile`` (re-time ``--sample`` subgraphs per task, rescale the drifted
   processors);
4. re-time every subgraph at that load just before and just after the refresh (the truth is
   their mean; how far they differ is how much the machine moved meanwhile) and compare, per
   processor, the cached and the refreshed cells with it (MAPE), and the additive estimate
   of every (stitched variant, order) from each table with the one from the truth.

The load average (``uptime``) is printed at every step: on a shared machine other jobs move
it too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from sparseloom.profile.builder import ProfileOptions, build_profile, resolve_processors, zoo_for
from sparseloom.profile.cost import placement_orders
from sparseloom.profile.measure import default_backend_resolver
from sparseloom.profile.refresh import refresh_profile, time_subgraphs
from sparseloom.profile.table import ProfileTable


def load() -> float:
    """The 1-minute load average."""
    return round(os.getloadavg()[0], 2)


BURNERS = {
    "cpu": "while 1: pass",
    # streams 2 × 128 MiB through the caches: slows the other core's memory accesses too
    "memory": "import numpy as np\na = np.ones(1 << 24); b = np.empty_like(a)\n"
              "while 1: np.copyto(b, a)",
}


def burner(core: int, kind: str = "cpu") -> subprocess.Popen[bytes]:
    """A busy loop (``cpu``) or a memory-streaming loop (``memory``) pinned to ``core``."""
    return subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c", BURNERS[kind]])


def chains_mape(table: ProfileTable, truth: ProfileTable) -> dict[str, float]:
    """MAPE of ``table``'s additive estimate of every (stitched variant, order) per task."""
    out = {}
    for name, profile in table.tasks.items():
        errors = []
        for order in placement_orders(len(table.processors), profile.n_positions):
            estimate = profile.latency_all(np.asarray(order))
            true = truth.task(name).latency_all(np.asarray(order))
            errors.append(np.abs(estimate - true) / true)
        out[name] = float(np.mean(errors))
    return out


def cells_mape(table: ProfileTable, truth: ProfileTable) -> dict[str, float]:
    """MAPE of the latency cells per processor, over every task."""
    out = {}
    for p, processor in enumerate(table.processors):
        errors = [np.abs(table.task(n).latency_ms[..., p] - truth.task(n).latency_ms[..., p])
                  / truth.task(n).latency_ms[..., p] for n in table.tasks]
        out[processor] = float(np.nanmean(np.concatenate([e.ravel() for e in errors])))
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the experiment and print its figures."""
    from sparseloom.workload.load import load_workload

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="tiny")
    parser.add_argument("--tasks", default=None, help="comma-separated task names")
    parser.add_argument("--burn-core", type=int, default=1)
    parser.add_argument("--burner", choices=tuple(BURNERS), default="cpu")
    parser.add_argument("--direction", choices=("quiet-to-busy", "busy-to-quiet"),
                        default="quiet-to-busy")
    parser.add_argument("--sample", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--threshold", type=float, default=0.10)
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    loaded = load_workload(args.workload, progress=False,
                           tasks=args.tasks.split(",") if args.tasks else None)
    cache = args.cache or Path(tempfile.mkdtemp(prefix="sparseloom-drift-"))
    options = ProfileOptions()
    steps: dict[str, Any] = {"direction": args.direction, "burner": args.burner,
                             "sample": args.sample, "rounds": args.rounds,
                             "burn_core": args.burn_core, "cache": str(cache)}
    hot = burner(args.burn_core, args.burner) if args.direction == "busy-to-quiet" else None
    try:
        time.sleep(2 if hot else 0)
        steps["load_at_profile"] = load()
        started = time.perf_counter()
        cached = build_profile(loaded, options=options, progress=False, cache_root=cache)
        steps["profile_seconds"] = round(time.perf_counter() - started, 1)
        started = time.perf_counter()
        _, calibration = refresh_profile(loaded, options=options, sample=args.sample,
                                         rounds=args.rounds, threshold=args.threshold,
                                         cache_root=cache, progress=False)
        steps["calibration"] = {"seconds": round(time.perf_counter() - started, 1),
                                "factors": calibration["factors"],
                                "action": calibration["action"]}
        before = ProfileTable.load(cached.meta["table_directory"])
        if hot:
            hot.kill()
            hot.wait()
            hot = None
            time.sleep(5)
        else:
            hot = burner(args.burn_core, args.burner)
            time.sleep(2)
        chosen = resolve_processors(None, loaded)
        zoos = {t.name: zoo_for(t, chosen, options, False) for t in loaded.tasks}

        def retime() -> ProfileTable:
            timed = ProfileTable(before.workload, before.processors, {}, {})
            for task in loaded.tasks:
                full = time_subgraphs(task, zoos[task.name], None, chosen, options,
                                      default_backend_resolver)
                timed.tasks[task.name] = attrs.evolve(
                    before.task(task.name), latency_ms=full.latency_ms,
                    handoff_ms=np.nan_to_num(full.handoff_ms, nan=0.0))
            return timed

        started = time.perf_counter()
        truth_before = retime()
        steps["truth_seconds"] = round(time.perf_counter() - started, 1)
        steps["load_at_refresh"] = load()
        refreshed, record = refresh_profile(loaded, options=options, sample=args.sample,
                                            rounds=args.rounds, threshold=args.threshold,
                                            cache_root=cache, progress=False)
        steps["refresh"] = {key: record[key] for key in (
            "factors", "task_factors", "drifted", "action", "seconds", "load_average")}
        truth_after = retime()
        steps["load_at_truth"] = load()
    finally:
        if hot:
            hot.kill()
            hot.wait()
    # the truth is the mean of a full re-time just before and just after the refresh; how far
    # those two differ is how much the shared machine moved within the experiment
    truth = ProfileTable(before.workload, before.processors, {
        n: attrs.evolve(p, latency_ms=(p.latency_ms + truth_after.task(n).latency_ms) / 2,
                        handoff_ms=(p.handoff_ms + truth_after.task(n).handoff_ms) / 2)
        for n, p in truth_before.tasks.items()}, {})
    steps["truth_moved_cells_mape"] = cells_mape(truth_before, truth_after)
    steps["truth_factor"] = {n: {proc: round(float(np.nanmedian(
        truth.task(n).latency_ms[..., p] / before.task(n).latency_ms[..., p])), 4)
        for p, proc in enumerate(before.processors)} for n in before.tasks}
    steps["cells_mape"] = {"cached": cells_mape(before, truth),
                           "refreshed": cells_mape(refreshed, truth)}
    steps["chains_mape"] = {"cached": chains_mape(before, truth),
                            "refreshed": chains_mape(refreshed, truth)}
    print(json.dumps(steps, indent=1))
    if args.json:
        args.json.write_text(json.dumps(steps, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
