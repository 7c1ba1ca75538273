"""``sparseloom-contention``: order and variants chosen against a contention model.

Where Algorithm 1 minimises the mean *isolated* latency, this policy plans for the tasks
running together (:mod:`sparseloom.plan.contention`: closed FCFS network, approximate MVA).
A plan is ranked by the key ``(tasks whose loaded latency misses the SLO, summed relative
overrun, bottleneck_ms, mean loaded latency)``, smaller first.

1. **Warm start.** Algorithm 1 (:func:`score_orders`) gives, for every order p ∈ Ω, each
   task's fastest accuracy-feasible variant; all |Ω| such plans are solved in one batched
   model call and ranked. The best :data:`REFINED_ORDERS` and Algorithm 1's own p* go on.
2. **Pruning.** Under a fixed order the hand-offs are the same for every variant, so a task's
   variant enters the model only through its service time per visit. A variant no better in
   every visit than another accuracy-feasible one is dropped: each task keeps its Pareto
   front (at most :data:`POOL` members, least total work first).
3. **Search.** If the pools' product is at most :data:`EXHAUSTIVE`, every combination is
   solved in one batch (exact over the pools). Otherwise steepest descent: every single-task
   change is solved in one batch and the best is taken while it improves the key.
4. **Time budget** (``budget_s``, from the start of the decision): when spent, the remaining
   orders are skipped and a running descent stops; the plan is the best found so far — never
   worse under the model than Algorithm 1's variants under the best-ranked order of step 1.

The pruning is exact for the bottleneck and for a task's own latency; the closed loop makes
the others' latency not quite monotone in a task's demand (a slower task is present less
often elsewhere), so on rare tables the pruned optimum is a hair above the brute-force one
(tests/plugins/policies/test_contention.py measures it). Reported latencies are the model's
*loaded* latencies; feasibility means the loaded latency meets the SLO.

Options: ``think_ms`` — the pause between a task's requests (0: back-to-back closed loop);
``budget_s`` — the time budget above (default 0.4 s).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import attrs
import numpy as np

from sparseloom.core.types import SLO, Plan
from sparseloom.plan.contention import loaded_latency, pareto_rows
from sparseloom.plan.feasible import TaskChoice, build_plan, infeasible_reason
from sparseloom.plan.orders import handoff_per_order
from sparseloom.plan.policy import ProfilePolicy
from sparseloom.plugins.policies.sparseloom import OrderScores, score_orders
from sparseloom.profile.table import ProfileTable, TaskProfile

#: Orders refined after the warm start (besides Algorithm 1's p*).
REFINED_ORDERS = 4
#: Pareto-front members kept per task and order.
POOL = 24
#: Joint plans at most for which an order's pools are searched exhaustively.
EXHAUSTIVE = 4096


@attrs.frozen
class _Pools:
    """One order's candidates: per task, pool rows and per-processor demand (m_t, P)."""

    order: np.ndarray
    rows: list[np.ndarray]
    demand: list[np.ndarray]
    delay: np.ndarray
    visits: np.ndarray


@attrs.frozen
class _Candidates:
    """A task's variants that may be chosen: rows and their choices (n, S)."""

    rows: np.ndarray
    choices: np.ndarray

    @classmethod
    def of(cls, profile: TaskProfile, slo: SLO) -> _Candidates:
        """The rows meeting the accuracy SLO; if none, the most accurate few (best first)."""
        rows = np.flatnonzero(profile.accuracy() >= slo.accuracy)
        if rows.size == 0:
            rows = np.argsort(-profile.accuracy(), kind="stable")[:POOL]
        return cls(rows, profile.choices(rows))


@attrs.define(eq=False)
class ContentionPolicy(ProfilePolicy):
    """Jointly choose the global order and the variants for the *loaded* latency."""

    name: str = attrs.field(default="sparseloom-contention", init=False)
    think_ms: float = attrs.field(default=0.0, converter=float,
                                  validator=attrs.validators.ge(0.0))
    budget_s: float = attrs.field(default=0.4, converter=float,
                                  validator=attrs.validators.gt(0.0))

    def decide(self, table: ProfileTable, slos: Mapping[str, SLO]) -> Plan:
        """Warm-start from Algorithm 1, prune, search the best orders; see the module doc."""
        deadline = time.perf_counter() + self.budget_s
        names = list(table.tasks)
        scores = score_orders(table, slos)
        limit = np.array([slos[n].latency_ms for n in names])
        candidates = [_Candidates.of(table.task(n), slos[n]) for n in names]
        start = np.where(scores.best_row >= 0, scores.best_row,
                         np.array([c.rows[0] for c in candidates])[:, None]).T  # (|Ω|, T)
        keys = self._warm_keys(table, scores, start, limit)
        ranked = list(np.lexsort(keys.T[::-1])[:REFINED_ORDERS])
        if scores.chosen not in ranked:
            ranked.append(scores.chosen)
        best_o = ranked[0]
        best_rows, best_key = start[best_o], tuple(keys[best_o].tolist())
        for o in ranked:
            if time.perf_counter() > deadline:
                break
            pools = self._pools(table, scores.orders[o], candidates, start[o])
            rows, key = self._search(pools, limit, deadline)
            if key < best_key:
                best_o, best_rows, best_key = o, rows, key
        order = scores.orders[best_o]
        figures = self._solve(table, order, best_rows)
        return self._plan(table, slos, scores, order, best_rows, figures.latency_ms, limit)

    # -- the model on batches of plans ------------------------------------------------------

    def _keys(self, demand: np.ndarray, delay: np.ndarray, visits: np.ndarray,
              limit: np.ndarray) -> np.ndarray:
        """Ranking keys (n, 4) of plans with demand (n, T, P), delay (n, T), visits."""
        figures = loaded_latency(demand, delay, self.think_ms, visits)
        over = np.maximum(0.0, figures.latency_ms - limit) / limit
        return np.stack([(over > 0).sum(axis=-1), over.sum(axis=-1), figures.bottleneck_ms,
                         figures.latency_ms.mean(axis=-1)], axis=-1)

    def _warm_keys(self, table: ProfileTable, scores: OrderScores, start: np.ndarray,
                   limit: np.ndarray) -> np.ndarray:
        """Keys of every order of Ω with Algorithm 1's variants under it, (|Ω|, 4)."""
        orders = scores.orders
        n, p = len(orders), len(table.processors)
        demand = np.zeros((n, len(table.tasks), p))
        delay = np.zeros((n, len(table.tasks)))
        every = np.arange(n)
        for t, profile in enumerate(table.tasks.values()):
            choices = profile.choices(start[:, t])
            for j in range(profile.n_positions):
                demand[every, t, orders[:, j]] += profile.latency_ms[j, choices[:, j], orders[:, j]]
            delay[:, t] = handoff_per_order(profile, orders)
        return self._keys(demand, delay, _visits(orders, p)[:, None, :], limit)

    def _solve(self, table: ProfileTable, order: np.ndarray, rows: np.ndarray):
        """The model's figures for one plan (rows (T,) under ``order``)."""
        p = len(table.processors)
        demand = np.zeros((len(table.tasks), p))
        delay = np.zeros(len(table.tasks))
        for t, profile in enumerate(table.tasks.values()):
            choice = profile.choices([rows[t]])[0]
            for j, q in enumerate(order):
                demand[t, q] += profile.latency_ms[j, choice[j], q]
            delay[t] = handoff_per_order(profile, order[None])[0]
        return loaded_latency(demand, delay, self.think_ms, _visits(order[None], p)[0])

    # -- candidates and search --------------------------------------------------------------

    def _pools(self, table: ProfileTable, order: np.ndarray, candidates: list[_Candidates],
               start: np.ndarray) -> _Pools:
        """Per task, the Pareto front of its accuracy-feasible variants under ``order``."""
        p = len(table.processors)
        first = np.flatnonzero(np.concatenate([[True], order[1:] != order[:-1]]))  # visits
        ends = np.append(first[1:], len(order))
        on = np.eye(p)[order]                                       # (S, P) position → processor
        rows, demand, delay = [], [], []
        for t, profile in enumerate(table.tasks.values()):
            member = candidates[t]
            stage = [profile.latency_ms[j, :, q][member.choices[:, j]]
                     for j, q in enumerate(order)]
            per_visit = np.stack([sum(stage[a:b]) for a, b in zip(first, ends, strict=True)],
                                 axis=1)                                      # (n, K)
            kept = pareto_rows(per_visit, POOL)
            own = int(np.flatnonzero(member.rows == start[t])[0])
            kept = np.concatenate([[own], kept[kept != own]])[:POOL]
            rows.append(member.rows[kept])
            demand.append(np.stack([s[kept] for s in stage], axis=1) @ on)
            delay.append(handoff_per_order(profile, order[None])[0])
        return _Pools(order, rows, demand, np.array(delay), _visits(order[None], p)[0])

    def _batch_keys(self, pools: _Pools, index: np.ndarray, limit: np.ndarray) -> np.ndarray:
        """Keys of the plans picking pool members ``index`` (n, T)."""
        demand = np.stack([d[index[:, t]] for t, d in enumerate(pools.demand)], axis=1)
        delay = np.broadcast_to(pools.delay, index.shape)
        return self._keys(demand, delay, pools.visits, limit)

    def _search(self, pools: _Pools, limit: np.ndarray, deadline: float
                ) -> tuple[np.ndarray, tuple]:
        """The best plan over ``pools``: exhaustive when small, else steepest descent."""
        sizes = [len(r) for r in pools.rows]
        if int(np.prod(sizes, dtype=float)) <= EXHAUSTIVE:
            index = np.stack(np.unravel_index(np.arange(int(np.prod(sizes))), sizes), axis=1)
            keys = self._batch_keys(pools, index, limit)
            best = int(np.lexsort(keys.T[::-1])[0])
            return self._rows(pools, index[best]), tuple(keys[best].tolist())
        current = np.zeros(len(sizes), dtype=np.int64)
        key = tuple(self._batch_keys(pools, current[None], limit)[0].tolist())
        task_of = np.repeat(np.arange(len(sizes)), sizes)
        member = np.concatenate([np.arange(m) for m in sizes])
        while time.perf_counter() < deadline:
            trial = np.repeat(current[None], len(member), axis=0)
            trial[np.arange(len(member)), task_of] = member
            keys = self._batch_keys(pools, trial, limit)
            best = int(np.lexsort(keys.T[::-1])[0])
            if not tuple(keys[best].tolist()) < key:
                break
            current, key = trial[best], tuple(keys[best].tolist())
        return self._rows(pools, current), key

    @staticmethod
    def _rows(pools: _Pools, index: np.ndarray) -> np.ndarray:
        return np.array([rows[i] for rows, i in zip(pools.rows, index, strict=True)])

    def _plan(self, table: ProfileTable, slos: Mapping[str, SLO], scores: OrderScores,
              order: np.ndarray, rows: np.ndarray, loaded_ms: np.ndarray,
              limit: np.ndarray) -> Plan:
        choices = {}
        for t, name in enumerate(table.tasks):
            latency = float(loaded_ms[t])
            feasible = bool(scores.accurate[t] > 0 and latency <= limit[t])
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


def _visits(orders: np.ndarray, n_processors: int) -> np.ndarray:
    """Visits per request to each processor for every order (n, S): runs of it, (n, P)."""
    starts = np.concatenate([np.ones((len(orders), 1), bool), orders[:, 1:] != orders[:, :-1]],
                            axis=1)
    visits = np.zeros((len(orders), n_processors))
    rows = np.repeat(np.arange(len(orders)), orders.shape[1])
    np.add.at(visits, (rows[starts.ravel()], orders.ravel()[starts.ravel()]), 1.0)
    return visits
