"""An example sparseloom plugin: a placement policy and an accuracy estimator.

Installed, it registers through the ``sparseloom`` entry-point group (see pyproject.toml), so
``sparseloom plugins`` lists ``fastest-dense`` (policy) and ``mean-of-sources`` (estimator).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sparseloom.core.hookspecs import hookimpl
from sparseloom.core.types import SLO, Plan, Processor, StitchedVariant


class MeanOfSourcesEstimator:
    """Predicts a stitched variant's metric as the mean of its source variants' metrics.

    The features are the per-position source accuracies (SparseLoom §3.2), so the mean is a
    sensible, training-free baseline for the learned XGBoost/LightGBM estimators.
    """

    def __init__(self, positions: int | None = None) -> None:
        self.positions = positions

    def fit(self, features: np.ndarray, accuracies: np.ndarray) -> None:
        """Nothing to learn; remembers how many leading columns are source accuracies."""
        if self.positions is None:
            self.positions = np.asarray(features).shape[1]

    def predict(self, features: np.ndarray) -> np.ndarray:
        """The mean of the first ``positions`` columns of each row."""
        features = np.asarray(features, dtype=float)
        return features[:, : self.positions or features.shape[1]].mean(axis=1)


class FastestDensePolicy:
    """Runs every task's dense model, all positions on the first processor given."""

    def plan(
        self,
        tasks: Sequence[str],
        profile: Any,
        processors: Sequence[Processor],
        slos: Mapping[str, SLO],
    ) -> Plan:
        """Place every position of every task's all-dense variant on ``processors[0]``."""
        positions = int(getattr(profile, "positions", 1))
        order = tuple([processors[0].name] * positions)
        variants = {t: StitchedVariant(t, (0,) * positions) for t in tasks}
        return Plan(policy="fastest-dense", order=order, variants=variants)

    def on_feedback(self, observations: Any) -> Plan | None:
        """Never re-plans."""
        return None


@hookimpl
def sparseloom_register_policies(register):
    register("fastest-dense", FastestDensePolicy, description="all-dense variants on one processor")


@hookimpl
def sparseloom_register_estimators(register):
    register(
        "mean-of-sources",
        MeanOfSourcesEstimator,
        description="mean of the source variants' metrics (no training)",
        capabilities=["accuracy"],
    )
