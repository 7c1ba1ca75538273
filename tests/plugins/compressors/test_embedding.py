"""INT8 embedding tables: a Gather from a large float32 table read from an int8 one, per-row
scales; checked against the float table's rows on ONNX Runtime and OpenVINO."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sparseloom.plugins.compressors import Int8Quantizer, boundary_signature
from sparseloom.plugins.compressors._embedding import MIN_ROWS, quantize_embeddings
from tests.plugins.compressors.models import run_chain

ROWS, WIDTH, TOKENS = 2048, 64, 12


def _table(rows: int = ROWS) -> np.ndarray:
    """Rows of very different magnitudes (a per-tensor scale would flatten the small ones),
    one of them all zeros."""
    rng = np.random.default_rng(0)
    table = rng.normal(size=(rows, WIDTH)) * np.exp(rng.uniform(-6, 2, size=(rows, 1)))
    table[7] = 0.0
    return table.astype(np.float32)


def _lookup_model(table: np.ndarray, *, second_user: bool = False,
                  project: bool = False) -> onnx.ModelProto:
    """``ids (batch, TOKENS) → Gather(table) [→ MatMul] → y``; ``second_user``: the table is
    read by a second node too (a tied weight)."""
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["rows"], name="lookup")]
    inits = [numpy_helper.from_array(table, "table")]
    last = "rows"
    if project:
        inits.append(numpy_helper.from_array(
            rng.normal(size=(WIDTH, 16)).astype(np.float32), "weight"))
        nodes.append(helper.make_node("MatMul", ["rows", "weight"], ["projected"], name="proj"))
        last = "projected"
    if second_user:
        nodes.append(helper.make_node("ReduceSum", ["table"], ["total"], keepdims=0))
        nodes.append(helper.make_node("Add", [last, "total"], ["summed"]))
        last = "summed"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    width = 16 if project else WIDTH
    graph = helper.make_graph(
        nodes, "lookup",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", TOKENS])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", TOKENS, width])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def _ids(batch: int = 8) -> np.ndarray:
    ids = np.random.default_rng(2).integers(0, ROWS, size=(batch, TOKENS))
    ids[0, :3] = (0, 7, ROWS - 1)  # the first row, the zero row, the last row
    return ids.astype(np.int64)


def test_each_row_keeps_its_resolution_on_both_runtimes(
        run_openvino: Callable[[onnx.ModelProto, dict[str, np.ndarray]],
                               dict[str, np.ndarray]]) -> None:
    table = _table()
    model = _lookup_model(table)
    before = model.SerializeToString()
    assert quantize_embeddings(model) == ["table"]
    onnx.checker.check_model(model)
    assert boundary_signature(model) == boundary_signature(onnx.load_from_string(before))
    stored = {i.name: i for i in model.graph.initializer}
    assert "table" not in stored and stored["table.int8"].data_type == TensorProto.INT8
    assert list(stored["table.int8"].dims) == [ROWS, WIDTH]
    ids = _ids()
    want = table[ids]
    # Symmetric per row: an entry is off by at most half its row's step (largest magnitude
    # ÷ 127), and an all-zero row stays exactly zero.
    step = np.abs(table).max(axis=1)[ids][..., None] / 127
    for got in (run_chain([model], {"ids": ids})["y"], run_openvino(model, {"ids": ids})["y"]):
        assert got.shape == want.shape
        assert np.all(np.abs(got - want) <= step * 0.5 * (1 + 1e-5) + 1e-30)
        assert not np.any(got[0, 1])


def test_small_tables_tied_tables_and_other_axes_stay_float() -> None:
    small = _lookup_model(_table(MIN_ROWS - 1))
    tied = _lookup_model(_table(), second_user=True)
    for model in (small, tied):
        before = model.SerializeToString()
        assert quantize_embeddings(model) == []
        assert model.SerializeToString() == before
    sideways = _lookup_model(_table())
    helper_node = sideways.graph.node[0]
    helper_node.attribute.append(helper.make_attribute("axis", 1))
    assert quantize_embeddings(sideways) == []


def test_int8_quantizer_stores_the_table_in_int8_and_says_so(
        run_openvino: Callable[[onnx.ModelProto, dict[str, np.ndarray]],
                               dict[str, np.ndarray]]) -> None:
    table = _table()
    model = _lookup_model(table, project=True)
    calibration = [{"ids": _ids(16)} for _ in range(2)]
    quantized = Int8Quantizer().compress(model, 0.0, calibration)
    stored = {i.name: i for i in quantized.graph.initializer}
    assert stored["table.int8"].data_type == TensorProto.INT8 and "table" not in stored
    assert "int8 embedding tables, one scale per row: table" in quantized.doc_string
    ids = _ids()
    dense = run_chain([model], {"ids": ids})["y"]
    for got in (run_chain([quantized], {"ids": ids})["y"],
                run_openvino(quantized, {"ids": ids})["y"]):
        # Rows of very different magnitudes through one per-tensor activation range: the
        # tokens of the largest rows carry the error budget.
        assert np.linalg.norm(got - dense) / np.linalg.norm(dense) < 0.05
    kept = Int8Quantizer(embeddings=False).compress(model, 0.0, calibration)
    assert "table" in {i.name for i in kept.graph.initializer}


@pytest.mark.slow
def test_sentiment_s_word_embedding_in_int8_keeps_its_answers() -> None:
    """On the bundled ``sentiment`` model and its eval rows: the 30,522-row word embedding in
    int8 shrinks the weights by three quarters of the table and keeps the answers."""
    from sparseloom.workload.load import load_workload

    task = load_workload("default", progress=False).task("sentiment")
    model = onnx.load(str(task.model_path))
    rows = {name: array[:128] for name, array in task.eval_inputs.items()}
    dense = run_chain([model], rows)[model.graph.output[0].name]
    size = model.ByteSize()
    assert quantize_embeddings(model) == ["embeddings.word_embeddings.weight"]
    assert model.ByteSize() < size - 30e6  # 47 MB of float32 → 12 MB of int8
    got = run_chain([model], rows)[model.graph.output[0].name]
    assert np.linalg.norm(got - dense) / np.linalg.norm(dense) < 0.01
    assert np.mean(got.argmax(-1) == dense.argmax(-1)) >= 0.99
