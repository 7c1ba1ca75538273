"""Unstructured magnitude pruning on trained subgraphs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from sparseloom.core.errors import CompressionError
from sparseloom.plugins.compressors import UnstructuredPruner, boundary_signature, zero_fraction
from sparseloom.plugins.compressors._common import weight_initializers
from tests.plugins.compressors.models import accuracy, run_chain


@pytest.mark.parametrize("level", [0.3, 0.7])
def test_each_weight_loses_its_fraction_and_nothing_else_changes(cnn, level: float) -> None:
    dense = cnn.parts[1]
    before = dense.SerializeToString()
    pruned = UnstructuredPruner(scope="layer").compress(dense, level, [])
    assert dense.SerializeToString() == before, "the input subgraph must not be modified"
    assert boundary_signature(pruned) == boundary_signature(dense)
    weights = {init.name for init in weight_initializers(dense)}
    assert weights == {"conv3.weight", "fc1.weight", "fc2.weight"}
    for original, result in zip(dense.graph.initializer, pruned.graph.initializer, strict=True):
        old, new = numpy_helper.to_array(original), numpy_helper.to_array(result)
        if original.name in weights:
            assert (new == 0).sum() == round(level * old.size)
            kept = new != 0
            assert np.array_equal(new[kept], old[kept])
            assert np.abs(old[~kept]).max() <= np.abs(old[kept]).min()
        else:  # biases untouched
            assert np.array_equal(old, new)
    assert zero_fraction(pruned) == pytest.approx(level, abs=0.01)


def test_global_scope_hits_the_overall_fraction_and_spares_every_layer(transformer) -> None:
    assert UnstructuredPruner().scope == "global"
    pruned = UnstructuredPruner().compress(transformer.parts[0], 0.5, [])
    assert zero_fraction(pruned) == pytest.approx(0.5, abs=0.005)
    per_layer = [float((numpy_helper.to_array(i) == 0).mean()) for i in weight_initializers(pruned)]
    assert max(per_layer) - min(per_layer) > 0.05  # layers lose different fractions
    extreme = UnstructuredPruner(min_kept_fraction=0.1).compress(transformer.parts[0], 0.99, [])
    for init in weight_initializers(extreme):
        assert (numpy_helper.to_array(init) != 0).mean() >= 0.1


@pytest.mark.parametrize("name", ["cnn", "transformer"])
def test_mild_pruning_keeps_accuracy_heavy_pruning_loses_it(models, name: str) -> None:
    cut = models[name]
    dense = accuracy(cut.parts, cut.trained)
    mild = [accuracy(cut.with_part(p, UnstructuredPruner().compress(cut.parts[p], 0.3, [])),
                     cut.trained) for p in range(2)]
    heavy = accuracy(cut.with_part(0, UnstructuredPruner().compress(cut.parts[0], 0.9, [])),
                     cut.trained)
    assert min(mild) >= dense - 0.02, (dense, mild)
    assert heavy < dense - 0.1, (dense, heavy)


def test_pruned_subgraph_runs_on_openvino(transformer, run_openvino) -> None:
    pruned = UnstructuredPruner().compress(transformer.parts[1], 0.5, [])
    feed = transformer.calibration[1][0]
    expected = run_chain([pruned], feed)["logits"]
    np.testing.assert_allclose(run_openvino(pruned, feed)["logits"], expected, atol=1e-3)


def test_nothing_to_prune_is_an_error() -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "relu_only",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 4])],
    )
    model = helper.make_model(graph)
    pruner = UnstructuredPruner()
    assert not pruner.prunable(model)
    with pytest.raises(CompressionError, match=r"unstructured.*no float32 Conv/Gemm/MatMul.*Relu"):
        pruner.compress(model, 0.5, [])
