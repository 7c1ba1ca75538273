"""The floor under every corrected chain latency (``scale · additive + offset``).

The chain model's line (:mod:`sparseloom.profile.chain_fit`) is fitted on ten chains timed
with the subgraphs. On sub-millisecond models their noise can give it an offset larger than the
fastest chain (−1.33 ms was seen on `tiny`), and the line then extrapolates below zero: a
negative latency reached the SLO grid and every policy. A corrected latency never falls below
:data:`CHAIN_FLOOR_RATIO` of its additive sum nor below :data:`CHAIN_FLOOR_MS`.
"""

from __future__ import annotations

import numpy as np

#: A corrected chain latency never falls below this share of its additive sum.
CHAIN_FLOOR_RATIO = 0.5
#: Nor below one microsecond, whatever the sum (hand-offs are measured differences and may be
#: negative).
CHAIN_FLOOR_MS = 1e-3


def chain_latency(additive_ms: np.ndarray, scale: float, offset: float) -> np.ndarray:
    """``scale · additive_ms + offset``, floored at :data:`CHAIN_FLOOR_RATIO` of the additive
    sum and at :data:`CHAIN_FLOOR_MS`. The floor is a maximum of non-decreasing functions of
    the sum (the scale is positive), so a faster additive sum is never estimated slower."""
    additive = np.asarray(additive_ms, dtype=np.float64)
    return np.maximum(np.maximum(scale * additive + offset, CHAIN_FLOOR_RATIO * additive),
                      CHAIN_FLOOR_MS)
