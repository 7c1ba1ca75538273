"""Choose again under a tighter selection margin where a pick falls outside its margin on the
held-out rows.

A policy chooses each task's stitched variant on the selection rows, where the accuracy SLO
leaves it a margin below dense (dense's selection accuracy − the SLO). A pick chosen just
inside that margin may lose more than it on rows it has not seen (``bench serve`` judges it
on the task's judging rows: :mod:`sparseloom.evaluation.judging`). Where it does, the policy
chooses that task's variant again as if its SLO were raised by a fraction of the margin
(:data:`STEPS`: half of it, then all of it, so that only variants as accurate as dense on
the selection rows qualify), and after the last step from the task's dense variants only —
until every pick of the plan keeps its margin on the held-out rows. Each step is a whole new
plan, so a task whose pick changed because another task's did is judged too.

The judging rows decide only *whether* a task chooses again, never *which* variant it
chooses: that stays the policy's choice on the selection rows. A pick that passed after a
step was still kept because it passed on those rows, so the benchmark's report lists every
step (:class:`Tightened`) beside the judgements. An SLO at or above dense's selection
accuracy leaves no margin to tighten (a grid cell above dense): its picks stand as chosen.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from sparseloom.core.errors import PlanError
from sparseloom.core.types import SLO
from sparseloom.evaluation.judging import Judged

__all__ = ["STEPS", "Tightened", "raised_slo", "render_tightened", "within_margins"]

#: The fractions of a task's margin its accuracy SLO is raised by, one per refusal on the
#: held-out rows; a task refused once more than there are steps keeps only its dense variants.
STEPS = (0.5, 1.0)
DENSE_ONLY = len(STEPS) + 1


@attrs.frozen
class Tightened:
    """One pick that fell outside its margin on the held-out rows, and the step that followed.

    Attributes:
        policy: the policy that chose it.
        task: its task.
        model: the pick's choices joined by ``_``.
        precision: the precision it was judged (and served) in.
        drop: what it lost against dense on the held-out rows.
        margin: the drop its SLO allowed.
        level: the step its task chooses at next: ``1..len(STEPS)`` raise the SLO by
            ``STEPS[level - 1]`` of the margin; :data:`DENSE_ONLY` leaves the dense variants.
    """

    policy: str
    task: str
    model: str
    precision: str
    drop: float
    margin: float
    level: int

    @property
    def then(self) -> str:
        """The step that followed, in words."""
        if self.level >= DENSE_ONLY:
            return "dense variants only"
        return f"SLO raised by {STEPS[self.level - 1]:g} × the margin"

    def to_json(self) -> dict[str, Any]:
        """The record and its step in words as JSON."""
        return attrs.asdict(self) | {"then": self.then}


def raised_slo(slo: SLO, level: int, dense_selection: float, floor: float) -> SLO:
    """``slo`` as a task at ``level`` chooses under: its accuracy raised by the level's
    fraction of the margin below ``dense_selection`` (at least to ``floor``: what the
    benchmark raises every SLO to), never above dense; ``level`` 0 leaves it at ``floor``."""
    accuracy = floor
    if level:
        margin = max(0.0, dense_selection - slo.accuracy)
        accuracy = max(floor, slo.accuracy + STEPS[min(level, len(STEPS)) - 1] * margin)
    return SLO(max(slo.accuracy, min(accuracy, dense_selection)), slo.latency_ms)


def within_margins(policy: str, slos: Mapping[str, SLO],
                   plan: Callable[[Mapping[str, int]], Mapping[str, tuple[int, ...]]],
                   judge: Callable[[str, tuple[int, ...]], Judged | None],
                   ) -> tuple[dict[str, int], list[Tightened]]:
    """The level per task at which every pick ``plan`` makes keeps its margin.

    :param plan: the picks of a plan made with each task at its level (absent: 0).
    :param judge: a task's pick judged on the held-out rows at its SLO, ``None`` for a pick
        that is dense at every position (never judged). A pick judged on no rows, or under
        an SLO that leaves no margin, is not chosen again.
    :returns: the levels, and every step taken, in order.
    :raises PlanError: the policy still picks a stitched variant for a task left only its
        dense variants (a policy that ignores accuracy when no variant meets the SLO).
    """
    levels: dict[str, int] = {}
    steps: list[Tightened] = []
    while True:
        outside = []
        for task, pick in plan(levels).items():
            judged = judge(task, pick)
            if judged is None or judged.within or not judged.rows or judged.margin <= 0:
                continue
            if levels.get(task, 0) >= DENSE_ONLY:
                raise PlanError(f"{policy} chose {task}'s stitched variant {judged.model} from "
                                f"a table left only its dense variants; lower {task}'s "
                                f"accuracy SLO, or benchmark with --no-tighten")
            outside.append(judged)
        if not outside:
            return levels, steps
        for judged in outside:
            levels[judged.task] = levels.get(judged.task, 0) + 1
            steps.append(Tightened(policy, judged.task, judged.model, judged.precision,
                                   judged.drop, judged.margin, levels[judged.task]))


def render_tightened(rows: list[Mapping[str, Any]]) -> list[str]:
    """The report's lines on the steps taken (none when no pick fell outside)."""
    if not rows:
        return []
    return ["", "Picks that fell outside their margin on the held-out rows, each followed by "
                "a plan under a tighter selection margin for its task: "
            + "; ".join(f"{r['policy']}'s {r['task']} {r['model']} ({r['precision']}, "
                        f"{-100 * r['drop']:+.2f} against a {100 * r['margin']:.2f} margin) → "
                        f"{r['then']}" for r in rows) + "."]
