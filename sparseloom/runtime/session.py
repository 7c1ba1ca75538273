"""``serve``: a whole run from a profile — plan, preload, workers, load, summary.

This is what ``sparseloom run`` calls::

    from sparseloom.runtime.session import RunConfig, serve
    result = serve(workload, profile, RunConfig(policy="sparseloom"))
    print(render(result.summary))
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from sparseloom.core.errors import RuntimeServeError
from sparseloom.core.processors import get_processor
from sparseloom.core.types import SLO, Processor
from sparseloom.runtime import switching
from sparseloom.runtime.executor import Runtime, RuntimeOptions
from sparseloom.runtime.load import LoadSpec, offer
from sparseloom.runtime.models import RuntimeTask, resident_bytes, rss_bytes
from sparseloom.runtime.records import RequestRecord
from sparseloom.runtime.summary import RunSummary, records, summarize


@attrs.frozen
class RunConfig:
    """How to serve a workload.

    Attributes:
        policy: the placement policy's registered name.
        slos: SLO per task (others: the workload's, else the middle of the task's SLO grid).
        memory_budget: fraction of full preloading in (0, 1], or bytes.
        processors: processor names or specs to serve on (default: the profile's).
        load: the offered load.
        options: runtime settings (monitor window, faults, ...).
        progress: show a progress bar on stderr for long runs.
    """

    policy: str = "sparseloom"
    slos: Mapping[str, SLO] = attrs.field(factory=dict, converter=dict)
    memory_budget: float | int = 1.0
    processors: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    load: LoadSpec = attrs.field(factory=LoadSpec)
    options: RuntimeOptions = attrs.field(factory=RuntimeOptions)
    progress: bool = False


@attrs.frozen(eq=False)
class RunResult:
    """A finished run: its summary, per-request records, the first plan and its preload."""

    summary: RunSummary
    records: tuple[RequestRecord, ...]
    plan: Any
    preload: Any


def profile_processors(profile: Any, names: Sequence[str] = ()) -> list[Processor]:
    """The processors a profile was measured on (with its pinning), or the ``names`` given.

    :raises RuntimeServeError: a processor the profile holds is not there any more, or a
        named one was not profiled.
    """
    configs = {str(c["spec"]).partition("?")[0]: c["spec"]
               for c in profile.meta.get("processor_config", [])}
    wanted = [str(n) for n in names] or list(profile.processors)
    out = []
    for name in wanted:
        base = name.partition("?")[0]
        if base not in profile.processors:
            raise RuntimeServeError(
                f"processor {base!r} was not profiled; the profile of {profile.workload!r} "
                f"holds {', '.join(profile.processors)} (profile again with -p {base})")
        processor = get_processor(name if "?" in name else configs.get(base, base))
        if not processor.available:
            raise RuntimeServeError(f"processor {processor.name} of the plan is not available "
                                    f"here ({processor.reason or 'it did not answer'}); "
                                    f"choose others with --processor")
        out.append(processor)
    return out


def serve(workload: Any, profile: Any, config: RunConfig | None = None) -> RunResult:
    """Plan ``workload`` from ``profile``, preload, offer the load and summarise the run.

    :raises RuntimeServeError: a task, processor or arrival order the run cannot serve.
    :raises PlanError, UnknownNameError: from planning (bad SLO, unknown policy, budget).
    """
    from sparseloom.plan.api import make_plan
    from sparseloom.zoo.load import load_zoo
    from sparseloom.zoo.options import zoo_directory

    config = config or RunConfig()
    spec = config.load
    order = spec.arrival_order
    if len(set(order)) != len(order):
        twice = sorted({t for t in order if order.count(t) > 1})
        raise RuntimeServeError(f"the arrival order names {', '.join(twice)} more than once; "
                                f"name each task once")
    unknown = [t for t in order if t not in profile.tasks]
    if unknown:
        raise RuntimeServeError(f"the arrival order names unknown task(s) "
                                f"{', '.join(map(repr, unknown))}; tasks: "
                                f"{', '.join(profile.tasks)}")
    processors = profile_processors(profile, config.processors)
    names = [p.name for p in processors]
    planned = make_plan(profile, policy=config.policy, slos=config.slos, processors=names,
                        memory_budget=config.memory_budget,
                        workload_slos={task.name: task.slo for task in workload.tasks})
    policy, plan, preload = planned.policy, planned.plan, planned.preload
    slos, sources = planned.slos, planned.slo_sources
    zoos = profile.meta.get("zoo_hashes", {})
    tasks = [RuntimeTask(workload.task(name), load_zoo(zoo_directory(zoos[name]), verify=False),
                         slos[name]) for name in profile.tasks]
    runtime: Runtime | None = None

    def planner(active: tuple[str, ...], down: tuple[str, ...]) -> Any:
        assert runtime is not None
        up = [n for n in names if n not in down]
        return policy.plan(list(active), profile, up, {t: runtime.slos[t] for t in active})

    runtime = Runtime(tasks, processors, profile=profile, policy=policy, planner=planner,
                      options=config.options)
    rss_before = rss_bytes()
    started = time.perf_counter()
    try:
        first = switching.start(runtime, plan, active=order[:1] or None, preload=preload,
                                progress=config.progress)
        preload_rss = rss_bytes() - rss_before
        load = offer(runtime, spec, progress=config.progress)
        memory = {
            "budget_bytes": float(preload.budget_bytes), "full_bytes": float(preload.full_bytes),
            "planned_resident_bytes": float(preload.resident_bytes),
            "loaded_bytes": float(resident_bytes(runtime.workers)),
            "rss_growth_bytes": float(max(rss_bytes() - rss_before, 0)),
            "rss_growth_after_preload_bytes": float(max(preload_rss, 0)),
            "device_bytes": float(sum(m.memory_bytes for w in runtime.workers.values()
                                      for m in w.models.values()
                                      if w.processor.device.split(".")[0] != "CPU")),
            "preloaded": float(len(first)),
        }
        settings = {
            "workload": workload.name, "policy": config.policy,
            "processors": names, "queries": spec.queries, "rate": spec.rate,
            "duration_s": spec.duration_s, "arrival_order": list(order),
            "join_after": spec.join_every if order else None,
            "memory_budget": config.memory_budget, "window": config.options.window,
            "fault_rate": config.options.fault_rate,
            "slo_sources": dict(sources), "setup_s": load.started_s - started,
        }
        jobs = runtime.control.job_ms
        if jobs:
            runtime.notes.append(
                f"control thread: {len(jobs)} job(s), {sum(jobs):.0f} ms, longest "
                f"{max(jobs):.0f} ms (loads for a switch hold the GIL while a backend builds "
                f"its session: every worker waits meanwhile, docs/runtime.md)")
        summary = summarize(runtime, load, spec, settings=settings, memory=memory)
        return RunResult(summary, tuple(records(runtime)), plan, preload)
    finally:
        runtime.stop()
