"""Accuracy as served: stitched variants measured exactly on a processor whose arithmetic differs.

The numerics check (:mod:`sparseloom.profile.numerics`) keeps a subgraph off a processor that
computes it differently from the evaluation processor, because every accuracy in the profile
was measured there. That is safe, and on some machines it forbids the fastest arithmetic
there is: on an Intel Xeon with AMX, OpenVINO's ``INFERENCE_PRECISION_HINT=bf16`` ran dense
sentiment 2.98× faster than f32 on one thread (``benchmarks/sentiment_precision.py``), and
every bf16 subgraph is flagged.

This step measures, exactly and on the flagged processor itself, the stitched variants a plan
could want there: for each task and each processor ``p`` that computes some of its subgraphs
differently, the Pareto front of (accuracy, latency of the whole chain on ``p``) over every
stitched variant, keeping :data:`SERVED_CANDIDATES` variants that pass through a flagged
subgraph — the most accurate of those clearly faster than dense there (:data:`WORTH_GAIN`),
then the most accurate of the rest of the front — and the dense chain where it is flagged.
Each is run with every position on ``p`` — its own backend and options (the precision hint),
on every core — over the task's whole eval set
(:func:`sparseloom.zoo.evaluate.evaluate_stitched`, so the metric store keyed by ``p``'s spec
keeps them: a variant is never measured twice). The result is
``TaskProfile.served_accuracy`` (V**S, P), NaN where not measured.

``sparseloom-loaded`` may then keep a task's whole chain on ``p`` with one of those variants,
judged by its served accuracy (:func:`sparseloom.plugins.policies.loaded_options.served_options`);
every other placement, and every other policy, still obeys the numerics check. Mixed chains
(some positions on ``p``, some elsewhere) are not measured: their number grows as P**S.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from sparseloom.core.types import Processor

log = logging.getLogger(__name__)

#: Stitched variants measured per (task, flagged processor): the most accurate of the
#: (accuracy, latency) front through a flagged subgraph. On ``default`` with a bf16 OpenVINO
#: processor (V = 10, S = 2; one profile run on an AMX Xeon) the fronts held 2–7 such variants,
#: 0.3–4.1 s of evaluation per task; an SLO within a few points of dense is met by the top few.
SERVED_CANDIDATES = 8
#: Of the front, the variants whose chain on the processor is at least this share faster than
#: the dense chain are measured first: ``sparseloom-loaded`` serves a compressed variant in
#: place of a dense model that meets the SLO only when it is that much faster
#: (``LoadedPolicy.min_gain``). On ``default``'s ``sentiment`` on bf16 OpenVINO (Intel Xeon
#: with AMX, 2026-12-07) the eight most accurate of the front were all within a few percent
#: of dense, and the structured variants 1.18-1.25x faster were never measured as served.
WORTH_GAIN = 0.1


def served_candidates(profile: Any, processor: int, count: int = SERVED_CANDIDATES
                      ) -> np.ndarray:
    """Rows worth measuring on ``processor`` (index), ``count`` of those that run some
    subgraph ``processor`` computes differently: first the most accurate variants whose whole
    chain on ``processor`` is at least :data:`WORTH_GAIN` faster than the dense chain there
    (on the front of accuracy and latency or not: the variant that dominates another on the
    selection rows may be the one the paired gate refuses), then the most accurate of the
    rest of the front of (accuracy ↑, whole-chain latency on ``processor`` ↓); then the dense
    chain when ``processor`` computes it differently (a variant that ties dense on the
    selection rows and is faster takes dense off the front; when a plan must not serve that
    variant — ``bench serve``'s paired gate — dense in ``processor``'s arithmetic is what is
    left). Empty when it computes every subgraph faithfully."""
    from sparseloom.profile.numerics import unfaithful_pairs

    flagged = unfaithful_pairs(profile.numerics_error)[:, :, processor]  # (S, V)
    if not flagged.any():
        return np.zeros(0, dtype=np.int64)
    order = np.full(profile.n_positions, processor, dtype=np.int64)
    latency = profile.latency_all(order)
    accuracy = profile.accuracy()
    front: list[int] = []
    best = -np.inf
    for row in np.lexsort((-accuracy, latency)):  # fastest first, the more accurate on ties
        if np.isfinite(latency[row]) and accuracy[row] > best:
            front.append(int(row))
            best = float(accuracy[row])
    every = np.arange(latency.size)
    positions = np.arange(profile.n_positions)
    through = flagged[positions[None, :], profile.choices(every)].any(axis=1)
    dense = int(profile.index([0] * profile.n_positions))  # a zoo's variant 0 is dense
    clearly = latency[dense] * (1.0 - WORTH_GAIN) if np.isfinite(latency[dense]) else np.inf
    faster = [int(r) for r in every[through & (latency <= clearly)]]
    taken = set(faster)
    rest = [r for r in front if through[r] and r not in taken]
    rows = (sorted(faster, key=lambda r: -accuracy[r]) + sorted(rest, key=lambda r: -accuracy[r])
            )[:count]
    if flagged[positions, 0].any() and dense not in rows:
        rows.append(dense)  # what a stock runtime serves there: the baseline of every plan
    return np.asarray(rows, dtype=np.int64)


def served_accuracy(task: Any, zoo: Any, profile: Any, processors: Sequence[Processor],
                    timings: dict[str, Any]) -> np.ndarray:
    """The (V**S, P) metric of :func:`served_candidates` measured on their processor (NaN
    elsewhere); the seconds it took go to ``timings["served"]``. A processor this process
    cannot run stays NaN, with a warning (its variants stay off it, as the numerics check
    has it)."""
    from sparseloom.core.processors import allowed_cores
    from sparseloom.profile.numerics import comparison_spec
    from sparseloom.zoo.evaluate import evaluate_stitched

    started = time.perf_counter()
    served = np.full((profile.n_stitched, len(processors)), np.nan, dtype=np.float32)
    cores = allowed_cores()
    for index, processor in enumerate(processors):
        rows = served_candidates(profile, index)
        if rows.size == 0:
            continue
        try:
            report = evaluate_stitched(zoo, task, [tuple(c) for c in profile.choices(rows)],
                                       processor=comparison_spec(processor, cores))
        except Exception as error:  # a processor this process cannot run (another node's)
            log.warning("profiling: cannot measure %s's variants as served on %s (%s); they "
                        "stay off it", task.name, processor.name, error)
            continue
        for choices, metric in report.metrics.items():
            served[profile.index(choices), index] = metric
    timings["served"] = time.perf_counter() - started
    return served
