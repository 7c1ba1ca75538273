"""Accuracy judged on held-out rows: the paired bootstrap, the verdicts, real judgements."""

from __future__ import annotations

import math
from typing import Any

import attrs
import numpy as np
import pytest

from sparseloom.evaluation.judging import (
    Judged,
    judge,
    judging_report,
    paired_interval,
    render_judging,
)


def _outputs(labels: np.ndarray, wrong: np.ndarray) -> np.ndarray:
    """One-hot scores that are right except on rows ``wrong``."""
    out = np.zeros((labels.size, 3), np.float32)
    out[np.arange(labels.size), labels] = 1.0
    out[wrong, (labels[wrong] + 1) % 3] = 2.0
    return out


def test_the_paired_interval_brackets_the_true_difference() -> None:
    labels = np.arange(300) % 3
    dense = _outputs(labels, np.arange(0, 300, 10))             # 30 wrong: 0.90
    assert paired_interval("accuracy", dense, dense, labels) == (0.0, 0.0)
    worse = _outputs(labels, np.concatenate([np.arange(0, 300, 10), np.arange(1, 300, 10)]))
    low, high = paired_interval("accuracy", worse, dense, labels)   # true difference −0.10
    assert low < -0.10 < high < 0.0
    assert high - low < 0.10  # paired: only the 30 rows where they differ vary it


def _judged(drop: float, selection_drop: float, margin: float = 0.01) -> Judged:
    return Judged("t", "0_1", "f32", 100, 0.9 - drop, 0.9, -drop - 0.02, -drop + 0.02,
                  selection_drop, margin)


def test_verdicts_and_the_count_of_picks_that_fell_outside() -> None:
    kept, fell, far = _judged(0.005, 0.009), _judged(0.03, 0.009), _judged(0.05, 0.03)
    assert kept.within and kept.chosen_within
    assert not fell.within and fell.chosen_within
    assert not far.chosen_within
    assert fell.judged_accuracy(0.95) == pytest.approx(0.92)
    dense = attrs.evolve(kept, model="dense", accuracy=0.9, low=0.0, high=0.0,
                         selection_drop=0.0)
    report = judging_report([dense, kept, fell, far])
    assert report["picks_chosen_within"] == 2
    assert report["fell_outside"] == ["t 0_1 (f32)"]
    text = "\n".join(render_judging(report))
    assert "Of 2 pick(s) selection put within the margin, 1 fell outside it" in text
    assert ("| t | 0_1 | f32 | 100 | 0.8700 | 0.9000 | -3.00 [-5.00, -1.00] | -0.90 | 1.00 "
            "| **no** |") in text


def test_a_real_pick_is_judged_on_the_held_out_rows_only(tmp_path: Any) -> None:
    import sparseloom
    from sparseloom.workload.evaluate import evaluate
    from sparseloom.zoo.build import build_zoo
    from sparseloom.zoo.options import ZooOptions
    from sparseloom.zoo.whole import merged_path

    task = sparseloom.load_workload("tiny", progress=False).task("tiny")
    zoo = build_zoo(task, ZooOptions(subgraphs=2, variants=("dense", "int8")), progress=False)
    held = task.judging()
    dense, outputs = judge(task, zoo, None, "f32", selection_drop=0.0, margin=0.01)
    assert dense.rows == held.num_eval == task.held_out.count
    assert dense.accuracy == dense.dense == evaluate(held) and dense.drop == 0.0
    pick, _ = judge(task, zoo, (0, 1), "f32", selection_drop=0.004, margin=0.01,
                    dense_outputs=outputs)
    assert pick.accuracy == evaluate(held, merged_path(zoo, (0, 1)))
    assert pick.dense == dense.dense and pick.low <= -pick.drop <= pick.high
    unsplit = attrs.evolve(task, held_out=None)
    nothing, _ = judge(unsplit, zoo, (0, 1), "f32", selection_drop=0.0, margin=0.01)
    assert nothing.rows == 0 and math.isnan(nothing.accuracy) and not nothing.within


def test_a_chain_served_on_both_runtimes_is_judged_position_by_position() -> None:
    import sparseloom
    from sparseloom.evaluation.judging import chain_precision, processor_for
    from sparseloom.workload.inference import run_batched
    from sparseloom.workload.metrics import get_metric
    from sparseloom.zoo.build import build_zoo
    from sparseloom.zoo.options import ZooOptions

    assert chain_precision(["f32", "f32"]) == "f32"
    assert chain_precision(["bf16", "f32"]) == "bf16>f32"
    task = sparseloom.load_workload("tiny", progress=False).task("tiny")
    zoo = build_zoo(task, ZooOptions(subgraphs=2, variants=("dense", "int8")), progress=False)
    held = task.judging()

    def chained(choices: tuple[int, int]) -> float:
        """Each position's subgraph on its own processor, by hand."""
        tensors = dict(held.eval_inputs)
        for position, (choice, precision) in enumerate(zip(choices, ("bf16", "f32"),
                                                           strict=True)):
            feed = {n: tensors[n] for n in zoo.boundary(position).input_names}
            tensors |= run_batched(zoo.subgraph_path(position, choice), feed,
                                   processor=processor_for(precision))
        return get_metric(task.metric)(tensors[task.output_names[0]], held.labels)

    pick, _ = judge(task, zoo, (0, 1), "bf16>f32", selection_drop=0.0, margin=0.01)
    assert pick.precision == "bf16>f32" and pick.rows == held.num_eval
    assert pick.accuracy == pytest.approx(chained((0, 1)), abs=1e-12)
    assert pick.dense == pytest.approx(chained((0, 0)), abs=1e-12)
    with pytest.raises(ValueError, match="names 3 positions; tiny's zoo has 2"):
        judge(task, zoo, (0, 1), "bf16>f32>f32", selection_drop=0.0, margin=0.01)
