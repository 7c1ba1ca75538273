"""Checks that a task's data means something, in the user's terms (file, array, rows).

The shape checks of :mod:`sparseloom.workload.build` make sure the arrays fit the model; these
make sure they are worth scoring: no NaN or Inf, labels that are class indices the model can
output, enough rows to evaluate and to calibrate. A refusal is a :class:`DataError`; data that
is usable but doubtful (a small calibration set, a metric at chance level) gets one
``Warning:`` line on stderr.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from sparseloom.core.errors import DataError
from sparseloom.workload.metrics import LABEL_PAD

#: Fewest calibration rows: the zoo traces shapes and checks its cuts on 4 rows and needs two
#: or more to tell the batch dimension from the others.
MIN_CALIBRATION_ROWS = 4
#: Fewest eval rows: a metric over N rows moves in steps of 1/N, so below 10 rows (steps over
#: 0.1) variants cannot be told apart and an accuracy SLO such as 0.85 cannot be judged.
MIN_EVAL_ROWS = 10
#: Below one calibration batch (32 rows) INT8 ranges come from too few samples to trust.
FEW_CALIBRATION_ROWS = 32


def warn(message: str) -> None:
    """One ``Warning:`` line on stderr."""
    print(f"Warning: {message}", file=sys.stderr, flush=True)


def check_finite(arrays: Mapping[str, np.ndarray], where: str) -> None:
    """Refuse NaN or Inf in any floating-point array, naming the array and the rows."""
    for name, array in arrays.items():
        if array.dtype.kind not in "fc" or array.size == 0:
            continue
        finite = np.isfinite(array).reshape(array.shape[0], -1).all(axis=1)
        if not finite.all():
            rows = np.flatnonzero(~finite)
            shown = ", ".join(map(str, rows[:5])) + (", ..." if rows.size > 5 else "")
            raise DataError(
                f"{where}: array {name!r} holds NaN or Inf in {rows.size} of {finite.size} "
                f"rows (rows {shown}); replace or drop those rows"
            )


def check_rows(arrays: Mapping[str, np.ndarray], where: str, minimum: int = 1,
               why: str = "") -> int:
    """The number of rows (first axis) of ``arrays``; :class:`DataError` below ``minimum``
    (``why`` says what the minimum is for)."""
    count = min((a.shape[0] if a.ndim else 0 for a in arrays.values()), default=0)
    if count < minimum:
        shapes = ", ".join(f"{name!r} {list(a.shape)}" for name, a in arrays.items())
        need = "at least one row" if minimum == 1 else f"at least {minimum} rows"
        raise DataError(f"{where}: {count} rows ({shapes or 'no arrays'}); it needs {need}"
                        f"{f' ({why})' if why else ''}")
    return count


def check_labels(labels: np.ndarray, metric: str, where: str,
                 classes: int | None = None) -> None:
    """Refuse labels that are not class indices the model can output.

    :param classes: the model output's class count, when static (labels must be below it).
    """
    if labels.dtype.kind not in "iu":
        raise DataError(
            f"{where}: array 'labels' has dtype {labels.dtype}; labels are class indices, "
            "save them as integers (labels.astype(numpy.int64))"
        )
    if labels.size == 0:
        return
    if metric == "ctc_accuracy":
        low, high = 1, classes  # token 0 is the CTC blank; -1 pads
        values = labels[labels != LABEL_PAD]
    else:
        low, high = 0, classes
        values = labels.reshape(-1)
    if values.size == 0:
        return
    smallest, largest = int(values.min()), int(values.max())
    if smallest < low or (high is not None and largest >= high):
        allowed = f"{low} to {high - 1}" if high is not None else f"{low} or more"
        raise DataError(
            f"{where}: array 'labels' holds values {smallest} to {largest}, but the model's "
            f"{'tokens' if metric == 'ctc_accuracy' else 'classes'} are {allowed}"
        )


def check_calibration(arrays: Mapping[str, np.ndarray], where: str) -> None:
    """Refuse a calibration set too small to calibrate; warn when it is small."""
    check_finite(arrays, where)
    count = check_rows(arrays, where, MIN_CALIBRATION_ROWS)
    if count < FEW_CALIBRATION_ROWS:
        warn(f"{where}: only {count} calibration rows; INT8 ranges from fewer than "
             f"{FEW_CALIBRATION_ROWS} rows may be poor")


def output_classes(shape: Sequence[int | None] | None) -> int | None:
    """The class count of an output shape (its last dimension), when static."""
    if not shape:
        return None
    last = shape[-1]
    return last if isinstance(last, int) and last > 0 else None


def class_count(classes: int | Sequence[str] | None) -> int | None:
    """How many classes: a count, or the length of a list of class names (a task's ``info``
    holds the names, e.g. ``["T-shirt", "Trouser", ...]``)."""
    if classes is None or isinstance(classes, bool):
        return None
    if isinstance(classes, int):
        return classes if classes > 0 else None
    if isinstance(classes, Sequence) and not isinstance(classes, str):
        return len(classes) or None
    return None


def chance_level(metric: str, labels: np.ndarray,
                 classes: int | Sequence[str] | None) -> float | None:
    """The metric of always guessing the most common class (``None`` when not defined)."""
    if metric != "accuracy" or labels.size == 0 or labels.dtype.kind not in "iu":
        return None
    flat = labels.reshape(-1)
    majority = float(np.bincount(flat - flat.min()).max() / flat.size)
    count = class_count(classes)
    return max(majority, 1.0 / count) if count else majority


def warn_if_chance(task: str, metric: str, value: float, labels: np.ndarray,
                   classes: int | Sequence[str] | None,
                   source: Path | str | None = None) -> bool:
    """Warn when the dense metric is no better than guessing; returns whether it warned."""
    chance = chance_level(metric, labels, classes)
    # 2 points of slack: a model that is right on 11% of 10 balanced classes learned nothing.
    if chance is None or value > chance + 0.02:
        return False
    origin = f" (data {source})" if source else ""
    warn(f"task {task!r}: the dense model's {metric} {value:.4f} is at chance level "
         f"({chance:.4f}, always guessing the most common class){origin}; check that the "
         "labels belong to the inputs and the model was trained")
    return True
