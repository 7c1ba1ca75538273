"""Algorithm 1 with the processor order forced: Fig. 13's contender, in real runs too.

:class:`FixedOrderPolicy` is SparseLoom's policy (variants chosen by Algorithm 1, feedback and
re-plans as usual) whose order set Ω holds a single order, given by processor names per
position. The runtime builds policies only from the registry (``RunConfig.policy`` is a
name), so :func:`forced_order` registers it for the duration of a ``with`` block under
``sparseloom-fixed-order``, bound to one order, through the same plugin path as any
third-party policy, and unregisters it afterwards::

    with forced_order(("ov:CPU", "ort:CPU", "ov:CPU")) as name:
        serve(workload, profile, RunConfig(policy=name))
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from functools import partial

import attrs
import numpy as np

from sparseloom.core.errors import PlanError
from sparseloom.core.hookspecs import RegisterFn, hookimpl
from sparseloom.core.registry import get_registry
from sparseloom.core.types import SLO, Plan, as_tuple
from sparseloom.plan.feasible import build_plan
from sparseloom.plan.policy import ProfilePolicy
from sparseloom.profile.table import ProfileTable

#: The registered name of the forced-order policy while :func:`forced_order` is active.
FIXED_ORDER_POLICY = "sparseloom-fixed-order"


@attrs.define(eq=False)
class FixedOrderPolicy(ProfilePolicy):
    """Algorithm 1 over Ω = {``order``}: the order is given, the variants are chosen.

    Attributes:
        order: a processor name per subgraph position, e.g. ``("ov:CPU", "ort:CPU")``.
    """

    order: tuple[str, ...] = attrs.field(default=(), converter=as_tuple, kw_only=True)

    def __attrs_post_init__(self) -> None:
        self.name = FIXED_ORDER_POLICY

    def decide(self, table: ProfileTable, slos: Mapping[str, SLO]) -> Plan:
        """Each task's fastest feasible variant under the forced order.

        :raises PlanError: the order names a processor the table does not hold (not profiled,
            or marked down) or has the wrong number of positions.
        """
        missing = [name for name in self.order if name not in table.processors]
        if missing:
            raise PlanError(f"forced order {'-'.join(self.order)} names "
                            f"{', '.join(sorted(set(missing)))}, not among the usable "
                            f"processors {', '.join(table.processors)}")
        # The built-in policy plugin's Algorithm 1, imported when used (evaluation builds on
        # the plan stage, not on plugins).
        from sparseloom.plugins.policies.sparseloom import algorithm1

        indices = np.array([[table.processors.index(name) for name in self.order]])
        order, choices = algorithm1(table, slos, indices)
        return build_plan(self.name, table, choices, order, slos, 0.0)


@attrs.define(eq=False)
class _ForcedOrderPlugin:
    order: tuple[str, ...]

    @hookimpl
    def sparseloom_register_policies(self, register: RegisterFn) -> None:
        register(FIXED_ORDER_POLICY, partial(FixedOrderPolicy, order=self.order),
                 capabilities=("stitched", "partitioned"),
                 description=f"Algorithm 1 with the order forced to {'-'.join(self.order)}")


@contextlib.contextmanager
def forced_order(order: Sequence[str]) -> Iterator[str]:
    """Register ``sparseloom-fixed-order`` bound to ``order`` for the block; yields its name.

    :raises PlanError: the name is already registered (a forced order is active elsewhere).
    """
    registry = get_registry()
    if any(r.name == FIXED_ORDER_POLICY for r in registry.policies()):
        raise PlanError(f"policy {FIXED_ORDER_POLICY!r} is already registered; forced orders "
                        f"cannot nest")
    plugin_name = registry.register_plugin(_ForcedOrderPlugin(tuple(order)),
                                           name=f"evaluation-{FIXED_ORDER_POLICY}")
    if plugin_name is None:
        raise PlanError(f"could not register {FIXED_ORDER_POLICY!r}: "
                        f"{registry.failures[-1].error if registry.failures else 'unknown'}")
    try:
        yield FIXED_ORDER_POLICY
    finally:
        registry.unregister_plugin(plugin_name)
