"""The chain latency model's correction, fitted on chains timed with the subgraphs.

The additive model (stage times plus hand-offs) misses what a chain adds beyond its stages:
cache effects and thread wake-ups that a dense hand-off pair does not capture. Measured on the
bundled tasks it underestimates every chain (``docs/results.md``). So the profiler times
:data:`FIT_CHAINS` random (stitched variant, order) chains per task in the *same* interleaved
rounds as the subgraphs (a few percent of the latency phase) and, when the chosen latency
estimator can be fitted (``additive-fitted``, the default), fits ``scale · additive + offset``
on them and stores it in the table (:attr:`~sparseloom.profile.table.TaskProfile.chain_fit`),
where every policy reads it. The same chains give a self-check of the additive model at no
extra cost (``meta["chain_check"]``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from sparseloom.core.registry import get_registry
from sparseloom.profile.chain_floor import chain_latency
from sparseloom.profile.metrics import mape

#: Chains timed per task during profiling (the fit's training set and the self-check).
FIT_CHAINS = 10
#: A fitted scale outside this range is taken for noise: the fit falls back to an offset.
SCALE_RANGE = (0.8, 1.25)


def fit_chains(jobs: Sequence[Any], n_processors: int,
               seed: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The :data:`FIT_CHAINS` chains timed with a task's subgraphs (its ``SubgraphJob``s) to
    fit the chain model, drawn apart from validation's (another seed)."""
    from sparseloom.profile.cost import random_chains

    positions = 1 + max(job.position for job in jobs)
    variants = 1 + max(job.variant for job in jobs)
    return random_chains(variants, positions, n_processors, FIT_CHAINS, seed + 1009)


def fit_chain_model(
    profile: Any, processors: Sequence[str], chains: Sequence[tuple[Sequence[int], Sequence[int]]],
    chain_ms: np.ndarray, estimator: str,
) -> tuple[np.ndarray, dict[str, Any]]:
    """The ``(scale, offset)`` for ``profile`` and the self-check of the chains.

    The correction stays ``(1, 0)`` when the estimator has no ``fit`` or fewer than its minimum
    of chains were measured; a least-squares scale outside :data:`SCALE_RANGE` falls back to
    the median offset (scale 1: one chain timed during a hiccup moves a mean, not a median).
    The check says which.
    """
    from sparseloom.profile.table import ProfileTable

    identity = np.array([1.0, 0.0])
    measured = np.asarray(chain_ms, dtype=np.float64)
    keep = np.isfinite(measured)
    check: dict[str, Any] = {"chains": int(keep.sum()), "estimator": estimator}
    if not keep.any():
        check["note"] = "no chain could be timed; the additive model is used as it is"
        return identity, check
    choices = np.asarray([c for c, _ in chains], dtype=np.int64)[keep]
    orders = np.asarray([o for _, o in chains], dtype=np.int64)[keep]
    additive = profile.latency(choices, orders, fitted=False)
    check["additive_mape"] = float(mape(measured[keep], additive))
    check["additive_bias_ms"] = float(np.mean(additive - measured[keep]))
    model = get_registry().create("estimator", estimator)
    if not hasattr(model, "fit"):
        return identity, check
    table = ProfileTable("chain-fit", list(processors), {profile.task: profile})
    try:
        model.fit(profile.task, choices, orders, measured[keep], table)
    except Exception as error:  # too few chains: the table keeps the plain model, and says why
        check["note"] = f"not fitted: {error}"
        return identity, check
    scale, offset = getattr(model, "coefficients", {}).get(profile.task, (1.0, 0.0))
    check["mode"] = "scale and offset"
    if not SCALE_RANGE[0] <= scale <= SCALE_RANGE[1]:
        # On ten chains whose latencies differ little, noise flattens the least-squares
        # slope (regression dilution: 0.4 seen on `tiny`), which would squeeze every latency
        # difference a policy compares; what is systematic there is an added cost per chain.
        check["mode"] = f"offset only (least-squares scale {scale:.3f} outside {SCALE_RANGE})"
        scale, offset = 1.0, float(np.median(measured[keep] - additive))
    fitted = np.array([float(scale), float(offset)])
    check["fitted_mape_in_sample"] = float(mape(measured[keep],
                                                chain_latency(additive, scale, offset)))
    check["scale"], check["offset_ms"] = float(scale), float(offset)
    return fitted, check
