"""``make_plan``: the one entry point that turns a profile into a plan and a preload set."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from sparseloom.core.errors import PlanError, SparseloomError
from sparseloom.core.registry import DEFAULT_POLICY, get_registry
from sparseloom.core.types import SLO, Plan, Processor, as_dict
from sparseloom.plan.contract import checked_plan, completed_plan
from sparseloom.plan.gating import PickGate, gated_profile
from sparseloom.plan.policy import ProfilePolicy
from sparseloom.plan.preload import Preload, fit_plan
from sparseloom.plan.slo_grid import grid_middle
from sparseloom.profile.table import ProfileTable

#: Where each task's SLO came from.
SLO_SOURCES = ("cli", "workload", "grid-middle")


@attrs.frozen
class PlanResult:
    """A plan, its preloaded subgraphs, and where each task's SLO came from.

    Attributes:
        plan: the policy's plan.
        preload: the hot-subgraph preloader's resident set for it.
        slo_sources: per task, ``cli`` (given by the caller), ``workload`` (the task's
            ``[task.slo]``) or ``grid-middle`` (the middle point of its SLO grid).
        policy: the policy object that made the plan; the runtime keeps it to re-plan
            (``on_feedback``, a task joining, a processor going down).
        slos: the SLO each task was planned against.
        reshaped: what the memory budget made the plan give up (``no spares``, ``no wide
            twins``, ``no lanes``; :func:`~sparseloom.plan.preload.fit_plan`), empty when it
            fitted.
        refused: per task, the picks (choices joined by ``_``) the gate refused before the
            plan's pick passed; empty without a gate or when every first pick passed.
        table: the table the plan was made from — the profile, less the variants the gate
            refused (:func:`~sparseloom.plan.gating.excluded_profile`); re-plans use it.
    """

    plan: Plan
    preload: Preload
    slo_sources: Mapping[str, str] = attrs.field(factory=dict, converter=as_dict)
    policy: Any = attrs.field(default=None, eq=False)
    slos: Mapping[str, SLO] = attrs.field(factory=dict, converter=as_dict)
    reshaped: tuple[str, ...] = ()
    refused: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict, converter=as_dict)
    table: Any = attrs.field(default=None, eq=False)


def resolve_slos(profile: ProfileTable, slos: Mapping[str, SLO] | None,
                 workload_slos: Mapping[str, SLO | None] | None
                 ) -> tuple[dict[str, SLO], dict[str, str]]:
    """Each task's SLO — given, else the workload's, else its grid's middle — and its source."""
    given = dict(slos or {})
    unknown = sorted(set(given) - set(profile.tasks))
    if unknown:
        raise PlanError(f"unknown task {', '.join(map(repr, unknown))} in the SLOs; the "
                        f"workload {profile.workload!r} has tasks: {', '.join(profile.tasks)}")
    resolved, sources = {}, {}
    for name, task_profile in profile.tasks.items():
        if name in given:
            resolved[name], sources[name] = given[name], "cli"
        elif (from_file := (workload_slos or {}).get(name)) is not None:
            resolved[name], sources[name] = from_file, "workload"
        else:
            resolved[name], sources[name] = grid_middle(task_profile), "grid-middle"
    return resolved, sources


def profiled_processors(profile: ProfileTable, chosen: Sequence[Any] | None = None
                        ) -> list[Processor]:
    """``chosen`` (records or names; default every profiled processor) as records, with the
    execution config the profile measured them with: as this machine discovers them, or by
    name alone where it does not (a simulated SoC's, a backend not installed here). A policy
    written to the protocol is always given records."""
    from sparseloom.core.processors import get_processor

    specs = {str(c.get("spec", "")).partition("?")[0]: c.get("spec")
             for c in profile.meta.get("processor_config", ()) if isinstance(c, Mapping)}
    found = []
    for item in chosen or profile.processors:
        if isinstance(item, Processor):
            found.append(item)
            continue
        name = str(item)
        try:
            found.append(get_processor(specs.get(name) or name, require_available=False))
        except SparseloomError:
            backend, _, device = name.partition("?")[0].partition(":")
            found.append(Processor(name.partition("?")[0], backend, device or name))
    return found


def make_plan(
    profile: ProfileTable,
    *,
    policy: str = DEFAULT_POLICY,
    slos: Mapping[str, SLO] | None = None,
    processors: Sequence[Any] | None = None,
    memory_budget: float | int = 1.0,
    workload_slos: Mapping[str, SLO | None] | None = None,
    policy_options: Mapping[str, Any] | None = None,
    gate: PickGate | None = None,
) -> PlanResult:
    """Plan every task of ``profile`` with the registered ``policy`` and preload for it.

    :param slos: SLO per task; tasks left out take ``workload_slos``, else their grid middle.
    :param processors: processors (records or names) to plan on; default all profiled ones
        (the policy is given them as records, see :func:`profiled_processors`).
    :param memory_budget: a fraction of full preloading in (0, 1], or bytes (an int): it bounds
        the preloaded subgraphs and the routes' wide twins, lane and spare copies together; a
        plan whose routes do not fit gives up its spares, then its twins, then its lanes
        (``PlanResult.reshaped``).
    :param workload_slos: the workload file's ``[task.slo]`` per task.
    :param policy_options: keyword options for the policy's factory.
    :param gate: judges each task's non-dense pick (served along its processors, under its
        SLO); a refused pick is taken out of the table and the policy plans again
        (:func:`~sparseloom.plan.gating.gated_profile`), so every pick of the plan passed it.
        The paired gate (:func:`~sparseloom.plan.paired_gate.serving_gate`) is what
        ``Server`` and the commands pass.
    :raises UnknownNameError: the policy is not registered (the message lists those that are).
    :raises PlanError: an unknown task, an unusable processor, a budget too small, or a plan
        the policy returned that cannot be served (:func:`~sparseloom.plan.contract.
        checked_plan`). The optional fields of the policy's plan that it left out are filled
        in from ``profile`` (:func:`~sparseloom.plan.contract.completed_plan`).
    """
    implementation = get_registry().create("policy", policy, **dict(policy_options or {}))
    if isinstance(implementation, ProfilePolicy):  # a subclass registered under its own name
        implementation.name = policy
    resolved, sources = resolve_slos(profile, slos, workload_slos)
    chosen = profiled_processors(profile, processors)
    table: ProfileTable = profile
    refused: dict[str, tuple[str, ...]] = {}
    if gate is not None:
        table, refused = _gated(implementation, policy, profile, chosen, resolved, gate)
    started = time.perf_counter()
    returned = implementation.plan(list(table.tasks), table, chosen, resolved)
    elapsed_s = time.perf_counter() - started
    plan = completed_plan(checked_plan(returned, table, policy, list(table.tasks)),
                          table, resolved, elapsed_s)
    plan, resident, reshaped = fit_plan(table, plan, budget=memory_budget)
    return PlanResult(plan, resident, sources, implementation, resolved, reshaped, refused,
                      table)


def _gated(implementation: Any, policy: str, profile: ProfileTable,
           processors: Sequence[Processor], slos: Mapping[str, SLO], gate: PickGate
           ) -> tuple[ProfileTable, dict[str, tuple[str, ...]]]:
    """The table ``implementation`` plans from once ``gate`` passed every pick, and the
    picks it refused by task."""
    routes: dict[str, tuple[str, ...]] = {}
    refused: dict[str, list[str]] = {}
    tasks = list(profile.tasks)

    def plan(table: ProfileTable) -> dict[str, tuple[int, ...]]:
        returned = checked_plan(implementation.plan(tasks, table, processors, slos), table,
                                policy, tasks)
        routes.update({t: returned.processors_of(t) for t in returned.variants})
        return {t: tuple(int(c) for c in v.choices) for t, v in returned.variants.items()}

    def verdict(task: str, pick: tuple[int, ...]) -> Any:
        given = gate(task, pick, routes[task], slos[task])
        if not given.passed:
            refused.setdefault(task, []).append("_".join(map(str, pick)))
        return given

    table = gated_profile(profile, plan, verdict)
    return table, {t: tuple(dict.fromkeys(v)) for t, v in refused.items()}
