"""What a user runs instead of sparseloom, for ``sparseloom evaluate``: the stock runtimes.

- ``vanilla-ov``: every task's dense model compiled by OpenVINO out of the box (THROUGHPUT
  hint, OpenVINO's own defaults) — :data:`~sparseloom.evaluation.stock.STOCK_RUNTIMES`'s
  ``stock-ov``;
- ``vanilla-ort``: one ONNX Runtime session per task with default options — ``stock-ort``.

They are served by the same runtime, load generator and summary as every sparseloom plan
(:func:`~sparseloom.evaluation.stock.serve_stock`; one serving path, the evaluation only
chooses the load): closed loop, batch 1, each task keeping one request in flight, ``queries``
requests per task, eval rows drawn from a seeded permutation, tasks joining in the arrival
order after the previous one completed ``join_after`` requests. Every response is scored
against its label, and the violation rule is the run summary's (:func:`violations`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from sparseloom.core.errors import EvaluationError
from sparseloom.core.types import SLO
from sparseloom.runtime.monitor import STATISTIC
from sparseloom.runtime.records import LatencyStats

#: The vanilla runners, by contender name.
VANILLA_RUNNERS = ("vanilla-ov", "vanilla-ort")


@attrs.frozen
class VanillaTaskResult:
    """One task under a vanilla runner: measured metric, latency and completions."""

    task: str
    metric: str
    accuracy: float
    latency: LatencyStats
    completed: int


@attrs.frozen
class VanillaResult:
    """A vanilla run: per-task results, wall time, throughput, memory growth."""

    runner: str
    tasks: tuple[VanillaTaskResult, ...]
    wall_s: float
    throughput_rps: float
    memory_bytes: float

    def to_dict(self) -> dict[str, Any]:
        """The result as plain JSON-ready data."""
        return attrs.asdict(self)


def violations(tasks: Sequence[Any], slos: Mapping[str, SLO]) -> dict[str, str]:
    """Per task, which SLO sides it misses (``accuracy``, ``latency``, both, or ``""``).

    The run summary's rule: measured metric below the accuracy SLO, or p90 latency above the
    latency SLO. ``tasks`` hold ``task``, ``accuracy`` and ``latency`` (:class:`LatencyStats`).
    """
    out = {}
    for task in tasks:
        slo = slos[task.task]
        sides = [side for side, bad in (
            ("accuracy", not task.accuracy >= slo.accuracy),
            ("latency", not task.latency.percentile(STATISTIC) <= slo.latency_ms)) if bad]
        out[task.task] = "+".join(sides)
    return out


#: The stock runtime each vanilla runner is.
_STOCK = {"vanilla-ov": "stock-ov", "vanilla-ort": "stock-ort"}


def run_vanilla(workload: Any, runner: str, *, queries: int = 100,
                arrival_order: Sequence[str] = (), join_after: int | None = None,
                seed: int = 0) -> VanillaResult:
    """Serve every task of ``workload`` with a vanilla runner (see the module doc).

    :param runner: ``vanilla-ov`` or ``vanilla-ort``.
    :param arrival_order: tasks in the order they join (default: all start at once).
    :param join_after: completions before the next task joins (default a tenth of queries).
    :raises EvaluationError: an unknown runner or task, or a model the runtime cannot load.
    """
    from sparseloom.core.errors import SparseloomError
    from sparseloom.evaluation.stock import STOCK_RUNTIMES, serve_stock
    from sparseloom.runtime.load import LoadSpec

    if runner not in _STOCK:
        raise EvaluationError(f"unknown vanilla runner {runner!r}; choose "
                              f"{' or '.join(VANILLA_RUNNERS)}")
    unknown = [t for t in arrival_order if t not in workload.task_names]
    if unknown:
        raise EvaluationError(f"arrival order names unknown task(s) {', '.join(unknown)}; "
                              f"tasks: {', '.join(workload.task_names)}")
    # The judge is the caller's (violations()); the runtime needs an SLO per task to order
    # its queues by deadline: one per task, all equal, so each queue is first come first served.
    slos = {t: SLO(0.0, 1e9) for t in workload.task_names}
    spec = LoadSpec("closed", queries=queries, arrival_order=tuple(arrival_order),
                    join_after=join_after, seed=seed)
    try:
        summary = serve_stock(workload, None, STOCK_RUNTIMES[_STOCK[runner]], spec, slos)
    except SparseloomError as error:
        raise EvaluationError(f"{runner} could not serve workload {workload.name!r}: "
                              f"{error}") from error
    tasks = tuple(VanillaTaskResult(t.task, t.metric, t.accuracy_measured, t.latency,
                                    t.completed) for t in summary.tasks)
    return VanillaResult(runner, tasks, summary.wall_s, summary.throughput_rps,
                         float(summary.memory.get("rss_growth_bytes", 0.0)))
