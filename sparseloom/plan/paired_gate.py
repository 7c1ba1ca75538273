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
:data:`GATE_ATTEMPTS` times serves its dense variants (:data:`GATE_ATTEMPTS_ABOVE_DENSE`
times when its SLO lies above dense's selection accuracy, where a pick must beat dense).
The judging rows stay unread until ``bench serve`` judges what was served
(:mod:`sparseloom.evaluation.judging`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from sparseloom.core.types import SLO
from sparseloom.plan.gating import (
    EXCLUDED,
    GATE_ATTEMPTS,
    GATE_ATTEMPTS_ABOVE_DENSE,
    PickGate,
    excluded_profile,
    gated_profile,
)

__all__ = ["EXCLUDED", "GATE_ATTEMPTS", "GATE_ATTEMPTS_ABOVE_DENSE", "GateVerdict",
           "SelectionGate", "excluded_profile", "gate_pick", "gated_profile", "serving_gate",
           "workload_gate"]


@attrs.frozen
class GateVerdict:
    """A pick's paired difference to dense on the rows it was selected on.

    Attributes:
        task: the task.
        model: the pick's choices joined by ``_``.
        precision: what both were computed in (:func:`~sparseloom.zoo.served_rows.
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
    from sparseloom.zoo.served_rows import paired_interval, served_outputs

    if dense_outputs is None:
        dense_outputs = served_outputs(task, zoo, None, precision)
    outputs = served_outputs(task, zoo, pick, precision)
    labels = np.asarray(task.labels)
    low, _ = paired_interval(task.metric, outputs, dense_outputs, labels)
    return GateVerdict(task.name, "_".join(map(str, pick)), precision, int(labels.shape[0]),
                       low, float(margin)), dense_outputs


@attrs.define
class SelectionGate:
    """The gate of one benchmark: each (task, pick, precision) run over the selection rows
    once and judged against every margin asked of it (a grid's cells differ only in the
    margin), dense's outputs computed once per task and precision, every verdict kept in
    :attr:`verdicts`.

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
    _ran: dict[tuple[Any, ...], GateVerdict] = attrs.field(factory=dict, init=False)

    def __call__(self, task: str, pick: tuple[int, ...], precision: str, margin: float
                 ) -> GateVerdict:
        """The verdict on ``pick`` of ``task`` served in ``precision`` (:func:`gate_pick`)."""
        key = (task, pick, precision, round(float(margin), 9))
        if key not in self._seen:
            ran = self._ran.get(key[:3])
            if ran is None:
                ran, self._dense[task, precision] = gate_pick(
                    self.workload.task(task), self.zoos[task], pick, precision, margin,
                    dense_outputs=self._dense.get((task, precision)))
                self._ran[key[:3]] = ran
            given = attrs.evolve(ran, margin=float(margin))
            self._seen[key] = given
            self.verdicts.append(given)
            if self.progress is not None:
                self.progress(f"paired gate {task} {given.model} ({precision}): "
                              f"{100 * given.low:+.2f} points at worst against a "
                              f"{100 * given.margin:.2f} margin on {given.rows} selection "
                              f"rows: {'kept' if given.passed else 'refused'}")
        return self._seen[key]


def serving_gate(gate: SelectionGate, processors: Sequence[Any]) -> PickGate:
    """``gate`` as :func:`~sparseloom.plan.api.make_plan` asks a gate: a pick served along
    some of ``processors`` (records) is judged in the precision each position computes in
    (:func:`~sparseloom.zoo.served_rows.chain_precision`) against the margin its SLO
    leaves below dense's selection accuracy (the zoo's record)."""
    from sparseloom.core.processors import openvino_precision
    from sparseloom.zoo.served_rows import chain_precision, judged_precision

    precisions = {p.name: judged_precision(openvino_precision([p])) for p in processors}

    def verdict(task: str, pick: tuple[int, ...], route: tuple[str, ...], slo: SLO
                ) -> GateVerdict:
        precision = chain_precision([precisions.get(name, "f32") for name in route])
        dense = float(gate.zoos[task].manifest["metric"]["dense"])
        return gate(task, pick, precision, dense - slo.accuracy)

    return verdict


def workload_gate(workload: Any, profile: Any, processors: Sequence[Any] | None = None, *,
                  zoos: Mapping[str, Any] | None = None,
                  progress: Callable[[str], None] | None = None) -> PickGate:
    """The paired gate of ``workload`` planned from ``profile`` on ``processors`` (records or
    names; default every profiled one), for :func:`~sparseloom.plan.api.make_plan`'s
    ``gate``.

    :param zoos: the task's zoos, if loaded (default: as the profile names them).
    :param progress: called with one line per verdict.
    """
    from sparseloom.plan.api import profiled_processors
    from sparseloom.zoo.load import profiled_zoos

    return serving_gate(SelectionGate(workload, zoos or profiled_zoos(profile), progress),
                        profiled_processors(profile, processors))
