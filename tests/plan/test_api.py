"""``make_plan`` hands a policy what the ``PlacementPolicy`` protocol promises."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any, ClassVar

from sparseloom.core.hookspecs import hookimpl
from sparseloom.core.types import SLO, Plan, Processor
from sparseloom.plan.api import make_plan
from sparseloom.plugins.policies.sparseloom import SparseLoomPolicy
from tests.plan.tables import random_table


class ProtocolPolicy:
    """A third-party policy written to the protocol alone: it reads ``processors[i].name``."""

    seen: ClassVar[list[Sequence[Any]]] = []

    def plan(self, tasks: Sequence[str], profile: Any, processors: Sequence[Processor],
             slos: Mapping[str, SLO]) -> Plan:
        type(self).seen.append(list(processors))
        names = [processor.name for processor in processors]  # the protocol's promise
        return SparseLoomPolicy().plan(tasks, profile, names, slos)


PLUGIN = SimpleNamespace(sparseloom_register_policies=hookimpl(
    lambda register: register("protocol-only", ProtocolPolicy)))


def test_a_policy_is_given_the_profiles_processors_as_records(register_plugin) -> None:
    register_plugin(PLUGIN, "protocol-only-policy")
    table = random_table(tasks=2, variants=3, positions=2, processors=2)
    ProtocolPolicy.seen.clear()
    result = make_plan(table, policy="protocol-only")
    (given,) = ProtocolPolicy.seen
    assert [p.name for p in given] == ["p0", "p1"]
    assert all(isinstance(p, Processor) for p in given)
    assert set(result.plan.variants) == {"t0", "t1"}
    make_plan(table, policy="protocol-only", processors=["p1", "p0"])
    assert [p.name for p in ProtocolPolicy.seen[-1]] == ["p1", "p0"]


class WanderingPolicy(ProtocolPolicy):
    """Test double: plans like ``sparseloom``, then moves every task onto an unprofiled NPU."""

    def plan(self, tasks: Sequence[str], profile: Any, processors: Sequence[Processor],
             slos: Mapping[str, SLO]) -> Plan:
        import attrs

        plan = super().plan(tasks, profile, processors, slos)
        return attrs.evolve(plan, order=("p0", "soc:NPU"),
                            assignment={t: ("p0", "soc:NPU") for t in plan.variants})


def test_a_plan_on_an_unprofiled_processor_names_the_policy(register_plugin) -> None:
    import pytest

    from sparseloom.core.errors import PlanError

    register_plugin(SimpleNamespace(sparseloom_register_policies=hookimpl(
        lambda register: register("wandering", WanderingPolicy))), "wandering-policy")
    with pytest.raises(PlanError, match=r"policy 'wandering' placed task 't0' on 'soc:NPU'.*"
                                        r"holds p0, p1"):
        make_plan(random_table(tasks=1, variants=3, positions=2, processors=2),
                  policy="wandering")
