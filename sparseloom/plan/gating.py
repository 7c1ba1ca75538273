"""Plan only with picks a gate vouches for: take each refused pick out of the table and plan
again.

A policy chooses each task's stitched variant by the accuracy the profile gives it. A gate —
the paired gate of :mod:`sparseloom.plan.paired_gate` by default, or any callable a
caller passes to :func:`~sparseloom.plan.api.make_plan` — may refuse a pick the table admits;
:func:`gated_profile` then plans from a copy of the table in which that variant reads
:data:`EXCLUDED` (:func:`excluded_profile`), until every pick passes or a task, refused
:data:`GATE_ATTEMPTS` times, keeps only its dense variants — after
:data:`GATE_ATTEMPTS_ABOVE_DENSE` refusals when its accuracy SLO asks for more than dense gives
on the selection rows (a verdict whose ``margin`` is negative).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs
import numpy as np

from sparseloom.core.errors import PlanError
from sparseloom.core.types import SLO

__all__ = ["EXCLUDED", "GATE_ATTEMPTS", "GATE_ATTEMPTS_ABOVE_DENSE", "PickGate", "Vouched",
           "excluded_profile", "gated_profile", "is_dense", "stitched_rows"]

#: The accuracy an excluded variant reads: below every metric (they lie in [0, 1]), finite so
#: that no policy's arithmetic on accuracies meets ``inf - inf``.
EXCLUDED = -1.0

#: Refusals after which a task keeps only its dense variants.
GATE_ATTEMPTS = 12
#: Refusals after which a task keeps only its dense variants when its accuracy SLO lies above
#: dense's selection accuracy. A pick must then beat dense by the difference, with 95%
#: confidence, on the very rows dense was measured on: an estimate that puts a stitched variant
#: there is almost always the estimator's error. In the top accuracy level of ``default``'s SLO
#: grid (2 points above the best original) the gate refused all 12 estimated picks of
#: ``vision`` and of ``sentiment``, each a run over the selection rows: 52 s of ``make demo``
#: (2-vCPU AMD EPYC Zen 4, commit d25c6b6, 2026-12-06), and as long at a ``Server``'s start.
GATE_ATTEMPTS_ABOVE_DENSE = 3


class Vouched(Protocol):
    """A gate's verdict on one pick."""

    @property
    def passed(self) -> bool:
        """Whether the pick may be served."""


#: A gate: its verdict on ``task``'s pick (choices per position), served along
#: ``processors`` (one per position), under the task's ``slo``.
PickGate = Callable[[str, tuple[int, ...], tuple[str, ...], SLO], Vouched]


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
                  verdict: Callable[[str, tuple[int, ...]], Vouched],
                  attempts: int = GATE_ATTEMPTS,
                  attempts_above_dense: int = GATE_ATTEMPTS_ABOVE_DENSE) -> Any:
    """The table a policy plans from once every pick it makes passes the gate.

    Each refused pick is taken out and the policy plans again; a task refused ``attempts``
    times keeps only its dense variants. Every plan is checked whole, so a task whose pick
    changes because another task's did is judged too; it ends after at most
    ``(attempts + 1) × tasks + 1`` plans. Dense picks are never judged.

    A verdict with a negative ``margin`` attribute (the task's SLO lies above dense's
    selection accuracy; :class:`~sparseloom.plan.paired_gate.GateVerdict` has it, a gate of
    the caller's need not) leaves its task at most ``attempts_above_dense`` refusals.

    :raises PlanError: the policy still picks a stitched variant for a task left only its
        dense ones (a policy that ignores accuracy when no variant meets the SLO).

    :param plan: the picks (choices per task) a policy makes from a table.
    :param verdict: the gate's verdict on one task's pick.
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
            if is_dense(table, pick):
                continue
            given = verdict(task, pick)
            if given.passed:
                continue
            failing = True
            limit = attempts if getattr(given, "margin", 0.0) >= 0 else min(
                attempts, attempts_above_dense)
            refusals[task] = refusals.get(task, 0) + 1
            if refusals[task] > limit:
                raise PlanError(
                    f"the policy chose {task}'s stitched variant "
                    f"{'_'.join(map(str, pick))} though the paired gate had refused its "
                    f"picks {limit} times and left it only its dense variants; lower "
                    f"{task}'s accuracy SLO, or plan without the gate (--no-paired-gate, "
                    f"paired_gate=False)")
            if refusals[task] < limit:
                excluded.setdefault(task, set()).add(int(table.index(list(pick))))
                continue
            excluded[task] = stitched_rows(table)
        if not failing:
            return current
        current = excluded_profile(profile, excluded)


def stitched_rows(task: Any) -> set[int]:
    """The rows of ``task`` (a task profile) whose variant is not dense at every position:
    what :func:`excluded_profile` takes out to leave a task only its dense variants."""
    rows = np.arange(task.accuracy_estimated.shape[0])
    return {int(r) for r, c in zip(rows, task.choices(rows), strict=True)
            if not is_dense(task, tuple(int(x) for x in c))}


def is_dense(task: Any, pick: Sequence[int]) -> bool:
    """Whether ``pick`` stitches only dense subgraphs of ``task`` (a task profile)."""
    return all(task.variant_kinds[int(c)] == "dense" for c in pick)
