"""The Python API: the steps of the job as functions, for scripts rather than commands.

Every function imports what it needs when it is called, so ``import sparseloom`` stays free of
OpenVINO, ONNX Runtime, torch, xgboost and lightgbm. The CLI calls these same functions::

    import sparseloom

    workload = sparseloom.load_workload("tiny")
    zoos = sparseloom.build_zoos(workload)
    table = sparseloom.build_profile(workload, zoos=zoos)
    planned = sparseloom.make_plan(table, workload=workload)
    result = sparseloom.serve(workload, table)

See ``docs/api.md`` for a complete script.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sparseloom.core.registry import DEFAULT_POLICY

if TYPE_CHECKING:
    from sparseloom.core.types import SLO, Processor
    from sparseloom.plan.api import PlanResult
    from sparseloom.profile.builder import ProfileOptions
    from sparseloom.profile.table import ProfileTable
    from sparseloom.runtime.session import RunConfig, RunResult
    from sparseloom.workload.task import Workload
    from sparseloom.zoo.options import ZooOptions
    from sparseloom.zoo.types import Zoo

__all__ = ["build_profile", "build_zoos", "load_profile", "load_workload", "make_plan",
           "refresh_profile", "serve"]


def load_workload(
    name_or_path: str | os.PathLike[str],
    *,
    tasks: Sequence[str] | None = None,
    progress: bool = True,
    rebuild: bool = False,
    held_out: float | None = None,
) -> Workload:
    """Build (or load from the cache) a workload: a bundled name or a workload TOML path.

    :param tasks: only these tasks, in this order (default: all).
    :param progress: progress bars on stderr for long build steps.
    :param rebuild: build the builder tasks again even when their cache entries are sound.
    :param held_out: the share of each task's eval rows held out of selection to judge it
        (``None``: the workload's, 0.3 unless its file says otherwise; 0: none).
    :raises ArgumentError: an argument of the wrong type (naming it).
    :raises ConfigError: ``held_out`` outside [0, 0.5].
    """
    from sparseloom.workload.arguments import check_flags, check_names, check_path_or_name
    from sparseloom.workload.load import load_workload as load

    where = "load_workload()"
    check_flags(where, progress=progress, rebuild=rebuild)
    check_path_or_name(where, "name_or_path", name_or_path,
                       "a registered workload name or a workload .toml path")
    names = check_names(where, "tasks", tasks)
    if held_out is not None:
        from sparseloom.workload.held_out import check_held_out

        check_held_out(held_out, f"{where}: held_out")
    return load(name_or_path, tasks=names, progress=progress, rebuild=rebuild,
                held_out=held_out)


def _loaded(workload: Workload | str | os.PathLike[str], progress: bool, where: str
            ) -> Workload:
    from sparseloom.workload.arguments import check_flags, check_instance
    from sparseloom.workload.task import Workload

    check_flags(where, progress=progress)
    if isinstance(workload, str | os.PathLike):
        return load_workload(workload, progress=progress)
    return check_instance(where, "workload", workload, Workload,
                          "a Workload (from load_workload()), a registered workload name or "
                          "a workload .toml path")


def _optional(where: str, parameter: str, value: Any, expected: type, fix: str) -> Any:
    from sparseloom.workload.arguments import check_instance

    return None if value is None else check_instance(where, parameter, value, expected, fix)


def build_zoos(
    workload: Workload | str | os.PathLike[str],
    options: ZooOptions | None = None,
    *,
    rebuild: bool = False,
    progress: bool = True,
) -> dict[str, Zoo]:
    """Build (or load from the cache) the subgraph zoo of every task of ``workload``.

    :param options: S, variants, partition settings; by default one position per processor
        of the workload (or of the default processor set) and the default variants
        (:data:`~sparseloom.zoo.variants.DEFAULT_VARIANTS`).
    :returns: the zoo of each task, by task name.
    """
    import attrs

    from sparseloom.workload.arguments import check_flags
    from sparseloom.zoo.build import build_zoo
    from sparseloom.zoo.options import ZooOptions, workload_processors

    check_flags("build_zoos()", rebuild=rebuild)
    loaded = _loaded(workload, progress, "build_zoos()")
    options = _optional("build_zoos()", "options", options, ZooOptions,
                        "a ZooOptions (sparseloom.zoo.options)") or ZooOptions()
    if not options.processors:
        options = attrs.evolve(options, processors=workload_processors(loaded))
    return {task.name: build_zoo(task, options, rebuild=rebuild, progress=progress)
            for task in loaded.tasks}


def build_profile(
    workload: Workload | str | os.PathLike[str],
    *,
    processors: Sequence[str | Processor] | None = None,
    options: ProfileOptions | None = None,
    zoos: Mapping[str, Zoo] | None = None,
    progress: bool = True,
    **settings: Any,
) -> ProfileTable:
    """Measure and estimate the profile table of ``workload`` (cached; a rerun loads it).

    :param processors: processor specs; default the workload's, else the default set.
    :param options: estimators, samples, S (:class:`~sparseloom.profile.builder.ProfileOptions`).
    :param zoos: prebuilt zoos by task name (default: built or loaded from the cache).
    :param settings: further keywords of :func:`sparseloom.profile.builder.build_profile`
        (``use_cache``, ``strict``, ``cache_root``).
    """
    from sparseloom.core.types import Processor
    from sparseloom.profile.builder import ProfileOptions
    from sparseloom.profile.builder import build_profile as build
    from sparseloom.workload.arguments import check_names

    where = "build_profile()"
    loaded = _loaded(workload, progress, where)
    chosen = check_names(where, "processors", processors, items=(str, Processor))
    _optional(where, "options", options, ProfileOptions,
              "a ProfileOptions (sparseloom.profile.builder)")
    _optional(where, "zoos", zoos, Mapping, "a mapping of task name to Zoo (from build_zoos())")
    return build(loaded, processors=list(chosen) if chosen else None, options=options,
                 zoos=zoos, progress=progress, **settings)


def load_profile(directory: str | os.PathLike[str]) -> ProfileTable:
    """Read a profile table saved by :func:`build_profile` (its ``meta["table_directory"]``)."""
    from sparseloom.profile.table import ProfileTable
    from sparseloom.workload.arguments import check_path_or_name

    check_path_or_name("load_profile()", "directory", directory,
                       "a profile table folder (table.meta['table_directory'])")
    return ProfileTable.load(directory)


def refresh_profile(
    workload: Workload | str | os.PathLike[str],
    *,
    processors: Sequence[str] | None = None,
    options: ProfileOptions | None = None,
    sample: int = 4,
    threshold: float = 0.25,
    mode: str = "rescale",
    rounds: int | None = None,
    progress: bool = True,
    **settings: Any,
) -> tuple[ProfileTable, dict[str, Any]]:
    """Re-time a sample of the cached profile's subgraphs and repair it if it drifted.

    ``sample`` subgraphs per task are re-timed (in ``rounds`` rounds, default the profile's)
    and compared with the same sample at the previous refresh (the first refresh re-times
    the whole table to calibrate). Where a task's latencies on a processor moved by more than
    ``threshold`` they are rescaled (``mode="rescale"``) or the task is re-timed
    (``mode="full"``); the record of what was done is returned and appended to
    ``table.meta["refresh"]``. ``settings``: further keywords of
    :func:`sparseloom.profile.refresh.refresh_profile` (``resolve_backend``, ``cache_root``,
    ``table``).
    """
    from sparseloom.profile.builder import ProfileOptions
    from sparseloom.profile.refresh import refresh_profile as refresh
    from sparseloom.workload.arguments import check_names, check_number

    where = "refresh_profile()"
    loaded = _loaded(workload, progress, where)
    names = check_names(where, "processors", processors)
    processors = list(names) if names else None
    _optional(where, "options", options, ProfileOptions,
              "a ProfileOptions (sparseloom.profile.builder)")
    check_number(where, "sample", sample, low=1, integer=True)
    check_number(where, "threshold", threshold, low=0, low_open=True)
    check_number(where, "rounds", rounds, low=1, integer=True, optional=True)
    return refresh(loaded, processors=processors, options=options,
                   sample=sample, threshold=threshold, mode=mode, rounds=rounds,
                   progress=progress,
                   **settings)


def make_plan(
    profile: ProfileTable,
    *,
    policy: str = DEFAULT_POLICY,
    slos: Mapping[str, SLO] | None = None,
    processors: Sequence[str | Processor] | None = None,
    memory_budget: float | int = 1.0,
    workload: Workload | None = None,
    paired_gate: bool | None = None,
) -> PlanResult:
    """Choose a processor order and a stitched variant per task, and the subgraphs to preload.

    :param policy: a registered placement policy (``sparseloom plugins`` lists them).
    :param slos: SLO per task; others take their workload's ``[task.slo]`` (when ``workload``
        is given), else the middle of their SLO grid.
    :param processors: processors to plan on (default: every profiled one).
    :param memory_budget: a fraction of full preloading in (0, 1], or bytes.
    :param paired_gate: keep a stitched pick only where ``workload``'s selection rows vouch
        for it beside dense row by row, else plan again without it
        (:mod:`sparseloom.plan.paired_gate`; ``result.refused`` names what it refused).
        ``None`` (default): on when ``workload`` is given — the gate needs its rows.
    :returns: the plan, its preload set, where each SLO came from, the policy object.
    :raises ArgumentError: an argument of the wrong type (naming it), or ``paired_gate=True``
        without ``workload``; an SLO may be given as a pair ``(accuracy, latency_ms)``.
    """
    from sparseloom.core.errors import ArgumentError
    from sparseloom.core.types import Processor
    from sparseloom.plan.api import make_plan as plan
    from sparseloom.profile.table import ProfileTable
    from sparseloom.workload.arguments import (
        check_flags,
        check_instance,
        check_names,
        check_number,
        check_slos,
    )
    from sparseloom.workload.task import Workload

    where = "make_plan()"
    check_instance(where, "profile", profile, ProfileTable,
                   "a ProfileTable (from build_profile() or load_profile())")
    check_instance(where, "policy", policy, str, "a registered policy name")
    chosen = check_names(where, "processors", processors, items=(str, Processor))
    check_number(where, "memory_budget", memory_budget, low=0, low_open=True)
    _optional(where, "workload", workload, Workload, "the Workload the profile was built from")
    if paired_gate is not None:
        check_flags(where, paired_gate=paired_gate)
    if paired_gate and workload is None:
        raise ArgumentError(f"{where}: paired_gate=True judges each pick on the workload's "
                            f"selection rows; pass workload=<the Workload the profile was "
                            f"built from>, or paired_gate=False")
    workload_slos = {t.name: t.slo for t in workload.tasks} if workload is not None else None
    gate = None
    if workload is not None and paired_gate is not False:
        from sparseloom.plan.paired_gate import workload_gate

        gate = workload_gate(workload, profile, list(chosen) if chosen else None)
    return plan(profile, policy=policy, slos=check_slos(where, "slos", slos),
                processors=list(chosen) if chosen else None,
                memory_budget=memory_budget, workload_slos=workload_slos, gate=gate)


def serve(
    workload: Workload | str | os.PathLike[str],
    profile: ProfileTable | None = None,
    config: RunConfig | None = None,
    *,
    progress: bool = True,
) -> RunResult:
    """Serve every task of ``workload`` at once on the processors and summarise the run.

    Plans with ``config.policy``, preloads the hot subgraphs within ``config.memory_budget``,
    offers ``config.load`` (closed loop, 100 queries per task by default) and re-plans on SLO
    violations. ``result.summary`` is the run's summary (``sparseloom.runtime.summary``).

    :param profile: the workload's profile (default: :func:`build_profile` with its defaults).
    :param config: policy, SLOs, memory budget, load and runtime options
        (:class:`sparseloom.runtime.session.RunConfig`).
    :raises RunInterrupted: Ctrl-C cut the load short (a ``KeyboardInterrupt``, from
        :mod:`sparseloom.runtime.summary`); its ``partial`` is the result so far.
    """
    from sparseloom.profile.table import ProfileTable
    from sparseloom.runtime.session import RunConfig
    from sparseloom.runtime.session import serve as run

    where = "serve()"
    loaded = _loaded(workload, progress, where)
    _optional(where, "profile", profile, ProfileTable,
              "a ProfileTable (from build_profile() or load_profile())")
    _optional(where, "config", config, RunConfig,
              "a RunConfig (sparseloom.runtime.session), e.g. RunConfig(policy='sparseloom')")
    table = profile if profile is not None else build_profile(loaded, progress=progress)
    return run(loaded, table, config)
