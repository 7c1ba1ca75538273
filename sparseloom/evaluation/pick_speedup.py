"""Each pick's speed-up over dense as the profile predicts it and as serving delivers it.

The planner chooses a stitched variant by the profile's latencies: each subgraph timed alone
on each processor, summed along the chain (:meth:`~sparseloom.profile.table.TaskProfile.latency`).
``picks-tuned`` and ``stock-tuned`` serve the pick and the dense model merged, hot, batch 1,
each alone in every configuration they try. Where a configuration computes as a profiled
processor does (same runtime, precision and threads), the two speed-ups answer the same
question: how much faster the pick is than dense there. A profile that promises more than
serving delivers steers the planner to picks that buy nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from sparseloom.core.types import Processor


def pick_speedups(measured: Mapping[tuple[str, tuple[int, ...] | None], Sequence[Any]],
                  profile: Any, processors: Sequence[Processor]) -> list[dict[str, Any]]:
    """One row per task, pick measured alone and profiled processor that a measured
    configuration matches: the served speed-up (dense's median latency ÷ the pick's, same
    configuration) beside the predicted one (the profile's chain latency of the all-dense
    variant ÷ the pick's, every position on that processor).

    ``measured`` is :meth:`~sparseloom.evaluation.contenders.ServeContext.measured_alone`;
    ``processors`` are the profile's, in its order. A pick equal to the all-dense variant,
    a task whose dense model was not measured, and failed measurements give no row.
    """
    from sparseloom.core.processors import openvino_precision
    from sparseloom.plugins.policies.baselines import dense_variant

    rows = []
    for (task, pick), pick_rows in measured.items():
        dense_rows = measured.get((task, None))
        if pick is None or not dense_rows:
            continue
        table = profile.task(task)
        dense = [dense_variant(table)] * table.n_positions
        if list(pick) == dense:
            continue
        for index, processor in enumerate(processors):
            precision = openvino_precision([processor])
            same = [(d, p) for d in dense_rows for p in pick_rows
                    if d.config == p.config and d.config.backend == processor.backend
                    and d.config.precision == precision
                    and d.config.threads == processor.threads
                    and not d.failure and not p.failure]
            if not same:
                continue
            order = [index] * table.n_positions
            predicted = (float(table.latency(dense, order)[0])
                         / float(table.latency(list(pick), order)[0]))
            for dense_run, pick_run in same:
                rows.append({"task": task, "pick": "_".join(map(str, pick)),
                             "processor": processor.name, "precision": precision,
                             "predicted": predicted,
                             "served": dense_run.latency_ms / pick_run.latency_ms,
                             "dense_ms": dense_run.latency_ms, "pick_ms": pick_run.latency_ms})
    return rows


def render_pick_speedups(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The report's table of :func:`pick_speedups` (nothing when there are no rows)."""
    if not rows:
        return []
    lines = ["", "## Picks: predicted against served speed-up", "",
             "Each pick's speed-up over its dense model on one processor: predicted by the "
             "profile (subgraphs timed alone, summed along the chain) and served (the merged "
             "models, hot, batch 1, each alone; `picks-tuned` and `stock-tuned` measure "
             "them). Above 1 the profile promises more than serving delivers.", "",
             "| task | pick | processor | precision | dense (ms) | pick (ms) | predicted | "
             "served | predicted ÷ served |", "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        ratio = row["predicted"] / row["served"] if row["served"] > 0 else math.nan
        lines.append(f"| {row['task']} | `{row['pick']}` | {row['processor']} | "
                     f"{row['precision']} | {row['dense_ms']:.3f} | {row['pick_ms']:.3f} | "
                     f"{row['predicted']:.2f}× | {row['served']:.2f}× | {ratio:.2f} |")
    return lines
