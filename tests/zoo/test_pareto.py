"""The Pareto front and the "beyond the originals" counts: the demo's headline figures.

Hand-built points with a known front and known counts, then the whole analysis on the tiny
zoo with hand-set subgraph latencies and metrics recomputed with plain ONNX Runtime chains.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from sparseloom.core.errors import ConfigError
from sparseloom.zoo.pareto import (
    ParetoOptions,
    beyond_originals,
    pareto_analysis,
    pareto_front,
    sample_stitched,
)
from tests.zoo.zoo_support import (
    chain_metrics_with_onnxruntime,
    tiny_task,
)

# (latency_ms, accuracy) by index
FRONT_POINTS = [
    (1.0, 0.5),   # 0 front
    (2.0, 0.7),   # 1 front
    (2.0, 0.6),   # 2 as fast as 1, less accurate
    (3.0, 0.7),   # 3 as accurate as 1, slower
    (4.0, 0.9),   # 4 front
    (5.0, 0.85),  # 5 slower and less accurate than 4
    (1.0, 0.5),   # 6 the same point as 0: only the first of equals is on the front
    (0.5, 0.1),   # 7 front: the fastest
    (6.0, 0.9),   # 8 as accurate as 4, slower
]


def test_front_of_hand_built_points() -> None:
    latency, accuracy = zip(*FRONT_POINTS, strict=True)
    assert pareto_front(latency, accuracy) == [7, 0, 1, 4]  # by latency
    assert pareto_front([3.0], [0.2]) == [0]
    assert pareto_front([], []) == []


def test_front_is_what_no_other_point_dominates() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        latency = rng.integers(1, 8, 30).astype(float)
        accuracy = rng.integers(1, 8, 30) / 8
        front = pareto_front(latency, accuracy)
        # brute force: i is on the front unless a point is at least as good in both and
        # better in one, or an equal point comes earlier
        expected = [i for i in range(30) if not any(
            (latency[o] <= latency[i] and accuracy[o] >= accuracy[i]
             and (latency[o] < latency[i] or accuracy[o] > accuracy[i]))
            or (latency[o] == latency[i] and accuracy[o] == accuracy[i] and o < i)
            for o in range(30))]
        assert sorted(front) == expected
        assert [latency[i] for i in front] == sorted(latency[i] for i in front)


# originals first: best accuracy 0.9, fastest 2.0
ORIGINALS = [(2.0, 0.8), (4.0, 0.9), (3.0, 0.7)]
STITCHED = [
    (1.5, 0.85),  # faster than every original, beyond
    (5.0, 0.95),  # more accurate than every original, beyond
    (3.0, 0.75),  # dominated by (2.0, 0.8)
    (2.0, 0.8),   # equal to an original: dominated
    (1.0, 0.95),  # above, below and beyond
    (4.0, 0.9),   # equal to the best original: not above, dominated
    (3.5, 0.85),  # between the originals: beyond, neither above nor below
]


def test_counts_beyond_hand_built_originals() -> None:
    latency, accuracy = zip(*ORIGINALS, *STITCHED, strict=True)
    assert beyond_originals(latency, accuracy, len(ORIGINALS)) == (2, 2, 4)
    # nothing stitched: nothing beyond
    assert beyond_originals(latency[:3], accuracy[:3], 3) == (0, 0, 0)


def test_sample_stitched_excludes_originals() -> None:
    every = sample_stitched(4, 2, 100)
    assert len(every) == 12 and len(set(every)) == 12
    assert not {(v, v) for v in range(4)} & set(every)
    some = sample_stitched(10, 3, 50, seed=1)
    assert len(some) == len(set(some)) == 50
    assert all(len(set(c)) > 1 for c in some)
    assert some == sample_stitched(10, 3, 50, seed=1) != sample_stitched(10, 3, 50, seed=2)


@pytest.mark.parametrize("field", ["sample", "runs", "warmup", "settle"])
def test_bad_options_are_config_errors(field: str) -> None:
    with pytest.raises(ConfigError, match=f"Pareto option {field} must be an integer"):
        ParetoOptions(**{field: -1})


def _with_set_latencies(zoo: Any, task: Any) -> tuple[np.ndarray, Any]:
    """Every subgraph 1 ms, but variant 9 is 10 ms at position 0 and 0.01 ms at position 1:
    originals take 2 ms (10.01 ms for variant 9), a stitched (a, 9) with a ≠ 9 takes 1.01 ms.
    The latencies and the analysis of every stitched variant with them."""
    latencies = np.ones((2, len(zoo.variants)))
    latencies[0, 9], latencies[1, 9] = 10.0, 0.01
    return latencies, pareto_analysis(zoo, task, ["ort:CPU", "ov:CPU"],
                                      ParetoOptions(sample=1000), latencies=latencies)


def test_analysis_of_the_tiny_zoo_with_set_latencies(private_zoo: Any) -> None:
    task, zoo = tiny_task(), private_zoo
    variants = len(zoo.variants)
    latencies, result = _with_set_latencies(zoo, task)
    assert result.stitched_total == result.stitched_sampled == variants**2 - variants
    assert result.below_fastest_latency == variants - 1
    # every choice with its metric from plain ONNX Runtime chains and its summed latency
    choices = [p.choices for p in result.points]
    assert choices[:variants] == [(v, v) for v in range(variants)]
    assert sorted(choices[variants:]) == [
        c for c in itertools.product(range(variants), repeat=2) if c[0] != c[1]]
    metric = chain_metrics_with_onnxruntime(zoo.directory, choices, task)
    latency = [latencies[0, a] + latencies[1, b] for a, b in choices]
    assert [p.metric for p in result.points] == metric
    assert [p.latency_ms for p in result.points] == pytest.approx(latency)
    best = max(metric[:variants])
    assert result.above_best_accuracy == sum(m > best for m in metric[variants:])
    assert result.beyond_front == sum(
        not any(metric[o] >= metric[i] and latency[o] <= latency[i] for o in range(variants))
        for i in range(variants, len(choices)))
    front = {i for i, p in enumerate(result.points) if p.on_front}
    assert front == set(pareto_front(latency, metric))
    summary = result.summary()
    assert summary["below_fastest_latency_fraction"] == pytest.approx(
        (variants - 1) / (variants**2 - variants), abs=1e-4)
    assert summary["front_size"] == len(front)
    assert summary["evaluation_passes"] == variants + variants**2


def test_the_fastest_variant_within_a_point_is_judged_on_held_out_rows(
        private_zoo: Any) -> None:
    import attrs

    from sparseloom.zoo.pareto import JUDGED_FASTEST, fastest_within

    task, zoo = tiny_task(), private_zoo
    # The stitched (a, 9), a ≠ 9, take 1.01 ms, every other variant 2 ms or more.
    _, result = _with_set_latencies(zoo, task)
    best = fastest_within(zoo, task, result, 1.0)
    # By hand: the variants within a point of dense on the selection rows and faster than
    # it, fastest first (ties in the order measured), judged on the held-out rows by plain
    # ONNX Runtime chains; the first within a point there wins.
    dense = result.points[0]
    within = sorted((p for p in result.points[1:] if p.metric >= dense.metric - 0.01
                     and p.latency_ms < dense.latency_ms), key=lambda p: p.latency_ms)
    judged = within[:JUDGED_FASTEST]
    held = chain_metrics_with_onnxruntime(
        zoo.directory, [dense.choices] + [p.choices for p in judged], task.judging())
    drops = [100 * (held[0] - h) for h in held[1:]]
    expected = next((i for i, d in enumerate(drops) if d <= 1.0), None)
    if expected is None:
        assert best is None
    else:
        assert best is not None and best.choices == judged[expected].choices
        assert best.drop_points == pytest.approx(drops[expected], abs=1e-9)
        assert best.judged == expected + 1 and best.judging_rows == task.held_out.count
        assert best.speedup == pytest.approx(dense.latency_ms / judged[expected].latency_ms)
    # No margin at all below dense on selection, and nothing held out: no answer.
    assert fastest_within(zoo, attrs.evolve(task, held_out=None), result) is None
    assert fastest_within(zoo, task, result, -100.0) is None
