"""Accuracy as served: the stitched variants a plan could want on a processor whose arithmetic
differs are measured there, exactly (:mod:`sparseloom.profile.served`)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import numpy as np
import onnxruntime as ort

from sparseloom.core.hookspecs import hookimpl
from sparseloom.core.processors import get_processor
from sparseloom.core.types import Processor
from sparseloom.profile.numerics import numerics_errors
from sparseloom.profile.served import served_accuracy, served_candidates
from sparseloom.profile.table import ProfileTable
from tests.plan.tables import task_profile
from tests.plugins.backends.protocol_only import ProtocolOnlyBackend


def _profile(flagged: list[tuple[int, int]], second_ms: float = 2.0) -> Any:
    """S = 2, V = 3, P = 2; on p0 variants 0, 1, 2 take 3, ``second_ms``, 1 ms per position,
    on p1 10 ms. Accuracies by row (c0, c1): chosen so that the front on p0 is known by hand."""
    latency = np.empty((2, 3, 2))
    latency[:, :, 0] = [3.0, second_ms, 1.0]
    latency[:, :, 1] = 10.0
    #                    00    01    02    10    11    12    20    21    22
    accuracy = np.array([0.90, 0.91, 0.70, 0.88, 0.80, 0.60, 0.85, 0.50, 0.40])
    profile = task_profile("t", latency, accuracy)
    for position, variant in flagged:
        profile.numerics_error[position, variant, 0] = 0.1
    return profile


def test_candidates_are_the_most_accurate_clearly_faster_than_dense_then_the_front() -> None:
    # Chains on p0 (ms): 00 6.0, 01 5.9, 02 4.0, 10 5.9, 11 5.8, 12 3.9, 20 4.0, 21 3.9,
    # 22 2.0; at least 10 % faster than dense (6.0): 5.4 ms or less. The front, fastest first,
    # each more accurate than all before it: 22 (2.0, 0.40), 12 (3.9, 0.60; 21 is as fast and
    # less accurate), 20 (4.0, 0.85), 01 (5.9, 0.91).
    profile = _profile(flagged=[(0, 2), (1, 1)], second_ms=2.9)
    # Through a flagged subgraph (variant 2 at position 0, variant 1 at position 1): 01, 11,
    # 20, 21, 22. Clearly faster, most accurate first, on the front or not: 20 (row 6),
    # 21 (row 7, off the front), 22 (row 8); then the rest of the front: 01 (row 1), not 10 %
    # faster. 11 (5.8 ms) is neither.
    assert served_candidates(profile, 0).tolist() == [6, 7, 8, 1]
    assert served_candidates(profile, 0, count=2).tolist() == [6, 7]
    assert served_candidates(profile, 1).size == 0  # p1 computes everything faithfully


def test_dense_is_measured_where_it_is_flagged_though_a_faster_variant_ties_it() -> None:
    # 00 (6 ms, 0.90) is off the front (01: 5.9 ms, 0.91); flagged, it is measured last, after
    # 02 (4.0 ms, 0.70), clearly faster through the flagged variant 0 at position 0.
    profile = _profile(flagged=[(0, 0), (0, 2), (1, 1)], second_ms=2.9)
    assert served_candidates(profile, 0).tolist() == [6, 2, 7, 8, 1, 0]
    assert served_candidates(profile, 0, count=1).tolist() == [6, 0]


def test_nothing_is_measured_where_nothing_is_flagged() -> None:
    assert served_candidates(_profile(flagged=[]), 0).size == 0


class NegatingBackendForTest(ProtocolOnlyBackend):
    """Fault injection: a processor whose arithmetic differs beyond any tolerance (every
    output negated), so what it serves scores differently from what the profile measured."""

    processors = (Processor("negate:CPU", "negate", "CPU"),)

    def infer(self, loaded: Any, inputs: Any) -> dict[str, np.ndarray]:
        return {name: -value for name, value in super().infer(loaded, inputs).items()}


PLUGIN = SimpleNamespace(sparseloom_register_backends=hookimpl(
    lambda register: register("negate", NegatingBackendForTest,
                              description="test double: outputs negated")))


def _served_by_hand(zoo: Any, task: Any, choices: tuple[int, ...]) -> float:
    """The oracle: each subgraph run by plain ONNX Runtime, its outputs negated, then scored."""
    values = dict(task.eval_inputs)
    for position, variant in enumerate(choices):
        session = ort.InferenceSession(str(zoo.subgraph_path(position, variant)),
                                       providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        outputs = session.run(None, {n: np.asarray(values[n]) for n in names})
        values = {o.name: -out for o, out in zip(session.get_outputs(), outputs, strict=True)}
    return float(task.score(values))


def test_candidates_are_measured_on_their_processor_and_nowhere_else(
        tiny_activations: tuple[Any, Any, list[Any]], register_plugin: Any) -> None:
    register_plugin(PLUGIN, "negating-backend")
    task, zoo, activations = tiny_activations
    processors = [get_processor("ort:CPU"), get_processor("negate:CPU")]
    errors, _ = numerics_errors(zoo, activations, processors, "ort:CPU")
    s, v = zoo.positions, len(zoo.variants)
    rows = list(itertools.product(range(v), repeat=s))
    profile = task_profile(task.name, np.ones((s, v, 2)),
                           np.linspace(0.9, 0.5, v**s))  # every chain as fast: front = row 0
    profile.numerics_error = errors
    timings: dict[str, Any] = {}

    served = served_accuracy(task, zoo, profile, processors, timings)

    assert served.shape == (v**s, 2) and timings["served"] > 0
    assert np.isnan(served[:, 0]).all()  # ort:CPU is the evaluation processor's arithmetic
    measured = np.flatnonzero(np.isfinite(served[:, 1]))
    assert measured.tolist() == served_candidates(profile, 1).tolist() == [0]
    assert served[0, 1] == np.float32(_served_by_hand(zoo, task, rows[0]))
    assert served[0, 1] != np.float32(zoo.manifest["metric"]["dense"])  # the fault shows


def test_served_accuracy_survives_a_save_and_an_old_table_reads_nan(tmp_path: Any) -> None:
    profile = _profile(flagged=[(0, 2)])
    profile.served_accuracy[6, 0] = 0.83
    ProfileTable("w", ["p0", "p1"], {"t": profile}).save(tmp_path / "new")
    loaded = ProfileTable.load(tmp_path / "new").task("t").served_accuracy
    assert loaded[6, 0] == np.float32(0.83) and np.isnan(np.delete(loaded.ravel(), 12)).all()

    old = _profile(flagged=[])
    ProfileTable("w", ["p0", "p1"], {"t": old}).save(tmp_path / "old")
    arrays = dict(np.load(tmp_path / "old" / "profile.npz"))
    del arrays["t0.served_accuracy"]
    np.savez_compressed(tmp_path / "old" / "profile.npz", **arrays)  # as an older version wrote
    assert np.isnan(ProfileTable.load(tmp_path / "old").task("t").served_accuracy).all()


def test_the_profile_report_names_the_flagged_pairs_and_counts_the_served_variants() -> None:
    from sparseloom.profile.numerics import describe_unfaithful

    profile = _profile(flagged=[(0, 2)])
    profile.served_accuracy[[6, 8], 0] = [0.85, 0.4]
    lines = describe_unfaithful(ProfileTable("w", ["p0", "p1"], {"t": profile}), "p1")
    assert len(lines) == 1 and lines[0].startswith("numerics: p0 computes")
    assert "except the 2 stitched variant(s)" in lines[0] and lines[0].endswith("t: v2@0")
