"""Stratified subsets of a task's eval set, for cheaper exact measurements with a stated error.

Measuring a stitched variant exactly means one pass of every subgraph over the whole eval set.
Where many variants are measured only to *train an estimator*, a subset of the rows that keeps
the label distribution (``stratified_rows``) costs proportionally less; the error it adds is
the sampling error of the metric on ``n`` of ``N`` rows, which :func:`subset_standard_error`
states (binomial, with the finite-population correction) and the profile measures on the
originals.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import numpy as np

from sparseloom.core.errors import ConfigError


def stratified_rows(labels: np.ndarray, count: int, seed: int = 0) -> np.ndarray:
    """``count`` eval row indices (sorted) drawn per class in proportion to the class sizes.

    Classification labels (one integer per row, or one-hot rows) are stratified by class with
    the largest-remainder rule, so every class keeps its share (a class with any rows keeps at
    least one when ``count`` allows); other labels are sampled uniformly. ``count`` at or above
    the number of rows returns every row.

    :raises ConfigError: ``count`` is not positive.
    """
    total = int(labels.shape[0])
    if count < 1:
        raise ConfigError(f"an eval subset needs at least 1 row; got {count}")
    if count >= total:
        return np.arange(total)
    rng = np.random.default_rng(seed)
    classes = _class_of_rows(labels)
    if classes is None:
        return np.sort(rng.choice(total, size=count, replace=False))
    values, sizes = np.unique(classes, return_counts=True)
    share = sizes * (count / total)
    taken = np.floor(share).astype(int)
    if count >= len(values):
        taken = np.maximum(taken, 1)
    order = np.argsort(-(share - np.floor(share)), kind="stable")
    for index in order:
        if taken.sum() >= count:
            break
        if taken[index] < sizes[index]:
            taken[index] += 1
    while taken.sum() > count:  # the minimum of one per class overshot: trim the largest
        taken[int(np.argmax(taken))] -= 1
    chosen = [rng.choice(np.flatnonzero(classes == value), size=int(n), replace=False)
              for value, n in zip(values, taken, strict=True) if n]
    return np.sort(np.concatenate(chosen))


def _class_of_rows(labels: np.ndarray) -> np.ndarray | None:
    if labels.ndim == 1 and np.issubdtype(labels.dtype, np.integer):
        return labels
    if labels.ndim == 2 and labels.shape[1] > 1 and np.all((labels == 0) | (labels == 1)):
        return np.argmax(labels, axis=1)
    return None


def subset_standard_error(metric: float, rows: int, total: int) -> float:
    """The standard error of an accuracy-like ``metric`` measured on ``rows`` of ``total`` rows.

    Binomial, with the finite-population correction (0 when every row is used).
    """
    if rows >= total:
        return 0.0
    p = min(max(float(metric), 0.0), 1.0)
    return math.sqrt(p * (1.0 - p) / rows * (total - rows) / max(1, total - 1))


def subset_task(task: Any, rows: np.ndarray) -> Any:
    """``task`` restricted to eval ``rows`` (inputs and labels), everything else unchanged.

    :raises ConfigError: the task has no ``labels`` to restrict (a third-party task type), or a
        row index is out of range.
    """
    labels = getattr(task, "labels", None)
    if labels is None or not attrs.has(type(task)):
        raise ConfigError(
            f"task {task.name!r} cannot be evaluated on an eval subset: it has no 'labels' "
            "array (use every eval row, or give the task a labels array)")
    rows = np.asarray(rows, dtype=np.int64)
    total = int(np.asarray(labels).shape[0])
    if rows.size == 0 or rows.min() < 0 or rows.max() >= total:
        raise ConfigError(f"task {task.name!r}: eval subset rows must lie in [0, {total})")
    return attrs.evolve(task, eval_inputs={n: np.asarray(a)[rows]
                                           for n, a in task.eval_inputs.items()},
                        labels=np.asarray(labels)[rows])
