"""The fastest stitched variant within a point of dense, from ``bench compressors``' timings.

``bench compressors`` times every variant at every position against dense, and judges each
alone (dense elsewhere). A stitched variant holds a different variant at each position; its
accuracy is not the sum of the positions' drops, so it is judged here as a whole. The
candidates are the stitched variants whose every position holds dense or one of that
position's :data:`PER_POSITION` fastest variants that are faster than dense there on some
processor (median per-round ratio above 1) and within
:data:`FRONT_DROP_POINTS` of dense alone. Each is
judged on the task's held-out rows (every position at once, ONNX Runtime CPU), and timed as the
whole-model rows are: on each processor, per round, the sum over positions of the medians the
benchmark measured, against dense's summed reference of the same round.

A variant is served on the processor where it runs fastest. A task's answer is the variant
within the point with the highest speed-up there against dense on the same processor, among
the candidates and those the benchmark judged already (one variant at one position, dense
elsewhere; one variant at every position), with its speed-up against dense on dense's fastest
processor beside it (a variant faster on ONNX Runtime than dense there may still trail dense
on OpenVINO).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

#: The largest accuracy drop (points) a faster variant may have and still be on a task's
#: front (``bench compressors``) or be its fastest within the point.
FRONT_DROP_POINTS = 1.0
#: Variants per position that candidates draw from (the fastest that qualify there).
PER_POSITION = 4
#: Rows within the point the Markdown report shows per task (report.json has every row).
SHOWN = 8

Scorer = Callable[[Sequence[tuple[int, ...]]], dict[tuple[int, ...], float]]


@attrs.frozen
class StitchedRow:
    """One stitched variant on one processor, against dense.

    Attributes:
        task, processor: what was measured.
        choices: the variant id at each position; ``names`` their names.
        dense_ms, variant_ms: the median over rounds of the summed per-position medians.
        speedup_median, speedup_min, speedup_max: of the per-round ratios dense ÷ variant on
            the same processor.
        vs_fastest_dense: the median per-round ratio of dense's time on its fastest
            processor of the round ÷ the variant's.
        drop_points: ``100 × (accuracy dense − accuracy variant)`` on the held-out rows.
        judging_rows: how many rows the accuracies were scored on.
    """

    task: str
    choices: tuple[int, ...]
    names: tuple[str, ...]
    processor: str
    dense_ms: float
    variant_ms: float
    speedup_median: float
    speedup_min: float
    speedup_max: float
    vs_fastest_dense: float
    drop_points: float
    judging_rows: int


def candidates(rows: Sequence[Any], variant_ids: Mapping[str, int], positions: int
               ) -> list[tuple[int, ...]]:
    """The stitched variants to judge (see the module doc), from one task's position rows
    (:class:`~sparseloom.evaluation.compressor_bench.CompressorRow`); the all-dense one
    left out."""
    best: dict[int, dict[int, float]] = {j: {} for j in range(positions)}
    for row in rows:
        if (row.position is None or row.error is not None or row.skipped
                or row.compressor == "dense" or not row.speedup_median > 1.0
                or not row.drop_points <= FRONT_DROP_POINTS):
            continue
        ids = best[row.position]
        vid = variant_ids[row.variant]
        ids[vid] = max(ids.get(vid, 0.0), row.speedup_median)
    options = [[0, *sorted(best[j], key=best[j].__getitem__, reverse=True)[:PER_POSITION]]
               for j in range(positions)]
    return [c for c in itertools.product(*options) if any(c)]


def stitched_rows(task: str, zoo: Any, processors: Sequence[str], times: Any,
                  scores: Mapping[tuple[int, ...], float], judging_rows: int
                  ) -> list[StitchedRow]:
    """One row per stitched variant in ``scores`` (the all-dense one excepted) and processor
    where every position was timed; ``times`` is the task's
    :class:`~sparseloom.evaluation.compressor_bench.RoundTimes`."""
    positions = zoo.positions
    names = {info.id: info.name for info in zoo.variants}
    dense = {p: [sum(times.reference[p, j][r] for j in range(positions))
                 for r in range(times.rounds)]
             for p in range(len(processors))
             if all(len(times.reference.get((p, j), ())) == times.rounds
                    for j in range(positions))}
    if not dense:
        return []
    fastest = [min(dense[p][r] for p in dense) for r in range(times.rounds)]
    dense_accuracy = scores[(0,) * positions]
    out = []
    for choices, accuracy in scores.items():
        if not any(choices):
            continue
        for p in dense:
            cells = [times.variants.get((p, j, v), []) for j, v in enumerate(choices)]
            if any(len(cell) != times.rounds for cell in cells):
                continue
            summed = [sum(cell[r] for cell in cells) for r in range(times.rounds)]
            ratios = [d / s for d, s in zip(dense[p], summed, strict=True)]
            out.append(StitchedRow(
                task, tuple(choices), tuple(names[v] for v in choices), processors[p],
                statistics.median(dense[p]), statistics.median(summed),
                statistics.median(ratios), min(ratios), max(ratios),
                statistics.median(f / s for f, s in zip(fastest, summed, strict=True)),
                100.0 * (dense_accuracy - accuracy), judging_rows))
    return out


def serving_rows(rows: Sequence[StitchedRow]) -> list[StitchedRow]:
    """Per stitched variant, its row on the processor that would serve it: where it runs
    fastest (its least median latency)."""
    best: dict[tuple[int, ...], StitchedRow] = {}
    for row in rows:
        if math.isfinite(row.variant_ms) and (row.choices not in best
                                              or row.variant_ms < best[row.choices].variant_ms):
            best[row.choices] = row
    return list(best.values())


def fastest_within(rows: Sequence[StitchedRow], drop_points: float) -> StitchedRow | None:
    """Among the :func:`serving_rows` at most ``drop_points`` below dense, the one with the
    highest speed-up over dense on the same processor; ``None`` when there is none."""
    within = [r for r in serving_rows(rows) if r.drop_points <= drop_points]
    return max(within, key=lambda r: r.speedup_median, default=None)


def render_stitched(task: Mapping[str, Any]) -> list[str]:
    """A task's stitched lines in the Markdown report (nothing for a one-position task)."""
    rows = task.get("stitched") or []
    if not rows:
        return []
    serving = serving_rows([StitchedRow(**{**r, "choices": tuple(r["choices"]),
                                           "names": tuple(r["names"])}) for r in rows])
    within = sorted((attrs.asdict(r) for r in serving if r.drop_points <= FRONT_DROP_POINTS),
                    key=lambda r: -r["speedup_median"])
    lines = ["", f"Stitched variants of {task['task']}: {len(serving)} judged as a whole on "
                 f"the held-out rows; the {min(SHOWN, len(within))} fastest of the "
                 f"{len(within)} within {FRONT_DROP_POINTS:g} point, each on the processor "
                 "where it runs fastest (summed per-position medians against dense's on the "
                 "same processor, and against dense on its fastest processor):", "",
             "| variant | processor | dense ms | variant ms | speed-up | min–max | "
             "vs fastest dense | drop pt |", "|---|---|---|---|---|---|---|---|"]
    for row in within[:SHOWN]:
        lines.append(f"| {_name(row)} | "
                     f"{row['processor']} | {row['dense_ms']:.4f} | {row['variant_ms']:.4f} | "
                     f"×{row['speedup_median']:.2f} | {row['speedup_min']:.2f}–"
                     f"{row['speedup_max']:.2f} | ×{row['vs_fastest_dense']:.2f} | "
                     f"{row['drop_points']:+.2f} |")
    best = task.get("fastest_within")
    lines += ["", f"**{task['task']}: the fastest variant within {FRONT_DROP_POINTS:g} point** "
                  + (f"is {_name(best)} on {best['processor']}: ×{best['speedup_median']:.2f} "
                     f"[{best['speedup_min']:.2f}–{best['speedup_max']:.2f}] against dense "
                     f"there, ×{best['vs_fastest_dense']:.2f} against dense on its fastest "
                     f"processor, drop {best['drop_points']:+.2f} pt." if best else
                     "does not exist: no stitched variant was within it.")]
    return lines


def _name(row: Mapping[str, Any]) -> str:
    """```7_0` (int8, dense)``: the ids and the names of the variant at each position."""
    return f"`{'_'.join(map(str, row['choices']))}` ({', '.join(row['names'])})"


def stitched(task: Any, zoo: Any, processors: Sequence[str], times: Any, rows: Sequence[Any],
             scores: Mapping[tuple[int, ...], float], judging_rows: int,
             progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The report's stitched part of one task: the :func:`candidates` judged (besides the
    variants in ``scores``), every :func:`stitched_rows` row, and :func:`fastest_within`
    the point (``stitched``, ``fastest_within``); empty for a one-position task."""
    from sparseloom.zoo.stitch import held_out_scores

    if zoo.positions < 2:
        return {}
    ids = {info.name: info.id for info in zoo.variants}
    wanted = [c for c in candidates(rows, ids, zoo.positions) if c not in scores]
    if progress and wanted:
        progress(f"{task.name}: judging {len(wanted)} stitched variants on {judging_rows} "
                 f"held-out rows")
    every = {**scores, **held_out_scores(zoo, task, wanted)}
    out = stitched_rows(task.name, zoo, processors, times, every, judging_rows)
    best = fastest_within(out, FRONT_DROP_POINTS)
    return {"stitched": [attrs.asdict(r) for r in out],
            "fastest_within": attrs.asdict(best) if best else None}
