"""``sparseloom-contention``: order and variants chosen against a contention model.

Where Algorithm 1 minimises the mean *isolated* latency, this policy plans for the tasks
running together (:mod:`sparseloom.plan.contention`: closed-loop approximate MVA):

1. For every order p ∈ Ω, start from Algorithm 1's choice under p (each task's fastest
   variant meeting its accuracy SLO) and solve the contention model.
2. Rank orders by ``(tasks whose loaded latency misses the SLO, summed relative overrun,
   bottleneck_ms, mean loaded latency)`` and refine the best :data:`REFINED_ORDERS` by
   coordinate descent: task by task, try its candidates — the accuracy-feasible variants
   fastest in isolation and those putting least work on each processor — and keep the one
   that improves the ranking, until a round changes nothing.
3. The plan is the best refined order with its variants. Reported latencies are the model's
   *loaded* latencies; feasibility means the loaded latency meets the SLO.

Options: ``think_ms`` — the pause between a task's requests (0: back-to-back closed loop).
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import numpy as np

from sparseloom.core.types import SLO, Plan
from sparseloom.plan.contention import loaded_latency, stage_demands
from sparseloom.plan.feasible import TaskChoice, build_plan, infeasible_reason
from sparseloom.plan.orders import handoff_per_order, latency_matrix
from sparseloom.plan.policy import ProfilePolicy
from sparseloom.plugins.policies.sparseloom import score_orders
from sparseloom.profile.table import ProfileTable

#: Orders refined by coordinate descent (the rest keep Algorithm 1's variants).
REFINED_ORDERS = 4
#: Per task and criterion, how many candidate variants are tried in one descent step.
CANDIDATES = 12
#: Descent rounds at most (one round tries every task once).
MAX_ROUNDS = 3


@attrs.define(eq=False)
class ContentionPolicy(ProfilePolicy):
    """Jointly choose the global order and the variants for the *loaded* latency."""

    name: str = attrs.field(default="sparseloom-contention", init=False)
    think_ms: float = attrs.field(default=0.0, converter=float,
                                  validator=attrs.validators.ge(0.0))

    def decide(self, table: ProfileTable, slos: Mapping[str, SLO]) -> Plan:
        """Rank orders under contention, refine the best, return the winner's plan."""
        names = list(table.tasks)
        scores = score_orders(table, slos)
        limit = np.array([slos[n].latency_ms for n in names])
        most_accurate = np.array([int(np.argmax(table.task(n).accuracy())) for n in names])
        start = np.where(scores.best_row >= 0, scores.best_row, most_accurate[:, None]).T
        keys = [self._key(table, scores.orders[o], start[o], limit)[0]
                for o in range(len(scores.orders))]
        ranked = sorted(range(len(keys)), key=keys.__getitem__)[:REFINED_ORDERS]
        best = None
        for o in ranked:
            pools = self._pools(table, slos, scores.orders[o], start[o])
            rows, key = self._descend(table, scores.orders[o], pools, start[o], limit)
            if best is None or key[0] < best[2][0]:
                best = (o, rows, key)
        assert best is not None
        o, rows, (_, figures) = best
        order = scores.orders[o]
        choices = {}
        for t, name in enumerate(names):
            latency = float(figures.latency_ms[t])
            feasible = scores.accurate[t] > 0 and latency <= limit[t]
            reason = ""
            if not feasible:
                reason = (infeasible_reason(table.task(name), slos[name], int(scores.accurate[t]),
                                            float(scores.best_ms[t].min()),
                                            float(scores.fastest_ms[t].min()))
                          if scores.accurate[t] == 0 or scores.best_ms[t].min() > limit[t]
                          else f"loaded latency unreachable: {latency:.3f} ms > "
                               f"{limit[t]:.3f} ms with the other tasks sharing the processors")
            choices[name] = TaskChoice(name, rows[t], order, latency, feasible, reason)
        return build_plan(self.name, table, choices, order, slos, 0.0)

    def _pools(self, table: ProfileTable, slos: Mapping[str, SLO], order: np.ndarray,
               start: np.ndarray) -> list[np.ndarray]:
        """Per task, candidate rows under ``order``; the first is the starting choice."""
        pools = []
        for name, first in zip(table.tasks, start, strict=True):
            profile = table.task(name)
            accurate = np.flatnonzero(profile.accuracy() >= slos[name].accuracy)
            if accurate.size == 0:  # nothing meets accuracy: the most accurate ones
                accurate = np.argsort(-profile.accuracy(), kind="stable")[:CANDIDATES]
            isolated = latency_matrix(profile, accurate, order[None, :])[:, 0]
            demand = stage_demands(profile.latency_ms, profile.choices(accurate), order,
                                   len(table.processors))
            picks = [_smallest(isolated)] + [_smallest(demand[:, q]) for q in np.unique(order)]
            chosen = accurate[np.unique(np.concatenate(picks))]
            pools.append(np.concatenate([[first], chosen[chosen != first]]))
        return pools

    def _figures(self, table: ProfileTable, order: np.ndarray, rows: np.ndarray) -> tuple:
        demand, delay = [], []
        for t, profile in enumerate(table.tasks.values()):
            choices = profile.choices(rows[..., t].reshape(-1)).reshape(*rows.shape[:-1], -1)
            flat = choices.reshape(-1, profile.n_positions)
            demand.append(stage_demands(profile.latency_ms, flat, order, len(table.processors))
                          .reshape(*rows.shape[:-1], -1))
            delay.append(np.full(rows.shape[:-1], handoff_per_order(profile, order[None])[0]))
        return np.stack(demand, axis=-2), np.stack(delay, axis=-1)

    def _key(self, table: ProfileTable, order: np.ndarray, rows: np.ndarray,
             limit: np.ndarray) -> tuple:
        """Ranking keys of plans ``rows`` (..., T) under ``order``; also their figures."""
        demand, delay = self._figures(table, order, rows)
        figures = loaded_latency(demand, delay, self.think_ms)
        over = np.maximum(0.0, figures.latency_ms - limit) / limit
        misses = (over > 0).sum(axis=-1)
        keys = np.stack([misses, over.sum(axis=-1), figures.bottleneck_ms,
                         figures.latency_ms.mean(axis=-1)], axis=-1)
        if rows.ndim == 1:
            return tuple(keys.tolist()), figures
        return keys, figures

    def _descend(self, table: ProfileTable, order: np.ndarray, pools: list[np.ndarray],
                 rows: np.ndarray, limit: np.ndarray) -> tuple[np.ndarray, tuple]:
        rows = rows.copy()
        key = self._key(table, order, rows, limit)
        for _ in range(MAX_ROUNDS):
            moved = False
            for t, pool in enumerate(pools):
                trial = np.repeat(rows[None, :], len(pool), axis=0)
                trial[:, t] = pool
                keys, _ = self._key(table, order, trial, limit)
                winner = int(np.lexsort(keys.T[::-1])[0])
                if tuple(keys[winner].tolist()) < key[0]:
                    rows = trial[winner]
                    key = self._key(table, order, rows, limit)
                    moved = True
            if not moved:
                break
        return rows, key


def _smallest(values: np.ndarray) -> np.ndarray:
    """Indices of the :data:`CANDIDATES` smallest ``values`` (any order)."""
    if len(values) <= CANDIDATES:
        return np.arange(len(values))
    return np.argpartition(values, CANDIDATES)[:CANDIDATES]
