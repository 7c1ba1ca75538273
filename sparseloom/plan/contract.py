"""What a placement policy's :class:`~sparseloom.core.types.Plan` must hold, and what
sparseloom fills in when a policy leaves the rest out.

A policy, built-in or third-party, must return a ``Plan`` with ``policy``, ``order`` and, for
every task it was asked to plan, a stitched variant with one choice per profiled position, on
processors the profile holds. :func:`checked_plan` refuses anything else with a
:class:`~sparseloom.core.errors.PlanError` naming the policy, the task and the fault (a
serving error later would not say who chose it).

Every other field is optional (see ``Plan``). :func:`completed_plan` fills what a policy left
out, per task, from the profile it planned from: the SLO from the SLOs it was given, the
estimated latency of the chosen variant on its processors (the chain model,
:meth:`~sparseloom.profile.table.TaskProfile.latency`), its metric (measured where the profile
measured it, else estimated) and feasibility against the SLO from those two. What the policy
did give is kept as given.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from sparseloom.core.errors import PlanError
from sparseloom.core.types import SLO, Plan
from sparseloom.profile.table import ProfileTable


def _fault(policy: str, task: str, what: str) -> PlanError:
    return PlanError(f"policy {policy!r} returned a plan whose task {task!r} {what}; fix the "
                     "policy (see `sparseloom plugins` for who provides it)")


def checked_plan(plan: Any, profile: ProfileTable, policy: str, tasks: Sequence[str]) -> Plan:
    """``plan`` when it places each of ``tasks`` in a way ``profile`` can serve.

    :raises PlanError: not a ``Plan``; a task without a variant; a variant with the wrong
        number of positions or an index past the task's variants; a processor the profile does
        not hold. The message names the policy and the task.
    """
    if not isinstance(plan, Plan):
        raise PlanError(f"policy {policy!r} returned {type(plan).__name__}, not a Plan; fix the "
                        "plugin that registers it (see `sparseloom plugins`)")
    for task in tasks:
        variant = plan.variants.get(task)
        if variant is None:
            raise _fault(policy, task, f"has no variant (it places "
                                       f"{', '.join(map(repr, plan.variants)) or 'no task'})")
        table = profile.task(task)
        if len(variant.choices) != table.n_positions:
            raise _fault(policy, task, f"has a variant of {len(variant.choices)} position(s), "
                                       f"but the task is cut into {table.n_positions}")
        beyond = [c for c in variant.choices if c >= table.n_variants]
        if beyond:
            raise _fault(policy, task, f"chooses variant index {beyond[0]}, but the task has "
                                       f"{table.n_variants} variants per position "
                                       f"(0..{table.n_variants - 1})")
        processors = plan.processors_of(task)
        if len(processors) != table.n_positions:
            raise _fault(policy, task, f"runs on {len(processors)} processor(s) "
                                       f"({', '.join(processors) or 'none'}), one per position "
                                       f"is {table.n_positions}")
        unknown = [p for p in processors if p not in profile.processors]
        if unknown:
            raise PlanError(
                f"policy {policy!r} placed task {task!r} on {', '.join(map(repr, unknown))}, "
                f"which the profile of {profile.workload!r} does not hold (it holds "
                f"{', '.join(profile.processors)}); fix the policy, or profile that processor")
    return plan


def completed_plan(plan: Plan, profile: ProfileTable, slos: Mapping[str, SLO],
                   decision_seconds: float) -> Plan:
    """``plan`` with every optional per-task field the policy left out filled in (see the
    module doc); ``decision_seconds`` (the measured wall time of the call) when the plan says
    0. ``plan`` must have passed :func:`checked_plan`."""
    plan_slos, latency = dict(plan.slos), dict(plan.estimated_latency_ms)
    accuracy, measured = dict(plan.estimated_accuracy), dict(plan.accuracy_measured)
    feasible, reasons = dict(plan.feasible), dict(plan.infeasible_reason)
    for task, variant in plan.variants.items():
        if task not in profile.tasks:
            continue
        table = profile.task(task)
        if task not in plan_slos and task in slos:
            plan_slos[task] = slos[task]
        if task not in latency:
            latency[task] = float(profile.latency(task, list(variant.choices),
                                                  list(plan.processors_of(task))))
        if task not in accuracy:
            row = int(table.index(list(variant.choices)))
            accuracy[task] = float(table.accuracy()[row])
            measured.setdefault(task, bool(math.isfinite(table.accuracy_measured[row])))
        slo = plan_slos.get(task)
        if task not in feasible and slo is not None:
            misses = []
            if not accuracy[task] >= slo.accuracy:
                misses.append(f"estimated {table.metric} {accuracy[task]:.4f} < "
                              f"{slo.accuracy:.4f}")
            if not latency[task] <= slo.latency_ms:
                misses.append(f"estimated latency {latency[task]:.3f} ms > "
                              f"{slo.latency_ms:.3f} ms")
            feasible[task] = not misses
            if misses:
                reasons.setdefault(task, f"the policy's choice misses its SLO: "
                                         f"{' and '.join(misses)}")
    return attrs.evolve(
        plan, slos=plan_slos, estimated_latency_ms=latency, estimated_accuracy=accuracy,
        accuracy_measured=measured, feasible=feasible, infeasible_reason=reasons,
        decision_seconds=plan.decision_seconds or decision_seconds)
