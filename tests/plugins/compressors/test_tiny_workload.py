"""Every registered compressor on a middle piece of the bundled ``tiny`` workload (ResNet)."""

from __future__ import annotations

import onnx
import pytest

from sparseloom.core.registry import create_registry
from sparseloom.plugins.compressors import boundary_signature
from sparseloom.workload.load import load_workload
from sparseloom.zoo.partition import partition_model
from tests.plugins.compressors.models import run_chain

#: (compressor, level, allowed top-1 drop) on the middle piece.
CASES = [("unstructured", 0.3, 0.02), ("structured", 0.25, 0.03), ("structured", 0.5, 0.05),
         ("int8", 0.0, 0.02), ("fp16", 0.0, 0.005)]


@pytest.fixture(scope="module")
def tiny():
    """The tiny task, its 3 dense pieces and calibration batches of piece 1's inputs."""
    task = load_workload("tiny", progress=False).tasks[0]
    sample = {name: value[:4] for name, value in task.calibration_inputs.items()}
    pieces = list(partition_model(onnx.load(str(task.model_path)), 3, sample).pieces)
    prefix = run_chain(pieces[:1], dict(task.calibration_inputs))
    inputs = {i.name: prefix[i.name] for i in pieces[1].graph.input}
    calibration = [{k: v[start : start + 32] for k, v in inputs.items()}
                   for start in range(0, len(next(iter(inputs.values()))), 32)]
    return task, pieces, calibration


def test_compressed_middle_piece_stitches_and_keeps_accuracy(tiny) -> None:
    task, pieces, calibration = tiny
    registry = create_registry(autoload=False, builtins=("sparseloom.plugins.compressors",))
    dense = task.score(run_chain(pieces, task.eval_inputs))
    for name, level, allowed_drop in CASES:
        compressed = registry.create("compressor", name).compress(pieces[1], level, calibration)
        assert boundary_signature(compressed) == boundary_signature(pieces[1]), name
        chain = [pieces[0], compressed, pieces[2]]
        metric = task.score(run_chain(chain, task.eval_inputs))
        assert metric >= dense - allowed_drop, (name, level, dense, metric)
