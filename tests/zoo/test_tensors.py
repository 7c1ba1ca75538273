"""The exactness check of a chain of pieces: passes on the real cut, names where it breaks.

Pieces are the tiny model's real three-way partition; a broken piece is one of them with a
weight scaled, the kind of mistake an extraction or a compressor that claims to be exact
could make.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from sparseloom.core.errors import ZooError
from sparseloom.zoo.partition import partition_model
from sparseloom.zoo.tensors import check_chain, take_batch
from tests.zoo.zoo_support import tiny_task


@pytest.fixture(scope="module")
def tiny_cut() -> tuple[str, dict[str, np.ndarray], list[onnx.ModelProto], list[list[str]]]:
    """The tiny model, sample inputs, its three dense pieces and each piece's output names."""
    task = tiny_task()
    inputs = take_batch(task.calibration_inputs, 0, 8)
    partition = partition_model(str(task.model_path), 3, inputs)
    outputs = [[o.name for o in piece.graph.output] for piece in partition.pieces]
    return str(task.model_path), inputs, list(partition.pieces), outputs


def scaled_weight(piece: onnx.ModelProto, factor: float = 1.5) -> onnx.ModelProto:
    """``piece`` with its largest weight scaled by ``factor``."""
    broken = onnx.ModelProto()
    broken.CopyFrom(piece)
    weight = max(broken.graph.initializer, key=lambda i: int(np.prod(i.dims)))
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * factor, weight.name))
    return broken


def test_the_real_cut_passes(tiny_cut) -> None:
    model, inputs, pieces, _ = tiny_cut
    assert check_chain(model, pieces, inputs) <= 1e-5


@pytest.mark.parametrize("broken", [0, 1])
def test_a_wrong_middle_piece_is_named_with_its_boundary(tiny_cut, broken: int) -> None:
    model, inputs, pieces, outputs = tiny_cut
    chain = list(pieces)
    chain[broken] = scaled_weight(chain[broken])
    with pytest.raises(ZooError) as caught:
        check_chain(model, chain, inputs)
    message = str(caught.value)
    assert "the chained subgraphs differ from the dense model" in message
    assert f"first appears in piece {broken}: its output " in message
    assert f"(boundary to piece {broken + 1})" in message
    assert any(repr(name) in message for name in outputs[broken])


def test_a_wrong_last_piece_is_named(tiny_cut) -> None:
    model, inputs, pieces, _ = tiny_cut
    with pytest.raises(ZooError, match=r"first appears in piece 2, the last \(every boundary"):
        check_chain(model, [*pieces[:2], scaled_weight(pieces[2])], inputs)


def test_a_missing_output_is_named(tiny_cut) -> None:
    model, inputs, pieces, _ = tiny_cut
    # two of the three pieces: right so far, but the model's output is never produced
    with pytest.raises(ZooError, match=r"do not produce model output .*in piece 1, the last"):
        check_chain(model, pieces[:2], inputs)
