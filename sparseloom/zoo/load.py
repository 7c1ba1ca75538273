"""Load a built zoo from its directory, or find the one built for a task and its options."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sparseloom.core.cache import config_hash
from sparseloom.core.errors import ZooError, ZooNotBuiltError
from sparseloom.zoo.manifest import ZOO_FORMAT
from sparseloom.zoo.options import MANIFEST, ZooOptions, zoo_directory
from sparseloom.zoo.types import Zoo, ZooTask

__all__ = ["REPAIR", "built_zoos", "check_manifest", "describe_built_zoos", "load_zoo"]

#: What a corrupt zoo's error tells the user to run.
REPAIR = "rebuild it with `sparseloom zoo build WORKLOAD --rebuild` (with the same -S/--variants)"


def check_manifest(zoo: Zoo, path: Path) -> None:
    """Read every manifest field the zoo uses once, so that a damaged manifest (a missing key,
    a wrong type) is one :class:`ZooError` here, not a ``KeyError`` deep in a later step."""
    try:
        variants, positions = zoo.variants, zoo.positions
        _ = zoo.task, zoo.hash, zoo.metric_name, zoo.manifest["partition"]["cuts"]
        for position in range(positions):
            zoo.boundary(position)
            for variant in range(len(variants)):
                zoo.subgraph(position, variant)
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as error:
        detail = f"missing key {error}" if isinstance(error, KeyError) else str(error)
        raise ZooError(f"zoo manifest {path} is damaged ({detail}); {REPAIR}") from None


def built_zoos(task: str) -> list[tuple[int, tuple[str, ...], Path]]:
    """The zoos of ``task`` in the cache: ``(S, variant names, directory)`` each."""
    from sparseloom.core.cache import cache_dir

    found = []
    for manifest_path in sorted((cache_dir() / "zoo").glob(f"*/{MANIFEST}")):
        try:
            manifest = json.loads(manifest_path.read_text())
            if manifest.get("task") != task:
                continue
            found.append((len(manifest["positions"]),
                          tuple(v["name"] for v in manifest["variants"]), manifest_path.parent))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a broken zoo is reported when it is loaded, not while listing
    return found


def describe_built_zoos(task: str) -> str:
    """One clause naming the built zoos of ``task`` and how to select each."""
    zoos = built_zoos(task)
    if not zoos:
        return f"no zoo of task {task!r} is built at all"
    choices = "; ".join(f"S={count} with variants {','.join(names)} (select with --subgraphs "
                        f"{count} --variants {','.join(names)}, or the workload file's "
                        f"'variants')" for count, names, _ in zoos)
    return f"built zoos of task {task!r}: {choices}"


def load_zoo(
    source: str | os.PathLike[str] | ZooTask,
    options: ZooOptions | None = None,
    *,
    verify: bool = True,
) -> Zoo:
    """Load a built zoo from its directory, or find the one ``build_zoo`` made for a task.

    :param source: a zoo directory, or a task whose zoo was built with ``options``.
    :param options: with a task, the options it was built with (they make the hash); ignored
        for a directory.
    :param verify: check every file's SHA-256 (a mismatch raises :class:`ZooError`).
    :raises ZooNotBuiltError: no zoo of the task with these options is built yet.
    :raises ZooError: an unreadable manifest, or a corrupted file.
    """
    if isinstance(source, str | os.PathLike):
        directory = Path(source)
    else:
        options = options or ZooOptions()
        count = options.count()
        config = options.config(source)
        directory = zoo_directory(config_hash(config))
        if not (directory / MANIFEST).is_file():
            wanted = ",".join(config["variants"])
            raise ZooNotBuiltError(
                f"no zoo of task {source.name!r} with S={count} is built yet for variants "
                f"{wanted} (looked in {directory}); {describe_built_zoos(source.name)}; "
                f"build this one with `sparseloom zoo build WORKLOAD --subgraphs {count} "
                f"--variants {wanted}`"
            )
    manifest_path = directory / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text())
    except FileNotFoundError:
        raise ZooError(f"{directory} holds no zoo: {MANIFEST} is missing") from None
    except (OSError, ValueError) as error:
        raise ZooError(f"cannot read zoo manifest {manifest_path}: {error}; "
                       f"{REPAIR}") from error
    if not isinstance(manifest, dict) or manifest.get("format") != ZOO_FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise ZooError(f"zoo {directory} has format {found!r}, this sparseloom "
                       f"reads format {ZOO_FORMAT}; {REPAIR}")
    zoo = Zoo(directory.resolve(), manifest)
    check_manifest(zoo, manifest_path)
    if verify:
        zoo.verify()
    return zoo


def profiled_zoos(profile: Any, tasks: Iterable[str] | None = None) -> dict[str, Zoo]:
    """The zoos ``profile`` was built from, by task (``tasks``: only these), as the cache holds
    them (not verified again: the profile's hashes name them).

    :raises ZooNotBuiltError: a zoo the profile names is not in the cache any more.
    """
    hashes = profile.meta["zoo_hashes"]
    return {name: load_zoo(zoo_directory(hashes[name]), verify=False)
            for name in (profile.tasks if tasks is None else tasks)}
