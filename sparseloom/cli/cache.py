"""``sparseloom cache``: what the on-disk cache holds (``list``) and removing parts of it
(``prune``); the logic is in :mod:`sparseloom.cli.cache_scan` and
:mod:`sparseloom.cli.cache_prune`."""

from __future__ import annotations

import datetime
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from sparseloom.cli.cache_prune import WorkloadSelector
from sparseloom.cli.cache_scan import OWNED_STAGES, STAGES, CacheEntry, CacheReport, human_bytes
from sparseloom.cli.output import echo_json, echo_table
from sparseloom.cli.parsing import CheckedGroup

#: What each stage holds, as ``cache list`` says it.
STAGE_CONTENTS = {
    "workloads": "built tasks: model, eval and calibration data",
    "zoo": "subgraph zoos, one per task and configuration",
    "whole": "merged stitched variants, by zoo",
    "profiles": "latency and accuracy profiles, by workload",
    "batch1": "batch-1 copies of zoo and whole models",
    "ort": "ONNX Runtime's provider records, optimized models, TensorRT engines",
    "ov": "OpenVINO's compiled models and device records",
    "probes": "crash-guard probe outcomes",
    "models": "in-memory models given to a backend",
}
_SELECTORS = "--older-than DURATION, --workload NAME, --stage STAGE or --all"


@click.group("cache", cls=CheckedGroup)
def cache_group() -> None:
    """The on-disk cache of built workloads, zoos, profiles and compiled models.

    Its folder is $SPARSELOOM_CACHE_DIR, else the user cache folder. A later run rebuilds
    whatever it needs that a prune removed: pruning costs that run the time to rebuild it.
    """


def _entries(count: int) -> str:
    return f"{count:,} {'entry' if count == 1 else 'entries'}"


def _when(timestamp: float | None, now: float) -> str:
    """``2026-12-03 06:22 (3 h ago)``."""
    if not timestamp:
        return "-"
    age = max(0.0, now - timestamp)
    ago = (f"{age / 86400:.0f} d ago" if age >= 2 * 86400 else f"{age / 3600:.0f} h ago"
           if age >= 3600 else f"{age / 60:.0f} min ago" if age >= 60 else "just now")
    stamp = datetime.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M")
    return f"{stamp} ({ago})"


def _iso(timestamp: float | None) -> str | None:
    if not timestamp:
        return None
    return datetime.datetime.fromtimestamp(timestamp).astimezone().isoformat(timespec="seconds")


def _owners(report: CacheReport) -> list[dict[str, Any]]:
    """Per owned stage and task (or workload): entries, bytes, newest modification."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for entry in report.entries(OWNED_STAGES):
        owner = entry.owner or "(unknown)"
        row = rows.setdefault((entry.stage, owner), {"stage": entry.stage, "name": owner,
                                                     "entries": 0, "size_bytes": 0,
                                                     "modified": 0.0})
        row["entries"] += 1
        row["size_bytes"] += entry.size_bytes
        row["modified"] = max(row["modified"], entry.modified)
    return sorted(rows.values(), key=lambda row: (STAGES.index(row["stage"]), row["name"]))


@cache_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def list_command(as_json: bool) -> None:
    """Show what the cache holds, by stage and by task or workload.

    The cache folder; each stage's size, file count and last modification; each task's (or,
    for profiles, workload's) share of the stages that belong to one; the total. Reads only:
    it creates nothing, not even the cache folder.
    """
    from sparseloom.cli.cache_scan import scan_cache
    from sparseloom.core.cache import CACHE_DIR_ENV, cache_root

    root, source = cache_root()
    report = scan_cache(root)
    owners = _owners(report)
    if as_json:
        echo_json({
            "root": str(root), "exists": report.exists, "size_bytes": report.size_bytes,
            "files": report.files,
            "stages": [{"name": s.name, "path": str(s.path), "exists": s.exists,
                        "size_bytes": s.size_bytes, "files": s.files,
                        "entries": len(s.entries), "modified": _iso(s.modified)}
                       for s in report.stages],
            "owners": [{**row, "modified": _iso(row["modified"])} for row in owners],
            "others": [{"name": s.name, "size_bytes": s.size_bytes, "files": s.files}
                       for s in report.others],
            "leftovers": {"count": len(report.leftovers),
                          "size_bytes": report.leftover_bytes},
        })
        return
    if not report.exists:
        click.echo(f"The {source} {root} does not exist: nothing is cached.")
        return
    if not report.files and not report.leftovers:
        click.echo(f"The {source} {root} is empty: nothing is cached.")
        return
    now = time.time()
    chosen_by = f"${CACHE_DIR_ENV}" if CACHE_DIR_ENV in source else "the user cache folder"
    click.echo(f"Cache folder {root} ({chosen_by}): {human_bytes(report.size_bytes)} in "
               f"{report.files:,} files\n")
    present = [s for s in report.stages if s.exists]
    echo_table(["stage", "size", "files", "entries", "last modified", "holds"],
               [[s.name, human_bytes(s.size_bytes), f"{s.files:,}", f"{len(s.entries):,}",
                 _when(s.modified, now), STAGE_CONTENTS[s.name]] for s in present]
               + [[s.name, human_bytes(s.size_bytes), f"{s.files:,}", "-", _when(s.modified, now),
                   "not sparseloom's: never pruned"] for s in report.others]
               + [["total", human_bytes(report.size_bytes), f"{report.files:,}", "", "", ""]])
    if owners:
        click.echo("\nBy task (workloads, zoo, whole) and by workload (profiles):")
        echo_table(["stage", "task or workload", "entries", "size", "last modified"],
                   [[row["stage"], row["name"], row["entries"], human_bytes(row["size_bytes"]),
                     _when(row["modified"], now)] for row in owners])
    shared = [s.name for s in present if s.name not in OWNED_STAGES]
    if shared:
        click.echo(f"\n{', '.join(shared)}: keyed by file content and shared by every "
                   "workload; `cache prune --stage` or `--older-than` removes them.")
    if report.leftovers:
        click.echo(f"\n{len(report.leftovers)} leftover(s) of a prune cut short "
                   f"({human_bytes(report.leftover_bytes)}): the next `cache prune` removes "
                   "them.")


def _selector(name: str) -> WorkloadSelector:
    """What ``--workload NAME`` matches: a registered name or workload file gives its tasks
    and their builds; another name only its profiles' records."""
    from sparseloom.core.cache import file_hash
    from sparseloom.core.errors import UnknownNameError
    from sparseloom.workload.build import builder_cache_key
    from sparseloom.workload.load import resolve_workload

    try:
        definition = resolve_workload(name)
    except UnknownNameError:
        return WorkloadSelector(name, registered=False)
    folders, files, digests = [], [], []
    for task in definition.tasks:
        if task.builder is not None:
            folders.append(builder_cache_key(task.builder, task.options)[1])
        elif task.model is not None and Path(task.model).is_file():
            files += [str(task.model), str(Path(task.model).resolve())]
            digests.append(file_hash(task.model))
    return WorkloadSelector(definition.name, [task.name for task in definition.tasks], folders,
                            files, digests)


def _unmatched(selector: WorkloadSelector) -> str:
    from sparseloom.core.registry import get_registry

    names = ", ".join(r.name for r in get_registry().workloads())
    return (f"--workload {selector.name!r} is neither a registered workload ({names}) nor a "
            "workload .toml file, and no profile in the cache names it")


def _matched_on(selector: WorkloadSelector) -> str:
    """What ``--workload`` matched on, in one line."""
    tasks = (f"tasks {', '.join(sorted(selector.task_names))}" if selector.registered
             else "not registered: what its profiles recorded")
    return (f"Workload {selector.name!r} ({tasks}): its tasks' builds in workloads/ (by builder "
            f"and options), the zoos whose manifest names one of its tasks and that were cut "
            f"from those builds or its model files or measured by its profiles, those zoos' "
            f"whole/ folders, and profiles/{selector.name}/.")


def _echo_entries(entries: Sequence[CacheEntry], verbose: bool) -> None:
    """Owned entries one a line; the content-keyed stages one line each (unless verbose)."""
    rows: list[list[Any]] = []
    for stage in STAGES:
        chosen = [e for e in entries if e.stage == stage]
        if stage in OWNED_STAGES or verbose:
            rows += [[e.label, human_bytes(e.size_bytes), e.owner or ""] for e in chosen]
        elif chosen:
            rows.append([f"{stage}/", human_bytes(sum(e.size_bytes for e in chosen)),
                         _entries(len(chosen))])
    width = max((len(row[0]) for row in rows), default=0)
    for label, size, note in rows:
        click.echo(f"  {label.ljust(width)}  {size.rjust(9)}  {note}".rstrip())


@cache_group.command("prune")
@click.option("--older-than", "older_than", metavar="DURATION",
              help="Entries not modified for DURATION: 30m, 12h, 7d, 2w. Alone, in every stage; "
                   "with --workload or --stage, among theirs.")
@click.option("--workload", "workloads", multiple=True, metavar="NAME",
              help="A workload's builds, zoos, merged models and profiles (repeatable).")
@click.option("--stage", "stages", multiple=True, metavar="STAGE",
              help=f"Every entry of a stage: {', '.join(STAGES)} (repeatable).")
@click.option("--all", "everything", is_flag=True, help="Every entry of every stage.")
@click.option("--dry-run", is_flag=True, help="Print what would go; remove nothing.")
@click.option("-v", "--verbose", is_flag=True,
              help="List every entry, not one line per content-keyed stage.")
def prune_command(older_than: str | None, workloads: tuple[str, ...], stages: tuple[str, ...],
                  everything: bool, dry_run: bool, verbose: bool) -> None:
    """Remove cache entries whole; a later run rebuilds what it needs.

    Refused while another sparseloom process uses the cache. A folder is renamed out of sight
    before it is deleted, so a prune cut short leaves no half entry (the next prune removes
    what it left). batch1, ort, ov, probes and models are keyed by file content and shared by
    every workload: --workload leaves them.
    """
    from sparseloom.cli.cache_prune import (
        check_stage,
        exclusive_use,
        in_use,
        parse_duration,
        prune,
        select_entries,
        workload_entries,
    )
    from sparseloom.cli.cache_scan import scan_cache
    from sparseloom.core.cache import cache_root
    from sparseloom.core.errors import ConfigError, PathError

    if older_than is None and not (workloads or stages or everything):
        raise ConfigError(f"say what to prune: {_SELECTORS} (with --dry-run to see what "
                          "would go first)")
    older_than_s = parse_duration(older_than) if older_than is not None else None
    for stage in stages:
        check_stage(stage)
    selectors = [_selector(name) for name in workloads]
    root, source = cache_root()
    if not root.is_dir():
        click.echo(f"Nothing to prune: the {source} {root} does not exist.")
        return

    def choose(report: CacheReport) -> list[CacheEntry]:
        for selector in selectors:
            if not selector.registered and not workload_entries(report, selector):
                raise ConfigError(_unmatched(selector))
        return select_entries(report, stages=stages, workloads=selectors,
                              older_than_s=older_than_s, everything=everything)

    if dry_run:
        report = scan_cache(root)
        result = prune(report, choose(report), dry_run=True)
        users = in_use(root)
        if users:
            click.echo(f"Note: {users} using the cache now; the same prune without "
                       "--dry-run would be refused until it ends.", err=True)
    else:
        with exclusive_use(root):
            report = scan_cache(root)
            result = prune(report, choose(report))
    if selectors and not everything:
        for selector in selectors:
            click.echo(_matched_on(selector))
        click.echo("batch1, ort, ov, probes and models are keyed by file content and shared by "
                   "every workload: --workload leaves them.")
    verb = "Would remove" if dry_run else "Removed"
    if not result.removed and not result.leftovers_removed:
        click.echo(f"Nothing to prune in {root}: no entry matches.")
    else:
        freed = f"{'freeing' if dry_run else 'freed'} {human_bytes(result.freed_bytes)}"
        click.echo(f"{verb} {_entries(len(result.removed))} from {root}, {freed}"
                   f"{' (dry run: nothing was removed)' if dry_run else ''}:")
        _echo_entries(result.removed, verbose)
        if result.leftovers_removed:
            click.echo(f"  and {result.leftovers_removed} leftover(s) of a prune cut short")
    if result.failures:
        failed = "; ".join(f"{entry.label}: {why}" for entry, why in result.failures)
        raise PathError(f"could not remove {_entries(len(result.failures))} ({failed}); check "
                         f"the permissions of the {source} {root}")


COMMANDS = (cache_group,)
