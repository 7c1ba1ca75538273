"""Stitched variants: chained from the manifest, run across processors, merged into one model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from sparseloom.core.errors import ConfigError, ZooError
from sparseloom.core.types import StitchedVariant
from sparseloom.zoo.evaluate import evaluate_stitched
from sparseloom.zoo.stitch import StitchedModel, merge_stitched, placement, run_stitched
from sparseloom.zoo.tensors import ort_session, run_session, take_batch
from tests.zoo.zoo_support import (
    chain_with_onnxruntime,
    tiny_task,
    tiny_zoo,
)


@pytest.mark.parametrize("choices", [(0, 0, 0), (0, 7, 1), (2, 8, 9), (5, 0, 3)])
def test_manifest_chain_with_plain_onnxruntime_matches_zoo_eval(choices: tuple[int, ...]) -> None:
    task = tiny_task()
    zoo = tiny_zoo(3)
    outputs = chain_with_onnxruntime(zoo.directory, choices, task.eval_inputs)
    measured = evaluate_stitched(zoo, task, [choices]).metric(choices)
    assert task.score(outputs) == measured


def test_all_dense_stitch_equals_the_dense_model_metric() -> None:
    from sparseloom.workload.evaluate import evaluate

    task = tiny_task()
    for subgraphs in (2, 3):
        zoo = tiny_zoo(subgraphs)
        dense = (0,) * subgraphs
        assert evaluate_stitched(zoo, task, [dense]).metric(dense) == evaluate(task)


def test_run_across_processors_matches_plain_chain() -> None:
    task = tiny_task()
    zoo = tiny_zoo(3)
    inputs = take_batch(task.eval_inputs, 0, 40)
    # f32 pieces only: an int8 piece fed by OpenVINO's f32 (1e-6 away from ONNX Runtime's) can
    # round a value to the next quantization step, which moves logits by ~1e-3 (measured).
    choices = (0, 1, 2)
    expected = chain_with_onnxruntime(zoo.directory, choices, inputs)["logits"]
    got = run_stitched(zoo, choices, inputs, ["ov:CPU", "ort:CPU", "ov:CPU"], batch_size=16)
    np.testing.assert_allclose(got["logits"], expected, atol=1e-4)
    with StitchedModel.load(zoo, zoo.stitched(choices), "ort:CPU") as model:
        assert model.order == ("ort:CPU",) * 3
        one = model.run_once(take_batch(inputs, 0, 1))
        np.testing.assert_allclose(one["logits"], expected[:1], atol=1e-4)
    assert model.stages == []


def test_merged_stitched_model_runs_without_partitioning(tmp_path: Path) -> None:
    task = tiny_task()
    zoo = tiny_zoo(3)
    choices = (2, 8, 9)
    path = tmp_path / "stitched.onnx"
    merged = merge_stitched(zoo, StitchedVariant("tiny", choices), path)
    onnx.checker.check_model(merged)
    assert [i.name for i in merged.graph.input] == ["image"]
    assert [o.name for o in merged.graph.output] == ["logits"]
    outputs = run_session(ort_session(str(path)), task.eval_inputs)
    expected = chain_with_onnxruntime(zoo.directory, choices, task.eval_inputs)
    np.testing.assert_allclose(outputs["logits"], expected["logits"], atol=1e-5)
    assert task.score(outputs) == evaluate_stitched(zoo, task, [choices]).metric(choices)


@pytest.mark.parametrize(
    ("choices", "message"),
    [
        ((0, 1), r"has 2 choice\(s\) but the zoo has 3 positions"),
        ((0, 1, 2, 3), r"has 4 choice\(s\) but the zoo has 3 positions"),
        ((0, 11, 1), r"position 1 has unknown variant id 11; ids are 0..10"),
        ((0, -1, 1), r"unknown variant id -1"),
        ((0, "a", 1), r"unknown variant id 'a'"),
    ],
)
def test_bad_stitch_tuples_are_zoo_errors(choices: tuple, message: str) -> None:
    zoo = tiny_zoo(3)
    with pytest.raises(ZooError, match=message):
        zoo.stitched(choices)
    with pytest.raises(ZooError, match=message):
        merge_stitched(zoo, choices)


def test_stitched_variant_of_another_task_is_refused() -> None:
    with pytest.raises(ZooError, match="is for task 'vision'"):
        tiny_zoo(3).check_choices(StitchedVariant("vision", (0, 0, 0)))


def test_placement_needs_one_processor_per_position() -> None:
    assert placement("ort:CPU", 3) == ["ort:CPU"] * 3
    with pytest.raises(ConfigError, match="one processor per position"):
        placement(["ov:CPU", "ort:CPU"], 3)
