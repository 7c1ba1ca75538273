"""Keep a pick only where its selection rows vouch for it beside dense, row by row.

A policy chooses a task's stitched variant by its accuracy on the selection rows: a variant
that ties dense there passes a 1-point margin whether it answers every row as dense does or
wins five rows and loses five. On 168 rows the second kind is as likely to lose 5 points on
rows it has not seen as to keep its accuracy (``mix``'s ``review`` pick ``0_6`` did, on 72
held-out rows). No accuracy margin tells the two apart; the paired difference does: the pick
and dense run over the *selection* rows as served (merged, in the precision of the processors
the plan serves it on), and the pick is kept only where the low end of the 95% paired
bootstrap interval of its metric minus dense's is at least −margin (dense's selection
accuracy − the task's accuracy SLO). A pick that fails is taken out of the table the policy
plans from (:func:`excluded_profile`) and the policy plans again; a task refused
:data:`GATE_ATTEMPTS` times serves its dense variants.
The judging rows stay unread until ``bench serve`` judges what was served
(:mod:`sparseloom.evaluation.judging`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

__all__ = ["EXCLUDED", "GATE_ATTEMPTS", "GateVerdict", "SelectionGate", "excluded_profile",
           "gate_pick", "gated_profile"]

#: The accuracy an excluded variant reads: below every metric (they lie in [0, 1]), finite so
#: that no policy's arithmetic on accuracies meets ``inf - inf``.
EXCLUDED = -1.0

#: Refusals after which a task keeps only its dense variants.
GATE_ATTEMPTS = 12


@attrs.frozen
class GateVerdict:
    """A pick's paired difference to dense on the rows it was selected on.

    Attributes:
        task: the task.
        model: the pick's choices joined by ``_``.
        precision: what both were computed in (:func:`~sparseloom.evaluation.judging.
            chain_precision`).
        rows: selection rows.
        low: the low end of the 95% paired bootstrap interval of pick − dense.
        margin: the drop the task's accuracy SLO allows: dense's selection accuracy − SLO.
    """

    task: str
    model: str
    precision: str
    rows: int
    low: float
    margin: float

    @property
    def passed(self) -> bool:
        """The selection rows vouch for at most the margin's loss."""
        return self.low >= -self.margin - 1e-9

    def to_json(self) -> dict[str, Any]:
        """The record and its verdict as JSON."""
        return attrs.asdict(self) | {"passed": self.passed}


def gate_pick(task: Any, zoo: Any, pick: Sequence[int], precision: str, margin: float, *,
              dense_outputs: np.ndarray | None = None) -> tuple[GateVerdict, np.ndarray]:
    """Run ``pick`` of ``task`` and its dense model over the task's selection rows
    (``eval_inputs``) in ``precision`` and judge the paired difference against ``margin``.

    :param dense_outputs: dense's scored output on those rows in ``precision``, if known.
    :returns: the verdict and dense's scored output (to pass for the next pick).
    """
    from sparseloom.evaluation.judging import paired_interval, served_outputs

    if dense_outputs is None:
        dense_outputs = served_outputs(task, zoo, None, precision)
    outputs = served_outputs(task, zoo, pick, precision)
    labels = np.asarray(task.labels)
    low, _ = paired_interval(task.metric, outputs, dense_outputs, labels)
    return GateVerdict(task.name, "_".join(map(str, pick)), precision, int(labels.shape[0]),
                       low, float(margin)), dense_outputs


@attrs.define
class SelectionGate:
    """The gate of one benchmark: each (task, pick, precision, margin) judged once, dense's
    outputs computed once per task and precision, every verdict kept in :attr:`verdicts`.

    Attributes:
        workload: the loaded workload (its tasks' ``eval_inputs`` are the selection rows).
        zoos: the subgraph zoo per task.
        progress: called with one line per verdict.
    """

    workload: Any
    zoos: Mapping[str, Any]
    progress: Callable[[str], None] | None = None
    verdicts: list[GateVerdict] = attrs.field(factory=list, init=False)
    _dense: dict[tuple[str, str], np.ndarray] = attrs.field(factory=dict, init=False)
    _seen: dict[tuple[Any, ...], GateVerdict] = attrs.field(factory=dict, init=False)

    def __call__(self, task: str, pick: tuple[int, ...], precision: str, margin: float
                 ) -> GateVerdict:
        """The verdict on ``pick`` of ``task`` served in ``precision`` (:func:`gate_pick`)."""
        key = (task, pick, precision, round(float(margin), 9))
        if key not in self._seen:
            given, self._dense[task, precision] = gate_pick(
                self.workload.task(task), self.zoos[task], pick, precision, margin,
                dense_outputs=self._dense.get((task, precision)))
            self._seen[key] = given
            self.verdicts.append(given)
            if self.progress is not None:
                self.progress(f"paired gate {task} {given.model} ({precision}): "
                              f"{100 * given.low:+.2f} points at worst against a "
                              f"{100 * given.margin:.2f} margin on {given.rows} selection "
                              f"rows: {'kept' if given.passed else 'refused'}")
        return self._seen[key]


def excluded_profile(profile: Any, excluded: Mapping[str, set[int]]) -> Any:
    """A copy of ``profile`` in which the stitched variants ``excluded`` names (rows, by
    task) have accuracy :data:`EXCLUDED` — measured, estimated and as served — so no
    accuracy SLO admits them; ``profile`` itself when nothing is excluded."""
    from sparseloom.profile.table import ProfileTable

    tasks = {}
    for name, rows in excluded.items():
        if not rows:
            continue
        task = profile.task(name)
        index = np.fromiter(sorted(rows), dtype=np.int64)
        arrays = {}
        for field in ("accuracy_estimated", "accuracy_measured", "served_accuracy"):
            array = np.array(getattr(task, field), copy=True)
            if array.shape and array.shape[0] == task.accuracy_estimated.shape[0]:
                array[index] = EXCLUDED
            arrays[field] = array
        tasks[name] = attrs.evolve(task, **arrays)
    if not tasks:
        return profile
    return ProfileTable(profile.workload, profile.processors, dict(profile.tasks) | tasks,
                        dict(profile.meta), unmasked=profile.unmasked)


def gated_profile(profile: Any, plan: Callable[[Any], Mapping[str, Sequence[int]]],
                  verdict: Callable[[str, tuple[int, ...]], GateVerdict],
                  attempts: int = GATE_ATTEMPTS) -> Any:
    """The table a policy plans from once every pick it makes passes the gate.

    Each refused pick is taken out and the policy plans again; a task refused ``attempts``
    times keeps only its dense variants. Every plan is checked whole, so a task whose pick
    changes because another task's did is judged too; it ends after at most
    ``attempts × tasks + 1`` plans.

    :param plan: the picks (choices per task) a policy makes from a table.
    :param verdict: the gate's verdict on one task's pick (a :class:`SelectionGate`, its
        precision and margin given).
    :returns: the table (``profile`` itself when every first pick passed).
    """
    excluded: dict[str, set[int]] = {}
    refusals: dict[str, int] = {}
    current = profile
    while True:
        failing = False
        for task, choices in plan(current).items():
            pick = tuple(int(c) for c in choices)
            table = profile.task(task)
            if _dense(table, pick):
                continue
            if verdict(task, pick).passed:
                continue
            failing = True
            refusals[task] = refusals.get(task, 0) + 1
            if refusals[task] < attempts:
                excluded.setdefault(task, set()).add(int(table.index(list(pick))))
                continue
            rows = np.arange(table.accuracy_estimated.shape[0])
            excluded[task] = {int(r) for r, c in zip(rows, table.choices(rows), strict=True)
                              if not _dense(table, tuple(int(x) for x in c))}
        if not failing:
            return current
        current = excluded_profile(profile, excluded)


def _dense(task: Any, pick: tuple[int, ...]) -> bool:
    return all(task.variant_kinds[c] == "dense" for c in pick)
