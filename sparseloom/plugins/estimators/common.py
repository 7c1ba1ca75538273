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
        """Predicted metric per row of ``features``, clipped to the metric range [0, 1].

        Boosted trees extrapolate: on the bundled ``default`` zoos XGBoost trained on 40 of
        the 100 stitched variants predicted -0.058 for one whose metric is 0, which the
        profiler's range check refuses (``benchmarks/estimator_routes.py``). Every task
        metric is a fraction, and clipping only touches variants far below the top.
        """
        x = prediction_data(features, self._n_features, estimator=self.name)
        return np.clip(np.asarray(self._model.predict(x), dtype=np.float64), 0.0, 1.0)


def xgboost_params(*, n_estimators: int = 400, max_depth: int = 3, learning_rate: float = 0.05,
                   seed: int = 0, **params: Any) -> dict[str, Any]:
    """The tree settings every built-in XGBoost estimator shares, regression and ranking alike:
    400 trees of depth 3 at learning rate 0.05 (tens of training rows), one thread (profiling
    shares the machine with the processors it measures), ``hist``; ``params`` add to or
    override them and go to the XGBoost model as they are."""
    return {"n_estimators": n_estimators, "max_depth": max_depth,
            "learning_rate": learning_rate, "reg_lambda": 1.0, "tree_method": "hist",
            "n_jobs": 1, "random_state": seed, **params}


def lightgbm_params(*, n_estimators: int = 400, num_leaves: int = 8, learning_rate: float = 0.05,
                    min_child_samples: int = 2, seed: int = 0, **params: Any) -> dict[str, Any]:
    """The small-data settings every built-in LightGBM estimator shares, regression and ranking
    alike: LightGBM's defaults (``min_child_samples=20``) grow no tree on a few dozen rows, so
    leaves and bins may be small; ``params`` add to or override them and go to the LightGBM
    model as they are."""
    return {"n_estimators": n_estimators, "num_leaves": num_leaves,
            "learning_rate": learning_rate, "min_child_samples": min_child_samples,
            "min_data_in_bin": 1, "min_split_gain": 0.0, "reg_lambda": 1.0,
            "n_jobs": 1, "random_state": seed, "verbose": -1, **params}
