"""``sparseloom bench compressors``: what each compressor buys, per task, position and processor.

For every task, subgraph position ``j`` and source variant ``v`` of the task's zoo, two figures
side by side, each against the dense subgraph of the same position:

* **Speed.** The hot batch-1 latency of subgraph ``(j, v)`` on every processor of the profile,
  timed as the profiler and the runtime run it (:mod:`sparseloom.profile.pinned`): the
  batch-1 copy is compiled and loaded once, warmed up, and called in place on its processor's
  pinned thread, ``requests`` calls back to back, each call stamped on that thread; a slot's
  latency is the median of its calls. The variants of a position are timed in *interleaved
  rounds*: round ``r`` runs one slot each of dense (the reference), dense again (the control),
  and every other variant, in an order rotated by ``r``, so that a busy neighbour or a
  frequency change hits every variant alike. Each round gives a ratio dense_ms ÷ variant_ms;
  a row reports the median of these per-round ratios and their min–max. The dense row is the
  control against the reference: its spread is the noise of this machine.
* **Accuracy on held-out rows.** The stitched variant with ``v`` at ``j`` and dense at every
  other position, run on ONNX Runtime CPU over the task's judging rows (``task.judging()``:
  rows that selection never saw, :mod:`sparseloom.workload.held_out`), against the dense model
  on the same rows. The drop is in points (1 point = 0.01 of the metric).

The **whole-model** row of a variant (when the task has more than one position) uses it at
every position: its latency is the sum over positions, its ratio per round the summed dense
medians ÷ the summed variant medians of that round, its accuracy the all-``v`` chain's.

A compressor is **on the front** of a task when one of its rows is faster than dense in every
round by more than the noise (its smallest per-round ratio above 1 and above the largest of
the dense row of the same position and processor) and drops at most
:data:`FRONT_DROP_POINTS`. A row where a step of the variant was skipped (the compressor found
nothing to compress there: that step is the identity) does not count.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from sparseloom.core.errors import ConfigError, UnknownTaskError
from sparseloom.evaluation.stitched_front import FRONT_DROP_POINTS
from sparseloom.zoo.stitch import held_out_scores

log = logging.getLogger(__name__)

__all__ = ["FRONT_DROP_POINTS", "CompressorRow", "RoundTimes", "bench_compressors",
           "front_summary", "judge_variants", "rows_of_task", "select_tasks", "time_variants"]

#: Rounds and requests per round of ``--quick``: a look in seconds, not a headline.
QUICK_ROUNDS, QUICK_REQUESTS = 2, 30

Progress = Callable[[str], None]


@attrs.frozen
class CompressorRow:
    """One variant at one position (``None``: every position) on one processor, against dense.

    Attributes:
        task, variant, compressor, processor: what was measured (``compressor`` is the zoo's
            compressor names joined by ``+``; ``dense`` for the dense row).
        position: the subgraph position, ``None`` for the whole-model row.
        dense_ms, variant_ms: the median over rounds of each round's median call.
        speedup_median, speedup_min, speedup_max: of the per-round ratios dense ÷ variant.
        rounds: interleaved rounds timed.
        round_dense_ms, round_variant_ms, ratios: each round's figures, in round order.
        accuracy_dense, accuracy_variant: the metric on the judging rows.
        drop_points: ``100 × (accuracy_dense − accuracy_variant)``.
        judging_rows: how many rows the accuracies were scored on.
        error: why the row could not be timed (its latencies are then NaN).
        skipped: the variant's steps the zoo left out here (``position j: step`` in a
            whole-model row) because the compressor found nothing to compress.
    """

    task: str
    position: int | None
    variant: str
    compressor: str
    processor: str
    dense_ms: float
    variant_ms: float
    speedup_median: float
    speedup_min: float
    speedup_max: float
    rounds: int
    round_dense_ms: tuple[float, ...]
    round_variant_ms: tuple[float, ...]
    ratios: tuple[float, ...]
    accuracy_dense: float
    accuracy_variant: float
    drop_points: float
    judging_rows: int
    error: str | None = None
    skipped: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        """``position 1`` or ``whole model``."""
        return "whole model" if self.position is None else f"position {self.position}"


@attrs.define(eq=False)
class RoundTimes:
    """Per-round median milliseconds of one task's subgraphs, by processor index ``p``.

    Attributes:
        rounds: rounds timed.
        reference: ``(p, j)`` → dense's reference slot, one value per round.
        variants: ``(p, j, v)`` → variant ``v``'s slot (``v = 0``: the dense control).
        failures: ``(p, j, v)`` → why it could not be timed (``v = 0``: dense, so the whole
            position on ``p``).
        load_before: the 1-minute load average just before the first round (``None`` where
            the OS has none).
        foreign_cores: cores other processes kept busy, on average, during the rounds.
    """

    rounds: int
    load_before: float | None = None
    foreign_cores: float = math.nan
    reference: dict[tuple[int, int], list[float]] = attrs.field(factory=dict)
    variants: dict[tuple[int, int, int], list[float]] = attrs.field(factory=dict)
    failures: dict[tuple[int, int, int], str] = attrs.field(factory=dict)


def select_tasks(workload: Any, names: Sequence[str]) -> list[Any]:
    """The tasks of ``workload`` named (all when none), each with judging rows.

    :raises UnknownTaskError: a name the workload has no task of (the message lists them).
    :raises ConfigError: a task holds no rows out of selection.
    """
    known = {task.name: task for task in workload.tasks}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise UnknownTaskError(f"--task {', '.join(map(repr, unknown))}: workload "
                               f"{workload.name!r} has tasks {', '.join(known)}")
    chosen = [known[name] for name in dict.fromkeys(names)] if names else list(workload.tasks)
    for task in chosen:
        if task.held_out is None:
            raise ConfigError(
                f"task {task.name!r} of {workload.name!r} holds no eval rows out of selection "
                f"(held_out = 0 in its workload file, or too few eval rows to split), so no "
                f"accuracy here would be judged on unseen rows; set held_out = 0.3 in the "
                f"workload file")
    return chosen


def _passing_inputs(call: Callable[[Mapping[str, Any]], Any]
                    ) -> Callable[[Mapping[str, Any]], Mapping[str, Any]]:
    """``call`` returning its own feed, so that one chain of ``n`` stages on a pinned thread
    is ``n`` back-to-back calls of one model on the same inputs (one wake-up per slot, not
    per call; the extra Python frame inside the stamp is the same for every variant)."""
    def run(feed: Mapping[str, Any]) -> Mapping[str, Any]:
        call(feed)
        return feed
    return run


def time_variants(zoo: Any, task: Any, processors: Sequence[Any], *, rounds: int,
                  requests: int, progress: Progress | None = None) -> RoundTimes:
    """Time every (position, variant) of ``zoo`` on every processor in interleaved rounds.

    Batch-1 inputs are the dense prefix's activations of the task's first calibration row, as
    the profiler feeds them (:func:`sparseloom.profile.builder.subgraph_jobs`). A subgraph
    that fails to compile, load or run is recorded in ``failures``, never dropped silently.
    """
    from functools import partial

    from sparseloom.evaluation.serve_figures import QUIET_LOAD
    from sparseloom.isolation.guard import prepare
    from sparseloom.isolation.probe import wait_for_probes
    from sparseloom.profile.builder import subgraph_jobs
    from sparseloom.profile.machine_load import ForeignLoad, recorded_load_average
    from sparseloom.profile.measure import ProfilerConfig, default_backend_resolver, direct_call
    from sparseloom.profile.pinned import PinnedThreads, Stage
    from sparseloom.zoo.evaluate import SubgraphRunner
    from sparseloom.zoo.tensors import dense_activations, take_batch

    with SubgraphRunner(processor="ort:CPU") as runner:
        reads, _ = dense_activations(zoo, take_batch(task.calibration_inputs, 0, 1), runner.run)
    jobs = {(job.position, job.variant): job for job in subgraph_jobs(zoo, reads)}
    times = RoundTimes(rounds)
    hot: dict[tuple[int, int, int], Stage] = {}
    loaded: list[tuple[Any, Any]] = []
    backends = [default_backend_resolver(processor) for processor in processors]
    prepare([(backends[p], job.model_path, processor) for p, processor in enumerate(processors)
             for job in jobs.values()])
    if progress:
        progress(f"{task.name}: loading {len(jobs)} subgraphs on {len(processors)} processor(s)")
    with PinnedThreads(processors) as threads:
        try:
            for p, processor in enumerate(processors):
                for (j, v), job in jobs.items():
                    try:
                        handle = backends[p].load(backends[p].compile(job.model_path,
                                                                      processor), processor)
                        loaded.append((backends[p], handle))
                        names = tuple(getattr(handle, "input_names", None) or job.inputs)
                        checked = Stage(p, partial(backends[p].infer, handle), names)
                        for _ in range(ProfilerConfig().warmup):  # the profiler's warm-up
                            threads.run([checked], job.inputs)
                        hot[p, j, v] = Stage(p, _passing_inputs(direct_call(backends[p],
                                                                            handle)), names)
                    except Exception as error:
                        times.failures[p, j, v] = f"{type(error).__name__}: {error}"
            wait_for_probes()  # nothing is timed while a probe process works
            times.load_before = load = recorded_load_average()
            if progress and load is not None and load > QUIET_LOAD:
                progress(f"Warning: load average {load:.2f} before the first round of "
                         f"{task.name} (> {QUIET_LOAD}): other work shares the CPU and "
                         f"inflates latencies; measure on a quiet machine for a headline")
            foreign = ForeignLoad()
            for r in range(rounds):
                if progress:
                    progress(f"{task.name}: round {r + 1}/{rounds}")
                for p in range(len(processors)):
                    for j in range(zoo.positions):
                        _time_slots(times, hot, threads, jobs[j, 0].inputs, p, j,
                                    len(zoo.variants), r, requests)
            times.foreign_cores = round(foreign.cores(), 2)
        finally:
            for backend, handle in loaded:
                try:
                    backend.unload(handle)
                except Exception as error:  # an unload failure must not lose the figures
                    log.warning("bench compressors: unloading failed: %s", error)
    return times


def _time_slots(times: RoundTimes, hot: Mapping[tuple[int, int, int], Any], threads: Any,
                inputs: Mapping[str, Any], p: int, j: int, variants: int, round_index: int,
                requests: int) -> None:
    """One round of position ``j`` on processor ``p``: the reference, then every variant
    (``0`` the control), in an order rotated by ``round_index``."""
    if (p, j, 0) not in hot:
        return  # dense failed here: every row of (p, j) reports it
    slots: list[int | None] = [None, *range(variants)]  # None: dense as the reference
    shift = round_index % len(slots)
    for v in slots[shift:] + slots[:shift]:
        cell = (p, j, 0 if v is None else v)
        if cell in times.failures or cell not in hot:
            continue
        try:
            timing = threads.run([hot[cell]] * requests, inputs)
        except Exception as error:
            times.failures[cell] = f"{type(error).__name__}: {error}"
            continue
        median_ms = statistics.median(timing.stage_ms(i) for i in range(requests))
        if v is None:
            times.reference.setdefault((p, j), []).append(median_ms)
        else:
            times.variants.setdefault(cell, []).append(median_ms)


def judge_variants(zoo: Any, task: Any) -> tuple[dict[tuple[int, ...], float], int]:
    """The metric on ``task``'s judging rows of dense, of every variant at one position (dense
    elsewhere) and of every variant at every position; and how many judging rows there are."""
    positions, variants = zoo.positions, len(zoo.variants)
    wanted = [(0,) * positions]
    wanted += [tuple(v if k == j else 0 for k in range(positions))
               for j in range(positions) for v in range(1, variants)]
    wanted += [(v,) * positions for v in range(1, variants)]
    return held_out_scores(zoo, task, wanted), task.judging().num_eval


def _row(task: str, position: int | None, info: Any, processor: str, dense: Sequence[float],
         variant: Sequence[float], accuracy: tuple[float, float], rows: int,
         error: str | None, skipped: Sequence[str]) -> CompressorRow:
    ratios = tuple(d / x for d, x in zip(dense, variant, strict=True)) if error is None else ()
    dense, variant = (dense, variant) if ratios else ((math.nan,), (math.nan,))
    return CompressorRow(
        task, position, info.name, info.compressor, processor, statistics.median(dense),
        statistics.median(variant), statistics.median(ratios or (math.nan,)),
        min(ratios, default=math.nan), max(ratios, default=math.nan), len(ratios),
        tuple(dense) if ratios else (), tuple(variant) if ratios else (), ratios, accuracy[0],
        accuracy[1], 100.0 * (accuracy[0] - accuracy[1]), rows, error, tuple(skipped))


def rows_of_task(task: str, zoo: Any, processors: Sequence[str], times: RoundTimes,
                 scores: Mapping[tuple[int, ...], float], judging_rows: int
                 ) -> list[CompressorRow]:
    """Every (position, variant, processor) row, then the whole-model rows (``S > 1``;
    dense's is the summed control against the summed reference)."""
    positions, infos = zoo.positions, zoo.variants
    dense_accuracy = scores[(0,) * positions]
    out = []
    skipped = {(j, info.id): zoo.subgraph(j, info.id).skipped for j in range(positions)
               for info in infos}
    for j in range(positions):
        for info in infos:
            choices = tuple(info.id if k == j else 0 for k in range(positions))
            for p, name in enumerate(processors):
                error = times.failures.get((p, j, 0)) or times.failures.get((p, j, info.id))
                if error and info.id and (p, j, 0) in times.failures:
                    error = f"dense failed: {error}"
                out.append(_row(task, j, info, name, times.reference.get((p, j), []),
                                times.variants.get((p, j, info.id), []),
                                (dense_accuracy, scores[choices]), judging_rows, error,
                                skipped[j, info.id]))
    for info in infos if positions > 1 else []:
        for p, name in enumerate(processors):
            failed = [f"position {j}: {times.failures[cell]}" for j in range(positions)
                      for cell in ((p, j, 0), (p, j, info.id)) if cell in times.failures]
            dense = [sum(times.reference[p, j][r] for j in range(positions))
                     for r in range(times.rounds)] if not failed else []
            summed = [sum(times.variants[p, j, info.id][r] for j in range(positions))
                      for r in range(times.rounds)] if not failed else []
            out.append(_row(task, None, info, name, dense, summed,
                            (dense_accuracy, scores[(info.id,) * positions]), judging_rows,
                            "; ".join(failed) or None,
                            [f"position {j}: {step}" for j in range(positions)
                             for step in skipped[j, info.id]]))
    return out


def front_summary(rows: Sequence[CompressorRow]) -> dict[str, Any]:
    """Which compressors reach the front (each with its fastest row there), and which never
    do, of one task's rows (see the module doc for the rule)."""
    compressors = list(dict.fromkeys(r.compressor for r in rows if r.compressor != "dense"))
    noise = {(r.position, r.processor): r.speedup_max for r in rows if r.compressor == "dense"}
    best: dict[str, CompressorRow] = {}
    for row in rows:
        floor = max(1.0, noise.get((row.position, row.processor), 1.0))
        if (row.compressor != "dense" and row.error is None and not row.skipped
                and row.speedup_min > floor and row.drop_points <= FRONT_DROP_POINTS
                and (row.compressor not in best
                     or row.speedup_median > best[row.compressor].speedup_median)):
            best[row.compressor] = row
    return {"on_front": {name: _brief(best[name]) for name in compressors if name in best},
            "never": [name for name in compressors if name not in best]}


def _brief(row: CompressorRow) -> dict[str, Any]:
    return {"variant": row.variant, "where": row.where, "processor": row.processor,
            "speedup_median": row.speedup_median, "drop_points": row.drop_points}


def bench_compressors(workload: Any, profile: Any, zoos: Mapping[str, Any], *,
                      tasks: Sequence[str] = (), rounds: int = 5, requests: int = 200,
                      quick: bool = False, progress: Progress | None = None) -> dict[str, Any]:
    """Measure every task's variants (:func:`time_variants`, :func:`judge_variants`); the JSON
    report. The 1-minute load average before each task's first round is recorded, and one
    above :data:`~sparseloom.evaluation.serve_figures.QUIET_LOAD` is warned about (the
    report is then not ``quiet``)."""
    from sparseloom.evaluation import stitched_front
    from sparseloom.evaluation.bench_serve import machine
    from sparseloom.evaluation.serve_figures import QUIET_LOAD
    from sparseloom.runtime.session import profile_processors

    chosen = select_tasks(workload, tasks)
    processors = profile_processors(profile)
    names = [p.name for p in processors]
    report: dict[str, Any] = {
        "workload": workload.name, "machine": machine(), "processors": names,
        "rounds": rounds, "requests": requests, "quick": quick,
        "front_rule": f"faster than dense in every round, beyond the dense row's spread, at "
                      f"<= {FRONT_DROP_POINTS:g} point drop on the held-out rows", "tasks": []}
    for task in chosen:
        zoo = zoos[task.name]
        # Timed first: judging computes for seconds and would raise the load average the
        # rounds are recorded under.
        times = time_variants(zoo, task, processors, rounds=rounds, requests=requests,
                              progress=progress)
        if progress:
            progress(f"{task.name}: judging {len(zoo.variants)} variants on "
                     f"{task.held_out.count} held-out rows")
        scores, judging_rows = judge_variants(zoo, task)
        rows = rows_of_task(task.name, zoo, names, times, scores, judging_rows)
        if progress:
            _progress_rows(rows, progress)
        stitched = stitched_front.stitched(task, zoo, names, times, rows, scores,
                                           judging_rows, progress)
        report["tasks"].append({
            "task": task.name, "metric": zoo.metric_name, "positions": zoo.positions,
            "judging_rows": judging_rows, "load_before": times.load_before,
            "foreign_cores": times.foreign_cores,
            "rows": [attrs.asdict(r) for r in rows], **front_summary(rows), **stitched})
    loads = [t["load_before"] for t in report["tasks"] if t["load_before"] is not None]
    report["load_before_first_round"] = loads[0] if loads else None
    report["quiet"] = bool(loads) and max(loads) <= QUIET_LOAD
    return report


def _progress_rows(rows: Sequence[CompressorRow], progress: Progress) -> None:
    """One line per measured variant (position or whole model): every processor's ratio."""
    grouped: dict[tuple[int | None, str], list[CompressorRow]] = {}
    for row in rows:
        grouped.setdefault((row.position, row.variant), []).append(row)
    for (_, variant), group in grouped.items():
        speeds = ", ".join(f"{r.processor} failed" if r.error else
                           f"{r.processor} ×{r.speedup_median:.2f} ({r.variant_ms:.4f} vs "
                           f"{r.dense_ms:.4f} ms)" for r in group)
        progress(f"{group[0].task} {group[0].where} {variant}: {speeds}; drop "
                 f"{group[0].drop_points:+.2f} pt on {group[0].judging_rows} held-out rows")
