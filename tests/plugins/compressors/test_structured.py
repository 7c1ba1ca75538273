"""Structured pruning: which channels are prunable, that shapes shrink, and that it is exact
when the removed channels carry no information."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from sparseloom.core.errors import CompressionError
from sparseloom.plugins.compressors import StructuredPruner, boundary_signature
from tests.plugins.compressors.models import accuracy, run_chain
from tests.plugins.compressors.models import graph_model as _model
from tests.plugins.compressors.models import initializer as _init


def _weights(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    return {i.name: tuple(i.dims) for i in model.graph.initializer}


def _parameters(model: onnx.ModelProto) -> int:
    return sum(int(np.prod(shape)) for shape in _weights(model).values())


def test_prunable_groups_and_reasons(cnn, transformer) -> None:
    pruner = StructuredPruner()
    groups, reasons = pruner.groups(cnn.parts[0])
    assert [(g.producer, g.channels) for g in groups] == [("/conv1/Conv", 16)]
    assert any("conv2" in r and "subgraph output" in r for r in reasons)
    groups, _ = pruner.groups(cnn.parts[1])
    assert [g.producer for g in groups] == ["/conv3/Conv", "/fc1/Gemm"]
    assert groups[0].sinks[0].block == 4  # conv3 → pool → Flatten(48×2×2) → fc1
    groups, reasons = pruner.groups(transformer.parts[1])
    assert [g.producer for g in groups] == ["/blocks.1/ffn1/MatMul"]  # FFN neurons only
    assert any("qkv.0" in r and "Reshape" in r for r in reasons)  # heads are not pruned
    assert any("proj" in r and "LayerNormalization" in r for r in reasons)


def test_weights_shrink_and_boundaries_stay(cnn) -> None:
    dense = cnn.parts[1]
    pruned = StructuredPruner().compress(dense, 0.5, cnn.calibration[1])
    assert boundary_signature(pruned) == boundary_signature(dense)
    before, after = _weights(dense), _weights(pruned)
    assert before["conv3.weight"] == (48, 32, 3, 3) and after["conv3.weight"] == (24, 32, 3, 3)
    assert after["conv3.bias"] == (24,)
    assert before["fc1.weight"] == (96, 192) and after["fc1.weight"] == (48, 96)
    assert after["fc2.weight"] == (10, 48) and after["fc2.bias"] == (10,)
    assert _parameters(pruned) < 0.4 * _parameters(dense)
    assert len(pruned.SerializeToString()) < 0.4 * len(dense.SerializeToString())


@pytest.mark.parametrize("name", ["cnn", "transformer"])
def test_mild_pruning_keeps_accuracy(models, name: str) -> None:
    cut = models[name]
    dense = accuracy(cut.parts, cut.trained)
    for position in range(2):
        pruned = StructuredPruner().compress(cut.parts[position], 0.25,
                                             cut.calibration[position])
        assert accuracy(cut.with_part(position, pruned), cut.trained) >= dense - 0.03


def test_heavier_pruning_costs_more(cnn) -> None:
    # With the bias fold only: the refit keeps both levels within a point on this part
    # (0.978 / 0.970); test_structured_refit.py compares the two.
    pruner = StructuredPruner(refit=False)
    results = [
        accuracy(cnn.with_part(0, pruner.compress(cnn.parts[0], level, cnn.calibration[0])),
                 cnn.trained)
        for level in (0.25, 0.75)
    ]
    assert results[1] < results[0] - 0.03, results


def test_runs_on_openvino(transformer, run_openvino) -> None:
    pruned = StructuredPruner().compress(transformer.parts[1], 0.5, transformer.calibration[1])
    feed = transformer.calibration[1][0]
    expected = run_chain([pruned], feed)["logits"]
    np.testing.assert_allclose(run_openvino(pruned, feed)["logits"], expected, atol=1e-3)


def test_nothing_prunable_is_an_error(cnn) -> None:
    only_conv = onnx.utils.Extractor(cnn.parts[0]).extract_model(
        ["image"], ["/conv1/Conv_output_0"])
    pruner = StructuredPruner()
    assert not pruner.prunable(only_conv)
    with pytest.raises(CompressionError, match=r"structured.*nothing.*subgraph output.*prunable"):
        pruner.compress(only_conv, 0.5, [])


# --- hand-built graphs: removing dead channels must leave the outputs unchanged ---------------

_RNG = np.random.default_rng(0)


def _conv_bn_depthwise() -> onnx.ModelProto:
    """Conv(4→8) → BN → Relu → depthwise Conv → Conv 1×1 (8→5); channels 0, 2, 4, 6 are dead."""
    dead = np.arange(8) % 2 == 0
    w1 = _RNG.normal(size=(8, 4, 3, 3)) * ~dead[:, None, None, None]
    gamma = np.where(dead, 0.0, _RNG.uniform(0.5, 1.5, 8))
    beta = np.where(dead, -1.0, _RNG.normal(size=8))  # dead: relu(-1) = 0
    dw_bias = np.where(dead, 0.0, _RNG.normal(size=8))
    inits = [
        _init("w1", w1), _init("b1", np.where(dead, 0.0, _RNG.normal(size=8))),
        _init("gamma", gamma), _init("beta", beta), _init("mean", _RNG.normal(size=8) * 0.1),
        _init("var", _RNG.uniform(0.5, 2.0, 8)),
        _init("wd", _RNG.normal(size=(8, 1, 3, 3))), _init("bd", dw_bias),
        _init("w2", _RNG.normal(size=(5, 8, 1, 1))), _init("b2", _RNG.normal(size=5)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "gamma", "beta", "mean", "var"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["r"]),
        helper.make_node("Conv", ["r", "wd", "bd"], ["dw"], group=8, pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["dw", "w2", "b2"], ["y"]),
    ]
    return _model(nodes, inits, (4, 6, 6), (5, 6, 6))


def _conv_flatten_gemm() -> onnx.ModelProto:
    """Conv(3→6) → Relu → MaxPool → Flatten → Gemm(transB); channels 1, 3, 5 are dead."""
    dead = np.arange(6) % 2 == 1
    inits = [
        _init("w1", _RNG.normal(size=(6, 3, 3, 3)) * ~dead[:, None, None, None]),
        _init("b1", np.where(dead, -0.5, _RNG.normal(size=6))),
        _init("w2", _RNG.normal(size=(7, 6 * 2 * 2))), _init("b2", _RNG.normal(size=7)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "w2", "b2"], ["y"], transB=1),
    ]
    return _model(nodes, inits, (3, 4, 4), (7,))


def _ffn(residual: bool = False) -> onnx.ModelProto:
    """MatMul(8→16) → Add bias → GELU (erf form) → MatMul(16→8) → Add bias [→ + x]."""
    dead = np.arange(16) < 8
    inits = [
        _init("w1", _RNG.normal(size=(8, 16)) * ~dead), _init("b1", np.where(dead, -30.0, 0.1)),
        _init("w2", _RNG.normal(size=(16, 8))), _init("b2", _RNG.normal(size=8)),
        _init("sqrt2", np.float32(np.sqrt(2.0))), _init("one", np.float32(1.0)),
        _init("half", np.float32(0.5)),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"]),
        helper.make_node("Add", ["b1", "m1"], ["h"]),
        helper.make_node("Div", ["h", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["e1"]),
        helper.make_node("Mul", ["h", "e1"], ["g0"]),
        helper.make_node("Mul", ["g0", "half"], ["g"]),
        helper.make_node("MatMul", ["g", "w2"], ["m2"]),
        helper.make_node("Add", ["m2", "b2"], ["o" if residual else "y"]),
    ]
    if residual:
        nodes.append(helper.make_node("Add", ["o", "x"], ["y"]))
    return _model(nodes, inits, (5, 8), (5, 8))


def _array(model: onnx.ModelProto, name: str) -> np.ndarray:
    return next(numpy_helper.to_array(i) for i in model.graph.initializer if i.name == name)


# ``live`` are the channels each builder leaves alive, ``axis`` their axis in ``w1``.
@pytest.mark.parametrize(("build", "x_shape", "live", "axis"), [
    (_conv_bn_depthwise, (4, 6, 6), [1, 3, 5, 7], 0),
    (_conv_flatten_gemm, (3, 4, 4), [0, 2, 4], 0),
    (_ffn, (5, 8), list(range(8, 16)), 1),
])
@pytest.mark.parametrize("with_calibration", [True, False])
def test_removing_dead_channels_is_exact(build, x_shape, live, axis, with_calibration) -> None:
    model = build()
    x = _RNG.normal(size=(16, *x_shape)).astype(np.float32)
    calibration = [{"x": x[:8]}, {"x": x[8:]}] if with_calibration else []
    pruned = StructuredPruner().compress(model, 0.5, calibration)
    # Exactly the live channels remain, in order, with their weights untouched.
    np.testing.assert_array_equal(_array(pruned, "w1"),
                                  np.take(_array(model, "w1"), live, axis=axis))
    np.testing.assert_allclose(run_chain([pruned], {"x": x})["y"],
                               run_chain([model], {"x": x})["y"], rtol=1e-4, atol=1e-4)


def test_depthwise_group_follows_the_kept_channels() -> None:
    pruned = StructuredPruner().compress(_conv_bn_depthwise(), 0.5, [])
    depthwise = [n for n in pruned.graph.node if n.op_type == "Conv"][1]
    group = next(a for a in depthwise.attribute if a.name == "group")
    assert helper.get_attribute_value(group) == 4
    assert _weights(pruned)["gamma"] == (4,) and _weights(pruned)["wd"] == (4, 1, 3, 3)


def test_residual_keeps_its_channels() -> None:
    pruner = StructuredPruner()
    model = _ffn(residual=True)
    groups, _ = pruner.groups(model)
    assert [g.producer for g in groups] == [model.graph.node[0].name or "m1"]
    pruned = pruner.compress(model, 0.5, [])
    assert _weights(pruned)["w2"] == (8, 8)  # second MatMul's outputs feed the residual: kept
