"""How good an estimate is: top-K recall, Spearman's ρ, MAE and MAPE.

Pure numpy (scipy only for Spearman, imported inside the function), so the profiler, the
validation report and the tests share one definition of every figure.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from sparseloom.core.errors import ProfileError


def _pair(true: np.ndarray | Iterable[float], estimated: np.ndarray | Iterable[float]) -> tuple[
    np.ndarray, np.ndarray
]:
    true_array = np.asarray(true, dtype=np.float64).ravel()
    estimated_array = np.asarray(estimated, dtype=np.float64).ravel()
    if true_array.shape != estimated_array.shape:
        raise ProfileError(
            f"measured and estimated values differ in length ({true_array.size} vs "
            f"{estimated_array.size}); pass one estimate per measured value"
        )
    if true_array.size == 0:
        raise ProfileError("no values to compare; measure at least one stitched variant")
    return true_array, estimated_array


def top_k_indices(values: np.ndarray, k: int, tie_breaker: np.ndarray | None = None) -> np.ndarray:
    """Indices of the ``k`` largest ``values`` (ties broken by ``tie_breaker``, then index)."""
    values = np.asarray(values, dtype=np.float64).ravel()
    k = min(int(k), values.size)
    keys: list[np.ndarray] = [np.arange(values.size)]
    if tie_breaker is not None:
        keys.append(-np.asarray(tie_breaker, dtype=np.float64).ravel())
    keys.append(-values)
    return np.lexsort(keys)[:k]


def top_k_recall(
    true: np.ndarray | Iterable[float],
    estimated: np.ndarray | Iterable[float],
    k: int,
    tolerance: float = 0.0,
) -> float:
    """Fraction of the true top-``k`` items that the estimate also ranks in its top ``k``.

    Ties in the measured values are resolved generously: an item counts as a true top-``k``
    item when its measured value reaches the ``k``-th best measured value, so two variants
    with identical measured accuracy are interchangeable (the paper's Fig. 7a metric).
    ``tolerance`` widens that to values within ``tolerance`` of the ``k``-th best (e.g. the
    metric's sampling error on the eval set, below which a ranking is noise).
    """
    true_array, estimated_array = _pair(true, estimated)
    if k < 1:
        raise ProfileError(f"top-K recall needs K >= 1, got {k}")
    k = min(k, true_array.size)
    threshold = np.sort(true_array)[::-1][k - 1]
    predicted = top_k_indices(estimated_array, k)
    hits = int(np.count_nonzero(true_array[predicted] >= threshold - tolerance))
    return hits / k


def spearman(true: np.ndarray | Iterable[float], estimated: np.ndarray | Iterable[float]) -> float:
    """Spearman's rank correlation ρ; NaN when either side is constant."""
    true_array, estimated_array = _pair(true, estimated)
    if true_array.size < 2 or np.ptp(true_array) == 0 or np.ptp(estimated_array) == 0:
        return float("nan")
    from scipy.stats import spearmanr

    return float(spearmanr(true_array, estimated_array).statistic)


def mae(true: np.ndarray | Iterable[float], estimated: np.ndarray | Iterable[float]) -> float:
    """Mean absolute error, in the unit of the inputs."""
    true_array, estimated_array = _pair(true, estimated)
    return float(np.mean(np.abs(estimated_array - true_array)))


def mape(true: np.ndarray | Iterable[float], estimated: np.ndarray | Iterable[float]) -> float:
    """Mean absolute percentage error as a fraction (0.089 is 8.9 %)."""
    true_array, estimated_array = _pair(true, estimated)
    if np.any(true_array <= 0):
        raise ProfileError("MAPE needs strictly positive measured values")
    return float(np.mean(np.abs(estimated_array - true_array) / true_array))
