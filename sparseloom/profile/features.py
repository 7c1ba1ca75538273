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
from sparseloom.core.types import as_tuple

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
    kinds: tuple[str, ...] = attrs.field(converter=as_tuple)
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
    """``‖output − reference‖ / ‖reference‖`` over all elements (0 when both are zero).

    The norms are numpy's pairwise sums, not ``np.linalg.norm``: that is a BLAS dot product,
    whose sum order follows the BLAS thread count (``OMP_NUM_THREADS``, 1 in a Ray worker), and
    a fidelity must be the same wherever it is computed (measured: 4e-16 apart otherwise).
    """
    difference = np.asarray(output, np.float64) - np.asarray(reference, np.float64)
    norm = _norm(np.asarray(reference, np.float64))
    return _norm(difference) / norm if norm > 0 else float(_norm(difference) > 0)


def _norm(values: np.ndarray) -> float:
    return float(np.sqrt(np.sum(np.square(values))))


#: N per position and source variant (N = ⌈SAMPLES_PER_SUBGRAPH · S · V⌉) ...
SAMPLES_PER_SUBGRAPH = 4.0
#: ... at most this fraction of the V**S stitched variants.
MAX_SAMPLE_FRACTION = 0.8


def default_sample_count(n_variants: int, n_positions: int) -> int:
    """The default number N of stitched variants measured exactly to train on.

    ``⌈4·S·V⌉`` (at least V + 4), capped at 80% of the V**S stitched variants (at least 6,
    what the built-in estimators need). N grows linearly in V, never with V**S. On the
    bundled zoos (V = 10, S = 2: N = 80 of 100) strict top-10 recall on held-out variants,
    30 training draws (``benchmarks/estimator_routes.py``, ``docs/results.md``): vision /
    sentiment / activity / speech 97 / 94 / 100 / 97% (mean 97.0%) against 94 / 88 / 100 /
    85% (91.5%) at the former ⌈2.5·S·V⌉ = 50. The held-out set shrinks with N (a random
    ranking scores 10/20 at N = 80, 10/50 at N = 50); what a policy reads — measured where
    measured, estimated elsewhere — ranks the true top 10 at 97.4% against 89.7%. The cost:
    at S = 2 the 80 exact samples take at most 90 subgraph passes with prefix sharing, against 60
    for N = 50 and 110 for every stitched variant.
    """
    total = n_variants**n_positions
    wanted = max(math.ceil(SAMPLES_PER_SUBGRAPH * n_positions * n_variants), n_variants + 4)
    cap = int(MAX_SAMPLE_FRACTION * total)
    # never fewer than the originals, nor than an estimator can train on (6)
    return int(max(min(wanted, cap), min(total, max(n_variants, 6))))


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
