"""Checks shared by the accuracy estimators: enough, finite, well-shaped training data."""

from __future__ import annotations

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
