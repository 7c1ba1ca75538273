"""ADMS partitioning through ``build_zoo`` with the backends' real ``supports()`` answers.

The model carries ONNX Runtime's ``com.microsoft.Inverse``, which OpenVINO has no converter
for: the piece holding it must be marked as runnable on ``ort:CPU`` only (and OpenVINO really
refuses it), the other piece on both processors.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from sparseloom.core.errors import BackendError
from sparseloom.workload.inference import load_model
from sparseloom.workload.task import Task
from sparseloom.zoo.build import build_zoo
from sparseloom.zoo.options import ZooOptions
from tests.zoo.zoo_support import (
    chain_with_onnxruntime,
    tiny_task,
)

PROCESSORS = ("ov:CPU", "ort:CPU")



def inverse_model(path: Path) -> Path:
    """x[N, 8] → MatMul → Relu → MatMul → [N, 3, 3] + 4·I → Inverse → [N, 9] → MatMul → [N, 3]."""
    rng = np.random.default_rng(0)
    weights = {
        "w1": rng.normal(size=(8, 16)), "w2": rng.normal(size=(16, 9)) * 0.3,
        "w3": rng.normal(size=(9, 3)), "eye4": 4 * np.eye(3),
    }
    initializers = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()]
    initializers += [numpy_helper.from_array(np.array([-1, 3, 3], np.int64), "square"),
                     numpy_helper.from_array(np.array([-1, 9], np.int64), "flat")]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["r1"]),
        helper.make_node("MatMul", ["r1", "w2"], ["h2"]),
        helper.make_node("Reshape", ["h2", "square"], ["m"]),
        helper.make_node("Add", ["m", "eye4"], ["well_conditioned"]),
        helper.make_node("Inverse", ["well_conditioned"], ["inverse"], domain="com.microsoft"),
        helper.make_node("Reshape", ["inverse", "flat"], ["f"]),
        helper.make_node("MatMul", ["f", "w3"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes, "with_inverse", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def inverse_task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    path = inverse_model(tmp_path_factory.mktemp("adms") / "inverse.onnx")
    x = np.random.default_rng(1).normal(size=(64, 8)).astype(np.float32)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    labels = session.run(None, {"x": x})[0].argmax(1)
    return Task(name="inverse", model_path=path, eval_inputs={"x": x}, labels=labels,
                calibration_inputs={"x": x[:16]}, metric="accuracy", input_names=("x",),
                output_names=("logits",))


def test_piece_with_an_op_openvino_lacks_runs_on_onnxruntime_only(inverse_task: Task) -> None:
    zoo = build_zoo(inverse_task, ZooOptions(subgraphs=2, variants=("dense", "unstructured-0.5"),
                                             mode="adms", processors=PROCESSORS),
                    rebuild=True, progress=False)
    supported_by = [tuple(s) for s in zoo.manifest["partition"]["supported_by"]]
    holds_inverse = [any(n.op_type == "Inverse" for n in
                         onnx.load(str(zoo.subgraph_path(j, 0))).graph.node) for j in range(2)]
    assert sorted(holds_inverse) == [False, True]
    assert supported_by == [("ort:CPU",) if inverse else PROCESSORS for inverse in holds_inverse]
    # What supports() said is what the backends do.
    for position, inverse in enumerate(holds_inverse):
        backend, loaded = load_model(str(zoo.subgraph_path(position, 0)), "ort:CPU")
        backend.unload(loaded)
        if inverse:
            with pytest.raises(BackendError, match="Inverse"):
                load_model(str(zoo.subgraph_path(position, 0)), "ov:CPU")
        else:
            backend, loaded = load_model(str(zoo.subgraph_path(position, 0)), "ov:CPU")
            backend.unload(loaded)
    # The dense chain is the model: every eval label (the model's own argmax) is hit.
    outputs = chain_with_onnxruntime(zoo.directory, (0, 0), inverse_task.eval_inputs)
    assert inverse_task.score(outputs) == 1.0 == zoo.variants[0].metric


def test_standard_ops_are_supported_by_both_processors() -> None:
    zoo = build_zoo(tiny_task(), ZooOptions(subgraphs=2, variants=("dense", "fp16"),
                                            mode="adms", processors=PROCESSORS),
                    progress=False)
    assert zoo.manifest["partition"]["supported_by"] == [list(PROCESSORS)] * 2
