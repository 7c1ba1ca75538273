"""The six baselines of SparseLoom §5.1: {SV-AO, SV-LO, AV} × {partitioned, not partitioned}.

Baselines only ever run *original* variants (the same source variant at every position);
stitched variants are SparseLoom's own contribution.

* **Variant selection.** SV-AO: the most accurate original whatever the SLO. SV-LO: the
  fastest original whatever the SLO. AV: per SLO, the fastest original that meets it, else
  the one closest to it (the distance of :mod:`sparseloom.plan.feasible`).
* **P (partitioned).** Every task's chain runs over one fixed global order: among the orders
  that really partition — that use ``min(S, P)`` distinct processors, so the subgraphs of one
  variant run on different processors as the partitioning systems do — the one with the
  lowest mean latency of the tasks' *dense* models. It is the fair choice because it is what a
  partitioning system tuned for its unmodified models would pick, and it does not depend on
  the SLO, which these systems do not co-optimise with placement. (An order that keeps every
  position on one processor would make P the same as NP.)
* **NP (not partitioned).** Each task's whole variant runs on one processor. Tasks are placed
  greedily, longest first (by their fastest single-processor latency): each goes to the
  processor where ``load + its latency there`` is least — list scheduling by earliest
  finish, which spreads the tasks by profiled latency. AV-NP chooses variant and processor
  together: among the processors where some original meets the SLO, the least loaded after
  placing that processor's fastest such original.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import numpy as np

from sparseloom.core.types import SLO, Plan
from sparseloom.plan.feasible import TaskChoice, build_plan, distance_to_slo
from sparseloom.plan.gating import EXCLUDED
from sparseloom.plan.orders import all_orders, latency_matrix
from sparseloom.plan.policy import ProfilePolicy
from sparseloom.plan.slo_grid import original_rows
from sparseloom.plugins.policies.sparseloom import common_positions
from sparseloom.profile.table import ProfileTable, TaskProfile


def dense_variant(profile: TaskProfile) -> int:
    """The index of the dense (uncompressed) variant: kind ``dense``, else variant 0."""
    kinds = list(profile.variant_kinds)
    return kinds.index("dense") if "dense" in kinds else 0


def dense_order(table: ProfileTable) -> np.ndarray:
    """The fixed order of the P baselines: among the orders using ``min(S, P)`` distinct
    processors, the one with the least mean latency of the tasks' dense models."""
    orders = all_orders(common_positions(table), range(len(table.processors)))
    spread = min(orders.shape[1], len(table.processors))
    distinct = np.array([len(set(order.tolist())) for order in orders])
    orders = orders[distinct >= spread]
    mean = np.zeros(len(orders))
    for profile in table.tasks.values():
        row = original_rows(profile)[dense_variant(profile)]
        mean += latency_matrix(profile, np.array([row]), orders)[0]
    return orders[int(np.argmin(mean))]


def _verdict(profile: TaskProfile, slo: SLO, row: int, latency_ms: float, how: str
             ) -> tuple[bool, str]:
    accuracy = float(profile.accuracy()[row])
    misses = []
    if accuracy < slo.accuracy:
        misses.append(f"{profile.metric} {accuracy:.4f} < {slo.accuracy:.4f}")
    if latency_ms > slo.latency_ms:
        misses.append(f"{latency_ms:.3f} ms > {slo.latency_ms:.3f} ms")
    if not misses:
        return True, ""
    return False, f"{how} misses the SLO: {' and '.join(misses)}"


def _pick(profile: TaskProfile, mode: str, slo: SLO, latency: np.ndarray) -> tuple[int, str]:
    """Index of the chosen original given each original's latency; and how it was chosen.

    An original with infinite latency cannot run where it would be placed (a processor that
    computes it differently from the profile's accuracies, ``faithful_profile``): it is chosen
    only when no original can. Nor is one a gate took out of the table (its accuracy reads
    :data:`~sparseloom.plan.gating.EXCLUDED`) while another remains: the latency-optimal
    selection, which ignores accuracy, would otherwise choose it again and again."""
    accuracy = profile.accuracy()[original_rows(profile)]
    candidates = np.isfinite(latency) & (accuracy > EXCLUDED)
    if not candidates.any():
        candidates = np.isfinite(latency)
    if candidates.any():
        accuracy = np.where(candidates, accuracy, -np.inf)
        latency = np.where(candidates, latency, np.inf)
    names = profile.variant_names
    if mode == "ao":
        index = int(np.lexsort((latency, -accuracy))[0])
        return index, f"the most accurate original {names[index]}"
    if mode == "lo":
        index = int(np.lexsort((-accuracy, latency))[0])
        return index, f"the fastest original {names[index]}"
    distance = distance_to_slo(accuracy, latency, slo)
    index = int(np.lexsort((latency, distance))[0])
    closest = "the fastest original meeting it" if distance[index] == 0 else "no original meets it;"
    return index, f"{closest} {names[index]}"


@attrs.define(eq=False)
class BaselinePolicy(ProfilePolicy):
    """One of the six §5.1 baselines; ``selection`` in ao/lo/av, ``partitioned`` P or NP."""

    selection: str = attrs.field(default="av", validator=attrs.validators.in_(("ao", "lo", "av")))
    partitioned: bool = True

    def decide(self, table: ProfileTable, slos: Mapping[str, SLO]) -> Plan:
        """Choose originals and their processors as the module doc describes."""
        if self.partitioned:
            return self._partitioned(table, slos)
        return self._not_partitioned(table, slos)

    def _partitioned(self, table: ProfileTable, slos: Mapping[str, SLO]) -> Plan:
        order = dense_order(table)
        choices = {}
        for name, profile in table.tasks.items():
            rows = original_rows(profile)
            latency = latency_matrix(profile, rows, order[None, :])[:, 0]
            index, how = _pick(profile, self.selection, slos[name], latency)
            ok, reason = _verdict(profile, slos[name], rows[index], latency[index], how)
            choices[name] = TaskChoice(name, rows[index], order, latency[index], ok, reason)
        return build_plan(self.name, table, choices, order, slos, 0.0)

    def _not_partitioned(self, table: ProfileTable, slos: Mapping[str, SLO]) -> Plan:
        s = common_positions(table)
        processors = range(len(table.processors))
        singles = all_orders(1, processors).repeat(s, axis=1)  # (P, S): all on one processor
        load = np.zeros(len(table.processors))
        latency = {name: latency_matrix(profile, original_rows(profile), singles)  # (V, P)
                   for name, profile in table.tasks.items()}
        choices = {}
        for name in sorted(table.tasks, key=lambda n: -latency[n].min()):
            profile, slo, own = table.task(name), slos[name], latency[name]
            rows = original_rows(profile)
            if self.selection == "av":
                picks = [_pick(profile, "av", slo, own[:, q]) for q in processors]
                meets = np.array([_verdict(profile, slo, rows[i], own[i, q], "")[0]
                                  for q, (i, _) in enumerate(picks)])
            else:  # one variant whatever the processor
                picks = [_pick(profile, self.selection, slo, own.min(axis=1))] * len(load)
                meets = np.ones(len(load), dtype=bool)
            finish = np.array([load[q] + own[picks[q][0], q] for q in processors])
            finish = np.where(meets | ~meets.any(), finish, np.inf)
            q = int(np.argmin(finish))
            index, how = picks[q]
            load[q] += own[index, q]
            ok, reason = _verdict(profile, slo, rows[index], own[index, q], how)
            choices[name] = TaskChoice(name, rows[index], singles[q], own[index, q], ok, reason)
        ordered = {name: choices[name] for name in table.tasks}
        # An NP plan has no global order; ``order`` repeats the first task's processor and
        # ``Plan.processors_of`` gives each task's own.
        first = next(iter(ordered.values())).processors
        return build_plan(self.name, table, ordered, first, slos, 0.0)


@attrs.define(eq=False)
class SvAoP(BaselinePolicy):
    """SV-AO-P: the most accurate original, partitioned over the fixed dense order.

    Stands for single accuracy-optimal variant systems (Pipe-it, Wang et al. 2019; Pantheon,
    Han et al. 2024; RT-mDL, Ling et al. 2021) given partitioning as in Hetero2Pipe, Band and
    BlastNet.
    """

    name: str = attrs.field(default="sv-ao-p", init=False)
    selection: str = attrs.field(default="ao", init=False)
    partitioned: bool = attrs.field(default=True, init=False)


@attrs.define(eq=False)
class SvAoNp(BaselinePolicy):
    """SV-AO-NP: the most accurate original, whole on one processor.

    Stands for Pipe-it (Wang et al. 2019), Pantheon (Han et al. 2024) and RT-mDL (Ling et al.
    2021), which run each accuracy-optimal model as one unit.
    """

    name: str = attrs.field(default="sv-ao-np", init=False)
    selection: str = attrs.field(default="ao", init=False)
    partitioned: bool = attrs.field(default=False, init=False)


@attrs.define(eq=False)
class SvLoP(BaselinePolicy):
    """SV-LO-P: the fastest original, partitioned over the fixed dense order.

    Stands for latency-optimal single-variant systems that partition models: Hetero2Pipe
    (Shen et al. 2025), Band (Jeong et al. 2022) and OmniBoost (Karatzas and Anagnostopoulos
    2023).
    """

    name: str = attrs.field(default="sv-lo-p", init=False)
    selection: str = attrs.field(default="lo", init=False)
    partitioned: bool = attrs.field(default=True, init=False)


@attrs.define(eq=False)
class SvLoNp(BaselinePolicy):
    """SV-LO-NP: the fastest original, whole on one processor.

    Stands for Hetero2Pipe, Band and OmniBoost's latency-optimal variant choice without
    partitioning, as in the monolithic schedulers (Pipe-it, Pantheon, Han et al. 2022).
    """

    name: str = attrs.field(default="sv-lo-np", init=False)
    selection: str = attrs.field(default="lo", init=False)
    partitioned: bool = attrs.field(default=False, init=False)


@attrs.define(eq=False)
class AvP(BaselinePolicy):
    """AV-P: per SLO the fastest original meeting it, partitioned over the fixed dense order.

    Stands for adaptive-variant systems — Tango (Taufique et al. 2024), ESIM (Sen and Shen
    2024), NestDNN (Fang et al. 2018) — given partitioning as in Hetero2Pipe and Band.
    """

    name: str = attrs.field(default="av-p", init=False)
    selection: str = attrs.field(default="av", init=False)
    partitioned: bool = attrs.field(default=True, init=False)


@attrs.define(eq=False)
class AvNp(BaselinePolicy):
    """AV-NP: per SLO the fastest original meeting it, whole on one processor.

    Stands for Tango (Taufique et al. 2024), ESIM (Sen and Shen 2024) and NestDNN (Fang et
    al. 2018), which switch among whole model variants.
    """

    name: str = attrs.field(default="av-np", init=False)
    selection: str = attrs.field(default="av", init=False)
    partitioned: bool = attrs.field(default=False, init=False)


#: The six baselines by registered name.
BASELINES: dict[str, type[BaselinePolicy]] = {
    "sv-ao-p": SvAoP, "sv-ao-np": SvAoNp, "sv-lo-p": SvLoP, "sv-lo-np": SvLoNp,
    "av-p": AvP, "av-np": AvNp}
