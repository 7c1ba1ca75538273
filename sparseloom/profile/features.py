"""Features of stitched variants for the accuracy estimators (SparseLoom §3.2, extended).

The paper describes subgraph ``s_j`` taken from source variant ``i`` by the measured accuracy
of that variant, ``X(s_j^i) = A(v^i)``, and a stitched variant by the vector of these over its
S positions. The ``extended`` set (the default) adds what the zoo tells us for free:

* the compressor kind code and level of the source variant at every position;
* the *output fidelity* of every subgraph: the relative L2 error of its output against the
  dense subgraph's, both fed the dense prefix's activations on calibration inputs (S·V runs
  of one subgraph each, never a stitched chain);
* sums over positions (accuracy drop, fidelity error), because trees cannot add columns and a
  stitched variant's error is close to additive in what each position contributes.

Features are built vectorised for any (n, S) array of choices, so estimating every one of
V**S stitched variants is one ``predict`` call.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs
import numpy as np

from sparseloom.core.errors import ProfileError

#: Stable integer codes for compressor kinds (unknown kinds get the next free code).
KIND_CODES: dict[str, int] = {
    "dense": 0, "unstructured": 1, "structured": 2, "int8": 3, "fp16": 4,
}

FEATURE_SETS: tuple[str, ...] = ("paper", "extended")
DEFAULT_FEATURE_SET = "extended"

#: Fidelity errors below this are treated as equal (log10 floor): below float32 noise.
_FIDELITY_FLOOR = 1e-7


def kind_code(kind: str) -> int:
    """The integer code of a compressor kind (stable for the built-in kinds)."""
    return KIND_CODES.get(kind, len(KIND_CODES) + sum(map(ord, kind)) % 97)


@attrs.frozen
class SubgraphFeatures:
    """What is known about every subgraph (position, variant) of one task.

    Attributes:
        source_accuracy: measured metric of each original variant (V,).
        kinds: compressor kind of each variant (V,).
        levels: compression level of each variant (V,).
        fidelity_error: relative output error of subgraph (position, variant) against the
            dense subgraph on dense-prefix inputs (S, V); ``None`` when not measured.
        dense_variant: index of the dense (uncompressed) variant.
    """

    source_accuracy: np.ndarray = attrs.field(converter=lambda a: np.asarray(a, np.float64))
    kinds: tuple[str, ...] = attrs.field(converter=tuple)
    levels: np.ndarray = attrs.field(converter=lambda a: np.asarray(a, np.float64))
    n_positions: int
    fidelity_error: np.ndarray | None = None
    dense_variant: int = 0

    @property
    def n_variants(self) -> int:
        """V, the number of source variants."""
        return int(self.source_accuracy.size)


def feature_names(features: SubgraphFeatures, feature_set: str = DEFAULT_FEATURE_SET) -> list[str]:
    """Column names of :func:`stitched_features` for ``feature_set``."""
    positions = range(features.n_positions)
    names = [f"acc_{j}" for j in positions]
    if feature_set == "paper":
        return names
    names += [f"kind_{j}" for j in positions] + [f"level_{j}" for j in positions]
    names += ["acc_drop_sum", "acc_min"]
    if features.fidelity_error is not None:
        names += [f"log_fidelity_{j}" for j in positions] + ["fidelity_sum", "fidelity_max"]
    return names


def stitched_features(
    features: SubgraphFeatures,
    choices: np.ndarray | Sequence[Sequence[int]],
    feature_set: str = DEFAULT_FEATURE_SET,
) -> np.ndarray:
    """Feature matrix (n, F) of the stitched variants ``choices`` (n, S).

    :raises ProfileError: unknown feature set or choices that do not fit the zoo.
    """
    if feature_set not in FEATURE_SETS:
        raise ProfileError(
            f"unknown feature set {feature_set!r}; choose one of {', '.join(FEATURE_SETS)}"
        )
    array = np.atleast_2d(np.asarray(choices, dtype=np.int64))
    if array.shape[1] != features.n_positions or (
        array.size and (array.min() < 0 or array.max() >= features.n_variants)
    ):
        raise ProfileError(
            f"choices of shape {array.shape} do not fit a zoo of {features.n_positions} "
            f"positions × {features.n_variants} variants"
        )
    accuracy = features.source_accuracy[array]
    columns = [accuracy]
    if feature_set == "extended":
        codes = np.array([kind_code(kind) for kind in features.kinds], dtype=np.float64)
        dense_accuracy = features.source_accuracy[features.dense_variant]
        columns += [
            codes[array],
            features.levels[array],
            (accuracy - dense_accuracy).sum(axis=1, keepdims=True),
            accuracy.min(axis=1, keepdims=True),
        ]
        if features.fidelity_error is not None:
            error = features.fidelity_error[np.arange(features.n_positions), array]
            columns += [
                np.log10(np.maximum(error, _FIDELITY_FLOOR)),
                error.sum(axis=1, keepdims=True),
                error.max(axis=1, keepdims=True),
            ]
    return np.concatenate(columns, axis=1)


def relative_error(output: np.ndarray, reference: np.ndarray) -> float:
    """``‖output − reference‖ / ‖reference‖`` over all elements (0 when both are zero)."""
    difference = np.asarray(output, np.float64) - np.asarray(reference, np.float64)
    norm = float(np.linalg.norm(np.asarray(reference, np.float64)))
    return float(np.linalg.norm(difference)) / norm if norm > 0 else float(
        np.linalg.norm(difference) > 0
    )


def default_sample_count(n_variants: int, n_positions: int) -> int:
    """The default number N of stitched variants measured exactly to train on.

    ``⌈2.5·S·V⌉`` (at least V + 4), capped at half of the V**S stitched variants (at least
    6, what the built-in estimators need). Every
    subgraph (position, variant) then appears in two to three training variants besides its
    own original. On the bundled zoos (V = 10, S = 2) top-10 recall on held-out variants
    rises from 0.82–0.86 at N = 30 to 0.88–0.91 at N = 40 and 0.91–0.92 at N = 50 (20
    training draws; ``docs/results.md``). N grows linearly in V, never with V**S.
    """
    total = n_variants**n_positions
    wanted = max(math.ceil(2.5 * n_positions * n_variants), n_variants + 4)
    # never fewer than the originals, nor than an estimator can train on (6)
    return int(max(min(wanted, total // 2), min(total, max(n_variants, 6))))


def sample_training_rows(
    n_variants: int, n_positions: int, n_samples: int, seed: int = 0
) -> np.ndarray:
    """Rows (mixed-radix indices) of the stitched variants to measure exactly.

    The V original variants (all positions from one source) come first: their accuracy is
    measured anyway (the paper's T·V accuracy runs). The rest are drawn uniformly without
    replacement from the stitched variants proper.
    """
    total = n_variants**n_positions
    n_samples = int(min(max(n_samples, 0), total))
    radix = sum(n_variants**j for j in range(n_positions))
    originals = np.arange(n_variants, dtype=np.int64) * radix
    rest = np.setdiff1d(np.arange(total, dtype=np.int64), originals)
    extra = max(n_samples - n_variants, 0)
    drawn = np.random.default_rng(seed).choice(rest, size=min(extra, rest.size), replace=False)
    return np.concatenate([originals, np.sort(drawn)])
