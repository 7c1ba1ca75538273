"""Choosing cache entries and removing them safely: the logic of ``sparseloom cache prune``.

:func:`select_entries` chooses among what :func:`~sparseloom.cli.cache_scan.scan_cache` found:
by stage, by workload (:func:`workload_entries` says what it matches on), by age.
:func:`prune` removes entries under :func:`exclusive_use`, the exclusive side of the lock every
process using the cache holds shared (:func:`sparseloom.core.cache.hold_in_use`), so nothing
removed is in use. A folder entry is first renamed to a hidden ``.<name>.pruning-<pid>``
sibling (one atomic step: readers see the whole entry or none), then deleted; a file group
loses the file whose presence marks it (``<key>.onnx``) first. A prune cut short leaves hidden
leftovers that no reader takes for an entry; the next prune deletes them.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import attrs

from sparseloom.cli.cache_scan import (
    STAGES,
    CacheEntry,
    CacheReport,
    children,
    freeable_bytes,
)
from sparseloom.core.cache import IN_USE_FILE, cache_name, release_in_use
from sparseloom.core.errors import ArgumentError, ConfigError, PathError

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def _names(values: Iterable[str]) -> frozenset[str]:
    return frozenset(values)


@attrs.frozen
class WorkloadSelector:
    """What ``--workload NAME`` matches: the workload's name, its tasks, and where each task's
    dense model comes from. A name the registry does not know has only its name: its entries
    are then found through what its profiles recorded.

    Attributes:
        entry_folders: the ``workloads/`` folders of its builder tasks (builder and options).
        model_files: the paths of the dense models of its file tasks.
        model_digests: the SHA-256 digests of those models.
    """

    name: str
    task_names: frozenset[str] = attrs.field(default=(), converter=_names)
    entry_folders: frozenset[str] = attrs.field(default=(), converter=_names)
    model_files: frozenset[str] = attrs.field(default=(), converter=_names)
    model_digests: frozenset[str] = attrs.field(default=(), converter=_names)
    registered: bool = True


@attrs.frozen
class PruneResult:
    """What :func:`prune` removed (or would remove, in a dry run) and what it could not."""

    removed: tuple[CacheEntry, ...]
    freed_bytes: int
    leftovers_removed: int
    failures: tuple[tuple[CacheEntry, str], ...]
    dry_run: bool


def parse_duration(text: str, option: str = "--older-than") -> float:
    """Seconds in ``text``: a number and a unit (``30m``, ``12h``, ``7d``, ``2w``, ``1d12h``).

    :raises ConfigError: anything else, naming ``option``, the text and the units.
    """
    compact = text.strip().replace(" ", "")
    parts = _DURATION.findall(compact)
    if not compact or "".join(number + unit for number, unit in parts) != compact:
        raise ConfigError(f"{option} {text!r} is not a duration; give a number and a unit "
                          f"(s, m, h, d or w), e.g. {option} 7d, 12h or 30m")
    return sum(float(number) * _DURATION_UNITS[unit] for number, unit in parts)


def check_stage(name: str, option: str = "--stage") -> str:
    """``name`` when it is a stage. :raises ConfigError: naming it and every stage."""
    if name not in STAGES:
        raise ConfigError(f"{option} {name!r} is not a cache stage; the stages are "
                          f"{', '.join(STAGES)}")
    return name


# -- choosing what to prune -----------------------------------------------------------------------


def workload_entries(report: CacheReport, selector: WorkloadSelector) -> list[CacheEntry]:
    """The entries of one workload, matched on what the cache records (no model is read):

    - ``profiles/<workload>/*``: the profiles of the workload's name;
    - ``workloads/``: the folders of its builder tasks (builder and options, hashed), and the
      builds its zoos below were cut from;
    - ``zoo/``: each zoo whose manifest names one of its tasks and whose dense model is one of
      those builds or one of its model files (the path or the SHA-256 the manifest records),
      and each zoo its profiles measured;
    - ``whole/``: the folders of those zoos.

    An entry two workloads share (one task built with the same options) belongs to both.
    """
    profiles = [e for e in report.entries(["profiles"]) if e.owner == cache_name(selector.name)]
    measured = {zoo_hash for entry in profiles for zoo_hash in entry.zoo_hashes}
    builds = [e for e in report.entries(["workloads"]) if e.name in selector.entry_folders]
    digests = {e.model_sha256 for e in builds if e.model_sha256} | selector.model_digests
    sources = selector.entry_folders | selector.model_files
    zoos = [e for e in report.entries(["zoo"]) if e.name in measured or (
        e.owner in selector.task_names and (e.model_source in sources
                                            or e.model_sha256 in digests))]
    cut_from = {e.model_source for e in zoos}
    builds = [e for e in report.entries(["workloads"])
              if e.name in selector.entry_folders or e.name in cut_from]
    hashes = measured | {e.name for e in zoos}
    wholes = [e for e in report.entries(["whole"]) if e.name in hashes]
    return [*builds, *zoos, *wholes, *profiles]


def select_entries(report: CacheReport, *, stages: Sequence[str] = (),
                   workloads: Sequence[WorkloadSelector] = (), older_than_s: float | None = None,
                   everything: bool = False, now: float | None = None) -> list[CacheEntry]:
    """The entries a prune removes, in stage order.

    ``stages`` and ``workloads`` add entries (every entry of a stage; :func:`workload_entries`);
    ``everything`` takes every entry. ``older_than_s`` keeps only entries not modified for
    that many seconds; given alone, it applies to every stage. A zoo takes its ``whole/``
    folder along.

    :raises ArgumentError: nothing selected. :raises ConfigError: an unknown stage.
    """
    if not (stages or workloads or everything or older_than_s is not None):
        raise ArgumentError("select_entries needs stages, workloads, older_than_s or "
                            "everything=True")
    if everything or not (stages or workloads):
        chosen = report.entries()
    else:
        chosen = report.entries([check_stage(stage) for stage in stages])
        for selector in workloads:
            chosen += workload_entries(report, selector)
    unique = {entry.label: entry for entry in chosen}
    if older_than_s is not None:
        moment = time.time() if now is None else now
        unique = {k: e for k, e in unique.items() if moment - e.modified >= older_than_s}
    # A zoo's merged models go with it: a zoo built again under the same hash must not meet
    # models merged from the files it replaced (whole/ trusts any file it finds).
    zoos = {e.name for e in unique.values() if e.stage == "zoo"}
    unique |= {e.label: e for e in report.entries(["whole"]) if e.name in zoos}
    return sorted(unique.values(), key=lambda e: (STAGES.index(e.stage), e.name))


# -- pruning --------------------------------------------------------------------------------------


def lock_holders(root: Path) -> list[int] | None:
    """The processes holding ``root``'s in-use lock, as Linux's ``/proc/locks`` lists them;
    ``None`` when that cannot be read (another OS) or the lock file is absent."""
    try:
        stat = (root / IN_USE_FILE).stat()
        table = Path("/proc/locks").read_text()
    except OSError:
        return None
    device = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    holders = set()
    for line in table.splitlines():  # "1: FLOCK  ADVISORY  READ 24420 fe:00:2146329 0 EOF"
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == device \
                and fields[4].isdigit():
            holders.add(int(fields[4]))
    return sorted(holders)


def _users(holders: Sequence[int] | None) -> str:
    """``another sparseloom process (pid 123) is``: who holds the in-use lock."""
    if not holders:
        return "another sparseloom process is"
    if len(holders) == 1:
        return f"another sparseloom process (pid {holders[0]}) is"
    return f"other sparseloom processes (pids {', '.join(map(str, holders))}) are"


def in_use(root: Path) -> str | None:
    """Who else uses ``root`` now (``another sparseloom process (pid 123) is``), ``None`` when no
    other process does or locks are unknown here. Creates nothing and, where ``/proc/locks``
    tells, takes no lock either (a process starting meanwhile is never kept waiting). Like
    :func:`exclusive_use`, it first releases this process's own shared lock."""
    release_in_use(root)
    holders = lock_holders(root)
    if holders is not None:
        others = [pid for pid in holders if pid != os.getpid()]
        return _users(others) if others else None
    try:
        import fcntl

        descriptor = os.open(root / IN_USE_FILE, os.O_RDONLY)
    except (ImportError, OSError):
        return None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return _users(None)
    finally:
        os.close(descriptor)  # closing releases it
    return None


@contextlib.contextmanager
def exclusive_use(root: Path) -> Iterator[None]:
    """Hold ``root``'s in-use lock exclusively while the block runs: no other process that uses
    the cache is running, and none starts (:func:`~sparseloom.core.cache.cache_dir` waits).

    This process's own shared lock is released first (one process cannot hold both); do not
    call ``cache_dir()`` for ``root`` in the block, it would wait for the block to end. Where
    the OS has no ``fcntl`` the block runs unguarded.

    :raises PathError: another process uses the cache (its pid named where known).
    """
    release_in_use(root)
    try:
        import fcntl
    except ImportError:
        yield
        return
    from sparseloom.core.cache import path_error

    try:
        descriptor = os.open(root / IN_USE_FILE, os.O_RDONLY | os.O_CREAT, 0o666)
    except OSError as error:
        raise path_error(root / IN_USE_FILE, error, "lock the cache folder at") from None
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            users = _users(lock_holders(root))
            raise PathError(f"{users} using the cache folder {root}; pruning now could "
                            "remove what it reads: retry when it has ended") from None
        yield
    finally:
        os.close(descriptor)


def _remove(entry: CacheEntry) -> None:
    """Remove one entry, its marker first; a folder by renaming it out of sight first."""
    for path in entry.paths:
        if path.is_dir() and not path.is_symlink():
            hidden = path.with_name(f".{path.name}.pruning-{os.getpid()}")
            os.rename(path, hidden)  # atomic: a reader sees the whole entry or none
            shutil.rmtree(hidden)
        else:
            path.unlink(missing_ok=True)


def prune(report: CacheReport, entries: Sequence[CacheEntry], *, dry_run: bool = False
          ) -> PruneResult:
    """Remove ``entries`` and the leftovers of earlier prunes cut short (or, with ``dry_run``,
    only say what would go). Call it inside :func:`exclusive_use` with a ``report`` scanned
    there: what was scanned before the lock may have changed.

    ``freed_bytes`` counts a hard-linked file only when all its links go. An entry that
    cannot be removed is reported in ``failures``; the others are removed.
    """
    freed = freeable_bytes([*report.leftovers, *(path for e in entries for path in e.paths)])
    if dry_run:
        return PruneResult(tuple(entries), freed, len(report.leftovers), (), True)
    for path in report.leftovers:  # no one reads them: not a failure if one resists
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    removed: list[CacheEntry] = []
    failures: list[tuple[CacheEntry, str]] = []
    for entry in entries:
        try:
            _remove(entry)
            removed.append(entry)
        except OSError as error:
            failures.append((entry, f"{error.strerror or error} ({error.filename})"))
    if failures:  # what they still hold was not freed
        freed -= freeable_bytes(path for entry, _ in failures for path in entry.paths)
    for folder in {e.paths[0].parent for e in removed if e.stage == "profiles"}:
        with contextlib.suppress(OSError):  # a workload's profile folder left with its lock
            if [child.name for child in children(folder)] == [".lock"]:
                (folder / ".lock").unlink()
                folder.rmdir()
    return PruneResult(tuple(removed), freed, len(report.leftovers), tuple(failures), False)
