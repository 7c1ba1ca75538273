"""The options ``sparseloom-loaded`` chooses among, per task: for each placement, the
stitched variants that meet the task's accuracy SLO, cut to the Pareto front of (work on each
processor, chain latency), and the dense model preferred where a variant is not estimated
clearly faster (:attr:`~sparseloom.plugins.policies.loaded.LoadedPolicy.min_gain`)."""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

from sparseloom.plan.lanes import Option
from sparseloom.plan.orders import handoff_per_order
from sparseloom.plugins.policies.baselines import dense_variant
from sparseloom.profile.table import ProfileTable, TaskProfile


def task_options(profile: TaskProfile, rows: np.ndarray, placements: Sequence[Sequence[int]],
                 n_processors: int, *, min_gain: float = 0.0) -> list[Option]:
    """The Pareto-minimal options of ``rows`` under ``placements`` (work per processor,
    chain).

    :param min_gain: where the dense model is among ``rows``, a compressed variant is an
        option under a placement only when its chain is estimated at least this share faster
        than the dense model's there (:attr:`LoadedPolicy.min_gain`).
    """
    choices = profile.choices(rows)
    dense = dense_row(profile) if min_gain > 0 else None
    options: list[Option] = []
    for placement in placements:
        order = np.asarray(placement, dtype=np.int64)
        stages = np.stack([profile.latency_ms[j][choices[:, j], order[j]]
                           for j in range(profile.n_positions)], axis=1)  # (n, S)
        chain = profile.apply_chain_fit(stages.sum(axis=1)
                                        + handoff_per_order(profile, order[None, :])[0])
        work = np.zeros((len(rows), n_processors))
        longest = np.zeros((len(rows), n_processors))
        run = np.zeros(len(rows))  # consecutive stages on one processor run in place
        for j, processor in enumerate(order):
            work[:, processor] += stages[:, j]
            run = stages[:, j] + (run if j and order[j - 1] == processor else 0.0)
            longest[:, processor] = np.maximum(longest[:, processor], run)
        keys = np.column_stack([work, chain])
        uses = np.isin(np.arange(n_processors), order)
        runnable = np.isfinite(chain)  # not through an unfaithful subgraph
        if dense is not None and dense in rows:
            dense_chain = chain[int(np.flatnonzero(rows == dense)[0])]
            if np.isfinite(dense_chain):  # a gain within the estimate's error is no gain
                runnable &= (rows == dense) | (chain <= dense_chain * (1.0 - min_gain))
        runnable = np.flatnonzero(runnable)
        for index in runnable[_pareto(keys[runnable])]:
            options.append(Option(int(rows[index]), tuple(int(p) for p in order), work[index],
                                  float(chain[index]), longest[index], uses,
                                  float(stages[index].max())))
    return options


def dense_row(profile: TaskProfile) -> int | None:
    """The row of the stitched variant that is the dense model at every position (``None``
    when the zoo has no ``dense`` variant)."""
    if "dense" not in profile.variant_kinds:
        return None
    return int(profile.index([dense_variant(profile)] * profile.n_positions))


def served_options(table: ProfileTable, task: str, accuracy_slo: float,
                   placements: Sequence[Sequence[int]], n_processors: int, *,
                   min_gain: float = 0.0) -> list[Option]:
    """The options of ``task`` whose whole chain sits on one processor that computes some of
    its subgraphs differently from the evaluation processor, where the variant's metric was
    measured *as served* there (``TaskProfile.served_accuracy``, :mod:`sparseloom.profile.
    served`) and meets ``accuracy_slo``. Latencies come from the table before the numerics
    mask (``table.unmasked``); each option carries its served accuracy."""
    profile = (table.unmasked or table).task(task)
    options: list[Option] = []
    for placement in placements:
        if len(set(placement)) != 1:
            continue  # a mixed chain's accuracy as served is never measured
        served = profile.served_accuracy[:, placement[0]]
        rows = np.flatnonzero(np.nan_to_num(served, nan=-np.inf) >= accuracy_slo)
        options += [attrs.evolve(option, served_accuracy=float(served[option.row]))
                    for option in task_options(profile, rows, [placement], n_processors,
                                               min_gain=min_gain)]
    return options


def _pareto(points: np.ndarray) -> list[int]:
    """Indices of the rows of ``points`` no other row is at most in every column and below in
    one (ties keep the first)."""
    order = np.lexsort(points.T[::-1])
    kept: list[int] = []
    for index in order:
        point = points[index]
        if not any(np.all(points[k] <= point) for k in kept):
            kept.append(int(index))
    return kept
