"""Whether each processor computes each subgraph as the evaluation processor does.

Every accuracy in a profile is measured on one processor, the evaluation processor
(``ort:CPU``): a stitched variant's metric is what that processor computes. A processor whose
arithmetic differs serves another function under the same name — OpenVINO runs a QDQ ``int8``
subgraph with its own integer kernels (on an AMX Xeon sentiment's ``int8`` halves moved 14–18 %
from ONNX Runtime's, and a stitched variant measured at 0.804 served 0.794, under its accuracy
SLO), and ``INFERENCE_PRECISION_HINT=bf16`` moves every f32 subgraph by 0.1–1 %. The profile
therefore runs every subgraph on every processor with the dense prefix's activations and
records how far its outputs are from the evaluation processor's (:func:`output_difference`);
beyond :data:`NUMERICS_TOLERANCE` the planner does not place the subgraph there
(:func:`sparseloom.plan.feasible.faithful_profile`): the profile's accuracy would not be the
served variant's.

Measured on the bundled ``default`` workload (Intel Xeon with AMX; the largest difference of a
subgraph's outputs over 16 calibration rows): OpenVINO f32 against ONNX Runtime 5·10⁻⁸–1.3·10⁻⁶,
``fp16`` subgraphs 2·10⁻⁵–6·10⁻⁴; OpenVINO ``int8`` 0 (activity) to 0.18 (sentiment); bf16
1.4·10⁻³–1.7·10⁻¹. The tolerance sits between f32 and fp16 storage on one side and bf16 and
foreign integer kernels on the other.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from sparseloom.core.types import Processor

log = logging.getLogger(__name__)

#: A subgraph whose outputs on a processor differ from the evaluation processor's by more than
#: this (relative, :func:`output_difference`) is not placed on that processor.
NUMERICS_TOLERANCE = 1e-3
#: Calibration rows each subgraph is run on for the comparison.
NUMERICS_ROWS = 16
#: Outputs at least this large in magnitude are masks and sentinels (``-3.4e38`` for a masked
#: attention score): compared by sign, not by value (bf16 turns them into ``-inf``).
EXTREME = 1e30


def output_difference(output: np.ndarray, reference: np.ndarray) -> float:
    """How far ``output`` is from ``reference``: the relative L2 error over the finite,
    moderate elements of ``reference``, and ``inf`` where an extreme or non-finite element
    of either disagrees in kind (NaN against a number, an extreme against a moderate value,
    or extremes of opposite sign)."""
    out = np.asarray(output, np.float64)
    ref = np.asarray(reference, np.float64)
    if out.shape != ref.shape:
        return float("inf")
    moderate = np.isfinite(ref) & (np.abs(ref) < EXTREME)
    out_moderate = np.isfinite(out) & (np.abs(out) < EXTREME)
    if np.any(moderate != out_moderate):
        return float("inf")
    same_nan = np.isnan(ref) == np.isnan(out)
    same_sign = np.sign(np.nan_to_num(ref)) == np.sign(np.nan_to_num(out))
    if not np.all(moderate | (same_nan & same_sign)):
        return float("inf")
    difference = np.sqrt(np.sum(np.square(out[moderate] - ref[moderate])))
    norm = np.sqrt(np.sum(np.square(ref[moderate])))
    return float(difference / norm) if norm > 0 else float(difference > 0)


def comparison_spec(processor: Processor, cores: Sequence[int]) -> str:
    """The spec that runs ``processor``'s arithmetic (backend, device, options such as its
    precision hint) on every core in ``cores``: threads change the speed of a comparison, not
    its outcome."""
    from sparseloom.core.processors import format_processor_spec

    return format_processor_spec(attrs.evolve(processor, threads=max(len(cores), 1),
                                              cores=tuple(cores)))


def numerics_errors(zoo: Any, activations: Sequence[Mapping[str, np.ndarray]],
                    processors: Sequence[Processor], evaluation_processor: str
                    ) -> tuple[np.ndarray, dict[str, str]]:
    """The (S, V, P) difference of every subgraph's outputs on every processor from the
    evaluation processor's, each fed the first :data:`NUMERICS_ROWS` rows of
    ``activations[j]`` (the dense prefix's); and, per processor this process could not run
    (NaN in its column), why.
    """
    from sparseloom.core.processors import allowed_cores
    from sparseloom.zoo.evaluate import SubgraphRunner

    s, v = zoo.positions, len(zoo.variants)
    errors = np.full((s, v, len(processors)), np.nan)
    unchecked: dict[str, str] = {}
    feeds = [{name: np.ascontiguousarray(array[:NUMERICS_ROWS])
              for name, array in activations[j].items()} for j in range(s)]
    cores = allowed_cores()
    with SubgraphRunner(processor=evaluation_processor) as reference_runner:
        references = [[reference_runner.run(zoo.subgraph_path(j, i), feeds[j])
                       for i in range(v)] for j in range(s)]
    for p, processor in enumerate(processors):
        try:
            with SubgraphRunner(processor=comparison_spec(processor, cores)) as runner:
                for j in range(s):
                    for i in range(v):
                        out = runner.run(zoo.subgraph_path(j, i), feeds[j])
                        reference = references[j][i]
                        errors[j, i, p] = max(
                            (output_difference(out[k], reference[k]) for k in reference),
                            default=0.0)
        except Exception as error:  # a processor this process cannot run (another node's)
            errors[:, :, p] = np.nan
            unchecked[processor.name] = f"{type(error).__name__}: {error}"
            log.warning("profiling: cannot compare %s's arithmetic with %s here (%s); the "
                        "profile's accuracies are taken for it unchecked", processor.name,
                        evaluation_processor, error)
    return errors, unchecked


def unfaithful_pairs(errors: np.ndarray, tolerance: float = NUMERICS_TOLERANCE) -> np.ndarray:
    """(S, V, P) mask of the subgraphs a processor computes differently (NaN: unchecked,
    not flagged)."""
    with np.errstate(invalid="ignore"):
        return np.asarray(errors) > tolerance


def unfaithful_summary(table: Any, tolerance: float = NUMERICS_TOLERANCE
                       ) -> dict[str, dict[str, list[str]]]:
    """Per processor, per task, the subgraphs (``variant@position``) it computes differently
    from the evaluation processor: what the planner keeps off it. Empty when none."""
    found: dict[str, dict[str, list[str]]] = {}
    for name, profile in table.tasks.items():
        flagged = unfaithful_pairs(profile.numerics_error, tolerance)
        for j, i, p in zip(*np.nonzero(flagged), strict=True):
            found.setdefault(table.processors[p], {}).setdefault(name, []).append(
                f"{profile.variant_names[i]}@{j}")
    return found


def describe_unfaithful(table: Any, evaluation_processor: str) -> list[str]:
    """One line per processor that computes some subgraphs differently, naming them."""
    lines = []
    for processor, tasks in unfaithful_summary(table).items():
        listed = "; ".join(f"{task}: {', '.join(pairs)}" for task, pairs in tasks.items())
        index = list(table.processors).index(processor)
        served = sum(int(np.isfinite(p.served_accuracy[:, index]).sum())
                     for p in table.tasks.values())
        lines.append(f"numerics: {processor} computes these subgraphs differently from "
                     f"{evaluation_processor}, where the accuracies were measured (relative "
                     f"output difference > {NUMERICS_TOLERANCE:g}); the planner keeps them off "
                     f"it, except the {served} stitched variant(s) whose accuracy was measured "
                     f"as served there (whole chains, sparseloom-loaded): {listed}")
    return lines
