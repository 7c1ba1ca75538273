"""Feasible sets Θ^t, the distance to an SLO, and turning per-task choices into a :class:`Plan`.

Θ^t (SparseLoom §3.3) is the set of stitched variants of task t whose accuracy — measured where
the profile measured it exactly, estimated elsewhere — meets the accuracy SLO and whose
estimated latency under the order in question meets the latency SLO.

A task with an empty Θ^t is still given a variant: the one *closest* to its SLO, by

    distance(v, p) = max(0, a_slo − a(v)) / a_slo + max(0, l(v, p) − l_slo) / l_slo,

the sum of the relative accuracy shortfall and the relative latency overrun (both 0 for a
variant that meets the SLO), ties broken by lower latency. Relative terms make one percent of
accuracy weigh as much as one percent of latency, whatever the metric's and the model's scale.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs
import numpy as np

from sparseloom.core.errors import PlanError
from sparseloom.core.types import SLO, Plan, StitchedVariant
from sparseloom.profile.table import ProfileTable, TaskProfile


@attrs.frozen
class TaskChoice:
    """One task's decision: a stitched-variant row and the processor of each position.

    Attributes:
        task: the task name.
        row: the stitched variant's row in the task profile.
        processors: processor index of each position.
        latency_ms: its estimated latency under ``processors``.
        feasible: whether it meets the SLO (estimated).
        reason: why not, for an infeasible task; empty otherwise.
        served_accuracy: the metric measured for this variant as served on ``processors``
            (``TaskProfile.served_accuracy``), when the plan relies on it; ``None``: the
            profile's accuracy of ``row`` applies.
    """

    task: str
    row: int = attrs.field(converter=int)
    processors: tuple[int, ...] = attrs.field(converter=lambda v: tuple(int(x) for x in v))
    latency_ms: float = attrs.field(converter=float)
    feasible: bool = True
    reason: str = ""
    served_accuracy: float | None = None


def choice_accuracy(profile: TaskProfile, row: int, served_accuracy: float | None
                    ) -> tuple[float, bool]:
    """The metric a choice serves and whether it was measured exactly: its served accuracy
    when the plan relies on one (measured), else the profile's of ``row``."""
    if served_accuracy is not None:
        return float(served_accuracy), True
    return float(profile.accuracy()[row]), bool(np.isfinite(profile.accuracy_measured[row]))


def accuracy_rows(profile: TaskProfile, slo: SLO) -> np.ndarray:
    """Rows of the stitched variants whose (measured, else estimated) metric meets the SLO."""
    return np.flatnonzero(profile.accuracy() >= slo.accuracy)


def distance_to_slo(accuracy: np.ndarray, latency_ms: np.ndarray, slo: SLO) -> np.ndarray:
    """Relative shortfall + relative overrun (0 when the SLO is met); see the module doc."""
    shortfall = np.maximum(0.0, slo.accuracy - accuracy) / max(slo.accuracy, 1e-9)
    overrun = np.maximum(0.0, latency_ms - slo.latency_ms) / slo.latency_ms
    return shortfall + overrun


def closest_row(profile: TaskProfile, slo: SLO, latency_ms: np.ndarray) -> int:
    """The row closest to ``slo`` given every row's latency (V**S,) under one order.

    A met accuracy SLO is never given up for a latency SLO that cannot be met: when any row
    meets the accuracy SLO, the closest is the fastest of those.
    """
    accuracy = profile.accuracy()
    distance = distance_to_slo(accuracy, latency_ms, slo)
    accurate = accuracy >= slo.accuracy
    if accurate.any():
        distance = np.where(accurate, distance, np.inf)
    return int(np.lexsort((latency_ms, distance))[0])


def order_text(table: ProfileTable, order: Sequence[int]) -> str:
    """An order as ``ov:CPU→ort:CPU``."""
    return "→".join(table.processors[int(p)] for p in order)


def infeasible_reason(profile: TaskProfile, slo: SLO, n_accurate: int,
                      fastest_accurate_ms: float, fastest_any_ms: float,
                      shared_ms: float | None = None, shared: str = "") -> str:
    """Why task ``profile.task`` has no variant meeting ``slo``, in one sentence.

    :param n_accurate: how many stitched variants meet the accuracy SLO.
    :param fastest_accurate_ms: the lowest latency of those under any order.
    :param fastest_any_ms: the lowest latency of any variant under any order.
    :param shared_ms: the lowest latency of those under the plan's shared order, when the task
        is feasible under some other order but not under the shared one.
    """
    best = float(profile.accuracy().max())
    if n_accurate == 0 and fastest_any_ms > slo.latency_ms:
        return (f"both unreachable: the best {profile.metric} is {best:.4f} < {slo.accuracy:.4f}"
                f" and the fastest variant takes {fastest_any_ms:.3f} ms > "
                f"{slo.latency_ms:.3f} ms")
    if n_accurate == 0:
        return f"accuracy unreachable: the best {profile.metric} is {best:.4f} < {slo.accuracy:.4f}"
    if fastest_accurate_ms > slo.latency_ms:
        return (f"latency unreachable: the fastest of the {n_accurate} variants meeting "
                f"{profile.metric} ≥ {slo.accuracy:.4f} takes {fastest_accurate_ms:.3f} ms > "
                f"{slo.latency_ms:.3f} ms")
    return (f"latency unreachable under the shared order {shared}: the fastest accurate variant "
            f"takes {shared_ms:.3f} ms > {slo.latency_ms:.3f} ms there ({fastest_accurate_ms:.3f}"
            " ms under another order, which would cost the other tasks more)")


def check_slos(table: ProfileTable, slos: Mapping[str, SLO]) -> dict[str, SLO]:
    """Every profiled task's SLO; raises :class:`PlanError` naming a missing or unknown task."""
    unknown = sorted(set(slos) - set(table.tasks))
    if unknown:
        raise PlanError(f"no task {', '.join(map(repr, unknown))} in the profile of workload "
                        f"{table.workload!r}; its tasks: {', '.join(table.tasks)}")
    missing = [name for name in table.tasks if name not in slos]
    if missing:
        raise PlanError(f"no SLO for task(s) {', '.join(missing)}; give one per task")
    return {name: slos[name] for name in table.tasks}


def restrict_profile(table: ProfileTable, processors: Sequence[str]) -> ProfileTable:
    """A copy of ``table`` that knows only ``processors`` (in the table's own order)."""
    unknown = [name for name in processors if name not in table.processors]
    if unknown:
        raise PlanError(f"processor(s) {', '.join(unknown)} are not in the profile; profiled "
                        f"processors: {', '.join(table.processors)}")
    keep = [i for i, name in enumerate(table.processors) if name in set(processors)]
    if not keep:
        raise PlanError("no processor left to plan on; every profiled processor is down")
    if len(keep) == len(table.processors):
        return table
    tasks = {}
    for name, profile in table.tasks.items():
        changes = {field: getattr(profile, field)[:, :, keep] for field in (
            "latency_ms", "latency_spread_ms", "compile_ms", "load_ms", "memory_bytes",
            "latency_median_ms", "numerics_error", "latency_cold_ms")}
        changes["handoff_ms"] = profile.handoff_ms[:, keep][:, :, keep]
        changes["served_accuracy"] = profile.served_accuracy[:, keep]
        tasks[name] = attrs.evolve(profile, **changes)
    return ProfileTable(table.workload, [table.processors[i] for i in keep], tasks,
                        dict(table.meta))


def faithful_profile(table: ProfileTable) -> ProfileTable:
    """A copy of ``table`` in which a subgraph costs infinite latency on every processor that
    computes it differently from the evaluation processor (``TaskProfile.numerics_error`` over
    :data:`~sparseloom.profile.numerics.NUMERICS_TOLERANCE`): its accuracies were measured on
    that processor's arithmetic only, so a plan that wants the accuracy it reads must not put
    the subgraph there. ``table`` itself when nothing is flagged; otherwise the copy keeps
    ``table`` as its ``unmasked``, where a policy that reads accuracies measured as served
    (``TaskProfile.served_accuracy``) finds those variants' latencies.

    :raises PlanError: a task has a position no processor computes faithfully.
    """
    from sparseloom.profile.numerics import unfaithful_pairs

    tasks = {}
    for name, profile in table.tasks.items():
        flagged = unfaithful_pairs(profile.numerics_error)
        stuck = np.flatnonzero(flagged.all(axis=(1, 2)))
        if stuck.size:
            raise PlanError(
                f"task {name!r}: every variant of position {int(stuck[0])} is computed "
                f"differently from the evaluation processor (numerics_error > tolerance) on "
                f"every processor of {', '.join(table.processors)}, so no plan serves the "
                f"accuracy the profile measured; add a processor that computes as the "
                f"evaluation processor does, or measure the accuracies on one of these (Python: "
                f"ProfileOptions(evaluation_processor=...))")
        if flagged.any():
            tasks[name] = attrs.evolve(profile, latency_ms=np.where(flagged, np.inf,
                                                                    profile.latency_ms))
    if not tasks:
        return table
    return ProfileTable(table.workload, table.processors, dict(table.tasks) | tasks,
                        dict(table.meta), unmasked=table)


def build_plan(policy: str, table: ProfileTable, choices: Mapping[str, TaskChoice],
               order: Sequence[int] | np.ndarray, slos: Mapping[str, SLO],
               decision_seconds: float) -> Plan:
    """The :class:`Plan` of per-task ``choices`` under the global ``order`` (indices)."""
    names = table.processors
    variants, latency, accuracy, measured, assignment = {}, {}, {}, {}, {}
    for task, choice in choices.items():
        profile = table.task(task)
        picked = profile.choices([choice.row])[0]
        variants[task] = StitchedVariant(task, tuple(int(c) for c in picked))
        latency[task] = choice.latency_ms
        accuracy[task], measured[task] = choice_accuracy(profile, choice.row,
                                                         choice.served_accuracy)
        assignment[task] = tuple(names[p] for p in choice.processors)
    return Plan(
        policy=policy, order=tuple(names[int(p)] for p in order), variants=variants,
        estimated_latency_ms=latency, estimated_accuracy=accuracy,
        feasible={t: c.feasible for t, c in choices.items()},
        infeasible_reason={t: c.reason for t, c in choices.items() if not c.feasible},
        accuracy_measured=measured, assignment=assignment, slos=dict(slos),
        decision_seconds=decision_seconds)
