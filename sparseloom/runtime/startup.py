"""What :meth:`sparseloom.Server.start` builds before the first subgraph loads: the plan,
each stitched pick through the paired gate, and the runtime that serves it."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

from sparseloom.core.types import SLO
from sparseloom.runtime.executor import Runtime, RuntimeOptions


def planned_runtime(workload: Any, profile: Any, *, policy: str, slos: Mapping[str, SLO],
                    processors: Sequence[str], memory_budget: float | int,
                    options: RuntimeOptions, paired_gate: bool, progress: bool
                    ) -> tuple[Runtime, Any]:
    """Plan ``workload``'s tasks from ``profile`` and build the runtime that serves the plan
    (its workers not started, nothing preloaded yet).

    With ``paired_gate`` each stitched pick is judged on the selection rows beside dense
    (:func:`~sparseloom.plan.paired_gate.workload_gate`) and a refused one is planned
    without; the runtime re-plans from the table the gate left, so a refused pick stays out.

    :returns: the runtime and the :class:`~sparseloom.plan.api.PlanResult`.
    :raises RuntimeServeError: a processor that is not there. :raises PlanError,
        UnknownNameError: from planning.
    """
    from sparseloom.plan.api import make_plan
    from sparseloom.plan.paired_gate import workload_gate
    from sparseloom.runtime.budget import enforced_bytes
    from sparseloom.runtime.models import RuntimeTask, profile_processors
    from sparseloom.runtime.replan import Replanner
    from sparseloom.zoo.load import profiled_zoos

    records = profile_processors(profile, processors)
    zoos = profiled_zoos(profile)
    gate = workload_gate(workload, profile, records, zoos=zoos,
                         progress=_stderr_line if progress else None) if paired_gate else None
    planned = make_plan(profile, policy=policy, slos=slos, processors=records,
                        memory_budget=memory_budget,
                        workload_slos={task.name: task.slo for task in workload.tasks},
                        gate=gate)
    tasks = [RuntimeTask(workload.task(name), zoos[name], planned.slos[name])
             for name in profile.tasks]
    # Every re-plan holds the policy to the contract make_plan held the first plan to.
    planner = Replanner(planned.policy, policy, planned.table, records)
    runtime = Runtime(tasks, records, profile=planned.table, policy=planned.policy,
                      planner=planner, options=options)
    planner.slos = runtime.slos  # the runtime's own mapping: live SLO changes reach it
    runtime.loader.memory_budget = enforced_bytes(memory_budget, planned.preload.budget_bytes)
    runtime.notes += [f"the memory budget reshaped the plan: {what}"
                      for what in planned.reshaped]
    runtime.notes += [f"the paired gate refused {task}'s {', '.join(picks)}: the selection "
                      f"rows do not vouch for its accuracy SLO's margin beside dense"
                      for task, picks in planned.refused.items()]
    return runtime, planned


def _stderr_line(line: str) -> None:
    print(f"sparseloom: {line}", file=sys.stderr)
