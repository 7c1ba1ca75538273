"""The numerics check: which processors compute a subgraph as the evaluation processor does."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from sparseloom.core.hookspecs import hookimpl
from sparseloom.core.processors import get_processor
from sparseloom.core.types import Processor
from sparseloom.profile.numerics import NUMERICS_TOLERANCE, numerics_errors, output_difference
from tests.plugins.backends.protocol_only import ProtocolOnlyBackend


def test_output_difference_is_the_relative_error_of_moderate_values() -> None:
    reference = np.array([3.0, 4.0])
    assert output_difference(reference, reference) == 0.0
    assert output_difference(np.array([3.0, 4.5]), reference) == pytest.approx(0.5 / 5.0)


def test_sentinels_compare_by_sign_and_disagreeing_kinds_are_infinitely_far() -> None:
    masked = np.array([1.0, -3.4e38])  # a masked attention score: bf16 makes it -inf
    assert output_difference(np.array([1.0, -np.inf]), masked) == 0.0
    assert output_difference(np.array([1.0, np.inf]), masked) == math.inf
    assert output_difference(np.array([np.nan, -3.4e38]), masked) == math.inf
    assert output_difference(np.array([1.0, -5.0]), masked) == math.inf
    assert output_difference(np.zeros(3), np.zeros(2)) == math.inf


class PerturbingBackendForTest(ProtocolOnlyBackend):
    """Fault injection: a processor whose arithmetic is 1 % off (every output × 1.01)."""

    processors = (Processor("perturb:CPU", "perturb", "CPU"),)

    def infer(self, loaded: Any, inputs: Any) -> dict[str, np.ndarray]:
        return {name: value * np.float32(1.01)
                for name, value in super().infer(loaded, inputs).items()}


PLUGIN = SimpleNamespace(sparseloom_register_backends=hookimpl(
    lambda register: register("perturb", PerturbingBackendForTest,
                              description="test double: outputs 1 % off")))


def test_each_processor_is_compared_with_the_evaluation_processor(
        tiny_activations: tuple[Any, Any, list[Any]], register_plugin: Any) -> None:
    register_plugin(PLUGIN, "perturbing-backend")
    _task, zoo, activations = tiny_activations
    processors = [get_processor("ort:CPU"), get_processor("ov:CPU"),
                  get_processor("perturb:CPU"), Processor("gone:CPU", "gone", "CPU")]
    errors, unchecked = numerics_errors(zoo, activations, processors, "ort:CPU")

    assert errors.shape == (zoo.positions, len(zoo.variants), 4)
    assert (errors[:, :, 0] < 1e-5).all()  # ONNX Runtime on one core or on every core
    assert (errors[:, :, 1] < NUMERICS_TOLERANCE).all()  # OpenVINO in f32: the same function
    assert errors[:, :, 2] == pytest.approx(np.full(errors.shape[:2], 0.01), rel=1e-4)
    assert np.isnan(errors[:, :, 3]).all() and list(unchecked) == ["gone:CPU"]
    assert "gone" in unchecked["gone:CPU"]
