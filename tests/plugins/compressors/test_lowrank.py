"""Low-rank factorisation against plain ONNX Runtime runs of the dense model: a weight of
lower rank is reproduced exactly, the whitened SVD fits the layer's real inputs better than the
plain one on inputs it was not fitted on, shapes and boundaries hold (Gemm, MatMul and Conv),
and accuracy stays on real data."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from sparseloom.core.errors import CompressionError
from sparseloom.plugins.compressors import LowRankFactoriser, boundary_signature
from sparseloom.plugins.compressors.lowrank import factorise, rank_for
from tests.plugins.compressors.models import accuracy, run_chain
from tests.plugins.compressors.models import graph_model as _model
from tests.plugins.compressors.models import initializer as _init


def _mlp(trans_b: bool) -> onnx.ModelProto:
    """Gemm(64→96, + bias; weight stored transposed when ``trans_b``) → Relu → MatMul(96→48)
    → Relu → MatMul(48→4, too small to factorise)."""
    rng = np.random.default_rng(5)
    w1 = rng.normal(size=(64, 96)) / 8
    inits = [_init("w1", w1.T if trans_b else w1), _init("b1", rng.normal(size=96) * 0.1),
             _init("w2", rng.normal(size=(96, 48)) / 10), _init("w3", rng.normal(size=(48, 4)))]
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["g"], transB=int(trans_b),
                              alpha=0.5, name="fc1"),
             helper.make_node("Relu", ["g"], ["r1"]),
             helper.make_node("MatMul", ["r1", "w2"], ["m2"], name="fc2"),
             helper.make_node("Relu", ["m2"], ["r2"]),
             helper.make_node("MatMul", ["r2", "w3"], ["y"], name="head")]
    return _model(nodes, inits, (64,), (4,))


def _inputs(count: int, seed: int) -> np.ndarray:
    """Inputs living mostly in 8 of 64 directions: what whitening can exploit."""
    basis = np.random.default_rng(11).normal(size=(8, 64))
    draws = np.random.default_rng(seed)
    return (draws.normal(size=(count, 8)) @ basis + 0.05 * draws.normal(size=(count, 64))
            ).astype(np.float32)


def _error(model: onnx.ModelProto, dense: onnx.ModelProto, x: np.ndarray) -> float:
    reference = run_chain([dense], {"x": x})["y"]
    got = run_chain([model], {"x": x})["y"]
    return float(np.linalg.norm(got - reference) / np.linalg.norm(reference))


def _shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    return {i.name: tuple(i.dims) for i in model.graph.initializer}


@pytest.mark.parametrize("trans_b", [False, True])
def test_factors_have_the_level_s_rank_and_the_boundaries_stay(trans_b: bool) -> None:
    dense = _mlp(trans_b)
    calibration = [{"x": _inputs(128, seed=1)}]
    factored = LowRankFactoriser(max_error=None).compress(dense, 0.5, calibration)
    onnx.checker.check_model(factored)
    assert boundary_signature(factored) == boundary_signature(dense)
    shapes = _shapes(factored)
    rank1, rank2 = rank_for(64, 96, 0.5), rank_for(96, 48, 0.5)
    assert (rank1, rank2) == (19, 16)
    assert shapes["w1/lowrank_a"] == (64, rank1) and shapes["w1/lowrank_b"] == (rank1, 96)
    assert shapes["w2/lowrank_a"] == (96, rank2) and shapes["w2/lowrank_b"] == (rank2, 48)
    assert shapes["w3"] == (48, 4) and "w1" not in shapes and "w2" not in shapes
    parameters = sum(int(np.prod(s)) for n, s in shapes.items() if "lowrank" in n)
    assert parameters <= 0.5 * (64 * 96 + 96 * 48)
    # The Gemm keeps its bias and alpha; its second factor is read untransposed.
    gemm = next(n for n in factored.graph.node if n.op_type == "Gemm")
    assert list(gemm.input) == ["g/lowrank", "w1/lowrank_b", "b1"]
    assert {a.name: helper.get_attribute_value(a) for a in gemm.attribute}.get("transB", 0) == 0


def test_full_rank_factors_reproduce_the_weight() -> None:
    rng = np.random.default_rng(3)
    weight = rng.normal(size=(40, 24)).astype(np.float32)
    moment = np.cov(rng.normal(size=(500, 40)), rowvar=False) + 0.1
    for given in (None, moment):
        left, right = factorise(weight, 24, given)
        np.testing.assert_allclose(left @ right, weight, atol=1e-4)


def test_whitening_fits_the_inputs_the_layer_sees() -> None:
    weight = np.random.default_rng(6).normal(size=(64, 96)) / 8
    dense = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [_init("w", weight)],
                   (64,), (96,))
    held_out = _inputs(256, seed=2)  # not the calibration draws
    plain = LowRankFactoriser().compress(dense, 0.75)
    whitened = LowRankFactoriser(max_error=None).compress(dense, 0.75,
                                                          [{"x": _inputs(256, seed=1)}])
    assert _error(whitened, dense, held_out) < 0.5 * _error(plain, dense, held_out)
    assert _error(whitened, dense, held_out) < 0.05


def test_mild_factorisation_keeps_accuracy_on_real_data(transformer) -> None:
    dense = accuracy(transformer.parts, transformer.trained)
    for position in range(2):
        factored = LowRankFactoriser().compress(transformer.parts[position], 0.25,
                                                transformer.calibration[position])
        assert accuracy(transformer.with_part(position, factored),
                        transformer.trained) >= dense - 0.02


def test_runs_on_openvino_as_on_onnx_runtime(transformer, run_openvino) -> None:
    part = LowRankFactoriser().compress(transformer.parts[1], 0.5, transformer.calibration[1])
    feed = transformer.calibration[1][0]
    expected = run_chain([part], feed)
    got = run_openvino(part, feed)
    for output in part.graph.output:
        np.testing.assert_allclose(got[output.name], expected[output.name], rtol=1e-3,
                                   atol=1e-3)


def _convnet(weight_rank: int | None = None) -> onnx.ModelProto:
    """Conv 3×3 (8→64, pad 1, stride 2, + bias) → Relu → Conv 1×1 (64→4, too small); the first
    weight, as a (8·3·3)×64 matrix, of rank ``weight_rank`` when given."""
    rng = np.random.default_rng(7)
    if weight_rank is None:
        w1 = rng.normal(size=(64, 8, 3, 3)) / 8
    else:
        matrix = rng.normal(size=(72, weight_rank)) @ rng.normal(size=(weight_rank, 64)) / 24
        w1 = np.moveaxis(matrix.reshape(8, 3, 3, 64), -1, 0)
    inits = [_init("w1", w1), _init("b1", rng.normal(size=64) * 0.1),
             _init("w2", rng.normal(size=(4, 64, 1, 1)) / 8)]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1],
                              strides=[2, 2], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2")]
    return _model(nodes, inits, (8, 10, 10), (4, 5, 5))


def _images(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(count, 8, 10, 10)).astype(np.float32)


def test_a_conv_becomes_a_thin_conv_and_a_pointwise_one() -> None:
    dense = _convnet()
    factored = LowRankFactoriser(max_error=None).compress(dense, 0.5,
                                                          [{"x": _images(16, seed=1)}])
    onnx.checker.check_model(factored)
    assert boundary_signature(factored) == boundary_signature(dense)
    rank = rank_for(72, 64, 0.5) // 8 * 8  # 16: rounded down to a multiple of 8
    shapes = _shapes(factored)
    assert shapes["w1/lowrank_a"] == (rank, 8, 3, 3) and shapes["w1/lowrank_b"] == (64, rank, 1, 1)
    assert shapes["w2"] == (4, 64, 1, 1) and shapes["b1"] == (64,)
    first, second = (n for n in factored.graph.node if "conv1" in n.name)
    attributes = {a.name: helper.get_attribute_value(a) for a in first.attribute}
    assert attributes["strides"] == [2, 2] and attributes["pads"] == [1, 1, 1, 1]
    assert list(first.input) == ["x", "w1/lowrank_a"]  # the bias moves to the 1×1 Conv
    assert list(second.input) == ["c1/lowrank", "w1/lowrank_b", "b1"]
    assert {a.name: helper.get_attribute_value(a) for a in second.attribute} == {
        "kernel_shape": [1, 1]}


@pytest.mark.parametrize("build", ["conv", "matmul"])
def test_a_weight_of_lower_rank_is_reproduced_exactly(build: str) -> None:
    if build == "conv":
        dense, x = _convnet(weight_rank=8), _images(8, seed=2)
    else:
        weight = np.random.default_rng(8).normal(size=(64, 6)) @ np.random.default_rng(9).normal(
            size=(6, 96)) / 8
        dense = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [_init("w", weight)],
                       (64,), (96,))
        x = _inputs(8, seed=2)
    for calibration in ((), [{"x": x}]):
        factored = LowRankFactoriser().compress(dense, 0.5, calibration)
        assert _error(factored, dense, x) < 1e-4


def test_whitening_fits_the_patches_a_conv_sees() -> None:
    dense = _convnet()
    direction = np.random.default_rng(12).normal(size=8)

    def along_one_direction(count: int, seed: int) -> np.ndarray:  # patches span 9 of 72
        draws = np.random.default_rng(seed).normal(size=(count, 1, 10, 10))
        return (draws * direction[None, :, None, None]).astype(np.float32)

    held_out = along_one_direction(32, seed=4)
    plain = LowRankFactoriser().compress(dense, 0.5)  # rank 16 of 64
    whitened = LowRankFactoriser(max_error=None).compress(
        dense, 0.5, [{"x": along_one_direction(32, 3)}])
    assert _error(whitened, dense, held_out) < 0.5 * _error(plain, dense, held_out)
    assert _error(whitened, dense, held_out) < 0.01


def test_mild_factorisation_keeps_the_cnn_s_accuracy(cnn) -> None:
    dense = accuracy(cnn.parts, cnn.trained)
    for position in range(2):
        factoriser = LowRankFactoriser()
        if factoriser.prunable(cnn.parts[position]):
            factored = factoriser.compress(cnn.parts[position], 0.25, cnn.calibration[position])
            assert accuracy(cnn.with_part(position, factored), cnn.trained) >= dense - 0.02


def test_the_layer_that_breaks_the_output_stays_dense() -> None:
    rng = np.random.default_rng(13)
    orthogonal = np.linalg.qr(rng.normal(size=(64, 64)))[0]  # flat spectrum: any cut hurts
    low = rng.normal(size=(64, 8)) @ rng.normal(size=(8, 64)) / 8  # rank 8: factorises exactly
    dense = _model([helper.make_node("MatMul", ["x", "w_flat"], ["h"]),
                    helper.make_node("MatMul", ["h", "w_low"], ["y"])],
                   [_init("w_flat", orthogonal), _init("w_low", low)], (64,), (64,))
    x = np.random.default_rng(14).normal(size=(256, 64)).astype(np.float32)
    batches = [{"x": x[i:i + 64]} for i in range(0, 256, 64)]
    everything = LowRankFactoriser(max_error=None).compress(dense, 0.5, batches)
    assert _error(everything, dense, x) > 0.5
    guarded = LowRankFactoriser().compress(dense, 0.5, batches)
    shapes = _shapes(guarded)
    assert shapes["w_flat"] == (64, 64) and shapes["w_low/lowrank_a"] == (64, 16)
    assert _error(guarded, dense, x) < 1e-3
    assert "dense layers (lowrank-0.5 output error" in guarded.doc_string
    assert guarded.doc_string.endswith(": w_flat")


def test_nothing_to_factorise_is_an_error_not_the_dense_graph() -> None:
    factoriser = LowRankFactoriser()
    small = _model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                   [_init("w", np.ones((64, 4)))], (64,), (4,))
    assert not factoriser.prunable(small)  # four outputs: nothing worth two products
    with pytest.raises(CompressionError, match="no Gemm/MatMul/Conv weight of at least 32"):
        factoriser.compress(small, 0.5)
    with pytest.raises(CompressionError, match="lacks subgraph inputs"):
        factoriser.compress(_mlp(False), 0.5, [{"wrong": np.zeros((2, 64), np.float32)}])


def test_the_input_model_is_not_modified() -> None:
    dense = _mlp(True)
    before = dense.SerializeToString()
    LowRankFactoriser().compress(dense, 0.5, [{"x": _inputs(64, seed=1)}])
    assert dense.SerializeToString() == before
    assert numpy_helper.to_array(dense.graph.initializer[0]).shape == (96, 64)


def test_the_zoo_cache_key_follows_the_sensitivity_settings() -> None:
    from sparseloom.zoo.options import compressor_cache_key

    default = compressor_cache_key(LowRankFactoriser, {})
    assert default is not None and default["max_error"] == 0.1
    assert compressor_cache_key(LowRankFactoriser, {"max_error": None}) != default
