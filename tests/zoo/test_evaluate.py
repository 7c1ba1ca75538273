"""Exact evaluation with prefix sharing: pass counts, equality with one-by-one evaluation."""

from __future__ import annotations

import itertools
import random

import attrs
import onnxruntime
import pytest

from sparseloom.core.errors import ZooError
from sparseloom.zoo.evaluate import (
    SubgraphRunner,
    evaluate_all,
    evaluate_stitched,
    prefix_passes,
)
from tests.zoo.zoo_support import (
    chain_with_onnxruntime,
    tiny_task,
    tiny_zoo,
)


def test_prefix_pass_count_formula() -> None:
    assert prefix_passes(itertools.product(range(10), repeat=3)) == 10 + 100 + 1000
    assert prefix_passes([(0, 1, 2), (0, 1, 3), (0, 2, 2)]) == 1 + 2 + 3


def test_full_space_shares_prefixes() -> None:
    task = tiny_task()
    zoo = tiny_zoo(2)
    count = len(zoo.variants)
    report = evaluate_all(zoo, task, cache=False)  # every pass runs, none is read
    assert len(report.metrics) == count**2
    assert report.passes == count + count**2
    assert report.naive_passes == 2 * count**2
    assert report.saving == pytest.approx(1 - (count + count**2) / (2 * count**2))
    # Independently: plain ONNX Runtime chains read from the manifest, and for the dense
    # chain the uncut dense model itself.
    for variant in zoo.variants:
        choices = (variant.id, variant.id)
        expected = task.score(chain_with_onnxruntime(zoo.directory, choices, task.eval_inputs))
        assert report.metric(choices) == expected == variant.metric
    for choices in [(0, 9), (3, 7), (8, 1)]:
        expected = task.score(chain_with_onnxruntime(zoo.directory, choices, task.eval_inputs))
        assert report.metric(choices) == expected
    dense = onnxruntime.InferenceSession(str(task.model_path),
                                         providers=["CPUExecutionProvider"])
    outputs = dict(zip(task.output_names, dense.run(list(task.output_names), task.eval_inputs),
                       strict=True))
    assert report.metric((0, 0)) == task.score(outputs)
    summary = report.to_json()
    assert summary["passes"] == report.passes and len(summary["metrics"]) == count**2


def test_a_sample_is_grouped_by_prefix_and_matches_single_evaluation() -> None:
    task = tiny_task()
    zoo = tiny_zoo(3)
    count = len(zoo.variants)
    rng = random.Random(3)
    sample = [tuple(rng.randrange(count) for _ in range(3)) for _ in range(25)]
    sample += sample[:5]  # duplicates are evaluated once
    with SubgraphRunner() as runner:
        report = evaluate_stitched(zoo, task, sample, runner=runner, cache=False)
        assert runner.passes == report.passes == prefix_passes(sample)
        assert report.passes < report.naive_passes == 3 * len(set(sample))
        # Each subgraph file is loaded once, however many prefixes use it.
        used = {(j, c[j]) for c in sample for j in range(3)}
        assert len(runner._loaded) == len(used)
    with SubgraphRunner() as fresh:
        for choices in sample[:3]:
            alone = evaluate_stitched(zoo, task, [zoo.stitched(choices)], runner=fresh,
                                      cache=False)
            assert alone.passes == 3
            assert alone.metric(choices) == report.metric(choices)


def test_evaluation_checks_task_and_choices() -> None:
    zoo = tiny_zoo(2)
    other = attrs.evolve(tiny_task(), name="other")
    with pytest.raises(ZooError, match="the zoo is for task 'tiny', not 'other'"):
        evaluate_stitched(zoo, other, [(0, 0)])
    with pytest.raises(ZooError, match="has 3 choice"):
        evaluate_stitched(zoo, tiny_task(), [(0, 0, 0)])
