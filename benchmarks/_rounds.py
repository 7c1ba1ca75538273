"""Shared by the kernel benchmarks: the sentiment task's first eval row, and hot batch-1 call
times taken in interleaved rounds (the order rotated each round)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np


def sentiment_row() -> tuple[Any, dict[str, np.ndarray]]:
    """``default``'s sentiment task and its first eval row (batch 1)."""
    from sparseloom.workload.load import load_workload

    task = load_workload("default", tasks=["sentiment"], progress=False).task("sentiment")
    return task, {name: array[:1] for name, array in task.eval_inputs.items()}


def interleaved(calls: Mapping[str, Callable[[], Any]], rounds: int, count: int,
                percentile: float, warmup: int = 10) -> dict[str, list[float]]:
    """Per call, its ``percentile`` latency (ms) of ``count`` timed calls, once per round; each
    round runs every call after ``warmup`` untimed ones, in an order rotated by the round."""
    names = list(calls)
    out: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(rounds):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            call = calls[name]
            for _ in range(warmup):
                call()
            times = []
            for _ in range(count):
                start = time.perf_counter()
                call()
                times.append(time.perf_counter() - start)
            out[name].append(float(np.percentile(times, percentile)) * 1e3)
    return out
