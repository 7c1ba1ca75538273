"""Dynamic INT8 (``int8dyn``) on trained subgraphs: its form, accuracy, ORT and OpenVINO."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest

from sparseloom.core.errors import CompressionError
from sparseloom.plugins.compressors import Int8DynamicQuantizer, boundary_signature
from tests.plugins.compressors.models import accuracy, run_chain


@pytest.fixture(scope="module")
def dynamic_parts(models) -> dict[str, list[onnx.ModelProto]]:
    """Every part of both models quantized once, without calibration."""
    return {name: [Int8DynamicQuantizer().compress(part, 0.0) for part in cut.parts]
            for name, cut in models.items()}


def _int8_weights(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    return [i for i in model.graph.initializer
            if i.data_type == onnx.TensorProto.INT8 and len(i.dims) >= 2]


@pytest.mark.parametrize("name", ["cnn", "transformer"])
def test_dynamic_int8_quantizes_matmuls_per_call_with_float_boundaries(
        models, dynamic_parts, name: str) -> None:
    for dense, quantized in zip(models[name].parts, dynamic_parts[name], strict=True):
        assert boundary_signature(quantized) == boundary_signature(dense)
        ops = Counter(node.op_type for node in quantized.graph.node)
        dense_ops = Counter(node.op_type for node in dense.graph.node)
        assert ops["Conv"] == dense_ops["Conv"], "convolutions stay float32"
        if dense_ops["MatMul"] + dense_ops["Gemm"]:
            assert ops["DynamicQuantizeLinear"] > 0 and ops["MatMulInteger"] > 0
            assert not ops["QuantizeLinear"], "no activation range fixed by calibration"
            assert _int8_weights(quantized), "weights must be stored as int8"


@pytest.mark.parametrize("name", ["cnn", "transformer"])
def test_dynamic_int8_accuracy_within_two_points(models, dynamic_parts, name: str) -> None:
    cut = models[name]
    dense = accuracy(cut.parts, cut.trained)
    for position, quantized in enumerate(dynamic_parts[name]):
        assert accuracy(cut.with_part(position, quantized), cut.trained) >= dense - 0.02
    assert accuracy(dynamic_parts[name], cut.trained) >= dense - 0.02


def test_dynamic_int8_runs_on_openvino_like_ort(transformer, dynamic_parts, run_openvino) -> None:
    for position, quantized in enumerate(dynamic_parts["transformer"]):
        feed = transformer.calibration[position][0]
        output = quantized.graph.output[0].name
        dense = run_chain([transformer.parts[position]], feed)[output]
        scale = np.linalg.norm(dense)
        assert np.linalg.norm(run_chain([quantized], feed)[output] - dense) / scale < 0.05
        assert np.linalg.norm(run_openvino(quantized, feed)[output] - dense) / scale < 0.05


def test_dynamic_int8_sensitive_layers_stay_float_under_a_tight_bound(transformer) -> None:
    """With ``max_error`` and calibration the search leaves the most sensitive layers
    float32 and names them; the error it reaches is below the every-layer error."""
    part, calibration = transformer.parts[1], transformer.calibration[1]
    every = Int8DynamicQuantizer().compress(part, 0.0, calibration)
    mixed = Int8DynamicQuantizer(max_error=1e-6, max_float_share=0.5).compress(
        part, 0.0, calibration)
    assert "float32 layers" in mixed.doc_string
    assert len(_int8_weights(mixed)) < len(_int8_weights(every))
    feed = calibration[0]
    output = part.graph.output[0].name
    dense = run_chain([part], feed)[output]

    def error(model: onnx.ModelProto) -> float:
        return float(np.linalg.norm(run_chain([model], feed)[output] - dense)
                     / np.linalg.norm(dense))

    assert error(mixed) < error(every)


def test_dynamic_int8_checks_level_and_calibration_inputs(transformer) -> None:
    part = transformer.parts[1]
    with pytest.raises(CompressionError, match=r"int8dyn"):
        Int8DynamicQuantizer().compress(part, 0.5)
    with pytest.raises(CompressionError, match=r"batch 0 lacks subgraph inputs \['mask'\]"):
        Int8DynamicQuantizer(max_error=0.1).compress(
            part, 0.0, [{"/blocks.0/Add_3_output_0": np.zeros((2, 8, 32))}])


def test_dynamic_int8_leaves_its_input_alone(transformer) -> None:
    before = transformer.parts[0].SerializeToString()
    Int8DynamicQuantizer().compress(transformer.parts[0], 0.0)
    assert transformer.parts[0].SerializeToString() == before


def test_dynamic_int8_is_registered_and_keyed_by_weight_width() -> None:
    from sparseloom.core.registry import get_registry
    from sparseloom.zoo.options import compressor_cache_key

    assert isinstance(get_registry().create("compressor", "int8dyn"), Int8DynamicQuantizer)
    for seven_bit in (True, False):
        key = compressor_cache_key(Int8DynamicQuantizer, {"reduce_range": seven_bit})
        assert key is not None and key["seven_bit_weights"] is seven_bit
