"""Re-profiling on drift (SparseLoom §5.4): re-time a sample, rescale or re-time the table.

A profile is timed once, but the machine it describes changes: DVFS lowers a clock, another
job starts on a core. On the shared development machine the subgraph latencies of a profile
cached 10–25 minutes earlier were off by 6–44% (``docs/results.md``). :func:`refresh_profile`
checks a cached profile cheaply and repairs it:

1. re-time a small *stratified* sample of subgraphs per task (``sample`` of its S·V: the
   dense subgraph at every position, then evenly spaced over the range of profiled
   latencies) on every processor, with the profile's rounds and statistic
   (:func:`~sparseloom.profile.measure.measure_task`);
2. compare it with the **reference sample**: the same cells timed the same way at the last
   refresh. A sample is *not* compared with the table's cells directly: timed in rounds of a
   few subgraphs, the same cells ran faster than in the full profile's rounds of all S·V·P
   (0.73–0.89 of the table against 0.84–1.03 for full re-times around them, ``default``
   ``vision``, ``docs/results.md``), which would read as drift. The first refresh of a
   profile therefore *calibrates*: it times the sample and re-times every subgraph, so the
   drift of that first check is measured on the full table;
3. the **drift factor** of a processor on a task is the median over the task's sampled cells
   of now ÷ reference (per task: a load does not slow every model alike); where it moved
   beyond ``threshold`` (|factor − 1| > threshold), that task's cells on that processor (and
   the hand-offs into it) are rescaled by the factor (``mode="rescale"``), or the task is
   re-timed (``mode="full"``, and always when calibrating, since the full re-time is at hand);
4. the history (when, sample, factors, action) goes to ``table.meta["refresh"]``, the
   reference to ``table.meta["refresh_reference"]``; the table is saved where it lives, and
   the latency partials of the profile cache are rewritten with both, so a later
   ``build_profile`` (``plan``, ``run``) reads the refreshed latencies.

Like a build, a refresh holds the workload's profile lock while it times and writes, and
records the load other processes put on the machine meanwhile (``record["timing_load"]`` per
task, and the table's ``meta["timing_load"]`` for a task whose latencies it changed), warning
in one line when they kept cores busy (:mod:`~sparseloom.profile.timing_guard`).
"""

from __future__ import annotations

import datetime
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from sparseloom.core.cache import config_hash
from sparseloom.core.errors import ProfileError
from sparseloom.profile.builder import timing_jobs
from sparseloom.profile.machine_load import recorded_load_average
from sparseloom.profile.measure import (
    BackendResolver,
    TaskMeasurement,
    default_backend_resolver,
    measure_task,
)
from sparseloom.profile.options import (
    ProfileOptions,
    processor_key,
    profiling_inputs,
    workload_zoos,
)
from sparseloom.profile.store import ProfileStore, profiles_directory
from sparseloom.profile.table import ProfileTable, TaskProfile
from sparseloom.profile.timing_guard import TimingWatch, profile_lock

MODES = ("rescale", "full")
#: Subgraphs re-timed per task by default (of S·V; the dense ones at every position first).
DEFAULT_SAMPLE = 4
#: Relative change of a processor's latencies that counts as drift by default. On the shared
#: 2-core development machine a 4-subgraph sample's factor missed the full re-time's by 12%
#: (median over 20 task × processor checks, ``docs/results.md``): a smaller threshold would
#: rescale by noise.
DEFAULT_THRESHOLD = 0.25
#: Where the reference sample lives (latency partial meta, table meta).
REFERENCE = "refresh_reference"


def stratified_sample(profile: TaskProfile, count: int) -> list[tuple[int, int]]:
    """``count`` (position, variant) subgraphs: the dense one at every position, then the rest
    evenly spaced over the range of profiled latencies (mean over processors)."""
    s, v = profile.n_positions, profile.n_variants
    chosen = [(j, 0) for j in range(s)][:count]
    rest = [(j, i) for j in range(s) for i in range(1, v)
            if np.all(np.isfinite(profile.latency_ms[j, i]))]
    rest.sort(key=lambda cell: float(np.mean(profile.latency_ms[cell])))
    wanted = count - len(chosen)
    if wanted > 0 and rest:
        picks = np.unique(np.round(np.linspace(0, len(rest) - 1, min(wanted, len(rest)))))
        chosen += [rest[int(p)] for p in picks]
    return chosen


def find_cached_table(workload: str, processors: Sequence[Any], options: ProfileOptions,
                      root: str | os.PathLike[str] | None = None) -> ProfileTable:
    """The cached table ``build_profile`` would load for these processors and options.

    :raises ProfileError: there is none (with the command that builds it).
    """
    folder = profiles_directory(workload, root)
    estimators = {"accuracy": options.accuracy_estimator, "latency": options.latency_estimator,
                  "feature_set": options.feature_set}
    name = f"table-{config_hash(estimators | {'seed': options.seed, 'samples': options.samples})}"
    wanted = ([processor_key(p) for p in processors], options.config.cache_key(), estimators)
    found, damaged = [], []
    for path in folder.glob("*/table-*/profile.json"):
        try:
            table = ProfileTable.load(path.parent)
        except ProfileError as error:
            damaged.append(error)
            continue
        if (table.meta.get("processor_config"), table.meta.get("profiler"),
                table.meta.get("estimators")) == wanted:
            # the exact table of these options first, else the newest that matches
            found.append((path.parent.name == name, path.stat().st_mtime, table))
    if not found and damaged:  # perhaps the one asked for: say so, not "profile first"
        raise ProfileError(f"{damaged[0]}; then refresh it")
    if not found:
        raise ProfileError(
            f"no cached profile of workload {workload!r} on "
            f"{', '.join(p.name for p in processors)} with these settings under {folder}; "
            f"run `sparseloom profile {workload}` first (with the same options), then refresh it")
    return max(found, key=lambda item: item[:2])[2]


@attrs.frozen
class DriftCheck:
    """What a refresh found for one processor on one task's sample."""

    task: str
    processor: str
    factor: float
    cells: int
    drifted: bool


def refresh_profile(
    workload: Any,
    *,
    processors: Sequence[str] | None = None,
    options: ProfileOptions | None = None,
    sample: int = DEFAULT_SAMPLE,
    threshold: float = DEFAULT_THRESHOLD,
    mode: str = "rescale",
    rounds: int | None = None,
    resolve_backend: BackendResolver | None = None,
    cache_root: str | os.PathLike[str] | None = None,
    table: ProfileTable | None = None,
    zoos: Mapping[str, Any] | None = None,
    progress: bool = False,
) -> tuple[ProfileTable, dict[str, Any]]:
    """Check the cached profile of ``workload`` for drift and repair it (module docstring).

    :param sample: subgraphs re-timed per task (each on every processor), at least 1; more
        than S·V re-times them all.
    :param rounds: timed rounds of the sample (default: the profile's ``repeats``); fewer
        rounds of more subgraphs cost the same as more rounds of fewer.
    :param threshold: |factor − 1| above which a processor has drifted, > 0 (0.25 = 25%).
    :param mode: ``rescale`` the drifted processors' cells by their factor, or re-time every
        task in ``full`` when any processor drifted.
    :param table: the table to refresh (default: the cached one :func:`build_profile` reads).
    :param zoos: the zoos it was built on, by task name (default: built or loaded from the
        cache, as :func:`build_profile` does).
    :returns: the refreshed (or unchanged) table and the record of what was done, also
        appended to ``table.meta["refresh"]``.
    :raises ProfileError: bad ``sample``/``threshold``/``mode``, or no cached profile.
    """
    if sample < 1:
        raise ProfileError(f"refresh sample must be at least 1 subgraph per task, got {sample}")
    if not 0 < threshold < math.inf:
        raise ProfileError(f"drift threshold must be > 0 and finite (0.25 = 25%), got "
                           f"{threshold}")
    if rounds is not None and rounds < 3:
        raise ProfileError(f"refresh rounds must be at least 3, got {rounds}")
    if mode not in MODES:
        raise ProfileError(f"unknown refresh mode {mode!r}; choose one of {', '.join(MODES)}")
    loaded, chosen, options = profiling_inputs(workload, processors, options, progress)
    resolve_backend = resolve_backend or default_backend_resolver
    folder = (Path(table.meta["cache_directory"]).parent
              if table is not None and table.meta.get("cache_directory")
              else profiles_directory(loaded.name, cache_root))
    # One profile of a workload at a time, as build_profile: a refresh timing beside a build
    # (or another refresh) inflates both, and both write the profile cache.
    with profile_lock(folder, loaded.name):
        if table is None:
            table = find_cached_table(loaded.name, chosen, options, cache_root)
        return _refresh(loaded, chosen, options, table, zoos, resolve_backend, progress,
                        (sample, threshold, mode, rounds))


def _refresh(loaded: Any, chosen: Sequence[Any], options: ProfileOptions, table: ProfileTable,
             zoos: Mapping[str, Any] | None, resolve_backend: BackendResolver, progress: bool,
             settings: tuple[int, float, str, int | None]
             ) -> tuple[ProfileTable, dict[str, Any]]:
    """:func:`refresh_profile` once its arguments are checked and the profile lock is held."""
    sample, threshold, mode, rounds = settings
    if list(table.processors) != [p.name for p in chosen]:
        raise ProfileError(f"the profile was measured on {', '.join(table.processors)}, not on "
                           f"{', '.join(p.name for p in chosen)}; refresh it on its processors")
    started = datetime.datetime.now(datetime.UTC)
    zoos = workload_zoos(loaded, chosen, options, zoos, progress)
    stale = [n for n, z in zoos.items() if table.meta.get("zoo_hashes", {}).get(n) != z.hash]
    if stale:
        raise ProfileError(f"the cached profile was built on other zoos of {', '.join(stale)}; "
                           f"run `sparseloom profile {loaded.name}` to profile the current ones")
    thin = attrs.evolve(options, config=attrs.evolve(
        options.config, repeats=rounds or options.config.repeats))
    references = _references(table, thin.config.repeats)
    for task in loaded.tasks:  # a reference of another sample size is timed again
        wanted = min(sample, table.task(task.name).n_positions * table.task(task.name).n_variants)
        if task.name in references and len(references[task.name][0]) != wanted:
            references.pop(task.name)
    calibrating = len(references) < len(loaded.tasks)
    samples, fresh, full, timing_load = {}, {}, {}, {}
    for task in loaded.tasks:
        reference = references.get(task.name)
        samples[task.name] = (reference[0] if reference is not None
                              else stratified_sample(table.task(task.name), sample))
        watch = TimingWatch(loaded.name)  # warns, as a build does, when the machine is busy
        fresh[task.name] = time_subgraphs(task, zoos[task.name], samples[task.name], chosen,
                                          thin, resolve_backend)
        if calibrating:  # no reference timed in the sample's context yet: re-time it all
            full[task.name] = time_subgraphs(task, zoos[task.name], None, chosen, options,
                                             resolve_backend)
        timing_load[task.name] = watch.finish(task.name)
    if calibrating:  # compare the full re-time with the table
        everything = {n: [(j, i) for j in range(p.n_positions) for i in range(p.n_variants)]
                      for n, p in table.tasks.items()}
        checks = _drift(table.processors, everything, full, _cells_of(table, everything))
    else:
        checks = _drift(table.processors, samples, fresh,
                        {n: references[n][1] for n in samples})
    checks = [attrs.evolve(c, drifted=abs(c.factor - 1) > threshold) for c in checks]
    drifted = {t.name: [c.processor for c in checks if c.task == t.name and c.drifted]
               for t in loaded.tasks}
    actions = set()
    for task in loaded.tasks:
        if not drifted[task.name]:
            continue
        if calibrating or mode == "full":
            if task.name not in full:  # the load of this re-time is what the table holds
                watch = TimingWatch(loaded.name)
                full[task.name] = time_subgraphs(task, zoos[task.name], None, chosen, options,
                                                 resolve_backend)
                timing_load[task.name] = watch.finish(task.name)
            table.tasks[task.name] = _replaced(table.task(task.name), full[task.name])
            actions.add("retimed")
        else:
            table.tasks[task.name] = _rescaled(table.task(task.name),
                                               [c for c in checks if c.task == task.name])
            actions.add("rescaled")
        table.meta.setdefault("timing_load", {})[task.name] = timing_load[task.name]
    for name, cells in samples.items():  # the sample as timed now is the next reference
        now = fresh[name].latency_ms[tuple(np.asarray(cells).T)]
        if name in references and not calibrating:
            keep = np.array([p not in drifted[name] for p in table.processors])
            now[:, keep] = references[name][1][:, keep]
        references[name] = (cells, now)
    record = {
        "when": started.isoformat(timespec="seconds"), "threshold": threshold, "mode": mode,
        "calibrated": calibrating, "rounds": thin.config.repeats,
        "sample": {n: [list(c) for c in cells] for n, cells in samples.items()},
        "factors": _overall_factors(table.processors, checks),
        "task_factors": {t.name: {c.processor: round(c.factor, 4) for c in checks
                                  if c.task == t.name} for t in loaded.tasks},
        "drifted": {n: ps for n, ps in drifted.items() if ps},
        "action": "+".join(sorted(actions)) or "none",
        "load_average": recorded_load_average(), "timing_load": timing_load,
        "seconds": round((datetime.datetime.now(datetime.UTC) - started)
                         .total_seconds(), 2),
    }
    table.meta.setdefault("refresh", []).append(record)
    table.meta[REFERENCE] = {n: {"cells": [list(c) for c in cells], "latency_ms": v.tolist(),
                                 "rounds": thin.config.repeats}
                             for n, (cells, v) in references.items()}
    _persist(table, loaded.tasks, record)
    return table, {**record, "checks": [attrs.asdict(c) for c in checks]}


def _references(table: ProfileTable, rounds: int
                 ) -> dict[str, tuple[list[tuple[int, int]], np.ndarray]]:
    """The reference sample of every task timed in ``rounds`` rounds: its cells and their
    latencies (k, P), from the profile cache's latency partial (else the table's meta)."""
    store = (ProfileStore(table.meta["cache_directory"]) if table.meta.get("cache_directory")
             else None)
    out = {}
    for name in table.tasks:
        cached = store.load(f"latency-{name}") if store is not None else None
        entry = (cached[1].get(REFERENCE) if cached is not None else None) or table.meta.get(
            REFERENCE, {}).get(name)
        if entry and entry.get("rounds") == rounds:
            out[name] = ([(int(j), int(i)) for j, i in entry["cells"]],
                         np.asarray(entry["latency_ms"], dtype=np.float64))
    return out


def _cells_of(table: ProfileTable, cells: dict[str, list[tuple[int, int]]]
              ) -> dict[str, np.ndarray]:
    return {n: table.task(n).latency_ms[tuple(np.asarray(c).T)] for n, c in cells.items()}


def time_subgraphs(task: Any, zoo: Any, cells: Sequence[tuple[int, int]] | None,
                   processors: Any, options: ProfileOptions,
                   resolve_backend: BackendResolver) -> TaskMeasurement:
    """Time ``cells`` (all subgraphs when ``None``) of ``task`` as the profiler does: batch 1,
    dense-prefix inputs, ``options.config``'s interleaved rounds on pinned threads."""
    jobs = timing_jobs(task, zoo, options)
    if cells is not None:
        jobs = [job for job in jobs if (job.position, job.variant) in set(cells)]
    return measure_task(task.name, jobs, processors, resolve_backend, options.config,
                        seed=options.seed + 11)


def _drift(processors: Sequence[str], cells: dict[str, list[tuple[int, int]]],
           fresh: dict[str, TaskMeasurement], reference: dict[str, np.ndarray]
           ) -> list[DriftCheck]:
    """Median re-timed ÷ reference latency of every task's ``cells``, per processor."""
    checks = []
    for name, task_cells in cells.items():
        now = fresh[name].latency_ms[tuple(np.asarray(task_cells).T)]
        for p, processor in enumerate(processors):
            ratios = now[:, p] / reference[name][:, p]
            finite = ratios[np.isfinite(ratios) & (ratios > 0)]
            factor = float(np.median(finite)) if finite.size else 1.0
            checks.append(DriftCheck(name, processor, factor, int(finite.size), False))
    return checks


def _overall_factors(processors: Sequence[str], checks: Sequence[DriftCheck]
                     ) -> dict[str, float]:
    """Per processor, the median of its tasks' factors (what the report leads with)."""
    return {p: round(float(np.median([c.factor for c in checks if c.processor == p])), 4)
            for p in processors}


def _rescaled(profile: TaskProfile, checks: Sequence[DriftCheck]) -> TaskProfile:
    """``profile`` with every drifted processor's cells (and hand-offs into it) × its factor."""
    latency, median = profile.latency_ms.copy(), profile.latency_median_ms.copy()
    spread, handoff = profile.latency_spread_ms.copy(), profile.handoff_ms.copy()
    cold = profile.latency_cold_ms.copy()
    for p, check in enumerate(checks):
        if check.drifted:
            for array in (latency, median, spread, cold):
                array[:, :, p] *= check.factor
            handoff[:, :, p] *= check.factor  # the wake-up of p's thread
    return attrs.evolve(profile, latency_ms=latency, latency_median_ms=median,
                        latency_spread_ms=spread, handoff_ms=handoff, latency_cold_ms=cold)


def _replaced(profile: TaskProfile, full: TaskMeasurement) -> TaskProfile:
    """``profile`` with every latency cell and hand-off re-timed."""
    return attrs.evolve(profile, latency_ms=full.latency_ms, latency_median_ms=full.median_ms,
                        latency_spread_ms=full.spread_ms, latency_cold_ms=full.cold(),
                        handoff_ms=np.nan_to_num(full.handoff_ms, nan=0.0))


def _persist(table: ProfileTable, tasks: Sequence[Any], record: dict[str, Any]) -> None:
    """Save the table where it lives and rewrite the profile cache's latency partials."""
    if table.meta.get("table_directory"):
        table.save(table.meta["table_directory"])
    directory = table.meta.get("cache_directory")
    if not directory:
        return
    store = ProfileStore(directory)
    for task in tasks:
        name = f"latency-{task.name}"
        cached = store.load(name)
        if cached is None:
            continue
        arrays, meta = cached
        profile = table.task(task.name)
        arrays = {**arrays, "latency_ms": profile.latency_ms,
                  "median_ms": profile.latency_median_ms, "spread_ms": profile.latency_spread_ms,
                  "handoff_ms": profile.handoff_ms, "cold_ms": profile.latency_cold_ms}
        meta = {**meta, "refresh": [*meta.get("refresh", []), record],
                REFERENCE: table.meta.get(REFERENCE, {}).get(task.name),
                "timing_load": table.meta.get("timing_load", {}).get(task.name,
                                                                   meta.get("timing_load"))}
        store.save(name, arrays, meta)
