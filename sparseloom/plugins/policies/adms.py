"""``adms``: ADMS-style dynamic dispatch — each ready subgraph goes to the processor that will
finish it first.

ADMS partitions a model with operator support in mind (``sparseloom zoo build --mode adms``)
and schedules its subgraphs by the processors' state at run time instead of a fixed order.

* **Plan.** Like the AV baselines it serves *original* variants only: per task, the fastest
  original that meets the SLO (else the closest), each position initially on the processor
  where the profile says it runs fastest.
* **Dispatch.** For a subgraph that becomes ready, the processor with the earliest expected
  finish: its queued work (the profiled stage times of what waits there) plus this subgraph's
  profiled latency there plus the hand-off from the processor that ran the previous stage.
  The runtime loads its subgraphs on every processor that is up, and counts that memory.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import numpy as np

from sparseloom.core.hookspecs import RegisterFn, hookimpl
from sparseloom.core.types import SLO, Plan
from sparseloom.plan.feasible import TaskChoice, build_plan
from sparseloom.plan.policy import ProfilePolicy
from sparseloom.plan.slo_grid import original_rows
from sparseloom.plugins.policies.baselines import _pick, _verdict
from sparseloom.profile.table import ProfileTable


@attrs.define(eq=False)
class AdmsPolicy(ProfilePolicy):
    """Fastest original in SLO, placed per position; dispatched at run time (see module doc)."""

    name: str = attrs.field(default="adms", init=False)

    def decide(self, table: ProfileTable, slos: Mapping[str, SLO]) -> Plan:
        """Per task: its originals with every position on its fastest processor."""
        choices = {}
        first_order: tuple[int, ...] = ()
        for name, profile in table.tasks.items():
            rows = original_rows(profile)
            picks = profile.choices(rows)  # (V, S)
            positions = np.arange(profile.n_positions)
            # (V, S): each original's fastest processor per position.
            best = profile.latency_ms[positions[None, :], picks].argmin(axis=-1)
            latency = profile.latency(picks, best)
            index, how = _pick(profile, "av", slos[name], latency)
            ok, reason = _verdict(profile, slos[name], rows[index], latency[index], how)
            choices[name] = TaskChoice(name, rows[index], best[index], latency[index], ok, reason)
            first_order = first_order or tuple(int(p) for p in best[index])
        return build_plan(self.name, table, choices, first_order, slos, 0.0)

    def dispatch(self, task: str, position: int, variant: int, queued_ms: Mapping[str, float],
                 previous: str | None) -> str:
        """The candidate processor with the earliest expected finish for this subgraph."""
        table = self._table
        if table is None or task not in table.tasks:
            return min(queued_ms, key=queued_ms.__getitem__)
        profile = table.task(task)
        names = list(table.processors)

        def finish(processor: str) -> float:
            if processor not in names:
                return float("inf")
            index = names.index(processor)
            expected = queued_ms[processor] + float(profile.latency_ms[position, variant, index])
            if previous in names and position > 0:
                handoff = profile.handoff_ms[position - 1, names.index(previous), index]
                expected += max(float(handoff), 0.0)
            return expected

        return min(queued_ms, key=finish)


@hookimpl
def sparseloom_register_policies(register: RegisterFn) -> None:
    """Register ``adms``."""
    register("adms", AdmsPolicy, capabilities=("original", "partitioned", "dispatch"),
             description="ADMS: originals per position, each subgraph dispatched at run time "
                         "to the processor with the earliest expected finish")
