"""Making the plan again while serving: a task joins or leaves, an SLO changes, a processor
goes down, or the policy's ``on_feedback`` returns a plan.

Every plan the runtime applies holds to the contract :func:`~sparseloom.plan.api.make_plan`
enforces on the first one: the policy is given :class:`~sparseloom.core.types.Processor`
records (the profiled processors that are up), its result is refused with a
:class:`~sparseloom.core.errors.PlanError` naming the policy and task when it cannot be served
(:func:`~sparseloom.plan.contract.checked_plan`), and the optional fields it left out are
filled from the profile (:func:`~sparseloom.plan.contract.completed_plan`). Without this, a
third-party policy written to the protocol would serve its first plan and fail at the first
re-plan.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs

from sparseloom.core.errors import RuntimeServeError
from sparseloom.core.types import SLO, Plan, Processor
from sparseloom.plan.contract import checked_plan, completed_plan
from sparseloom.profile.table import ProfileTable


class Replannable(Protocol):
    """What :func:`checked_feedback` needs of a runtime (:class:`~sparseloom.runtime.
    executor.Runtime` is one), named here so that this module does not import the runtime."""

    @property
    def planner(self) -> Any: ...

    @property
    def profile(self) -> Any: ...

    @property
    def plan(self) -> Any: ...

    @property
    def policy(self) -> Any: ...

    @property
    def slos(self) -> Mapping[str, SLO]: ...


@attrs.define(eq=False)
class Replanner:
    """The runtime's planner: ``replanner(active, down)`` is ``policy``'s checked, completed
    plan of the ``active`` tasks on the ``processors`` not ``down``.

    Attributes:
        policy: the policy object (as :func:`make_plan` created it).
        policy_name: its registered name (errors name it).
        profile: the profile it plans from.
        processors: the served processors, as records.
        slos: the SLO each task is served under now; the runtime's own mapping, which live
            SLO changes update (set it once the runtime exists).
    """

    policy: Any
    policy_name: str
    profile: ProfileTable
    processors: Sequence[Processor]
    slos: Mapping[str, SLO] = attrs.field(factory=dict)

    def __call__(self, active: Sequence[str], down: Sequence[str]) -> Plan:
        """The policy's plan of ``active`` without the ``down`` processors.

        :raises PlanError: the policy's result cannot be served (the message names it).
        :raises PluginCallError: a third-party policy raised.
        :raises RuntimeServeError: every processor is down (a policy is never given none).
        """
        up = [p for p in self.processors if p.name not in set(down)]
        if not up:
            raise RuntimeServeError(f"every processor ({', '.join(down)}) is down: nothing is "
                                    f"left to plan on; start a new Server")
        started = time.perf_counter()
        returned = self.policy.plan(list(active), self.profile, up,
                                    {t: self.slos[t] for t in active})
        return self.checked(returned, active, time.perf_counter() - started)

    def checked(self, returned: Any, active: Sequence[str], decision_seconds: float = 0.0
                ) -> Plan:
        """``returned`` (what the policy gave for ``active``) checked and completed.

        :raises PlanError: it is not a ``Plan`` the runtime can serve (naming the policy)."""
        plan = checked_plan(returned, self.profile, self.policy_name, list(active))
        return completed_plan(plan, self.profile, {t: self.slos[t] for t in active},
                              decision_seconds)


def checked_feedback(runtime: Replannable, returned: Any, active: Sequence[str]) -> Plan:
    """``returned`` (the policy's ``on_feedback`` plan for the ``active`` tasks) checked and
    completed by the runtime's :class:`Replanner`; a runtime planned some other way checks it
    against its profile, naming the policy by the plan in force.

    :raises PlanError: it is not a ``Plan`` the runtime can serve (naming the policy)."""
    planner = runtime.planner
    if not isinstance(planner, Replanner):
        if runtime.profile is None and isinstance(returned, Plan):
            return returned  # nothing to check it against
        name = str(getattr(runtime.plan, "policy", "") or type(runtime.policy).__name__)
        planner = Replanner(runtime.policy, name, runtime.profile, (), runtime.slos)
    return planner.checked(returned, active)
