"""``knn``: an accuracy estimator that averages the k nearest measured stitched variants."""

from __future__ import annotations

import numpy as np


class KnnEstimator:
    """k-nearest-neighbour regression on standardized features.

    The profiler trains it on the stitched variants it measured exactly and asks it for every
    stitched variant. Each prediction is the mean measured metric of the ``k`` training rows
    nearest in feature space, so it always lies in the metric's range [0, 1]. Features are
    standardized per column first, because the columns mix metrics, kind codes and levels (see
    "The accuracy features" in docs/plugins.md).

    :param k: neighbours averaged per prediction.
    :param seed: accepted because sparseloom passes ``seed=`` to factories that take it; k-NN
        has no randomness.
    """

    def __init__(self, k: int = 3, seed: int = 0) -> None:
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        self.k = k
        self._x: np.ndarray | None = None
        self._y: np.ndarray | None = None

    def fit(self, features: np.ndarray, accuracies: np.ndarray) -> None:
        """Remember the training rows, standardized."""
        x = np.asarray(features, dtype=np.float64)
        self._mean, self._scale = x.mean(axis=0), x.std(axis=0)
        self._scale[self._scale == 0] = 1.0
        self._x = (x - self._mean) / self._scale
        self._y = np.asarray(accuracies, dtype=np.float64).ravel()

    def predict(self, features: np.ndarray) -> np.ndarray:
        """The mean metric of the ``k`` nearest training rows, one value per row."""
        if self._x is None or self._y is None:
            raise RuntimeError("knn: predict() called before fit()")
        x = (np.asarray(features, dtype=np.float64) - self._mean) / self._scale
        k = min(self.k, len(self._y))
        predictions = np.empty(len(x))
        for start in range(0, len(x), 4096):  # bounded memory for V**S rows
            block = x[start:start + 4096]
            distances = ((block[:, None, :] - self._x[None, :, :]) ** 2).sum(axis=2)
            nearest = np.argpartition(distances, k - 1, axis=1)[:, :k]
            predictions[start:start + len(block)] = self._y[nearest].mean(axis=1)
        return predictions
