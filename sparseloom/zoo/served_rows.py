"""A pick's outputs over a task's rows as it is served, and its paired difference to dense.

The paired gate (:mod:`sparseloom.plan.paired_gate`, on the selection rows) and ``bench
serve``'s judging (:mod:`sparseloom.evaluation.judging`, on the held-out rows) both run a pick
the way a plan serves it — merged into one model, or position by position where its chain
computes in two precisions — beside the dense model in the same precision, and compare the
two row by row with a paired bootstrap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sparseloom.workload.metrics import get_metric

__all__ = ["BOOTSTRAP_ROUNDS", "chain_precision", "judged_precision", "paired_interval",
           "processor_for", "served_outputs"]

#: Resamples of the paired bootstrap (a 95% interval's ends move by about 0.1 point between
#: seeds at this count on a few hundred rows).
BOOTSTRAP_ROUNDS = 1000


def judged_precision(processor_precision: str) -> str:
    """The precision a model served with this OpenVINO precision is judged in: ``bf16`` when
    OpenVINO computed bf16, else ``f32`` (f32 on either runtime agrees to about 1e-6)."""
    return "bf16" if processor_precision == "bf16" else "f32"


def chain_precision(positions: Sequence[str]) -> str:
    """The precision of a chain whose positions compute in ``positions`` (each ``f32`` or
    ``bf16``): the one they share, else each position's joined by ``>`` (``bf16>f32``)."""
    if not positions:
        raise ValueError("a chain has at least one position")
    return positions[0] if len(set(positions)) == 1 else ">".join(positions)


def processor_for(precision: str) -> str:
    """The processor spec a judgement in ``precision`` runs on."""
    return "ov:CPU?INFERENCE_PRECISION_HINT=bf16" if precision == "bf16" else "ort:CPU"


def paired_interval(metric: str, model: np.ndarray, dense: np.ndarray, labels: np.ndarray,
                    rounds: int = BOOTSTRAP_ROUNDS, seed: int = 0) -> tuple[float, float]:
    """The 95% paired bootstrap interval of ``metric(model) - metric(dense)``: both scored on
    the same ``rounds`` resamples of the rows (with replacement)."""
    score = get_metric(metric)
    count = int(labels.shape[0])
    rng = np.random.default_rng(seed)
    differences = np.empty(rounds)
    for index in range(rounds):
        rows = rng.integers(0, count, count)
        differences[index] = score(model[rows], labels[rows]) - score(dense[rows], labels[rows])
    low, high = np.percentile(differences, [2.5, 97.5])
    return float(low), float(high)


def _scored(task: Any, outputs: Mapping[str, np.ndarray]) -> np.ndarray:
    first = task.output_names[0] if task.output_names else None
    return outputs[first] if first is not None and first in outputs else next(
        iter(outputs.values()))


def served_outputs(task: Any, zoo: Any, pick: Sequence[int] | None, precision: str
                   ) -> np.ndarray:
    """The scored output of ``pick`` (``None``: the dense model) of ``task`` over its
    ``eval_inputs``, computed as served in ``precision``: merged into one model on that
    precision's processor (:func:`processor_for`), or, for a chain precision
    (:func:`chain_precision`), position by position on each position's processor.

    :raises ValueError: a chain precision naming another number of positions than the zoo's.
    """
    from sparseloom.workload.inference import run_batched
    from sparseloom.zoo.whole import merged_path

    processors = [processor_for(p) for p in precision.split(">")]
    if len(processors) > 1 and len(processors) != zoo.positions:
        raise ValueError(f"precision {precision!r} names {len(processors)} positions; "
                         f"{task.name}'s zoo has {zoo.positions}")
    if len(processors) > 1:
        from sparseloom.zoo.stitch import run_stitched

        chain = (0,) * zoo.positions if pick is None else tuple(pick)
        return _scored(task, run_stitched(zoo, chain, task.eval_inputs, processors))
    model = task.model_path if pick is None else merged_path(zoo, pick)
    return _scored(task, run_batched(model, task.eval_inputs, processor=processors[0]))
