"""``bench compressors``' stitched variants: the candidates, the summed timings and the
fastest within a point, worked by hand (the real run: tests/evaluation/test_compressor_bench.py)."""

from __future__ import annotations

import statistics

import attrs
import pytest

from sparseloom.evaluation.compressor_bench import CompressorRow, RoundTimes
from sparseloom.evaluation.stitched_front import (
    PER_POSITION,
    StitchedRow,
    candidates,
    fastest_within,
    render_stitched,
    serving_rows,
    stitched_rows,
)


@attrs.frozen
class _Info:
    id: int
    name: str


@attrs.frozen
class _Zoo:
    """The two things :func:`stitched_rows` reads of a zoo."""

    positions: int
    variants: tuple[_Info, ...]


def _row(position: int | None, variant: str, speedup: float, drop: float,
         skipped: tuple[str, ...] = ()) -> CompressorRow:
    return CompressorRow("t", position, variant, variant, "ort:CPU", 1.0, 1.0, speedup,
                         speedup, speedup, 1, (1.0,), (1.0,), (speedup,), 0.9,
                         0.9 - drop / 100, drop, 100, skipped=skipped)


IDS = {"dense": 0, "a": 1, "b": 2, "c": 3}


def test_candidates_hold_at_each_position_dense_or_a_faster_variant_within_a_point() -> None:
    rows = [_row(0, "dense", 1.0, 0.0),
            _row(0, "a", 1.3, 0.5),                          # faster, within: a candidate
            _row(0, "b", 1.5, 1.5),                          # loses too much alone
            _row(0, "c", 1.4, 0.0, skipped=("c",)),          # nothing compressed here
            _row(1, "a", 0.9, 0.0),                          # slower
            _row(1, "c", 1.2, 1.0),                          # exactly a point: within
            _row(None, "b", 3.0, 0.0)]                       # whole-model rows do not count
    assert candidates(rows, IDS, 2) == [(0, 3), (1, 0), (1, 3)]


def test_candidates_draw_only_the_fastest_few_at_a_position() -> None:
    names = {f"v{i}": i for i in range(1, PER_POSITION + 3)}
    rows = [_row(0, name, 1.0 + i / 10, 0.0) for name, i in names.items()]
    kept = {c[0] for c in candidates(rows, names, 1)}
    assert kept == set(range(3, PER_POSITION + 3))  # the slowest two left out


def test_a_stitched_variant_is_timed_as_its_summed_positions_against_dense() -> None:
    zoo = _Zoo(2, (_Info(0, "dense"), _Info(1, "a"), _Info(3, "c")))
    times = RoundTimes(rounds=2)
    # ov (p = 0): dense 1 + 1 ms a round; ort (p = 1): dense 1 + 2 ms.
    times.reference = {(0, 0): [1.0, 1.0], (0, 1): [1.0, 1.0],
                       (1, 0): [1.0, 1.0], (1, 1): [2.0, 2.0]}
    times.variants = {(0, 0, 1): [0.5, 0.5], (0, 1, 3): [0.5, 1.0],
                      (1, 0, 1): [1.0, 1.0], (1, 1, 3): [1.0, 1.0],
                      (0, 1, 0): [1.0, 1.0]}  # (no ort timing of `a | dense`)
    scores = {(0, 0): 0.9, (1, 3): 0.895, (1, 0): 0.85}
    rows = stitched_rows("t", zoo, ["ov", "ort"], times, scores, 200)
    got = {(r.choices, r.processor): r for r in rows}
    assert set(got) == {((1, 3), "ov"), ((1, 3), "ort"), ((1, 0), "ov")}
    ov = got[(1, 3), "ov"]
    # rounds: 2 / (0.5 + 0.5) = 2, 2 / (0.5 + 1.0) = 4/3
    assert (ov.speedup_min, ov.speedup_max) == pytest.approx((4 / 3, 2.0))
    assert ov.speedup_median == pytest.approx(statistics.median([2.0, 4 / 3]))
    assert ov.variant_ms == pytest.approx(1.25) and ov.dense_ms == pytest.approx(2.0)
    assert ov.names == ("a", "c") and ov.drop_points == pytest.approx(0.5)
    ort = got[(1, 3), "ort"]
    # 3 ms of dense on ort against 2: ×1.5 there, but dense is fastest on ov (2 ms): ×1.0.
    assert ort.speedup_median == pytest.approx(1.5)
    assert ort.vs_fastest_dense == pytest.approx(1.0)
    best = fastest_within(rows, 1.0)
    assert best is ov  # (1, 0) is faster on ov (×2) but 5 points below dense
    assert fastest_within([got[(1, 0), "ov"]], 1.0) is None


def test_a_variant_counts_on_the_processor_where_it_runs_fastest() -> None:
    # 1.0 ms on ov, ×1.2 against ov's dense; 2.0 ms on ort, ×2 against ort's slow dense.
    on_ov = StitchedRow("t", (1, 1), ("a", "a"), "ov", 1.2, 1.0, 1.2, 1.1, 1.3, 1.2, 0.0, 100)
    on_ort = attrs.evolve(on_ov, processor="ort", dense_ms=4.0, variant_ms=2.0,
                          speedup_median=2.0, vs_fastest_dense=0.6)
    assert serving_rows([on_ort, on_ov]) == [on_ov]
    assert fastest_within([on_ort, on_ov], 1.0) is on_ov


def test_the_report_shows_the_fastest_within_the_point_or_says_there_is_none() -> None:
    row = {"task": "t", "choices": [1, 3], "names": ["a", "c"], "processor": "ov",
           "judging_rows": 100, "dense_ms": 2.0,
           "variant_ms": 1.25, "speedup_median": 1.67, "speedup_min": 1.33,
           "speedup_max": 2.0, "vs_fastest_dense": 1.67, "drop_points": 0.5}
    lost = dict(row, choices=[1, 0], names=["a", "dense"], speedup_median=2.0,
                drop_points=5.0)
    slower = dict(row, processor="ort", variant_ms=1.5, speedup_median=1.9)
    text = "\n".join(render_stitched({"task": "t", "stitched": [row, lost, slower],
                                      "fastest_within": row}))
    assert "2 judged as a whole" in text and "the 1 fastest of the 1 within" in text
    assert "| `1_3` (a, c) | ov | 2.0000 | 1.2500 | ×1.67 | 1.33–2.00 | ×1.67 | +0.50 |" \
        in text
    table = text.split("**t:")[0].split("|---|")[1]
    assert "`1_0`" not in table and "| ort |" not in table  # lost; not where it serves
    assert "**t: the fastest variant within 1 point** is `1_3` (a, c) on ov: ×1.67" in text
    none = "\n".join(render_stitched({"task": "t", "stitched": [lost],
                                      "fastest_within": None}))
    assert "does not exist" in none
    assert render_stitched({"task": "t"}) == []
