"""Stage times called once per round (cold) against the same stages called back to back (hot).

Called once per round, interleaved with every other subgraph of the task on a pinned thread
that waits on its queue between calls, a subgraph runs cold; under a closed loop or any steady
load a worker calls its models back to back instead, hot. The profiler times a burst per round
and records both (``latency_ms`` hot, ``latency_cold_ms`` its first call; ``--burst 1``: one
cold call, as before 2026-12-07; docs/profile.md). This measures, with the profiler's own
pinned threads and the backends' own loaded models, each subgraph both ways, and prints per
task and processor the median over subgraphs of

* ``cold ÷ profile``: one call per round, against the cached profile table's ``latency_ms``;
* ``hot ÷ profile``: a burst of back-to-back calls (the median of calls 2..``--burst``);
* ``cold ÷ hot``: how much a cold call costs over a hot one.

Where ``cold ÷ hot`` differs between processors, a table of cold calls ranks them otherwise
than a busy worker finds them (docs/results.md, *Cold and hot stage times*):

    .venv/bin/python benchmarks/cold_hot.py benchmarks/workloads/mix.toml \\
        -p 'ov:CPU?INFERENCE_PRECISION_HINT=bf16' -p ort:CPU

Run it on a quiet machine (1-minute load <= 0.5). ``--cells`` also prints every subgraph.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

#: Untimed rounds before the cold ones, as the profiler's default warm-up.
WARMUP = 3


def _prefix_feeds(calls: Sequence[Any], names: Sequence[Sequence[str]],
                  row: Mapping[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """Each position's inputs: the eval row run through the dense subgraphs before it."""
    carried: dict[str, np.ndarray] = dict(row)
    feeds = []
    for call, wanted in zip(calls, names, strict=True):
        feed = {name: carried[name] for name in wanted}
        feeds.append(feed)
        carried.update(call(feed))
    return feeds


def _fixed(call: Any, feed: Mapping[str, np.ndarray], _carried: Mapping[str, Any]) -> Any:
    """``call`` on ``feed``, whatever the chain carried: one stage called back to back."""
    return call(feed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="?", default="default")
    parser.add_argument("-p", "--processor", action="append", default=[])
    parser.add_argument("--task", action="append", default=[], help="only these tasks")
    parser.add_argument("--rounds", type=int, default=20, help="cold rounds (the profile's 20)")
    parser.add_argument("--burst", type=int, default=10, help="back-to-back calls per hot sample")
    parser.add_argument("--cells", action="store_true", help="print every subgraph")
    args = parser.parse_args()

    from sparseloom.api import build_profile, build_zoos
    from sparseloom.core.processors import get_backend
    from sparseloom.profile.measure import direct_call
    from sparseloom.profile.pinned import PinnedThreads, Stage
    from sparseloom.runtime.models import profile_processors
    from sparseloom.workload.load import load_workload
    from sparseloom.zoo.batch_one import batch_one_path, batch_params

    workload = load_workload(args.workload, progress=False)
    zoos = build_zoos(workload, progress=False)
    table = build_profile(workload, zoos=zoos, progress=False, processors=args.processor or None)
    processors = profile_processors(table)
    print(f"1-minute load before: {os.getloadavg()[0]:.2f}; processors "
          f"{', '.join(p.name for p in processors)}")
    rng = np.random.default_rng(0)
    header = (f"{'task':10s} {'processor':34s} {'cold/profile':>12s} {'hot/profile':>12s} "
              f"{'cold/hot':>9s} [min-max]")
    print(header)
    with PinnedThreads(processors) as threads:
        for name in args.task or workload.task_names:
            zoo, profile = zoos[name], table.task(name)
            row = {k: np.ascontiguousarray(v[:1])
                   for k, v in workload.task(name).eval_inputs.items()}
            loaded: dict[tuple[int, int, int], Any] = {}
            params = batch_params(zoo.boundary(0).inputs)  # as the profiler times them
            for p, processor in enumerate(processors):
                backend = get_backend(processor.backend)
                for j in range(zoo.positions):
                    for v in range(len(zoo.variants)):
                        path = batch_one_path(zoo.subgraph_path(j, v), params)
                        compiled = backend.compile(str(path), processor)
                        loaded[(j, v, p)] = (backend, backend.load(compiled, processor))
            dense = [direct_call(*loaded[(j, 0, 0)]) for j in range(zoo.positions)]
            names = [loaded[(j, 0, 0)][1].input_names for j in range(zoo.positions)]
            feeds = _prefix_feeds(dense, names, row)
            stages = {cell: Stage(cell[2], direct_call(*pair), pair[1].input_names)
                      for cell, pair in loaded.items()}
            rows: list[str] = []
            cold: dict[tuple[int, int, int], list[float]] = {cell: [] for cell in stages}
            order = list(stages)
            for _ in range(WARMUP + args.rounds):
                for index in rng.permutation(len(order)):
                    cell = order[index]
                    cold[cell].append(threads.run([stages[cell]], feeds[cell[0]]).stage_ms(0))
            hot = {}
            for cell, pair in loaded.items():
                stage = Stage(cell[2], partial(_fixed, direct_call(*pair), feeds[cell[0]]), ())
                timing = threads.run([stage] * args.burst, {})
                hot[cell] = float(np.median([timing.stage_ms(i) for i in range(1, args.burst)]))
            for p, processor in enumerate(processors):
                cells = [c for c in stages if c[2] == p]
                cold_ms = np.array([np.percentile(cold[c][WARMUP:], 25) for c in cells])
                hot_ms = np.array([hot[c] for c in cells])
                profiled = np.array([profile.latency_ms[c] for c in cells])
                ratios = {"cold": cold_ms / profiled, "hot": hot_ms / profiled}
                spread = cold_ms / hot_ms
                rows.append(f"{name:10s} {processor.name:34s} {np.median(ratios['cold']):12.2f} "
                            f"{np.median(ratios['hot']):12.2f} {np.median(spread):9.2f} "
                            f"[{spread.min():.2f}-{spread.max():.2f}]")
                if args.cells:
                    for c, a, b, m in zip(cells, profiled, cold_ms, hot_ms, strict=True):
                        rows.append(f"    position {c[0]} {zoo.variants[c[1]].name:28s} profile "
                                    f"{a:.3f} cold {b:.3f} hot {m:.3f} ms")
            for backend, handle in loaded.values():
                backend.unload(handle)
            print("\n".join(rows), flush=True)


if __name__ == "__main__":
    main()
