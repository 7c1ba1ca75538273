"""Processor orders Ω and the lowest latency of a set of stitched variants under each order.

An order assigns each of the S subgraph positions to a processor. The paper's Ω (SparseLoom
§3.3, :func:`paper_orders`) uses each processor once — the permutations when S = P (G–C–N,
G–C) — so every task's chain spreads over the processors; when S ≠ P it is the orders that
spread the positions as evenly as S allows (no processor holds more than ⌈S/P⌉ positions, and
with S ≥ P every processor holds one). :func:`all_orders` is every assignment (P**S orders,
repeats allowed: a chain may stay on one processor), which only the policies named for it use.

:func:`best_per_order` answers Algorithm 1's inner question — for every order, which member of
a candidate set is fastest — exactly and with numpy, without materialising the V**S × |Ω|
latency matrix. The latency estimate is additive over positions, so split the positions into a
prefix (the first h) and a suffix: ``latency(a·b, p) = pre[a, p_pre] + suf[b, p_suf]``. For a
fixed prefix order, sort the prefixes by ``pre``; the best prefix compatible with each suffix
``b`` is the first candidate in that sorted order (one ``argmax`` over the candidate mask).
Then the best of each full order is a min over suffixes of ``m[b] + suf[b, p_suf]``. The cost
is about ``P**h · V**S + P**S · V**(S-h)`` instead of ``P**S · V**S``; h is chosen to make it
least.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from sparseloom.profile.table import TaskProfile


def all_orders(n_positions: int, processors: Sequence[int] | np.ndarray) -> np.ndarray:
    """Ω: every assignment of ``n_positions`` positions to ``processors`` (indices), (|Ω|, S).

    Rows are in lexicographic order of the processor indices given.
    """
    if n_positions < 1 or len(processors) == 0:
        raise ValueError("need at least one position and one processor to build orders")
    product = itertools.product([int(p) for p in processors], repeat=n_positions)
    return np.array(list(product), dtype=np.int64).reshape(-1, n_positions)


def paper_orders(n_positions: int, processors: Sequence[int]) -> np.ndarray:
    """The paper's Ω: assignments that spread the positions over the processors, (|Ω|, S).

    Each processor holds at most ⌈S/P⌉ positions, and when S ≥ P each holds at least one: the
    permutations when S = P, injective orders when S < P. Rows are in lexicographic order.
    """
    every = all_orders(n_positions, processors)
    count = len(processors)
    most = -(-n_positions // count)
    held = np.stack([(every == int(p)).sum(axis=1) for p in processors], axis=1)
    keep = (held <= most).all(axis=1)
    if n_positions >= count:
        keep &= (held >= 1).all(axis=1)
    return every[keep]


def handoff_per_order(profile: TaskProfile, orders: np.ndarray) -> np.ndarray:
    """The summed hand-off cost (ms) of every order, (|Ω|,); the same for every variant."""
    if profile.n_positions < 2:
        return np.zeros(len(orders))
    boundaries = np.arange(profile.n_positions - 1)
    return profile.handoff_ms[boundaries, orders[:, :-1], orders[:, 1:]].sum(axis=1)


def latency_matrix(profile: TaskProfile, rows: np.ndarray, orders: np.ndarray,
                   *, include_handoff: bool = True) -> np.ndarray:
    """Estimated latency (ms) of stitched variant ``rows`` under ``orders``, (len(rows), |Ω|)."""
    choices = profile.choices(rows)
    total = np.zeros((len(rows), len(orders)))
    for position in range(profile.n_positions):
        stage = profile.latency_ms[position][choices[:, position]]  # (n, P)
        total += stage[:, orders[:, position]]
    if include_handoff:
        total += handoff_per_order(profile, orders)
        return profile.apply_chain_fit(total)
    return total


def _split(n_positions: int, n_variants: int, n_processors: int) -> int:
    """The prefix length h with the least work (see the module doc)."""
    def cost(h: int) -> float:
        return (n_processors**h * n_variants**n_positions
                + n_processors**n_positions * n_variants ** (n_positions - h))
    return min(range(n_positions + 1), key=cost)


def _part(profile: TaskProfile, positions: range, processors: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray]:
    """Latency (ms) of every choice of ``positions`` under every sub-order: (V**k, P**k)."""
    sub_orders = all_orders(len(positions), processors) if len(positions) else \
        np.zeros((1, 0), dtype=np.int64)
    total: np.ndarray = np.zeros((1, len(sub_orders)))
    for k, position in enumerate(positions):
        stage = profile.latency_ms[position][:, sub_orders[:, k]]  # (V, n_sub)
        total = (total[:, None, :] + stage[None, :, :]).reshape(-1, len(sub_orders))
    return total, sub_orders


def best_per_order(
    profile: TaskProfile, rows: np.ndarray, orders: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For every order, the lowest estimated latency among stitched variant ``rows``.

    Returns ``(latency_ms, row)``, both (|Ω|,): the latency (``inf`` when ``rows`` is empty)
    and the stitched-variant row achieving it (``-1`` when empty).
    """
    rows = np.asarray(rows, dtype=np.int64)
    orders = np.asarray(orders, dtype=np.int64).reshape(len(orders), -1)
    if rows.size == 0:
        return np.full(len(orders), np.inf), np.full(len(orders), -1, dtype=np.int64)
    s, v = profile.n_positions, profile.n_variants
    processors = np.unique(orders)
    h = _split(s, v, len(processors))
    prefix, _ = _part(profile, range(h), processors)  # (V**h, P**h)
    suffix, _ = _part(profile, range(h, s), processors)  # (V**(S-h), P**(S-h))
    flat_mask = np.zeros(profile.n_stitched, dtype=bool)
    flat_mask[rows] = True
    mask = flat_mask.reshape(v**h, v ** (s - h))
    best = np.empty((prefix.shape[1], suffix.shape[1]))
    best_row = np.empty(best.shape, dtype=np.int64)
    columns = np.arange(suffix.shape[1])
    for a_order in range(prefix.shape[1]):
        ranked = np.argsort(prefix[:, a_order], kind="stable")
        allowed = mask[ranked]
        first = allowed.argmax(axis=0)  # per suffix: the fastest compatible prefix's rank
        head = ranked[first]
        reach = np.where(allowed.any(axis=0), prefix[head, a_order], np.inf)
        total = reach[:, None] + suffix  # (V**(S-h), P**(S-h))
        winner = total.argmin(axis=0)
        best[a_order] = total[winner, columns]
        best_row[a_order] = head[winner] * v ** (s - h) + winner
    index = np.searchsorted(processors, orders)
    flat = np.ravel_multi_index(tuple(index.T), (len(processors),) * s) if s else \
        np.zeros(len(orders), dtype=np.int64)
    latency, picked = best.reshape(-1)[flat], best_row.reshape(-1)[flat]
    picked = np.where(np.isfinite(latency), picked, -1)
    return profile.apply_chain_fit(latency + handoff_per_order(profile, orders)), picked
