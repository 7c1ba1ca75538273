"""``serve``: a whole run from a profile — a :class:`~sparseloom.Server`, a load, a summary.

The server plans, preloads and starts the workers; the load generator
(:mod:`sparseloom.runtime.load`) offers eval-set rows to its runtime; the summary is read from
the runtime's bounded counters. This is what ``sparseloom run`` and ``evaluate`` call::

    from sparseloom.runtime.session import RunConfig, serve
    result = serve(workload, profile, RunConfig(policy="sparseloom"))
    print(render(result.summary))
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from sparseloom.core.errors import RuntimeServeError
from sparseloom.core.registry import DEFAULT_POLICY
from sparseloom.core.types import SLO, repeated
from sparseloom.runtime.budget import weights_bytes
from sparseloom.runtime.executor import RuntimeOptions
from sparseloom.runtime.load import LoadSpec, offer
from sparseloom.runtime.models import profile_processors as profile_processors  # re-export
from sparseloom.runtime.models import resident_bytes, rss_bytes
from sparseloom.runtime.records import RecordStream, RequestRecord
from sparseloom.runtime.server import DEFAULT_MAX_QUEUED, Server
from sparseloom.runtime.summary import (
    RunInterrupted,
    RunSummary,
    records,
    request_record,
    summarize,
)
from sparseloom.workload.arguments import (
    instance_field,
    names_attribute,
    number_field,
    slos_converter,
)


@attrs.frozen
class RunConfig:
    """How to serve a workload.

    Attributes:
        policy: the placement policy's registered name.
        slos: SLO per task (others: the workload's, else the middle of the task's SLO grid).
        memory_budget: fraction of full preloading in (0, 1], or bytes.
        processors: processor names or specs to serve on (default: the profile's).
        load: the offered load.
        options: runtime settings (monitor window, faults, ...); without ``max_queued`` a
            task's queue is bounded at :data:`~sparseloom.runtime.server.DEFAULT_MAX_QUEUED`.
        progress: show a progress bar on stderr for long runs.
        records_path: stream every ended request's record to this CSV file as the run goes.
        live: ``live(server)`` gives a context manager held while the load is offered (the
            CLI's live view); ``None``: none.
        paired_gate: serve a stitched pick only where the selection rows vouch for it beside
            dense (``Server(paired_gate=...)``).
    """

    policy: str = attrs.field(default=DEFAULT_POLICY,
                              validator=instance_field(str, "a registered policy name"))
    slos: Mapping[str, SLO] = attrs.field(factory=dict, converter=slos_converter)
    memory_budget: float | int = attrs.field(default=1.0,
                                             validator=number_field(low=0, low_open=True))
    processors: tuple[str, ...] = names_attribute()
    load: LoadSpec = attrs.field(factory=LoadSpec, validator=instance_field(
        LoadSpec, "a LoadSpec, e.g. LoadSpec('closed', queries=100)"))
    options: RuntimeOptions = attrs.field(factory=RuntimeOptions, validator=instance_field(
        RuntimeOptions, "a RuntimeOptions"))
    progress: bool = False
    records_path: Path | None = None
    live: Callable[[Any], contextlib.AbstractContextManager[Any]] | None = attrs.field(
        default=None, eq=False)
    paired_gate: bool = attrs.field(default=True, validator=instance_field(bool, "True or False"))


@attrs.frozen(eq=False)
class RunResult:
    """A finished run: its summary, the records of its newest requests
    (``options.keep_requests``; all of them with ``records_path``, in that file), the first
    plan and its preload."""

    summary: RunSummary
    records: tuple[RequestRecord, ...]
    plan: Any
    preload: Any


def serve(workload: Any, profile: Any, config: RunConfig | None = None) -> RunResult:
    """Serve ``workload`` from ``profile`` through a :class:`~sparseloom.Server`, offer the
    load and summarise the run.

    :raises RunInterrupted: Ctrl-C cut the load short (a ``KeyboardInterrupt``); its
        ``partial`` is the result of what was served until then (INVALID, marked so).
    :raises RuntimeServeError: a task, processor or arrival order the run cannot serve.
    :raises PlanError, UnknownNameError: from planning (bad SLO, unknown policy, budget).
    """
    config = config or RunConfig()
    spec = config.load
    order = spec.arrival_order
    twice = repeated(order)
    if twice:
        raise RuntimeServeError(f"the arrival order names {', '.join(twice)} more than once; "
                                f"name each task once")
    unknown = [t for t in order if t not in profile.tasks]
    if unknown:
        raise RuntimeServeError(f"the arrival order names unknown task(s) "
                                f"{', '.join(map(repr, unknown))}; tasks: "
                                f"{', '.join(profile.tasks)}")
    options = config.options
    server = Server(workload, profile, policy=config.policy, slos=config.slos,
                    processors=config.processors, memory_budget=config.memory_budget,
                    tasks=order[:1] or None, options=options,
                    max_queued=options.max_queued or DEFAULT_MAX_QUEUED,
                    progress=config.progress, paired_gate=config.paired_gate)
    rss_before = rss_bytes()
    started = time.perf_counter()
    stream: RecordStream | None = None
    with server:
        runtime = server.runtime
        preload_rss = rss_bytes() - rss_before
        if config.records_path is not None:
            stream = RecordStream(config.records_path,
                                  lambda request: request_record(runtime, request))
            runtime.record_sink = stream.accept
        try:
            live = config.live(server) if config.live is not None else contextlib.nullcontext()
            with live:
                load = offer(runtime, spec, progress=config.progress and config.live is None)
        finally:
            if stream is not None:
                runtime.record_sink = None
                stream.close()
        preload, names = server.preload, list(runtime.workers)
        memory = {
            "budget_bytes": float(preload.budget_bytes), "full_bytes": float(preload.full_bytes),
            "planned_resident_bytes": float(preload.resident_bytes),
            "loaded_bytes": float(resident_bytes(runtime.workers)),
            "weights_bytes": float(weights_bytes(runtime)),
            "runtime_budget_bytes": float(runtime.loader.memory_budget or 0),
            "evicted": float(runtime.loader.evicted), "left_out": float(runtime.loader.left_out),
            "rss_growth_bytes": float(max(rss_bytes() - rss_before, 0)),
            "rss_growth_after_preload_bytes": float(max(preload_rss, 0)),
            "device_bytes": float(sum(m.memory_bytes for w in runtime.workers.values()
                                      for m in w.models.values()
                                      if w.processor.device.split(".")[0] != "CPU")),
            "preloaded": float(len(server.preload_events)),
        }
        settings = {
            "workload": server.workload.name, "policy": config.policy,
            "processors": names, "queries": spec.queries, "rate": spec.rate,
            "duration_s": spec.duration_s, "arrival_order": list(order),
            "join_after": spec.join_every if order else None,
            "memory_budget": config.memory_budget, "window": options.window,
            "fault_rate": options.fault_rate, "max_queued": runtime.options.max_queued,
            "slo_sources": dict(server.slo_sources), "setup_s": load.started_s - started,
        }
        jobs = runtime.control.job_ms
        if jobs:
            runtime.notes.append(
                f"control thread: {len(jobs)} job(s), {sum(jobs):.0f} ms, longest "
                f"{max(jobs):.0f} ms (loads for a switch hold the GIL while a backend builds "
                f"its session: every worker waits meanwhile, docs/runtime.md)")
        summary = summarize(runtime, load, spec, settings=settings, memory=memory)
        result = RunResult(summary, tuple(records(runtime)), server.plan, preload)
    if load.interrupted:
        raise RunInterrupted(result)
    return result
