"""A stitched variant run as its chain of subgraphs against the same variant merged into one
model, and the task's dense model, on one processor, in interleaved rounds.

The figure behind docs/results.md, *Merged chain per call*: what a route of one stage would save
when a task's whole chain stays on one processor.

    .venv/bin/python benchmarks/merged_chain.py --task sentiment --choices 5,0 \\
        --processor 'ov:CPU?INFERENCE_PRECISION_HINT=bf16' --rounds 5

Each model is loaded through sparseloom's backends as the runtime loads it (the processor's
threads; this process pinned to its cores) and called in place with one eval row. Run it on a
quiet machine (1-minute load <= 0.5); it prints each configuration's p25 per round, their
median [min-max], and the ratios to the merged model per round.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np


def _timed(call: Callable[[], Any], calls: int) -> float:
    for _ in range(20):
        call()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return float(np.percentile(times, 25)) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="default")
    parser.add_argument("--task", default="sentiment")
    parser.add_argument("--choices", default="5,0", help="the stitched variant, comma-separated")
    parser.add_argument("--processor", default="ov:CPU?INFERENCE_PRECISION_HINT=bf16")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=300, help="timed calls per round")
    args = parser.parse_args()

    from sparseloom.api import build_zoos
    from sparseloom.core.processors import get_processor
    from sparseloom.workload.inference import load_model
    from sparseloom.workload.load import load_workload
    from sparseloom.zoo.whole import merged_path

    choices = tuple(int(c) for c in args.choices.split(","))
    workload = load_workload(args.workload, tasks=[args.task], progress=False)
    task = workload.task(args.task)
    zoo = build_zoos(workload, progress=False)[args.task]
    processor = get_processor(args.processor)
    if processor.cores:
        os.sched_setaffinity(0, processor.cores)  # the runtime calls in place, pinned
    row = {name: np.ascontiguousarray(array[:1]) for name, array in task.eval_inputs.items()}

    def whole(path: Any) -> Callable[[], Any]:
        _, loaded = load_model(str(path), processor)
        return lambda: loaded.runner({n: row[n] for n in loaded.input_names})

    stages = [load_model(str(zoo.subgraph_path(j, c)), processor)[1]
              for j, c in enumerate(choices)]

    def chain() -> Mapping[str, Any]:
        carried: Mapping[str, Any] = row
        for stage in stages:
            carried = stage.runner({n: carried[n] for n in stage.input_names})
        return carried

    calls = {"merged": whole(merged_path(zoo, choices)), "chain": chain,
             "dense": whole(task.model_path)}
    print(f"{args.task}{list(choices)} on {args.processor}; 1-minute load before: "
          f"{os.getloadavg()[0]:.2f}")
    names = list(calls)
    p25: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(args.rounds):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            p25[name].append(_timed(calls[name], args.calls))
        print(f"round {round_}: " + ", ".join(f"{n} {p25[n][-1]:.3f} ms" for n in names))
    merged = np.asarray(p25["merged"])
    for name in names:
        values = np.asarray(p25[name])
        ratio = values / merged
        print(f"{name:7s} p25 {np.median(values):.3f} ms [{values.min():.3f}-{values.max():.3f}]"
              f"   ÷ merged: {np.median(ratio):.3f} [{ratio.min():.3f}-{ratio.max():.3f}]")


if __name__ == "__main__":
    main()
