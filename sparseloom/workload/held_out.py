"""Hold part of each task's eval set out of selection, to judge what selection picked.

Everything that *chooses* — the zoo's metrics, the profile, the accuracy estimators, the
placement policies — sees a task's ``eval_inputs`` and ``labels``. A variant chosen at
dense − 0.99 points on those rows was chosen *because* it scored well on them, so the same
rows cannot say whether it keeps its accuracy (on 500 rows one standard error is about 1.75
points). :func:`split_held_out` therefore cuts each task's eval set once, seeded and
stratified by label, into a *selection* part (which stays ``eval_inputs`` and ``labels``) and
a *judging* part (:class:`HeldOut`, ``task.held_out``) that only ``sparseloom bench serve``
reads. :func:`sparseloom.workload.load.load_workload` applies it to every task with the
workload's ``held_out`` share (``held_out = 0.3`` in the workload file; ``0`` turns it off).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import attrs
import numpy as np

from sparseloom.core.errors import ConfigError
from sparseloom.workload.checks import MIN_EVAL_ROWS, warn
from sparseloom.workload.subset import stratified_rows

__all__ = ["DEFAULT_HELD_OUT", "HELD_OUT_SEED", "HeldOut", "check_held_out", "split_held_out"]

#: The share of each task's eval rows held out for judging unless the workload says otherwise.
DEFAULT_HELD_OUT = 0.3
#: The seed of the split: the same rows are held out on every machine and every run.
HELD_OUT_SEED = 20261203
TaskT = TypeVar("TaskT")

#: The ``Task.info`` key of a task whose calibration rows are its first eval rows (no
#: calibration file): its value is how many. The split takes them again from the selection
#: rows, so that no compressor sees a judging row either.
CALIBRATION_FROM_EVAL = "calibration_from_eval"
#: The largest share: selection keeps at least half the rows.
MAX_HELD_OUT = 0.5


def readonly(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``arrays`` as read-only numpy arrays (a task's data is never written to)."""
    frozen = {}
    for key, value in arrays.items():
        array = np.asarray(value)
        array.setflags(write=False)
        frozen[key] = array
    return frozen


@attrs.frozen(eq=False)
class HeldOut:
    """The judging part of a task's eval set: rows that selection never sees.

    Attributes:
        inputs: the judging inputs by model input name (read-only).
        labels: the judging labels.
        rows: the judging rows' indices in the eval set as the task's data gave it.
        selection_rows: the other rows' indices, in the order ``eval_inputs`` now holds them.
    """

    inputs: Mapping[str, np.ndarray] = attrs.field(converter=readonly)
    labels: np.ndarray
    rows: np.ndarray
    selection_rows: np.ndarray

    @property
    def count(self) -> int:
        """Number of judging rows."""
        return int(self.labels.shape[0])


def check_held_out(share: object, where: str = "held_out") -> float:
    """``share`` as a float in ``[0, MAX_HELD_OUT]``; :class:`ConfigError` otherwise."""
    if isinstance(share, bool) or not isinstance(share, int | float):
        raise ConfigError(f"{where} must be a number in [0, {MAX_HELD_OUT}] (the share of each "
                          f"task's eval rows held out for judging), got {share!r}")
    value = float(share)
    if not 0.0 <= value <= MAX_HELD_OUT:
        raise ConfigError(f"{where} = {value} is outside [0, {MAX_HELD_OUT}]: it is the share of "
                          f"each task's eval rows held out for judging (0 turns it off; "
                          f"selection keeps at least half)")
    return value


def split_held_out(task: TaskT, share: float = DEFAULT_HELD_OUT,
                   seed: int = HELD_OUT_SEED) -> TaskT:
    """``task`` with ``share`` of its eval rows moved into ``held_out``.

    The judging rows are drawn per class in proportion to the class sizes
    (:func:`~sparseloom.workload.subset.stratified_rows`); ``eval_inputs`` and ``labels`` keep
    the others, in their original order, and calibration rows that were taken from the eval
    rows are taken again from the selection rows. A task that already has a held-out part, a
    share of 0, or a task too small to leave :data:`~sparseloom.workload.checks.MIN_EVAL_ROWS`
    rows on each side is returned unchanged (the last with one warning: its accuracy is then
    judged on the rows it was selected on).

    :raises ConfigError: ``share`` outside ``[0, MAX_HELD_OUT]``, or ``task`` has no labels.
    """
    share = check_held_out(share)
    name = getattr(task, "name", "?")
    if getattr(task, "held_out", None) is not None or share == 0.0:
        return task
    labels = getattr(task, "labels", None)
    inputs = getattr(task, "eval_inputs", None)
    if labels is None or inputs is None or not attrs.has(type(task)):
        raise ConfigError(f"task {name!r} cannot hold rows out: it has no 'labels' and "
                          f"'eval_inputs' arrays")
    labels = np.asarray(labels)
    total = int(labels.shape[0])
    judging = round(total * share)
    if judging < MIN_EVAL_ROWS or total - judging < MIN_EVAL_ROWS:
        warn(f"task {name!r}: {total} eval rows are too few to hold {share:.0%} out for judging "
             f"(each part needs {MIN_EVAL_ROWS}); its accuracy is judged on the rows it was "
             f"selected on")
        return task
    rows = stratified_rows(labels, judging, seed=seed)
    keep = np.setdiff1d(np.arange(total), rows)
    held = HeldOut(inputs={n: np.asarray(a)[rows] for n, a in inputs.items()},
                   labels=labels[rows], rows=rows, selection_rows=keep)
    record: Any = task
    selection = {n: np.asarray(a)[keep] for n, a in inputs.items()}
    calibration = record.calibration_inputs
    taken = int(record.info.get(CALIBRATION_FROM_EVAL, 0) or 0)
    if taken:
        calibration = {n: a[:taken] for n, a in selection.items()}
    split: TaskT = attrs.evolve(record, eval_inputs=selection, labels=labels[keep],
                                calibration_inputs=calibration, held_out=held)
    return split
