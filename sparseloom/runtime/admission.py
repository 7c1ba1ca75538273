"""What a request must be before the runtime admits it: checked at ``submit``, in the caller's
thread, so that a client's bad request fails there with an error naming the task and the fix,
and never reaches a processor (where its failure would count against the processor).

- an eval-set row is an ``int`` (a NumPy integer too; never a ``bool`` or a float) in
  ``[0, rows)``, checked on every call;
- your own inputs are a mapping holding the task's input names and no others (names, dtype and
  shape are then checked by :func:`~sparseloom.runtime.models.check_request_inputs`);
- a float input holding NaN or Inf is served, as ``sparseloom infer`` serves it, with one
  :class:`NonFiniteInputWarning` per task: its outputs mean little, yet a model still returns
  confident-looking logits.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from sparseloom.core.errors import ArgumentError, BackendError
from sparseloom.runtime.models import RuntimeTask, check_request_inputs


class NonFiniteInputWarning(UserWarning):
    """A request's input holds NaN or Inf values: it is served, but its outputs mean little."""


def check_row(task: str, sample: Any, rows: int) -> int:
    """``sample`` as an eval-set row of ``task``, which has ``rows`` rows.

    :raises ArgumentError: not an integer (a ``bool`` or a float is refused, not read as a
        row), or outside ``[0, rows)``.
    """
    # (type() first: the load generators' plain ints skip the slower ABC check)
    if type(sample) is not int and (isinstance(sample, bool)
                                    or not isinstance(sample, numbers.Integral)):
        raise ArgumentError(f"submit_sample({task!r}, {sample!r}): the row must be an int in "
                            f"[0, {rows}) (task {task!r} has {rows} eval rows), got "
                            f"{type(sample).__name__}")
    row = int(sample)
    if not 0 <= row < rows:
        raise ArgumentError(f"submit_sample({task!r}, {row}): row {row} is outside the eval "
                            f"set of task {task!r}; give a row in [0, {rows})")
    return row


def check_input_names(task: str, inputs: Any, expected: list[str]) -> None:
    """Refuse inputs that are not a mapping, or that name an input the task's model does not
    take (a misspelt name would otherwise be dropped without a word).

    :raises ArgumentError: ``inputs`` is not a mapping. :raises BackendError: an extra name.
    """
    if not isinstance(inputs, Mapping):
        raise ArgumentError(f"submit({task!r}, inputs): inputs must be a mapping of input name "
                            f"to array (the task's inputs are {', '.join(map(repr, expected))}), "
                            f"got {type(inputs).__name__}")
    extra = [name for name in inputs if name not in expected]
    if extra:
        raise BackendError(f"a request of task {task!r} has input(s) "
                           f"{', '.join(map(repr, extra))} that its model does not take; the "
                           f"task's inputs are {', '.join(map(repr, expected))}")


def count_non_finite(array: Any) -> int:
    """How many NaN or Inf values a float or complex array holds (0 for other dtypes)."""
    values = np.asarray(array)
    if values.dtype.kind not in "fc":
        return 0
    return int(values.size - np.count_nonzero(np.isfinite(values)))


def non_finite_message(task: str, arrays: Mapping[str, Any]) -> str | None:
    """The warning for a request of ``task`` whose inputs hold NaN or Inf (``None``: none)."""
    bad = {name: count_non_finite(array) for name, array in arrays.items()}
    bad = {name: count for name, count in bad.items() if count}
    if not bad:
        return None
    where = ", ".join(f"{name!r} holds {count} of {np.asarray(arrays[name]).size}"
                      for name, count in bad.items())
    return (f"a request of task {task!r} has NaN or Inf input values ({where}); it is served, "
            f"but the outputs will not mean much (warned once per task)")


@attrs.define(eq=False)
class RequestChecks:
    """The checks of every request a runtime admits (the module doc), with what they learnt
    per task: its row count and input names, whether its eval rows' shapes were checked (they
    share one shape: once per task), whether its NaN warning was given.

    ``notes`` (the runtime's) receives each warning too, so the run summary carries it.
    """

    tasks: Mapping[str, RuntimeTask]
    notes: list[str]
    _rows: dict[str, int] = attrs.field(factory=dict, init=False)
    _names: dict[str, list[str]] = attrs.field(factory=dict, init=False)
    _rows_checked: set[str] = attrs.field(factory=set, init=False)
    _warned: set[str] = attrs.field(factory=set, init=False)

    def arrays(self, task: str, sample: Any, inputs: Mapping[str, Any] | None
               ) -> dict[str, np.ndarray]:
        """The first stage's inputs of a request of ``task``: eval row ``sample``, or
        ``inputs`` when given.

        :raises ArgumentError: a bad row (or none) or inputs that are not a mapping.
        :raises BackendError: inputs that do not match the task's model.
        """
        served = self.tasks[task]
        if inputs is not None:
            names = self._names.get(task)
            if names is None:
                names = self._names[task] = [spec["name"]
                                             for spec in served.zoo.boundary(0).inputs]
            check_input_names(task, inputs, names)
            arrays = check_request_inputs(served, inputs)
            if task not in self._warned:
                message = non_finite_message(task, arrays)
                if message is not None:
                    self._warned.add(task)
                    self.notes.append(message)
                    warnings.warn(message, NonFiniteInputWarning, stacklevel=4)
            return arrays
        rows = self._rows.get(task)
        if rows is None:
            rows = self._rows[task] = served.task.num_eval
        if sample is None:
            raise ArgumentError(f"a request of task {task!r} needs inputs (submit(task, "
                                f"inputs): a mapping of input name to array) or an eval-set "
                                f"row in [0, {rows}) (submit_sample(task, row))")
        row = check_row(task, sample, rows)
        eval_inputs = served.task.eval_inputs
        arrays = {name: eval_inputs[name][row:row + 1] for name in eval_inputs}
        if task not in self._rows_checked:
            arrays = check_request_inputs(served, arrays)
            self._rows_checked.add(task)
        return arrays
