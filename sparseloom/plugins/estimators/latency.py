"""Latency estimators: ``additive`` (the paper's model plus hand-offs) and ``additive-fitted``.

``additive`` is SparseLoom's Lat(v, p) ≈ Σ_j Lat(s_j, p_j) over the per-subgraph medians of
the profile table, plus (our addition) the measured hand-off cost of every boundary for the
processor pair that meets there. ``additive-fitted`` learns a per-task linear correction
``a · additive + b`` from measured chained runs, for runtimes whose chains are systematically
faster or slower than their parts (cache warmth, thread wake-ups).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from sparseloom.core.errors import ProfileError
from sparseloom.core.hookspecs import RegisterFn, hookimpl

if TYPE_CHECKING:
    from sparseloom.core.types import StitchedVariant
    from sparseloom.profile.table import ProfileTable

#: Stitched variants' choices, one row (S,) per variant.
Choices = np.ndarray | Sequence[Sequence[int]]
#: Processor orders, one per variant (n, S) or one for all (S,): names or profile indices.
Orders = np.ndarray | Sequence[Sequence[str]] | Sequence[Sequence[int]]


class AdditiveLatencyEstimator:
    """Sum of per-subgraph median latencies on their processors, plus hand-off costs.

    :param include_handoff: add the measured boundary hand-off costs (``False`` gives the
        paper's pure additive model).
    """

    name = "additive"

    def __init__(self, *, include_handoff: bool = True) -> None:
        self.include_handoff = include_handoff

    def predict(
        self, stitched: StitchedVariant, order: Sequence[str], profile: ProfileTable
    ) -> float:
        """Estimated end-to-end latency in ms of ``stitched`` under processor ``order``."""
        return float(self.predict_many(stitched.task, [stitched.choices], [order], profile)[0])

    def predict_many(
        self, task: str, choices: Choices, orders: Orders, profile: ProfileTable
    ) -> np.ndarray:
        """Vectorised :meth:`predict`: ``choices`` (n, S) under ``orders`` (n, S) or (S,)."""
        table = profile.task(task)
        return table.latency(
            np.atleast_2d(choices), profile.order_indices(orders),
            include_handoff=self.include_handoff, fitted=False,
        )


class FittedAdditiveLatencyEstimator(AdditiveLatencyEstimator):
    """The additive model with a per-task linear correction fitted on measured chains.

    The profiler fits it on chains timed with the subgraphs and stores the correction in the
    table (``TaskProfile.chain_fit``, which every policy reads). :meth:`fit` fits it on other
    measured chains; a task it has not fitted gets the table's correction.
    """

    name = "additive-fitted"

    def __init__(self, *, include_handoff: bool = True, min_samples: int = 5) -> None:
        super().__init__(include_handoff=include_handoff)
        self.min_samples = min_samples
        self.coefficients: dict[str, tuple[float, float]] = {}

    def fit(
        self, task: str, choices: Choices, orders: Orders,
        measured_ms: np.ndarray | Sequence[float], profile: ProfileTable,
    ) -> None:
        """Fit ``measured ≈ a · additive + b`` for ``task`` by least squares."""
        additive = super().predict_many(task, choices, orders, profile)
        measured = np.asarray(measured_ms, dtype=np.float64).ravel()
        if measured.size != additive.size:
            raise ProfileError(
                f"{self.name}: {additive.size} variants but {measured.size} measured latencies"
            )
        if measured.size < self.min_samples:
            raise ProfileError(
                f"{self.name}: too few measured chains for task {task!r} ({measured.size}, "
                f"need {self.min_samples}); measure more stitched variants"
            )
        design = np.stack([additive, np.ones_like(additive)], axis=1)
        (scale, offset), *_ = np.linalg.lstsq(design, measured, rcond=None)
        self.coefficients[task] = (float(scale), float(offset))

    def predict_many(
        self, task: str, choices: Choices, orders: Orders, profile: ProfileTable
    ) -> np.ndarray:
        """The corrected additive estimate (the table's correction for tasks not fitted here)."""
        additive = super().predict_many(task, choices, orders, profile)
        if task not in self.coefficients:
            return profile.task(task).apply_chain_fit(additive)
        from sparseloom.profile.chain_floor import chain_latency

        return chain_latency(additive, *self.coefficients[task])


@hookimpl
def sparseloom_register_estimators(register: RegisterFn) -> None:
    """Register the ``additive`` and ``additive-fitted`` latency estimators."""
    for factory, description in (
        (AdditiveLatencyEstimator, "Σ per-subgraph latency on its processor + measured hand-offs"),
        (FittedAdditiveLatencyEstimator,
         "additive, with a per-task linear correction fitted on measured chains"),
    ):
        register(factory.name, factory, description=description, capabilities=("latency",))
