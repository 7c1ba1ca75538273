"""The partitioner: valid cuts, multi-tensor boundaries, balance, ADMS mode, equivalence."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from sparseloom.core.errors import ConfigError, ZooError
from sparseloom.zoo.cost import node_costs
from sparseloom.zoo.extract import merge_chain
from sparseloom.zoo.graph import prepare_model
from sparseloom.zoo.partition import find_cut_points, partition_model
from sparseloom.zoo.tensors import ort_session, run_session, take_batch, tensor_facts
from tests.zoo.zoo_support import tiny_task, transformer_model


@pytest.fixture(scope="module")
def tiny() -> tuple[str, dict[str, np.ndarray]]:
    task = tiny_task()
    return str(task.model_path), take_batch(task.calibration_inputs, 0, 8)


@pytest.fixture(scope="module")
def transformer(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, np.ndarray]]:
    path = tmp_path_factory.mktemp("transformer") / "encoder.onnx"
    inputs = transformer_model(path)
    return str(path), inputs


def _dense(model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return run_session(ort_session(model), inputs)


@pytest.mark.parametrize("subgraphs", [1, 2, 3, 4])
def test_tiny_pieces_reproduce_the_dense_model(tiny, subgraphs: int) -> None:
    model, inputs = tiny
    partition = partition_model(model, subgraphs, inputs)
    assert partition.subgraphs == subgraphs and len(partition.cuts) == subgraphs - 1
    assert partition.max_abs_diff <= 1e-5
    for piece in partition.pieces:
        onnx.checker.check_model(piece)
    # A CNN with residual blocks is only ever cut where one tensor is live.
    for boundary in partition.inputs[1:]:
        assert len(boundary) == 1 and boundary[0].dtype == "float32"
        assert boundary[0].shape[0] == "batch"
    # The outputs of one piece are the inputs of the next, names and all.
    for before, after in zip(partition.outputs[:-1], partition.inputs[1:], strict=True):
        assert before == after


def test_residual_blocks_are_never_cut(tiny) -> None:
    model, inputs = tiny
    prepared = prepare_model(model)
    facts, values = tensor_facts(prepared, inputs)
    cuts = find_cut_points(prepared, facts, node_costs(prepared, facts, values))
    nodes = list(prepared.graph.node)
    assert cuts, "the tiny ResNet has cut points between its blocks"
    for cut in cuts:
        assert len(cut.crossing) == 1
    # No cut between the node that produces a residual Add's skip input and the Add itself
    # (right after the producer is fine: only the skip is live there).
    producer = {name: i for i, node in enumerate(nodes) for name in node.output}
    indices = {c.index for c in cuts}
    for add, node in enumerate(nodes):
        if node.op_type == "Add":
            start = min(producer.get(name, -1) for name in node.input)
            assert not indices & set(range(start + 2, add + 1)), (node.name, sorted(indices))


def test_pieces_balance_their_flops(tiny) -> None:
    model, inputs = tiny
    two = partition_model(model, 2, inputs)
    total = sum(two.costs)
    # The best split of this model leaves neither piece under a third of the work.
    assert min(two.costs) >= total / 3


@pytest.mark.parametrize("subgraphs", [2, 3, 4])
def test_transformer_boundaries_carry_hidden_state_and_mask(transformer, subgraphs: int) -> None:
    model, inputs = transformer
    partition = partition_model(model, subgraphs, inputs)
    assert partition.max_abs_diff <= 1e-5
    for position, boundary in enumerate(partition.inputs[1:], start=1):
        floats = [t for t in boundary if t.dtype == "float32" and len(t.shape) == 3]
        # Exactly one hidden state crosses: never Q/K/V plus residual (inside attention).
        assert len(floats) == 1, [t.source for t in boundary]
        masks = [t for t in boundary if t.source == "attention_mask"]
        assert masks and masks[0].dtype == "int64"
        assert masks[0].name == f"attention_mask__cut{position}"
    pieces = partition.pieces
    chained: dict[str, np.ndarray] = dict(inputs)
    for piece in pieces:
        chained = run_session(ort_session(piece), chained)
    np.testing.assert_allclose(chained["logits"], _dense(model, inputs)["logits"], atol=1e-5)


def test_merged_pieces_equal_the_dense_model(transformer) -> None:
    model, inputs = transformer
    partition = partition_model(model, 3, inputs)
    merged = merge_chain(partition.pieces)
    onnx.checker.check_model(merged)
    assert [i.name for i in merged.graph.input] == ["input_ids", "attention_mask"]
    assert [o.name for o in merged.graph.output] == ["logits"]
    np.testing.assert_allclose(
        run_session(ort_session(merged), inputs)["logits"], _dense(model, inputs)["logits"],
        atol=1e-5,
    )


def test_prepare_model_folds_constants_and_keeps_outputs(transformer) -> None:
    model, inputs = transformer
    original = onnx.load(model)
    assert any(n.op_type == "Constant" for n in original.graph.node)
    prepared = prepare_model(model)
    assert not any(n.op_type == "Constant" for n in prepared.graph.node)
    assert len({n.name for n in prepared.graph.node}) == len(prepared.graph.node)
    np.testing.assert_allclose(
        run_session(ort_session(prepared), inputs)["logits"], _dense(model, inputs)["logits"],
        atol=1e-6,
    )


def test_latency_cost_partitions_too(tiny) -> None:
    model, inputs = tiny
    partition = partition_model(model, 2, inputs, cost="latency")
    assert partition.cost_kind == "latency" and all(c > 0 for c in partition.costs)
    assert partition.max_abs_diff <= 1e-5


def test_adms_mode_groups_ops_by_processor_support(tiny) -> None:
    model, inputs = tiny
    convolutional = {"Conv", "Relu", "Add"}
    supports = {
        "conv-engine": lambda op, domain: op in convolutional,
        "general": lambda op, domain: op != "Conv",
    }
    partition = partition_model(model, 2, inputs, mode="adms", supports=supports,
                                min_fraction=0.0)
    first, second = partition.pieces
    assert any(n.op_type == "Conv" for n in first.graph.node)
    assert not any(n.op_type == "Conv" for n in second.graph.node)
    assert partition.supported_by == [("conv-engine",), ("general",)]
    # Balanced mode cuts in the middle of the network instead.
    balanced = partition_model(model, 2, inputs)
    assert balanced.cuts != partition.cuts
    # A minimum piece size can outweigh op support (the head alone is a few % of the FLOPs).
    granular = partition_model(model, 2, inputs, mode="adms", supports=supports,
                               min_fraction=0.2)
    assert min(granular.costs) >= 0.2 * sum(granular.costs)


def test_too_many_subgraphs_is_a_clear_error(tiny) -> None:
    model, inputs = tiny
    with pytest.raises(ZooError, match=r"valid cut points .* so at most \d+ subgraphs"):
        partition_model(model, 40, inputs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"subgraphs": 0}, "positive integer"),
        ({"subgraphs": 2, "mode": "greedy"}, "unknown partition mode"),
        ({"subgraphs": 2, "mode": "adms"}, "supports"),
        ({"subgraphs": 2, "cost": "bytes"}, "unknown partition cost"),
    ],
)
def test_bad_partition_options(tiny, kwargs: dict, message: str) -> None:
    model, inputs = tiny
    with pytest.raises(ConfigError, match=message):
        partition_model(model, sample_inputs=inputs, **kwargs)


def test_unreadable_model_is_a_zoo_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    with pytest.raises(ZooError, match="cannot load ONNX model"):
        prepare_model(str(broken))
