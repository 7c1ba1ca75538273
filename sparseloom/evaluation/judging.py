"""Judge the accuracy of what a benchmark served on rows its selection never saw.

The zoo, the profile, the estimators and the policies choose a task's variant on its
*selection* rows (:mod:`sparseloom.workload.held_out`); a variant chosen just inside the
accuracy margin there was chosen because it scored well on those very rows. ``bench serve``
therefore judges "equal accuracy" on the task's *judging* rows: the served model (dense, or a
pick merged into one model) runs over them in the precision it was served in, beside the dense
model in the same precision, and the pick keeps its accuracy when what it loses against dense
there is at most the margin selection allowed it (dense's selection accuracy − the SLO). The
difference carries a 95% paired bootstrap interval (the same resampled rows for both models).
A chain served partly in bf16 on OpenVINO and partly in f32 on ONNX Runtime is judged so,
position by position, and so is dense beside it (:func:`chain_precision`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from sparseloom.workload.metrics import get_metric
from sparseloom.zoo.served_rows import (
    BOOTSTRAP_ROUNDS,
    chain_precision,
    judged_precision,
    paired_interval,
    processor_for,
    served_outputs,
)

__all__ = ["BOOTSTRAP_ROUNDS", "Judged", "chain_precision", "judge", "judged_precision",
           "judging_report", "paired_interval", "processor_for", "render_judging",
           "served_outputs"]

@attrs.frozen
class Judged:
    """A model's accuracy on a task's judging rows against dense's on the same rows.

    Attributes:
        task: the task.
        model: ``"dense"`` or the pick's choices joined by ``_`` (``"0_5"``).
        precision: what it was computed in: ``f32`` (ONNX Runtime) or ``bf16`` (OpenVINO);
            one per position joined by ``>`` where the chain ran on both
            (:func:`chain_precision`).
        rows: judging rows (0 when the task holds none out: then every figure is ``nan``).
        accuracy: the model's metric on the judging rows.
        dense: the dense model's, on the same rows and in the same precision.
        low, high: the 95% paired bootstrap interval of ``accuracy - dense``.
        selection_drop: dense − the model on the selection rows (the profile's, f32).
        margin: the drop selection allowed: dense's selection accuracy − the accuracy SLO.
    """

    task: str
    model: str
    precision: str
    rows: int
    accuracy: float
    dense: float
    low: float
    high: float
    selection_drop: float
    margin: float

    @property
    def drop(self) -> float:
        """What the model loses against dense on the judging rows."""
        return self.dense - self.accuracy

    @property
    def chosen_within(self) -> bool:
        """Selection put it within the margin."""
        return self.selection_drop <= self.margin + 1e-9

    @property
    def within(self) -> bool:
        """It keeps the margin on the judging rows too (``False`` when nothing was judged)."""
        return self.drop <= self.margin + 1e-9

    def judged_accuracy(self, dense_selection: float) -> float:
        """The accuracy on the selection scale that the judging rows vouch for: dense's
        selection accuracy minus what the model lost against dense on the judging rows (so
        the task's accuracy SLO reads the same on both); ``nan`` when nothing was judged."""
        return dense_selection - self.drop

    def to_json(self) -> dict[str, Any]:
        """The record and its verdicts as JSON."""
        return attrs.asdict(self) | {"drop": self.drop, "within": self.within,
                                     "chosen_within": self.chosen_within}


def judge(task: Any, zoo: Any, pick: Sequence[int] | None, precision: str, *,
          selection_drop: float, margin: float, dense_outputs: np.ndarray | None = None,
          rounds: int = BOOTSTRAP_ROUNDS) -> tuple[Judged, np.ndarray]:
    """Judge ``pick`` (``None``: the dense model) of ``task`` on its judging rows.

    :param zoo: the task's subgraph zoo (a pick is merged from it into one model).
    :param precision: ``f32`` or ``bf16`` (see :func:`processor_for`), or one per position
        joined by ``>`` (:func:`chain_precision`): then the pick and dense run position by
        position, each on its precision's processor.
    :param selection_drop: dense − the pick on the selection rows.
    :param margin: dense's selection accuracy − the task's accuracy SLO.
    :param dense_outputs: dense's scored output on the judging rows in ``precision``, when
        already computed.
    :returns: the judgement and dense's scored output (to pass again for the next pick).
    """
    model = "dense" if pick is None else "_".join(map(str, pick))
    held = getattr(task, "held_out", None)
    if held is None:
        nan = math.nan
        return Judged(task.name, model, precision, 0, nan, nan, nan, nan, selection_drop,
                      margin), np.empty(0)
    judging = task.judging()

    def run(choices: Sequence[int] | None) -> np.ndarray:
        return served_outputs(judging, zoo, choices, precision)

    if dense_outputs is None:
        dense_outputs = run(None)
    outputs = dense_outputs if pick is None else run(pick)
    score = get_metric(task.metric)
    labels = np.asarray(judging.labels)
    low, high = ((0.0, 0.0) if pick is None else
                 paired_interval(task.metric, outputs, dense_outputs, labels, rounds))
    return Judged(task.name, model, precision, held.count, score(outputs, labels),
                  score(dense_outputs, labels), low, high, selection_drop, margin), dense_outputs


def judging_report(judgements: Sequence[Judged], gate: Sequence[Any] = ()) -> dict[str, Any]:
    """The report's ``judging`` section: every judgement, how often a pick that selection
    put within its margin fell outside it on the held-out rows, and every verdict of the
    paired gate on the selection rows (:mod:`~sparseloom.plan.paired_gate`)."""
    picks = [j for j in judgements if j.model != "dense" and j.rows]
    chosen = [j for j in picks if j.chosen_within]
    return {"judged": [j.to_json() for j in judgements],
            "gate": [verdict.to_json() for verdict in gate],
            "picks_chosen_within": len(chosen),
            "fell_outside": sorted({f"{j.task} {j.model} ({j.precision})"
                                    for j in chosen if not j.within}),
            "unjudged_tasks": sorted({j.task for j in judgements if not j.rows})}


def render_judging(section: Mapping[str, Any]) -> list[str]:
    """The ``judging`` section as Markdown lines."""
    rows = section.get("judged") or []
    if not rows:
        return []

    def points(value: float) -> str:
        return "—" if value != value else f"{100 * value:+.2f}"

    lines = ["", "## Accuracy on held-out rows", "",
             "Each model served, on eval rows its selection never saw, against the dense model "
             "on the same rows and in the same precision (differences in points; 95% paired "
             "bootstrap interval). Within: what it lost there is at most the margin "
             "selection allowed it (dense − the accuracy SLO).", "",
             "| task | model | precision | rows | accuracy | dense | difference [95%] | "
             "difference on selection | margin | within |", "|---|---|---|---|---|---|---|---|"
             "---|---|"]
    for row in rows:
        judged = row["rows"] > 0
        lines.append(
            f"| {row['task']} | {row['model']} | {row['precision']} | {row['rows']} | "
            f"{row['accuracy']:.4f} | {row['dense']:.4f} | {points(-row['drop'])} "
            f"[{points(row['low'])}, {points(row['high'])}] | "
            f"{points(-row['selection_drop'])} | {100 * row['margin']:.2f} | "
            f"{('yes' if row['within'] else '**no**') if judged else 'not judged'} |")
    refused = [v for v in section.get("gate") or [] if not v["passed"]]
    if section.get("gate"):
        lines += ["", f"The paired gate gave {len(section['gate'])} verdict(s) on the selection "
                      f"rows and refused {len(refused)} pick(s)"
                      + (": " + ", ".join(f"{v['task']} {v['model']} ({v['precision']}, "
                                          f"{100 * v['low']:+.2f} against a "
                                          f"{100 * v['margin']:.2f} margin)" for v in refused)
                         if refused else "") + "."]
    fell = section.get("fell_outside") or []
    lines += ["", f"Of {section['picks_chosen_within']} pick(s) selection put within the "
                  f"margin, {len(fell)} fell outside it on the held-out rows"
                  + (f": {', '.join(fell)}." if fell else ".")]
    if section.get("unjudged_tasks"):
        lines.append(f"Not judged (no rows held out): {', '.join(section['unjudged_tasks'])}; "
                     "their accuracy is judged on the rows it was selected on.")
    return lines
