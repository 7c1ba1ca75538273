"""``fastest-dense``: every task's dense model, on the processor order fastest for them all."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from sparseloom.core.types import SLO, Plan, Processor, StitchedVariant

if TYPE_CHECKING:
    from sparseloom.profile.table import ProfileTable


class FastestDensePolicy:
    """A baseline policy: never compresses; picks the order with the least summed latency.

    A plan names one profiled processor per subgraph position (``order``, length S; a
    processor may take several positions) and, per task, a stitched variant with one choice
    per position. Variant 0 of every zoo is the dense one.
    """

    name = "fastest-dense"

    def plan(self, tasks: Sequence[str], profile: ProfileTable,
             processors: Sequence[Processor], slos: Mapping[str, SLO]) -> Plan:
        """The all-dense plan on the order with the least total estimated latency.

        :param processors: the processors to plan on; empty means every profiled one.
        """
        usable = [p.name for p in processors if p.name in profile.processors] \
            or list(profile.processors)
        positions = profile.task(tasks[0]).n_positions  # S is the same for every task
        dense = (0,) * positions

        def total_ms(order: tuple[str, ...]) -> float:
            return sum(profile.latency(t, dense, order) for t in tasks)

        order = min(itertools.product(usable, repeat=positions), key=total_ms)
        latency = {t: profile.latency(t, dense, order) for t in tasks}
        accuracy = {t: profile.accuracy(t, dense) for t in tasks}
        feasible = {t: t not in slos or (latency[t] <= slos[t].latency_ms
                                         and accuracy[t] >= slos[t].accuracy) for t in tasks}
        return Plan(
            policy=self.name, order=order,
            variants={t: StitchedVariant(t, dense) for t in tasks},
            estimated_latency_ms=latency, estimated_accuracy=accuracy, feasible=feasible,
            infeasible_reason={t: "the dense variant misses the SLO" for t in tasks
                               if not feasible[t]},
            slos=dict(slos))

    def on_feedback(self, observations: object) -> Plan | None:
        """Never re-plans: the dense plan does not depend on what the runtime sees."""
        return None
