"""Structured pruning's least-squares refit of the next layer ("sink"), against plain ONNX
Runtime runs of the dense model: it must bring the pruned output closer to the dense one than
the mean bias fold does, on inputs it was not fitted on, and ``refit=False`` must keep the fold.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sparseloom.plugins.compressors import StructuredPruner, boundary_signature
from sparseloom.plugins.compressors._sink_fit import conv_patches, sink_matrix
from sparseloom.zoo.variants import create_compressor
from tests.plugins.compressors.models import graph_model as _model
from tests.plugins.compressors.models import initializer as _init
from tests.plugins.compressors.models import run_chain

LEVELS = (0.25, 0.5)


def _array(model: onnx.ModelProto, name: str) -> np.ndarray:
    return next(numpy_helper.to_array(i) for i in model.graph.initializer if i.name == name)


def _mlp() -> onnx.ModelProto:
    """MatMul(16→64) → Add → Relu → MatMul(64→8) → Add; random weights."""
    rng = np.random.default_rng(1)
    inits = [_init("w1", rng.normal(size=(16, 64)) / 4), _init("b1", rng.normal(size=64) * 0.2),
             _init("w2", rng.normal(size=(64, 8)) / 8), _init("b2", rng.normal(size=8))]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"]),
        helper.make_node("Add", ["m1", "b1"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["m2"]),
        helper.make_node("Add", ["m2", "b2"], ["y"]),
    ]
    return _model(nodes, inits, (16,), (8,))


def _convnet() -> onnx.ModelProto:
    """Conv 3×3 (4→32, pad 1) → Relu → Conv 1×1 (32→8); random weights."""
    rng = np.random.default_rng(2)
    inits = [_init("w1", rng.normal(size=(32, 4, 3, 3)) / 6),
             _init("b1", rng.normal(size=32) * 0.2),
             _init("w2", rng.normal(size=(8, 32, 1, 1)) / 6), _init("b2", rng.normal(size=8))]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r"]),
        helper.make_node("Conv", ["r", "w2", "b2"], ["y"]),
    ]
    return _model(nodes, inits, (4, 8, 8), (8, 8, 8))


def _inputs(name: str, count: int, seed: int) -> np.ndarray:
    """Correlated Gaussian inputs with an offset: one fixed distribution, any number of draws."""
    mixing = np.random.default_rng(10).normal(size=(16, 16) if name == "mlp" else (4, 4))
    draws = np.random.default_rng(seed)
    if name == "mlp":
        x = draws.normal(size=(count, 16)) @ mixing + 0.3
    else:
        x = np.einsum("nchw,cd->ndhw", draws.normal(size=(count, 4, 8, 8)), mixing) + 0.3
    return x.astype(np.float32)


BUILDERS = {"mlp": _mlp, "convnet": _convnet}


@pytest.fixture(scope="module")
def synthetic() -> dict[str, tuple[onnx.ModelProto, list[dict[str, np.ndarray]], np.ndarray]]:
    """Per model: the dense model, 4 calibration batches of 64, and 256 held-out inputs."""
    cases = {}
    for name, build in BUILDERS.items():
        calibration = _inputs(name, 256, seed=3)
        cases[name] = (build(), [{"x": calibration[i : i + 64]} for i in range(0, 256, 64)],
                       _inputs(name, 256, seed=4))
    return cases


def _relative_l2(model: onnx.ModelProto, dense: onnx.ModelProto, x: np.ndarray) -> float:
    expected = run_chain([dense], {"x": x})["y"]
    return float(np.linalg.norm(run_chain([model], {"x": x})["y"] - expected)
                 / np.linalg.norm(expected))


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_refit_is_closer_to_dense_on_held_out_inputs(synthetic, name: str, level: float) -> None:
    dense, calibration, held_out = synthetic[name]
    folded = StructuredPruner(refit=False).compress(dense, level, calibration)
    refitted = StructuredPruner().compress(dense, level, calibration)
    assert _array(refitted, "w1").shape == _array(folded, "w1").shape  # same channels cut
    error_fold = _relative_l2(folded, dense, held_out)
    error_refit = _relative_l2(refitted, dense, held_out)
    assert 0.0 < error_refit < 0.9 * error_fold, (name, level, error_refit, error_fold)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_refit_keeps_boundaries_and_runs_on_both_runtimes(synthetic, run_openvino,
                                                          name: str) -> None:
    dense, calibration, held_out = synthetic[name]
    pruned = StructuredPruner().compress(dense, 0.5, calibration)
    assert boundary_signature(pruned) == boundary_signature(dense)
    assert all(i.data_type == TensorProto.FLOAT for i in pruned.graph.initializer)
    feed = {"x": held_out[:32]}
    on_ort = run_chain([pruned], feed)["y"]
    assert on_ort.shape == run_chain([dense], feed)["y"].shape and on_ort.dtype == np.float32
    np.testing.assert_allclose(run_openvino(pruned, feed)["y"], on_ort, rtol=1e-4, atol=1e-4)


def _kept_columns(pruned: onnx.ModelProto, dense: onnx.ModelProto) -> list[int]:
    """Which hidden neurons of the MLP survived, found by matching ``w1``'s columns."""
    before, after = _array(dense, "w1"), _array(pruned, "w1")
    return [int(np.flatnonzero((before == after[:, [j]]).all(0))[0])
            for j in range(after.shape[1])]


def _hidden(dense: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """The MLP's ReLU output for ``x``, from ONNX Runtime."""
    probe = onnx.ModelProto()
    probe.CopyFrom(dense)
    probe.graph.output.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, None))
    return run_chain([probe], {"x": x})["r"]


def test_refit_off_is_the_mean_bias_fold(synthetic) -> None:
    """``refit=False``: the consumer keeps its weight rows bit for bit and its bias gains the
    removed neurons' mean contribution (hand-computed from a dense ORT run); the option read
    the way a workload file's ``[compressors.structured]`` table gives it builds the same."""
    dense, calibration, _ = synthetic["mlp"]
    folded = StructuredPruner(refit=False).compress(dense, 0.5, calibration)
    kept = _kept_columns(folded, dense)
    removed = sorted(set(range(64)) - set(kept))
    assert len(kept) == 32
    np.testing.assert_array_equal(_array(folded, "w2"), _array(dense, "w2")[kept])
    mean = _hidden(dense, np.concatenate([b["x"] for b in calibration])).mean(0, dtype=np.float64)
    expected_bias = _array(dense, "b2") + mean[removed] @ _array(dense, "w2")[removed]
    np.testing.assert_allclose(_array(folded, "b2"), expected_bias, rtol=1e-5, atol=1e-6)
    from_options = create_compressor("structured", {"refit": False})
    assert from_options.refit is False
    again = from_options.compress(dense, 0.5, calibration)
    assert again.SerializeToString() == folded.SerializeToString()


def test_refit_changes_the_consumer_not_the_choice(synthetic) -> None:
    dense, calibration, _ = synthetic["mlp"]
    folded = StructuredPruner(refit=False).compress(dense, 0.5, calibration)
    refitted = StructuredPruner().compress(dense, 0.5, calibration)
    np.testing.assert_array_equal(_array(refitted, "w1"), _array(folded, "w1"))
    change = np.abs(_array(refitted, "w2") - _array(folded, "w2")).max()
    assert change > 1e-3 * np.abs(_array(folded, "w2")).max()
    assert not np.array_equal(_array(refitted, "b2"), _array(folded, "b2"))


def test_refit_recovers_channels_that_are_copies_of_kept_ones() -> None:
    """Conv 3×3 → Relu → Conv 3×3 (stride 2, pad 1, dilation 1) where channels 4..7 are 0.3×
    channels 0..3: the removed channels' contribution is a linear function of the kept ones,
    so the refit must reproduce the dense output (padding borders included); the fold cannot."""
    rng = np.random.default_rng(5)
    w1 = rng.normal(size=(4, 3, 3, 3))
    b1 = rng.normal(size=4) * 0.1
    inits = [_init("w1", np.concatenate([w1, 0.3 * w1])),
             _init("b1", np.concatenate([b1, 0.3 * b1])),
             _init("w2", rng.normal(size=(5, 8, 3, 3))), _init("b2", rng.normal(size=5))]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r"]),
        helper.make_node("Conv", ["r", "w2", "b2"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2]),
    ]
    dense = _model(nodes, inits, (3, 6, 6), (5, 3, 3))
    x = rng.normal(size=(96, 3, 6, 6)).astype(np.float32)
    calibration = [{"x": x[:32]}, {"x": x[32:64]}]
    refitted = StructuredPruner().compress(dense, 0.5, calibration)
    folded = StructuredPruner(refit=False).compress(dense, 0.5, calibration)
    np.testing.assert_array_equal(_array(refitted, "w1"), _array(dense, "w1")[:4])
    assert _relative_l2(refitted, dense, x[64:]) < 1e-2 < _relative_l2(folded, dense, x[64:])


@pytest.mark.parametrize("attributes", [
    {"pads": [1, 1, 1, 1]},
    {"pads": [0, 1, 2, 1], "strides": [2, 1]},
    {"dilations": [2, 2], "pads": [2, 2, 2, 2], "strides": [2, 2]},
    {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"auto_pad": "SAME_LOWER", "strides": [2, 2], "kernel_shape": [2, 2]},
    {"auto_pad": "VALID"},
])
def test_patches_times_weight_is_the_conv(attributes: dict) -> None:
    """The refit's im2col rows times the weight matrix give ONNX Runtime's Conv output."""
    attributes = dict(attributes)
    kernel = attributes.pop("kernel_shape", [3, 3])
    rng = np.random.default_rng(6)
    weight = rng.normal(size=(5, 3, *kernel)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], **attributes)
    graph = helper.make_graph([node], "conv",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[_init("w", weight)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.normal(size=(2, 3, 7, 6)).astype(np.float32)
    expected = run_chain([model], {"x": x})["y"]  # (N, 5, OH, OW)
    everything = expected.shape[0] * expected.shape[2] * expected.shape[3]
    patches = conv_patches(node, kernel, x, everything, np.random.default_rng(0))
    got = patches @ sink_matrix(node, weight.astype(np.float64), 1)
    np.testing.assert_allclose(got, np.moveaxis(expected, 1, -1).reshape(-1, 5), atol=1e-4)


def test_the_refit_default_changes_the_zoo_cache_key(monkeypatch) -> None:
    """Zoos built before the refit (no cache key from the pruner) must not be reused, and
    ``refit = false`` in the workload file gives its own zoo."""
    from sparseloom.zoo.options import ZooOptions
    from tests.zoo.zoo_support import tiny_task

    task = tiny_task()

    def config(**compressor_options) -> dict:
        return ZooOptions(subgraphs=2, variants=["dense", "structured-0.25"],
                          compressor_options=compressor_options).config(task)

    with_refit, without = config(), config(structured={"refit": False})
    monkeypatch.delattr(StructuredPruner, "cache_key")
    before_the_refit = config()
    assert with_refit != before_the_refit and with_refit != without


def test_tiny_whole_model_loses_no_more_with_refit() -> None:
    """The bundled ResNet pruned whole at 0.25 (its sinks are 3×3 convs): held-out accuracy
    with the refit is at least that of the bias fold."""
    from tests.zoo.zoo_support import tiny_task

    task = tiny_task()
    model = onnx.load(str(task.model_path))
    calibration = task.calibration_batches()
    scores = {
        refit: task.score(run_chain(
            [StructuredPruner(refit=refit).compress(model, 0.25, calibration)], task.eval_inputs))
        for refit in (False, True)
    }
    assert scores[True] >= scores[False], scores
