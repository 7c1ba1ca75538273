"""What the cache holds: the logic of ``sparseloom cache list``, and what ``prune`` removes.

:func:`scan_cache` walks a cache root (``os.scandir``, reading only the small JSON files that
name an entry's task or workload) and creates nothing. Each stage folder holds *entries*, the
units a prune removes whole:

- ``workloads/<builder>-<hash>/`` with its ``<builder>-<hash>.lock``: a built task, the
  builder's (its ``meta.json`` names it and the model's SHA-256);
- ``zoo/<hash>/`` (``manifest.json``, ``p*/``, ``metrics/``): a zoo of the task its manifest
  names, cut from the dense model the manifest records (path and SHA-256);
- ``whole/<zoo hash>/`` (``<task>-<choices>.onnx``): the merged stitched variants of a zoo;
- ``profiles/<workload>/<key>/``: one profile of the workload; ``key.json`` names its zoos;
- keyed by file content, no one's: ``batch1/<digest>*`` (a batch-1 copy,
  ``<digest>-<params>.ref.onnx``) and ``batch1/tensors/<sha256>.bin`` (a weight tensor the
  copies holding it share: each is an entry, as new as the newest copy that uses it, and a
  copy whose tensor is gone is made again when it is next used), ``ort/<key>.*`` (a
  providers record, or an older version's optimized model with its digest and providers)
  and ``ort/trt/<key>/``, ``ov/<n>.blob`` and ``ov/<key>.devices.json``,
  ``probes/<key>.json`` and ``probes/models/<hash>.onnx``, ``models/<hash>.onnx``.

Files of a flat stage are grouped by the name before the first dot (in ``batch1/``, by the
digest), so an ONNX Runtime artefact goes with its digest and providers record and a batch-1
copy with its data. Hidden names (locks, builds in progress) are counted in their stage's
size but are no entry; folders other than these stages are listed and never pruned.

Choosing entries and removing them safely is :mod:`sparseloom.cli.cache_prune`.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

from sparseloom.core.cache import IN_USE_FILE

#: Every stage folder sparseloom writes, in the order data flows.
STAGES = ("workloads", "zoo", "whole", "profiles", "batch1", "ort", "ov", "probes", "models")
#: The stages whose entries belong to a task or workload (the others are keyed by content).
OWNED_STAGES = ("workloads", "zoo", "whole", "profiles")
#: Sub-folders of a flat stage that hold entries themselves: folders (``trt/<key>/``) or files.
_CONTAINERS = {("ort", "trt"): "folders", ("probes", "models"): "files",
               ("batch1", "tensors"): "files"}
#: A leftover of a prune cut short: ``.<name>.pruning-<pid>``.
LEFTOVER = re.compile(r"^\..+\.pruning-\d+$")
#: A batch-1 copy's files share its source's digest (``<digest>-<params>.ref.onnx``, and an
#: older version's ``<digest>-<params>.onnx`` with its ``.data``): they are one entry.
_DIGEST = re.compile(r"^[0-9a-f]{16}(?=[-.])")


@attrs.frozen
class CacheEntry:
    """One unit of a stage that a prune removes whole.

    Attributes:
        stage: the stage folder (``zoo``).
        name: the entry's path below the stage folder (``af702e194d945e0f``, ``tiny/7332…``).
        paths: its files and folders, the one whose presence marks the entry first.
        size_bytes: the bytes of its files (apparent sizes, as ``du -b`` counts files).
        files: how many files it holds.
        modified: the newest modification time (epoch seconds) of anything in it.
        owner: its task (workloads, zoo, whole) or workload (profiles); ``None`` when unknown.
        zoo_hashes: zoo: its own hash; whole: its zoo's; profiles: the zoos it measured.
        model_source: workloads: its folder name; zoo: the ``workloads/`` folder its dense
            model came from (or the model file's path, for a task given as files).
        model_sha256: workloads: ``model.onnx``'s digest; zoo: its dense model's.
    """

    stage: str
    name: str
    paths: tuple[Path, ...]
    size_bytes: int
    files: int
    modified: float
    owner: str | None = None
    zoo_hashes: tuple[str, ...] = ()
    model_source: str | None = None
    model_sha256: str | None = None

    @property
    def label(self) -> str:
        """``stage/name``, as the commands print it."""
        return f"{self.stage}/{self.name}"


@attrs.frozen
class StageReport:
    """One stage folder: its totals (everything in it) and its entries."""

    name: str
    path: Path
    exists: bool
    size_bytes: int
    files: int
    modified: float | None
    entries: tuple[CacheEntry, ...]


@attrs.frozen
class CacheReport:
    """What a cache root holds (:func:`scan_cache`).

    Attributes:
        others: folders and files of the root that are no stage (never pruned), with totals.
        leftovers: hidden ``.<name>.pruning-<pid>`` remains of a prune cut short.
    """

    root: Path
    exists: bool
    stages: tuple[StageReport, ...]
    others: tuple[StageReport, ...]
    leftovers: tuple[Path, ...]
    leftover_bytes: int

    @property
    def size_bytes(self) -> int:
        """All bytes under the root (its in-use lock file aside)."""
        return sum(s.size_bytes for s in (*self.stages, *self.others)) + self.leftover_bytes

    @property
    def files(self) -> int:
        """All files under the root (its in-use lock file aside)."""
        return sum(s.files for s in (*self.stages, *self.others))

    def stage(self, name: str) -> StageReport:
        """The report of stage ``name``."""
        return next(s for s in self.stages if s.name == name)

    def entries(self, stages: Iterable[str] = STAGES) -> list[CacheEntry]:
        """The entries of ``stages``."""
        wanted = set(stages)
        return [e for s in self.stages if s.name in wanted for e in s.entries]


# -- sizes ----------------------------------------------------------------------------------------


def human_bytes(size_bytes: int) -> str:
    """``1.7 GiB``, ``759.3 MiB``, ``512 B``: binary units, one decimal."""
    if size_bytes < 1024:
        return f"{size_bytes} B"
    value = float(size_bytes)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"


def _walk(path: Path, skip: frozenset[Path] = frozenset()) -> Iterator[tuple[os.stat_result, bool]]:
    """The ``lstat`` of ``path`` and of everything under it (links not followed), each with
    whether it is a folder; what vanishes or cannot be read meanwhile is left out."""
    try:
        top = os.lstat(path)
    except OSError:
        return
    yield top, stat.S_ISDIR(top.st_mode)
    pending = [os.fspath(path)] if stat.S_ISDIR(top.st_mode) else []
    while pending:
        try:
            with os.scandir(pending.pop()) as found:
                for child in found:
                    try:
                        info = child.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if skip and Path(child.path) in skip:
                        continue
                    yield info, stat.S_ISDIR(info.st_mode)
                    if stat.S_ISDIR(info.st_mode):
                        pending.append(child.path)
        except OSError:
            continue


def _usage(path: Path, seen: set[tuple[int, int]], skip: frozenset[Path] = frozenset()
           ) -> tuple[int, int, float]:
    """Bytes, files and newest modification time under ``path``. A file with hard links
    counts its bytes once per ``seen`` (as ``du`` counts them once per run)."""
    size_bytes, files, newest = 0, 0, 0.0
    for info, is_dir in _walk(path, skip):
        newest = max(newest, info.st_mtime)
        if is_dir:
            continue
        files += 1
        if info.st_nlink > 1:
            if (info.st_dev, info.st_ino) in seen:
                continue
            seen.add((info.st_dev, info.st_ino))
        size_bytes += info.st_size
    return size_bytes, files, newest


def freeable_bytes(paths: Iterable[Path]) -> int:
    """The bytes that removing ``paths`` frees: a hard-linked file's only when every one of its
    links is among them."""
    found: dict[tuple[int, int], tuple[int, int, int]] = {}
    for path in paths:
        for info, is_dir in _walk(path):
            if not is_dir:
                size, links, met = found.get((info.st_dev, info.st_ino),
                                             (info.st_size, info.st_nlink, 0))
                found[info.st_dev, info.st_ino] = (size, links, met + 1)
    return sum(size for size, links, met in found.values() if met >= links)


# -- scanning -------------------------------------------------------------------------------------


def children(folder: Path) -> list[os.DirEntry[str]]:
    """The entries of ``folder`` by name (none when it cannot be read)."""
    try:
        with os.scandir(folder) as found:
            return sorted(found, key=lambda child: child.name)
    except OSError:
        return []


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def _table(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _facts(stage: str, path: Path) -> dict[str, Any]:
    """What names an owned entry's task or workload and links it to others (small files)."""
    if stage == "workloads":
        meta = _table(_read_json(path / "meta.json"))
        return {"owner": _text(meta.get("builder")) or path.name.rpartition("-")[0] or None,
                "model_source": path.name,
                "model_sha256": _text(_table(meta.get("sha256")).get("model.onnx"))}
    if stage == "zoo":
        manifest = _table(_read_json(path / "manifest.json"))
        dense = _table(manifest.get("dense_model"))
        source = _text(dense.get("path"))
        if source and Path(source).parent.parent.name == "workloads":
            source = Path(source).parent.name  # the cache may have moved: keep the folder
        return {"owner": _text(manifest.get("task")), "zoo_hashes": (path.name,),
                "model_source": source, "model_sha256": _text(dense.get("sha256"))}
    if stage == "whole":  # <task>-<choices>.onnx
        tasks = {child.name.rpartition("-")[0] for child in children(path)
                 if child.name.endswith(".onnx") and "-" in child.name}
        return {"owner": min(tasks) if len(tasks) == 1 else None, "zoo_hashes": (path.name,)}
    zoos = _table(_table(_read_json(path / "key.json")).get("zoos"))  # profiles/<w>/<key>
    return {"owner": path.parent.name,
            "zoo_hashes": tuple(sorted(h for h in zoos.values() if isinstance(h, str)))}


@attrs.define(eq=False)
class _Scan:
    """One walk of a cache root: the leftovers met and the hard links already counted."""

    leftovers: list[Path] = attrs.field(factory=list)
    seen: set[tuple[int, int]] = attrs.field(factory=set)

    def entry(self, stage: str, name: str, paths: Sequence[Path], **facts: Any) -> CacheEntry:
        """The entry of ``paths``, its marker first."""
        usages = [_usage(path, self.seen) for path in paths]
        return CacheEntry(stage, name, tuple(paths), sum(u[0] for u in usages),
                          sum(u[1] for u in usages), max((u[2] for u in usages), default=0.0),
                          **facts)

    def level(self, stage: str, folder: Path, prefix: str = "") -> list[CacheEntry]:
        """The entries directly in ``folder`` (``prefix`` joins their names to the stage's)."""
        entries: list[CacheEntry] = []
        files: list[Path] = []
        for child in children(folder):
            path = Path(child.path)
            if LEFTOVER.match(child.name):
                self.leftovers.append(path)
            elif child.name.startswith(".") or ".building-" in child.name:
                continue  # a lock, or a build in progress (or crashed: its builder cleans it)
            elif not child.is_dir(follow_symlinks=False):
                files.append(path)
            elif (kind := _CONTAINERS.get((stage, child.name)) if not prefix else None) \
                    == "folders":
                entries += [self.entry(stage, f"{child.name}/{c.name}", [Path(c.path)])
                            for c in children(path) if not c.name.startswith(".")]
            elif kind == "files" or (stage == "profiles" and not prefix):
                entries += self.level(stage, path, f"{child.name}/")
            else:
                lock = path.with_name(f"{child.name}.lock")  # workloads/: its build lock too
                paths = [path, lock] if stage == "workloads" and lock.is_file() else [path]
                entries.append(self.entry(stage, prefix + child.name, paths, **(
                    _facts(stage, path) if stage in OWNED_STAGES else {})))
        groups: dict[str, list[Path]] = {}
        for path in files:
            if stage == "workloads" and path.suffix == ".lock" and path.with_suffix("").is_dir():
                continue
            digest = _DIGEST.match(path.name) if stage == "batch1" else None
            groups.setdefault(digest.group() if digest else path.name.split(".", 1)[0],
                              []).append(path)
        for stem, paths in groups.items():
            # What readers look up first (<key>.onnx, a batch-1 copy); what it points to last.
            order = sorted(paths, key=lambda p: (len(p.name), p.name))
            entries.append(self.entry(stage, prefix + stem, order))
        return sorted(entries, key=lambda entry: entry.name)


def scan_cache(root: Path) -> CacheReport:
    """What ``root`` holds, stage by stage; reads only, creates nothing (an absent root is
    reported as such)."""
    root = Path(root)
    scan = _Scan()
    found = [(name, root / name, scan.level(name, root / name) if (root / name).is_dir() else [])
             for name in STAGES]
    skip = frozenset(scan.leftovers)  # counted apart: they are no stage's entries any more
    totals: set[tuple[int, int]] = set()
    zoo_tasks = {e.name: e.owner for name, _, entries in found if name == "zoo"
                 for e in entries if e.owner}
    stages = []
    for name, folder, entries in found:
        if name == "whole":  # a whole/ folder's task is its zoo's, while it is there
            entries = [attrs.evolve(e, owner=zoo_tasks.get(e.name, e.owner)) for e in entries]
        exists = folder.is_dir()
        size_bytes, files, modified = _usage(folder, totals, skip) if exists else (0, 0, 0.0)
        stages.append(StageReport(name, folder, exists, size_bytes, files,
                                  modified if exists else None, tuple(entries)))
    others = []
    for child in children(root):
        if child.name not in STAGES and child.name != IN_USE_FILE:
            size_bytes, files, modified = _usage(Path(child.path), totals)
            others.append(StageReport(child.name, Path(child.path), True, size_bytes, files,
                                      modified, ()))
    leftover_bytes = sum(_usage(path, totals)[0] for path in scan.leftovers)
    return CacheReport(root, root.is_dir(), tuple(stages), tuple(others),
                       tuple(scan.leftovers), leftover_bytes)
