"""Low-rank factorisation against plain ONNX Runtime runs of the dense model: the factor pair
is exact at full rank, the whitened SVD fits the layer's real inputs better than the plain one
on inputs it was not fitted on, shapes and boundaries hold, and accuracy stays on real data."""

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
    factored = LowRankFactoriser().compress(dense, 0.5, calibration)
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
    whitened = LowRankFactoriser().compress(dense, 0.75, [{"x": _inputs(256, seed=1)}])
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


def test_nothing_to_factorise_is_an_error_not_the_dense_graph(cnn) -> None:
    factoriser = LowRankFactoriser()
    assert not factoriser.prunable(cnn.parts[0])  # convolutions only
    with pytest.raises(CompressionError, match="no Gemm/MatMul weight of at least 32×32"):
        factoriser.compress(cnn.parts[0], 0.5, cnn.calibration[0])
    with pytest.raises(CompressionError, match="lacks subgraph inputs"):
        factoriser.compress(_mlp(False), 0.5, [{"wrong": np.zeros((2, 64), np.float32)}])


def test_the_input_model_is_not_modified() -> None:
    dense = _mlp(True)
    before = dense.SerializeToString()
    LowRankFactoriser().compress(dense, 0.5, [{"x": _inputs(64, seed=1)}])
    assert dense.SerializeToString() == before
    assert numpy_helper.to_array(dense.graph.initializer[0]).shape == (96, 64)
