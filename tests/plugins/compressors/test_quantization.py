"""INT8 (QDQ) and FP16 on trained subgraphs: boundaries, accuracy, ORT and OpenVINO."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest

from sparseloom.core.errors import CompressionError
from sparseloom.plugins.compressors import Fp16Converter, Int8Quantizer, boundary_signature
from tests.plugins.compressors.models import accuracy, run_chain

QOPERATOR_OPS = {"QLinearConv", "QLinearMatMul", "QGemm", "ConvInteger", "MatMulInteger"}


@pytest.fixture(scope="module")
def int8_parts(models) -> dict[str, list[onnx.ModelProto]]:
    """Every part of both models quantized once."""
    return {
        name: [Int8Quantizer().compress(part, 0.0, cut.calibration[position])
               for position, part in enumerate(cut.parts)]
        for name, cut in models.items()
    }


@pytest.mark.parametrize("name", ["cnn", "transformer"])
def test_int8_is_qdq_with_float_boundaries(models, int8_parts, name: str) -> None:
    for dense, quantized in zip(models[name].parts, int8_parts[name], strict=True):
        assert boundary_signature(quantized) == boundary_signature(dense)
        ops = Counter(node.op_type for node in quantized.graph.node)
        assert ops["QuantizeLinear"] > 0 and ops["DequantizeLinear"] > 0
        assert not QOPERATOR_OPS & set(ops)
        int8_weights = [i for i in quantized.graph.initializer
                        if i.data_type == onnx.TensorProto.INT8 and len(i.dims) >= 2]
        assert int8_weights, "weights must be stored as int8"
        per_channel = [i for i in quantized.graph.initializer
                       if i.name.endswith("_scale") and len(i.dims) == 1 and i.dims[0] > 1]
        assert per_channel, "weight scales must be per channel"


@pytest.mark.parametrize("name", ["cnn", "transformer"])
def test_int8_accuracy_within_two_points(models, int8_parts, name: str) -> None:
    cut = models[name]
    dense = accuracy(cut.parts, cut.trained)
    for position, quantized in enumerate(int8_parts[name]):
        assert accuracy(cut.with_part(position, quantized), cut.trained) >= dense - 0.02
    assert accuracy(int8_parts[name], cut.trained) >= dense - 0.02


@pytest.mark.parametrize("name", ["cnn", "transformer"])
def test_int8_runs_on_openvino_like_ort(models, int8_parts, run_openvino, name: str) -> None:
    cut = models[name]
    for position, quantized in enumerate(int8_parts[name]):
        feed = cut.calibration[position][0]
        output = quantized.graph.output[0].name
        dense = run_chain([cut.parts[position]], feed)[output]
        ort_out = run_chain([quantized], feed)[output]
        ov_out = run_openvino(quantized, feed)[output]
        scale = np.linalg.norm(dense)
        assert np.linalg.norm(ort_out - dense) / scale < 0.05
        assert np.linalg.norm(ov_out - dense) / scale < 0.05


def test_int8_needs_calibration_of_the_right_inputs(transformer) -> None:
    part = transformer.parts[1]
    with pytest.raises(CompressionError, match=r"int8.*needs calibration"):
        Int8Quantizer().compress(part, 0.0, [])
    with pytest.raises(CompressionError, match=r"batch 0 lacks subgraph inputs \['mask'\]"):
        Int8Quantizer().compress(part, 0.0, [{"/blocks.0/Add_3_output_0": np.zeros((2, 8, 32))}])


def _weight_extent(model: onnx.ModelProto) -> int:
    from onnx.numpy_helper import to_array

    return max(int(np.abs(to_array(i).astype(np.int32)).max()) for i in model.graph.initializer
               if i.data_type == onnx.TensorProto.INT8 and len(i.dims) >= 2)


def test_int8_weight_width_follows_the_cpu(cnn) -> None:
    """7-bit weights (|w| ≤ 64) where the CPU lacks VNNI and AMX, full 8 bits (up to 127)
    where it has them; the zoo's cache key carries the width."""
    from sparseloom.core.processors.cores import cpu_flags, has_int8_dot_product
    from sparseloom.zoo.options import compressor_cache_key

    part, calibration = cnn.parts[0], cnn.calibration[0]
    assert _weight_extent(Int8Quantizer(reduce_range=True).compress(part, 0.0, calibration)) <= 64
    assert _weight_extent(Int8Quantizer(reduce_range=False).compress(part, 0.0, calibration)) > 64
    native = bool({"avx512_vnni", "avx_vnni", "amx_int8"} & cpu_flags())
    assert has_int8_dot_product() is native and Int8Quantizer().seven_bit is not native
    assert compressor_cache_key(Int8Quantizer, {})["seven_bit_weights"] is not native
    for seven_bit in (True, False):
        key = compressor_cache_key(Int8Quantizer, {"reduce_range": seven_bit})
        assert key is not None and key["seven_bit_weights"] is seven_bit


def test_int8_leaves_its_input_alone(cnn) -> None:
    before = cnn.parts[0].SerializeToString()
    Int8Quantizer().compress(cnn.parts[0], 0.0, cnn.calibration[0])
    assert cnn.parts[0].SerializeToString() == before


@pytest.mark.parametrize("name", ["cnn", "transformer"])
def test_fp16_float_boundaries_half_weights_same_accuracy(models, run_openvino,
                                                          name: str) -> None:
    cut = models[name]
    dense_accuracy = accuracy(cut.parts, cut.trained)
    for position, dense in enumerate(cut.parts):
        before = dense.SerializeToString()
        half = Fp16Converter().compress(dense, 0.0, [])
        assert dense.SerializeToString() == before
        assert boundary_signature(half) == boundary_signature(dense)
        weights = [i for i in half.graph.initializer if len(i.dims) >= 2]
        assert weights and all(i.data_type == onnx.TensorProto.FLOAT16 for i in weights)
        assert accuracy(cut.with_part(position, half), cut.trained) >= dense_accuracy - 0.005
        feed = cut.calibration[position][0]
        output = half.graph.output[0].name
        expected = run_chain([dense], feed)[output]
        for result in (run_chain([half], feed)[output], run_openvino(half, feed)[output]):
            assert result.dtype == np.float32
            assert np.linalg.norm(result - expected) / np.linalg.norm(expected) < 5e-3
