"""Checks shared by the accuracy estimators: enough, finite, well-shaped training data."""

from __future__ import annotations

from typing import Any

import numpy as np

from sparseloom.core.errors import ProfileError

#: The fewest measured stitched variants an accuracy estimator will train on.
MIN_TRAINING_SAMPLES = 6


def training_data(
    features: np.ndarray, accuracies: np.ndarray, *, estimator: str, minimum: int
) -> tuple[np.ndarray, np.ndarray]:
    """Validate and convert ``features`` (n × f) and ``accuracies`` (n) for training."""
    x = np.asarray(features, dtype=np.float64)
    y = np.asarray(accuracies, dtype=np.float64).ravel()
    if x.ndim != 2:
        raise ProfileError(
            f"{estimator}: features must be 2-D (variants × features), got shape {x.shape}")
    if x.shape[0] != y.size:
        raise ProfileError(
            f"{estimator}: {x.shape[0]} feature rows but {y.size} measured accuracies; pass one "
            f"measured accuracy per stitched variant"
        )
    if y.size < minimum:
        raise ProfileError(
            f"{estimator}: too few measured stitched variants to train on ({y.size}, need at "
            f"least {minimum}); raise the number of samples (`--samples`) or use a zoo with "
            f"more variants"
        )
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ProfileError(f"{estimator}: training data holds NaN or infinite values")
    return x, y


def prediction_data(features: np.ndarray, n_features: int | None, *, estimator: str) -> np.ndarray:
    """Validate ``features`` for prediction against the width seen in training."""
    if n_features is None:
        raise ProfileError(f"{estimator}: predict() called before fit(); train it first")
    x = np.asarray(features, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != n_features:
        raise ProfileError(
            f"{estimator}: expected features of shape (n, {n_features}), got {x.shape}"
        )
    return x


class TreeAccuracyEstimator:
    """Shared ``fit``/``predict`` of the gradient-boosted-tree accuracy estimators.

    A subclass sets :attr:`name` and ``self.params`` and builds its library's regressor in
    :meth:`make_model`; the data checks and the prediction shape are the same for all.
    """

    name = "tree"

    def __init__(self, params: dict[str, Any], min_samples: int) -> None:
        self.params = params
        self.min_samples = min_samples
        self._model: Any = None
        self._n_features: int | None = None

    def make_model(self) -> Any:
        """A fresh, unfitted regressor with ``fit(x, y)`` and ``predict(x)``."""
        raise NotImplementedError

    def fit(self, features: np.ndarray, accuracies: np.ndarray) -> None:
        """Train on measured stitched variants."""
        x, y = training_data(features, accuracies, estimator=self.name, minimum=self.min_samples)
        model = self.make_model()
        model.fit(x, y)
        self._model, self._n_features = model, x.shape[1]

    def predict(self, features: np.ndarray) -> np.ndarray:
        """Predicted metric per row of ``features``."""
        x = prediction_data(features, self._n_features, estimator=self.name)
        return np.asarray(self._model.predict(x), dtype=np.float64)
