"""Zoos of the four bundled tasks (vision, sentiment, activity, speech) at S = 3, and of vision
at S = 2 (the cut search and alignment do not depend on S otherwise; sentiment alone at S = 2
took 45 s).

Slow: builds the ``default`` workload (cached after the first run) and 5 zoos. Measuring the
ten originals' metrics dominates a build (sentiment's MiniLM: ~20 s per pass over its 600 eval
rows on one core), so these zoos are built for the first ``EVAL_ROWS`` eval rows of each task;
``sparseloom zoo build default`` builds them on the whole eval sets (see docs/zoo.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest

from sparseloom.zoo.build import build_zoo
from sparseloom.zoo.evaluate import evaluate_stitched
from sparseloom.zoo.extract import declared_signature
from sparseloom.zoo.manifest import check_alignment
from sparseloom.zoo.options import ZooOptions
from tests.zoo.zoo_support import chain_with_onnxruntime

pytestmark = pytest.mark.slow

TASKS = ("vision", "sentiment", "activity", "speech")
EVAL_ROWS = 64


def _first_rows(task: Any) -> Any:
    import attrs

    rows = min(EVAL_ROWS, task.num_eval)
    return attrs.evolve(
        task, eval_inputs={name: array[:rows] for name, array in task.eval_inputs.items()},
        labels=task.labels[:rows],
    )


@pytest.fixture(scope="module")
def tasks() -> dict[str, Any]:
    from sparseloom.workload.load import load_workload

    loaded = load_workload("default", progress=False)
    return {name: _first_rows(loaded.task(name)) for name in TASKS}


@pytest.fixture(scope="module")
def dense_metrics(tasks: dict[str, Any]) -> dict[str, float]:
    from sparseloom.workload.evaluate import evaluate

    return {name: evaluate(tasks[name]) for name in TASKS}


@pytest.mark.parametrize(("task_name", "subgraphs"),
                         [*((name, 3) for name in TASKS), ("vision", 2)])
def test_bundled_zoo_is_aligned_and_exact(
    tasks: dict[str, Any], dense_metrics: dict[str, float], task_name: str, subgraphs: int
) -> None:
    task = tasks[task_name]
    zoo = build_zoo(task, ZooOptions(subgraphs=subgraphs), progress=False)
    assert zoo.positions == subgraphs and len(zoo.variants) >= 10
    assert zoo.manifest["partition"]["max_abs_diff"] <= 1e-4
    for position in range(subgraphs):
        boundary = zoo.boundary(position)
        for tensor in boundary.inputs:
            assert np.dtype(tensor["dtype"]).kind in "biuf"
        dense = declared_signature(onnx.load(str(zoo.subgraph_path(position, 0))))
        for variant in zoo.variants[1:]:
            piece = onnx.load(str(zoo.subgraph_path(position, variant.id)))
            check_alignment(task_name, position, variant.id, variant.name, dense,
                            declared_signature(piece))
    if set(task.input_names) >= {"input_ids", "attention_mask"}:
        # A transformer with a mask: the mask (or its additive form) crosses every cut.
        for position in range(1, subgraphs):
            sources = {t["source"] for t in zoo.boundary(position).inputs}
            assert len(sources) >= 2, sources
    if task_name == "sentiment":  # its int8 variant reads the word embedding from int8
        (int8,) = (v.id for v in zoo.variants if v.name == "int8")
        first = onnx.load(str(zoo.subgraph_path(0, int8)))
        tables = {i.name: i.data_type for i in first.graph.initializer}
        assert tables.get("embeddings.word_embeddings.weight.int8") == onnx.TensorProto.INT8
    dense = (0,) * subgraphs
    assert zoo.variants[0].metric == dense_metrics[task_name]
    # Chaining the files listed in manifest.json with plain ONNX Runtime gives the same metric.
    mixed = tuple((j * 3 + 1) % len(zoo.variants) for j in range(subgraphs))
    report = evaluate_stitched(zoo, task, [dense, mixed])
    assert report.metric(dense) == dense_metrics[task_name]
    outputs = chain_with_onnxruntime(zoo.directory, mixed, task.eval_inputs)
    assert task.score(outputs) == pytest.approx(report.metric(mixed), abs=1e-9)
