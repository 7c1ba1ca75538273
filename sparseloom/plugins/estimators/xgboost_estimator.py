"""The ``xgboost`` accuracy estimator: gradient-boosted trees (the paper's choice, §3.2)."""

from __future__ import annotations

from typing import Any

from sparseloom.core.hookspecs import RegisterFn, hookimpl
from sparseloom.plugins.estimators.common import (
    MIN_TRAINING_SAMPLES,
    TreeAccuracyEstimator,
    xgboost_params,
)


class XGBoostAccuracyEstimator(TreeAccuracyEstimator):
    """Regresses a stitched variant's metric on its per-position features with XGBoost.

    The defaults suit the tens of training rows a zoo gives: shallow trees, a slow learning
    rate and one thread (profiling shares the machine with the processors being measured).
    Extra keyword options go to :class:`xgboost.XGBRegressor`.
    """

    name = "xgboost"

    def __init__(
        self,
        *,
        n_estimators: int = 400,
        max_depth: int = 3,
        learning_rate: float = 0.05,
        min_samples: int = MIN_TRAINING_SAMPLES,
        seed: int = 0,
        **params: Any,
    ) -> None:
        options = xgboost_params(n_estimators=n_estimators, max_depth=max_depth,
                                 learning_rate=learning_rate, seed=seed, min_child_weight=1.0,
                                 subsample=1.0, **params)
        super().__init__(options, min_samples)

    def make_model(self) -> Any:
        """An unfitted :class:`xgboost.XGBRegressor` with this estimator's parameters."""
        import xgboost

        return xgboost.XGBRegressor(objective="reg:squarederror", **self.params)


@hookimpl
def sparseloom_register_estimators(register: RegisterFn) -> None:
    """Register the ``xgboost`` accuracy estimator."""
    register(
        "xgboost",
        XGBoostAccuracyEstimator,
        description="accuracy of stitched variants from per-position features (XGBoost)",
        capabilities=("accuracy",),
    )
