"""The ``lightgbm`` accuracy estimator: LightGBM trees tuned for tens of training rows."""

from __future__ import annotations

from typing import Any

import numpy as np

from sparseloom.core.hookspecs import RegisterFn, hookimpl
from sparseloom.plugins.estimators.common import (
    MIN_TRAINING_SAMPLES,
    prediction_data,
    training_data,
)


class LightGBMAccuracyEstimator:
    """Regresses a stitched variant's metric on its per-position features with LightGBM.

    LightGBM's defaults (``min_child_samples=20``) would grow no tree at all on a few dozen
    rows, so leaves and bins are allowed to be small. Extra options go to ``LGBMRegressor``.
    """

    name = "lightgbm"

    def __init__(
        self,
        *,
        n_estimators: int = 400,
        num_leaves: int = 8,
        learning_rate: float = 0.05,
        min_child_samples: int = 2,
        min_samples: int = MIN_TRAINING_SAMPLES,
        seed: int = 0,
        **params: Any,
    ) -> None:
        self.params: dict[str, Any] = {
            "n_estimators": n_estimators, "num_leaves": num_leaves,
            "learning_rate": learning_rate, "min_child_samples": min_child_samples,
            "min_data_in_bin": 1, "min_split_gain": 0.0, "reg_lambda": 1.0,
            "n_jobs": 1, "random_state": seed, "verbose": -1, **params,
        }
        self.min_samples = min_samples
        self._model: Any = None
        self._n_features: int | None = None

    def fit(self, features: np.ndarray, accuracies: np.ndarray) -> None:
        """Train on measured stitched variants."""
        import lightgbm

        x, y = training_data(features, accuracies, estimator=self.name, minimum=self.min_samples)
        model = lightgbm.LGBMRegressor(objective="regression", **self.params)
        model.fit(x, y)
        self._model, self._n_features = model, x.shape[1]

    def predict(self, features: np.ndarray) -> np.ndarray:
        """Predicted metric per row of ``features``."""
        x = prediction_data(features, self._n_features, estimator=self.name)
        return np.asarray(self._model.predict(x), dtype=np.float64)


@hookimpl
def sparseloom_register_estimators(register: RegisterFn) -> None:
    """Register the ``lightgbm`` accuracy estimator."""
    register(
        "lightgbm",
        LightGBMAccuracyEstimator,
        description="accuracy of stitched variants from per-position features (LightGBM)",
        capabilities=("accuracy",),
    )
