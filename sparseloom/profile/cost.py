"""Profiling cost: SparseLoom's estimator path against exhaustive profiling (paper Fig. 12).

Exhaustive profiling measures every stitched variant: V**S exact accuracy runs (S subgraph
passes over the eval set each, no prefix sharing) and V**S × |orders| end-to-end latency
measurements. The estimator path measures T·S·V·P subgraph latencies, the hand-offs, S·V
fidelity passes and N exact accuracy samples, then trains and predicts.

Every figure here comes from unit costs *measured in this run*: seconds per subgraph pass over
the eval set, per subgraph deployment (compile + load), per subgraph profile, per chain
timing. Extrapolation changes only V (and, for ``paper_setting``, S = P = 3 as in the paper's
CPU + GPU + NPU testbeds, with this machine's unit costs). ``exhaustive_seconds_measured``
is given when every stitched variant × order was really timed; its deployments are the
measured per-subgraph compile + load times (the chains shared loaded subgraphs).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Any

from sparseloom.profile.features import default_sample_count

#: Timed phases of the estimator path, as recorded in ``table.meta["timings"][task]``.
PHASES: tuple[str, ...] = ("fidelity", "latency", "accuracy_samples", "fit_predict")


def placement_orders(n_processors: int, n_positions: int) -> list[tuple[int, ...]]:
    """The processor orders profiled exhaustively: permutations (the paper's P! when S = P).

    With more positions than processors every assignment (P**S) is an order.
    """
    if n_positions <= n_processors:
        return list(itertools.permutations(range(n_processors), n_positions))
    return list(itertools.product(range(n_processors), repeat=n_positions))


def random_chains(n_variants: int, n_positions: int, n_processors: int, count: int,
                  seed: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """``count`` distinct random (stitched choices, processor order) pairs over every stitched
    variant and :func:`placement_orders` order; all of them if there are fewer."""
    import numpy as np

    orders = placement_orders(n_processors, n_positions)
    everything = n_variants**n_positions * len(orders)
    rng = np.random.default_rng(seed)
    picks = (np.arange(everything) if count >= everything
             else rng.choice(everything, size=count, replace=False))
    shape = (n_variants,) * n_positions
    return [(tuple(int(c) for c in np.unravel_index(int(pick) // len(orders), shape)),
             orders[int(pick) % len(orders)]) for pick in picks]


def _orders_count(n_processors: int, n_positions: int) -> int:
    if n_positions <= n_processors:
        return math.perm(n_processors, n_positions)
    return n_processors**n_positions


def estimator_seconds(timings: Mapping[str, float]) -> float:
    """Measured wall time of the estimator path for one task."""
    return float(sum(float(timings.get(phase, 0.0)) for phase in PHASES))


def task_cost(
    timings: Mapping[str, float],
    *,
    n_positions: int,
    n_variants: int,
    n_processors: int,
    n_samples: int,
    deploy_seconds: float,
    chain_seconds: float,
    chains_measured: int,
    truth_seconds: float | None,
    truth_complete: bool,
    target_variants: int = 10,
) -> dict[str, Any]:
    """Cost figures of one task: measured, exhaustive (measured/estimated), and at V = 10.

    :param deploy_seconds: median compile + load time of one subgraph (from the profile);
        exhaustive profiling deploys each stitched variant under each order on its own.
    :param chain_seconds: wall time spent timing ``chains_measured`` chains (validation).
    :param truth_seconds: wall time of the exact evaluation of all V**S variants, if run.
    :param truth_complete: whether every stitched variant × order was measured.
    """
    s, v, p = n_positions, n_variants, n_processors
    pass_seconds = float(timings.get("seconds_per_pass", 0.0))
    chain_unit = chain_seconds / chains_measured if chains_measured else 0.0
    subgraph_unit = float(timings.get("latency", 0.0)) / max(1, s * v * p)
    fidelity_unit = float(timings.get("fidelity", 0.0)) / max(1, s * v)
    fixed = float(timings.get("fit_predict", 0.0))

    def exhaustive(variants: int, positions: int = s, processors: int = p) -> float:
        orders = _orders_count(processors, positions)
        return variants**positions * (positions * pass_seconds + orders * (
            positions * deploy_seconds + chain_unit))

    def with_estimators(variants: int, positions: int = s, processors: int = p) -> float:
        if (variants, positions, processors) == (v, s, p):
            return estimator_seconds(timings)  # measured, not extrapolated
        samples = (n_samples if (variants, positions) == (v, s)
                   else default_sample_count(variants, positions))
        return (fidelity_unit * positions * variants
                + subgraph_unit * positions * variants * processors
                + samples * positions * pass_seconds + fixed)

    def point(variants: int, positions: int = s, processors: int = p) -> dict[str, Any]:
        estimate, full = (with_estimators(variants, positions, processors),
                          exhaustive(variants, positions, processors))
        return {"variants": variants, "positions": positions, "processors": processors,
                "seconds_estimate": estimate, "exhaustive_seconds_estimate": full,
                "reduction": 1.0 - estimate / full if full > 0 else None}

    measured = estimator_seconds(timings)
    return {
        "seconds": measured,
        "phases": {phase: float(timings.get(phase, 0.0)) for phase in PHASES},
        "exhaustive_seconds_estimate": exhaustive(v),
        "exhaustive_seconds_measured": (truth_seconds + chain_seconds + _orders_count(p, s)
                                        * v**s * s * deploy_seconds)
        if truth_complete and truth_seconds is not None else None,
        "reduction": 1.0 - measured / exhaustive(v) if exhaustive(v) > 0 else None,
        "orders": _orders_count(p, s),
        "stitched_variants": v**s,
        "units": {"seconds_per_subgraph_pass": pass_seconds,
                  "seconds_per_chain_timing": chain_unit,
                  "seconds_per_subgraph_deploy": deploy_seconds,
                  "seconds_per_subgraph_profile": subgraph_unit},
        "by_variants": [point(count) for count in sorted({2, 4, 6, 8, v, target_variants})],
        f"v{target_variants}": point(target_variants),
        "paper_setting": point(target_variants, 3, 3),
    }


def overall_cost(per_task: Mapping[str, Mapping[str, Any]], target_variants: int = 10
                 ) -> dict[str, Any]:
    """Sums over tasks (profiling runs task after task)."""
    def total(key: str, source: str | None = None) -> float | None:
        values = [(t[source] if source else t).get(key) for t in per_task.values()]
        known = [float(value) for value in values if value is not None]
        return float(sum(known)) if len(known) == len(values) else None

    def summed(source: str) -> dict[str, Any]:
        estimate = total("seconds_estimate", source)
        exhaustive = total("exhaustive_seconds_estimate", source)
        return {"seconds_estimate": estimate, "exhaustive_seconds_estimate": exhaustive,
                "reduction": 1.0 - estimate / exhaustive
                if estimate is not None and exhaustive else None}

    seconds, exhaustive = total("seconds"), total("exhaustive_seconds_estimate")
    measured = total("exhaustive_seconds_measured")
    return {
        "seconds": seconds,
        "exhaustive_seconds_estimate": exhaustive,
        "exhaustive_seconds_measured": measured,
        "reduction": 1.0 - seconds / exhaustive if seconds is not None and exhaustive else None,
        "reduction_measured": 1.0 - seconds / measured
        if seconds is not None and measured else None,
        f"v{target_variants}": summed(f"v{target_variants}"),
        "paper_setting": summed("paper_setting"),
    }
