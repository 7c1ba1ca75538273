"""The ``lightgbm`` accuracy estimator: LightGBM trees tuned for tens of training rows."""

from __future__ import annotations

from typing import Any

from sparseloom.core.hookspecs import RegisterFn, hookimpl
from sparseloom.plugins.estimators.common import (
    MIN_TRAINING_SAMPLES,
    TreeAccuracyEstimator,
    lightgbm_params,
)


class LightGBMAccuracyEstimator(TreeAccuracyEstimator):
    """Regresses a stitched variant's metric on its per-position features with LightGBM.

    :param min_samples: the fewest measured stitched variants it trains on.
    :param options: ``n_estimators``, ``num_leaves``, ``learning_rate``, ``min_child_samples``,
        ``seed`` (defaults: :func:`~sparseloom.plugins.estimators.common.lightgbm_params`, small
        leaves and bins for a few dozen rows), and any other ``LGBMRegressor`` option.
    """

    name = "lightgbm"

    def __init__(self, *, min_samples: int = MIN_TRAINING_SAMPLES, **options: Any) -> None:
        super().__init__(lightgbm_params(**options), min_samples)

    def make_model(self) -> Any:
        """An unfitted :class:`lightgbm.LGBMRegressor` with this estimator's parameters."""
        import lightgbm

        return lightgbm.LGBMRegressor(objective="regression", **self.params)


@hookimpl
def sparseloom_register_estimators(register: RegisterFn) -> None:
    """Register the ``lightgbm`` accuracy estimator."""
    register(
        "lightgbm",
        LightGBMAccuracyEstimator,
        description="accuracy of stitched variants from per-position features (LightGBM)",
        capabilities=("accuracy",),
    )
