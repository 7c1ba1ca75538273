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
        options = lightgbm_params(n_estimators=n_estimators, num_leaves=num_leaves,
                                  learning_rate=learning_rate,
                                  min_child_samples=min_child_samples, seed=seed, **params)
        super().__init__(options, min_samples)

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
