"""Layouts tried together: ``stock-tuned`` and ``picks-tuned`` keep the one that serves best.

The partition search (:func:`~sparseloom.evaluation.stock_tuned.best_partition`) predicts the
closed makespan by adding up, per core, latencies measured with each task alone. It cannot see
how the tasks' threads interfere where they share cores: ONNX Runtime's intra-op pool waits,
spinning, for a thread the kernel has descheduled to run another task's call. On ``default``
(2-vCPU AMD EPYC Zen 4, 2026-12-07) it put ``sentiment``'s dynamic-INT8 pick on two ONNX
Runtime threads across both cores (2.85 ms alone against 4.08 ms on one thread), where,
beside the light tasks' threads, it served 216 requests/s against dense OpenVINO's 239.

So, as an engineer would, the tuned runtimes try their best layouts together before settling:
for each core set the slowest task may have, the best partition of the others
(:func:`layouts`); each is served with every task at once, by closed runs in interleaved
rounds, and the one with the highest median throughput serves the benchmark (:func:`choose`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from sparseloom.core.errors import EvaluationError
from sparseloom.core.types import SLO, rotated
from sparseloom.evaluation.stock_tuned import (
    Measured,
    TunedRuntime,
    broken_reasons,
    core_sets,
    refusals,
    tune,
)


def layouts(name: str, measured: Sequence[Measured], cores: Sequence[int], picks: bool,
            slos: Mapping[str, SLO], whole: Mapping[str, float]) -> list[TunedRuntime]:
    """The tuned runtimes worth trying: for each core set the slowest task (the one whose
    fastest usable configuration is slowest) can use, :func:`~sparseloom.evaluation.
    stock_tuned.tune` with that task fixed there; distinct ones, least predicted bottleneck
    first (the first is the search's own choice).

    :raises EvaluationError: a task none of whose configurations may serve it.
    """
    best = tune(name, measured, cores, picks, slos, whole)
    usable = [m for m, refusal in zip(measured, refusals(measured, slos, whole), strict=True)
              if not refusal]
    slowest = max(best.choices, key=lambda t: min(m.latency_ms for m in usable if m.task == t))
    found = {best.describe(): best}
    for cores_of in core_sets(cores):
        try:
            runtime = tune(name, measured, cores, picks, slos, whole, fixed={slowest: cores_of})
        except EvaluationError:
            continue  # no usable configuration with that many threads
        found.setdefault(runtime.describe(), runtime)
    return sorted(found.values(), key=lambda r: r.makespan_ms)


def choose(candidates: Sequence[TunedRuntime], serve: Callable[[TunedRuntime], Any], *,
           rounds: int = 1, progress: Callable[[str], None] | None = None
           ) -> tuple[TunedRuntime, list[dict[str, Any]]]:
    """The candidate whose closed runs served the most requests per second (median of
    ``rounds`` interleaved rounds; round r starts with the r-th candidate), and one record
    per candidate: its configuration, predicted bottleneck, each round's throughput, the
    median, and why it did not count ("" when it did).

    :param serve: ``serve(candidate)`` serves every task at once and returns the run's
        summary; an exception, or an invalid run (lost or failed requests), rules the
        candidate out (named in its record).
    :raises EvaluationError: no candidates, or none served a valid run.
    """
    if not candidates:
        raise EvaluationError("no layout to choose from")
    if len(candidates) == 1:
        return candidates[0], []
    runs: dict[int, list[float]] = {i: [] for i in range(len(candidates))}
    failures: dict[int, str] = {}
    for index in range(rounds):
        for which in rotated(range(len(candidates)), index):
            if which in failures:
                continue
            figure, failure = _served(serve, candidates[which])
            if failure:
                failures[which] = failure
            else:
                runs[which].append(figure)
    records: list[dict[str, Any]] = []
    medians = [float(np.median(runs[i])) if i not in failures else math.nan
               for i in range(len(candidates))]
    for which, candidate in enumerate(candidates):
        median = medians[which]
        records.append({"configuration": candidate.describe(),
                        "predicted_bottleneck_ms": candidate.makespan_ms,
                        "throughput_rps": runs[which], "median_rps": median,
                        "failure": failures.get(which, "")})
        if progress:
            text = f"{median:.1f} req/s" if math.isfinite(median) else "—"
            progress(f"layout of {candidate.name}: {candidate.describe()}: {text}"
                     + (f" (not used: {failures[which]})" if which in failures else ""))
    valid = [i for i in range(len(candidates)) if i not in failures]
    if not valid:
        raise EvaluationError(f"{candidates[0].name}: no layout served a valid run: "
                              + "; ".join(failures.values()))
    best = max(valid, key=lambda i: medians[i])
    return candidates[best], records


def _served(serve: Callable[[TunedRuntime], Any], candidate: TunedRuntime
            ) -> tuple[float, str]:
    """One run of ``candidate``: its throughput and why it does not count ("" when it does)."""
    try:
        summary = serve(candidate)
    except KeyboardInterrupt:
        raise
    except Exception as error:  # reported with the layout, never chosen
        return math.nan, f"failed: {type(error).__name__}: {error}"
    broken = broken_reasons(summary)
    return float(summary.throughput_rps), "invalid run: " + "; ".join(broken) if broken else ""
