"""The end-to-end comparison (SparseLoom §5.1–5.3): contenders × SLO grid × arrival orders.

A *cell* is one contender under one SLO configuration k (every task at point k of its own
grid Ψ, :func:`~sparseloom.plan.slo_grid.slo_grid`), one arrival order and one repeat. Policy
contenders are served by the real runtime through the one serving path applications use
(:func:`sparseloom.runtime.session.serve` on a :class:`sparseloom.Server`); the
vanilla runners (:mod:`sparseloom.evaluation.vanilla`) do not plan, so one run per order and
repeat is scored against every SLO configuration. Cells not run for real are filled by the
simulator (:mod:`sparseloom.evaluation.simulator`) and marked ``"source": "simulated"``.

Every finished run is written to ``OUT/runs/<key>.json`` as soon as it ends; a rerun reads
those back and runs only what is missing (resumable).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from sparseloom.core.cache import cache_notice
from sparseloom.core.errors import EvaluationError, SparseloomError
from sparseloom.core.registry import get_registry
from sparseloom.core.types import SLO, as_tuple, repeated
from sparseloom.evaluation.simulator import SimConfig, simulate
from sparseloom.evaluation.vanilla import VANILLA_RUNNERS, run_vanilla, violations
from sparseloom.workload.arguments import names_attribute, number_field


@attrs.frozen
class EvalConfig:
    """What to compare.

    Attributes:
        contenders: contender names (policies, ``vanilla-ov``, ``vanilla-ort``); empty: every
            registered policy and both vanilla runners, less ``exclude``.
        exclude: contenders to leave out.
        slo_configs: indices into the 5 × 5 grid to run for real (empty: all 25).
        simulate_rest: fill the other grid cells with the simulator (marked simulated).
        orders: how many arrival orders to run (a seeded sample of the T! orders; ``None``:
            all of them).
        queries: requests per task per run (closed loop, batch 1).
        repeats: runs per cell, averaged.
        budgets: memory budgets (fractions of full preloading) of the Fig. 14 sweep.
        budget_policy: the contender of the Fig. 14 sweep.
        order_runs: run Fig. 13 for real: Algorithm 1 with each processor order of Ω forced
            (:mod:`sparseloom.evaluation.fixed_order`), at the Fig. 14 configuration.
        seed: seeds the order sample and the runs' sample draws.
    """

    contenders: tuple[str, ...] = names_attribute()
    exclude: tuple[str, ...] = names_attribute()
    slo_configs: tuple[int, ...] = attrs.field(default=(), converter=as_tuple)
    simulate_rest: bool = True
    orders: int | None = attrs.field(
        default=None, validator=number_field(low=1, integer=True, optional=True))
    queries: int = attrs.field(default=100, validator=number_field(low=1, integer=True))
    repeats: int = attrs.field(default=3, validator=number_field(low=1, integer=True))
    budgets: tuple[float, ...] = (0.05, 0.15, 0.35, 0.55, 0.75, 1.0)
    budget_policy: str = "sparseloom"
    order_runs: bool = True
    seed: int = 0


#: ``--quick``: three SLO configurations (grid corners and middle), one order, one repeat,
#: 20 queries per task, two budgets; the rest of the grid simulated.
QUICK = EvalConfig(slo_configs=(0, 12, 24), orders=1, queries=20, repeats=1,
                   budgets=(0.5, 1.0))


def contenders(config: EvalConfig) -> list[str]:
    """The contenders to run: the asked-for ones, else every registered policy + vanilla.

    :raises EvaluationError: an unknown contender, asked for or excluded (the message lists the
        known ones), one asked for twice, or none left to run.
    """
    known = sorted(r.name for r in get_registry().policies()) + list(VANILLA_RUNNERS)
    chosen = list(config.contenders) or known
    for option, names in (("--contender", chosen), ("--exclude", config.exclude)):
        unknown = [c for c in names if c not in known]
        if unknown:
            raise EvaluationError(f"{option}: unknown contender(s) {', '.join(unknown)}; "
                                  f"known: {', '.join(known)}")
        twice = repeated(names)
        if twice:
            raise EvaluationError(f"{option} names {', '.join(twice)} more than once; name "
                                  "each contender once")
    left = [c for c in chosen if c not in config.exclude]
    if not left:
        raise EvaluationError("--exclude leaves no contender to run; exclude fewer, or name "
                              "the ones to run with --contender")
    return left


def arrival_orders(tasks: Sequence[str], count: int | None, seed: int = 0) -> list[tuple]:
    """All T! arrival orders, or a seeded sample of ``count`` of them (first: file order)."""
    every = list(itertools.permutations(tasks))
    if count is None or count >= len(every):
        return every
    rest = every[1:]
    random.Random(seed).shuffle(rest)
    return [every[0], *rest[:max(count - 1, 0)]]


def slo_configurations(profile: Any, points: int = 5) -> list[dict[str, SLO]]:
    """SLO configuration k = every task at point k of its own grid (accuracy-major)."""
    from sparseloom.plan.slo_grid import slo_grid

    grids = {name: slo_grid(task, points) for name, task in profile.tasks.items()}
    return [{name: grid[k] for name, grid in grids.items()} for k in range(points * points)]


def _key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:16]


#: The keys every cached run holds (a vanilla run's, too), and those of a policy's run.
RUN_KEYS = frozenset({"throughput_rps", "memory_bytes", "tasks"})
POLICY_RUN_KEYS = RUN_KEYS | {"violation_rate", "pipeline_share", "valid"}
TASK_ROW_KEYS = frozenset({"task", "accuracy", "p90_ms"})


@attrs.define(eq=False)
class RunCache:
    """Finished runs as JSON files under ``directory`` (one file per run)."""

    directory: Path

    def get(self, key: str, required: frozenset[str] = RUN_KEYS) -> dict[str, Any] | None:
        """The run stored as ``key``; ``None`` (it is run again) when there is none, when it
        was cut short mid-write, or when it lacks one of ``required`` (a damaged or foreign
        file: a ``Warning:`` line names it)."""
        path = self.directory / f"{key}.json"
        try:
            value = json.loads(path.read_text()) if path.exists() else None
        except (OSError, ValueError):
            return None  # a run cut short mid-write is run again
        if value is None:
            return None
        rows = value.get("tasks") if isinstance(value, dict) else None
        if not isinstance(value, dict) or not required <= value.keys() or not isinstance(
                rows, list) or not all(isinstance(r, dict) and r.keys() >= TASK_ROW_KEYS
                                       for r in rows):
            missing = sorted(required - value.keys()) if isinstance(value, dict) else []
            cache_notice(f"run file {path} is damaged or not a run ("
                         f"{'lacks ' + ', '.join(missing) if missing else 'bad task rows'}); "
                         "running it again")
            return None
        return value

    def put(self, key: str, value: dict[str, Any]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        temporary = self.directory / f"{key}.json.tmp"
        temporary.write_text(json.dumps(value, default=_plain))
        temporary.replace(self.directory / f"{key}.json")


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def _task_rows(tasks: Sequence[Any], slos: dict[str, SLO]) -> list[dict[str, Any]]:
    verdict = violations(tasks, slos)
    return [{"task": t.task, "accuracy": t.accuracy, "p90_ms": t.latency.p90_ms,
             "slo_accuracy": slos[t.task].accuracy, "slo_latency_ms": slos[t.task].latency_ms,
             "violated": verdict[t.task]} for t in tasks]


def real_policy_run(workload: Any, profile: Any, policy: str, slos: dict[str, SLO],
                    order: Sequence[str], repeat: int, queries: int,
                    budget: float = 1.0) -> dict[str, Any]:
    """One run of ``policy`` by the real runtime, reduced to the harness's numbers."""
    from sparseloom.runtime.load import LoadSpec
    from sparseloom.runtime.session import RunConfig, serve

    spec = LoadSpec(queries=queries, arrival_order=tuple(order) if len(order) > 1 else (),
                    seed=repeat)
    # The harness compares the policies' own decisions, so no paired gate re-judges them (it
    # would also run each pick over the selection rows at every one of the grid's starts).
    result = serve(workload, profile, RunConfig(policy=policy, slos=slos, memory_budget=budget,
                                                load=spec, paired_gate=False))
    summary = result.summary
    rows = [{"task": t.task, "accuracy": t.accuracy_measured, "p90_ms": t.latency.p90_ms,
             "slo_accuracy": t.slo_accuracy, "slo_latency_ms": t.slo_latency_ms,
             "violated": t.violated} for t in summary.tasks]
    return {"violation_rate": summary.violation_rate, "throughput_rps": summary.throughput_rps,
            "pipeline_share": summary.pipeline_share,
            "memory_bytes": summary.memory.get("loaded_bytes", math.nan),
            "valid": summary.valid, "tasks": rows, "wall_s": summary.wall_s,
            "submitted": summary.submitted, "failed": summary.failed,
            "rejected": summary.rejected,
            "utilisation": dict(summary.utilisation), "switches": summary.switches,
            "pipeline_bound_rps": summary.pipeline_bound_rps,
            # The shared machine's load while it ran: the real runs' context, in the results.
            "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan}


def simulated_run(profile: Any, policy: str, slos: dict[str, SLO], order: Sequence[str],
                  queries: int, budget: float = 1.0, slowdown: dict[str, float] | None = None
                  ) -> dict[str, Any]:
    """The simulator's figures for one cell, in the same shape as a real run's."""
    result = simulate(profile, SimConfig(policy=policy, slos=slos, queries=queries,
                                         arrival_order=tuple(order) if len(order) > 1 else (),
                                         memory_budget=budget, slowdown=slowdown or {}))
    rows = _task_rows(result.tasks, slos)
    return {"violation_rate": result.violation_rate, "throughput_rps": result.throughput_rps,
            "pipeline_share": result.pipeline_share, "memory_bytes": result.resident_bytes,
            "valid": True, "tasks": rows,
            "busy_ms": {p: u * result.makespan_ms for p, u in result.utilisation.items()}}


def measured_slowdown(real: dict[str, Any], simulated: dict[str, Any]) -> dict[str, float]:
    """Per processor, the real run's busy time over the simulation's: how much longer its
    stages took than the profile says (other jobs on the cores, cache sharing). Empty when
    the real run did not record its utilisation."""
    busy = {p: u * real["wall_s"] * 1e3 for p, u in real.get("utilisation", {}).items()}
    return {p: busy[p] / ms for p, ms in simulated.get("busy_ms", {}).items()
            if p in busy and ms > 0 and busy[p] > 0}


def vanilla_cells(run: dict[str, Any], configs: Sequence[dict[str, SLO]]) -> list[dict]:
    """Score one vanilla run against every SLO configuration."""
    cells = []
    for slos in configs:
        rows = []
        for task in run["tasks"]:
            slo = slos[task["task"]]
            sides = [side for side, bad in (
                ("accuracy", not task["accuracy"] >= slo.accuracy),
                ("latency", not task["p90_ms"] <= slo.latency_ms)) if bad]
            rows.append(task | {"slo_accuracy": slo.accuracy, "slo_latency_ms": slo.latency_ms,
                                "violated": "+".join(sides)})
        cells.append({"violation_rate": sum(1 for r in rows if r["violated"]) / len(rows),
                      "throughput_rps": run["throughput_rps"], "pipeline_share": math.nan,
                      "memory_bytes": run["memory_bytes"], "valid": True, "tasks": rows})
    return cells


def _vanilla_run(workload: Any, runner: str, order: Sequence[str], repeat: int,
                 queries: int) -> dict[str, Any]:
    result = run_vanilla(workload, runner, queries=queries,
                         arrival_order=tuple(order) if len(order) > 1 else (), seed=repeat)
    return {"throughput_rps": result.throughput_rps, "memory_bytes": result.memory_bytes,
            "tasks": [{"task": t.task, "accuracy": t.accuracy, "p90_ms": t.latency.p90_ms}
                      for t in result.tasks]}


Progress = Callable[[int, int, str], None]

#: Bumped when the simulator's model changes, so cached simulated cells are made again.
SIMULATOR_MODEL = 2

#: Contender label of a Fig. 13 run: the prefix, then the forced order (``ov:CPU>ort:CPU``).
ORDER_PREFIX = "order "


def _run_key(profile: Any, kind: str, name: str, k: int | None, order: Sequence[str],
             repeat: int, budget: float, queries: int) -> str:
    # The budget-1.0 point of Fig. 14 is the grid's own real run of that policy: shared.
    if kind == "budget" and budget == 1.0:
        kind = "real"
    parts: list[Any] = [profile.workload, kind, name, k, list(order), repeat, budget, queries]
    if kind == "simulated":
        # A re-measured profile redoes simulated cells (a new key) and real runs (each records
        # ``profile_fingerprint``, checked when read back).
        parts += [profile_fingerprint(profile), SIMULATOR_MODEL]
    return _key(*parts)


def profile_fingerprint(profile: Any) -> str:
    """A short hash of the profile's latency, hand-off and memory figures."""
    import numpy as np

    digest = hashlib.sha256()
    for name in sorted(profile.tasks):
        task = profile.tasks[name]
        for field in ("latency_ms", "handoff_ms"):
            values = getattr(task, field, None)
            if values is not None:
                digest.update(np.ascontiguousarray(values, dtype=np.float64).tobytes())
    return digest.hexdigest()[:12]


def evaluate(workload: Any, profile: Any, out: Path, config: EvalConfig = QUICK, *,
             progress: Progress | None = None) -> dict[str, Any]:
    """Run (or resume) the comparison; returns every cell and the Fig. 14 sweep.

    :param out: the output folder; runs are cached under ``out/runs``.
    :param progress: called ``(done, total, label)`` before each run.
    :raises EvaluationError: an unknown contender.
    """
    cache = RunCache(out / "runs")
    names = contenders(config)
    configs = slo_configurations(profile)
    real = list(config.slo_configs) or list(range(len(configs)))
    orders = arrival_orders(list(profile.tasks), config.orders, config.seed)
    jobs: list[tuple] = []
    for name in names:
        for order_index, order in enumerate(orders):
            for repeat in range(config.repeats):
                if name in VANILLA_RUNNERS:
                    jobs.append(("vanilla", name, None, order_index, order, repeat, 1.0))
                    continue
                jobs += [("real", name, k, order_index, order, repeat, 1.0) for k in real]
                if config.simulate_rest and repeat == 0:
                    jobs += [("simulated", name, k, order_index, order, 0, 1.0)
                             for k in range(len(configs)) if k not in real]
    # Fig. 14 at one configuration (the grid middle if run for real, else the first asked
    # for): each budget point is a full real run (plan, preload, serve) and costs as much.
    middle = 12 if 12 in real else real[0]
    jobs += [("budget", config.budget_policy, middle, 0, orders[0], 0, budget)
             for budget in config.budgets]
    if config.order_runs:
        from sparseloom.plan.orders import all_orders

        positions = next(iter(profile.tasks.values())).n_positions
        jobs += [("order", ORDER_PREFIX + ">".join(profile.processors[q] for q in forced),
                  middle, 0, orders[0], 0, 1.0)
                 for forced in all_orders(positions, range(len(profile.processors)))]
    # Real runs go configuration by configuration (in the order asked), every contender at
    # each, so a run cut short still compares all contenders; the Fig. 13/14 runs follow the
    # first configuration; simulated cells come last.
    place = {"vanilla": -1.0, "budget": 0.5, "order": 0.5, "simulated": float(len(real))}

    def rank(job: tuple) -> tuple:
        return (real.index(job[2]) if job[0] == "real" else place[job[0]], job[3], job[5])

    jobs.sort(key=rank)
    cells: list[dict[str, Any]] = []
    started, ran = time.perf_counter(), 0
    fingerprint = profile_fingerprint(profile)
    for done, (kind, name, k, order_index, order, repeat, budget) in enumerate(jobs):
        key = _run_key(profile, kind, name, k, order, repeat, budget, config.queries)
        found = cache.get(key, RUN_KEYS if kind == "vanilla" else POLICY_RUN_KEYS)
        if found is not None and found.get("profile_fingerprint", fingerprint) != fingerprint:
            found = None  # planned from an older profile of the workload: run it again
        if found is None:
            if progress is not None:
                elapsed = time.perf_counter() - started
                real_left = sum(1 for job in jobs[done:] if job[0] != "simulated")
                left = elapsed / ran * real_left if ran else math.nan
                progress(done, len(jobs), f"{name} {kind} slo={k} order={order_index} "
                         f"(~{left:.0f}s left)" if ran else f"{name} {kind}")
            found = _run(kind, workload, profile, name, configs, k, order, repeat, budget,
                         config.queries)
            found["profile_fingerprint"] = fingerprint
            cache.put(key, found)
            ran += kind != "simulated"
        base = {"contender": name, "order": order_index, "repeat": repeat, "budget": budget,
                "kind": kind if kind in ("budget", "order") else "grid",
                "source": "simulated" if kind == "simulated" else "measured"}
        if kind == "vanilla":
            cells += [base | {"slo_config": i} | cell
                      for i, cell in enumerate(vanilla_cells(found, configs))]
        else:
            cells.append(base | {"slo_config": k} | found)
    return {"workload": profile.workload, "processors": list(profile.processors),
            "contenders": names, "slo_configs_real": real, "orders": [list(o) for o in orders],
            "config": attrs.asdict(config), "cells": cells}


def _run(kind: str, workload: Any, profile: Any, name: str, configs: list, k: int | None,
         order: Sequence[str], repeat: int, budget: float, queries: int) -> dict[str, Any]:
    if kind == "vanilla":
        return _vanilla_run(workload, name, order, repeat, queries)
    assert k is not None
    if kind == "simulated":
        return simulated_run(profile, name, configs[k], order, queries, budget)
    if kind == "order":
        from sparseloom.evaluation.fixed_order import forced_order

        with forced_order(name.removeprefix(ORDER_PREFIX).split(">")) as policy:
            return real_policy_run(workload, profile, policy, configs[k], order, repeat,
                                   queries)
    try:
        return real_policy_run(workload, profile, name, configs[k], order, repeat, queries,
                               budget)
    except SparseloomError as error:
        # A budget below what the plan's own subgraphs need cannot serve at all: every task
        # misses. Recorded, not raised, so the sweep goes on.
        if kind != "budget":
            raise
        return {"violation_rate": 1.0, "throughput_rps": 0.0, "pipeline_share": math.nan,
                "memory_bytes": math.nan, "valid": False, "tasks": [], "error": str(error)}
