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

    :param min_samples: the fewest measured stitched variants it trains on.
    :param options: ``n_estimators``, ``max_depth``, ``learning_rate``, ``seed`` (defaults:
        :func:`~sparseloom.plugins.estimators.common.xgboost_params`: shallow trees, a slow
        learning rate and one thread for the tens of training rows a zoo gives), and any other
        :class:`xgboost.XGBRegressor` option.
    """

    name = "xgboost"

    def __init__(self, *, min_samples: int = MIN_TRAINING_SAMPLES, **options: Any) -> None:
        params = xgboost_params(**{"min_child_weight": 1.0, "subsample": 1.0, **options})
        super().__init__(params, min_samples)

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
