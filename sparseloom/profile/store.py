"""The on-disk profile cache: partial results written as they are measured, so a run resumes.

A store is one directory, ``cache_dir()/profiles/<workload>/<key>`` (the workload's name as
:func:`~sparseloom.core.cache.cache_name` writes it), where ``key`` hashes the
zoo hashes, the processor config and the profiler settings: change any of them and a fresh
directory (a fresh profile) is used. Each unit of work (one task on one processor, one task's
hand-offs, one task's accuracy samples) is one ``<name>.npz`` holding its arrays plus a JSON
``_meta`` entry, written atomically (temporary file, then rename).
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from sparseloom.core.cache import cache_dir, cache_name, cache_notice, config_hash, path_error

_META = "_meta"
#: The metadata key naming the unit a file holds: a file found under another unit's name (one
#: copied over it) is not read.
_UNIT = "unit"
#: What a unit of each kind holds (arrays, metadata), by the prefix of its name: a file without
#: them is another kind's (or an older layout) and is measured again, not read into a
#: ``KeyError`` at every later ``plan``.
UNIT_CONTENTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "latency-": (("latency_ms", "median_ms", "spread_ms", "compile_ms", "load_ms",
                  "memory_bytes", "handoff_ms"), ("seconds",)),
    "fidelity-": (("fidelity_error",), ("seconds",)),
    "numerics-": (("numerics_error",), ("seconds",)),
    "accuracy-": (("rows", "metrics"), ("seconds", "passes")),
    "truth-": (("truth",), ("seconds",)),
}


def unit_problem(name: str, arrays: Mapping[str, Any], meta: Mapping[str, Any]) -> str | None:
    """Why a file read as unit ``name`` does not hold that unit, or ``None``."""
    if meta.get(_UNIT, name) != name:
        return f"it holds unit {meta[_UNIT]!r}, not {name!r}"
    for prefix, (array_keys, meta_keys) in UNIT_CONTENTS.items():
        if name.startswith(prefix):
            missing = [k for k in array_keys if k not in arrays] + [
                f"_meta.{k}" for k in meta_keys if k not in meta]
            if missing:
                return f"it lacks {', '.join(missing)}, which every {prefix}* unit holds"
    return None


def profiles_directory(workload: str, root: str | os.PathLike[str] | None = None) -> Path:
    """The folder of ``workload``'s profiles: ``cache_dir()/profiles/<cache_name(workload)>``
    (``root`` in place of ``cache_dir()/profiles``); where profiles are saved and looked up."""
    base = Path(root) if root is not None else cache_dir() / "profiles"
    return base / cache_name(workload)


@attrs.define(eq=False)
class ProfileStore:
    """Partial and final profile results of one (workload, zoo, processors, settings) key.

    Attributes:
        directory: where the files live.
        enabled: when ``False`` nothing is read (every unit is measured again) but results
            are still written, so ``--no-cache`` refreshes the cache.
    """

    directory: Path = attrs.field(converter=Path)
    enabled: bool = True

    @classmethod
    def for_key(cls, workload: str, key_config: Mapping[str, Any], *, enabled: bool = True,
                root: str | os.PathLike[str] | None = None) -> ProfileStore:
        """The store of ``key_config`` (hashed) for ``workload``, under the cache root."""
        directory = profiles_directory(workload, root) / config_hash(dict(key_config))
        try:
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "key.json").write_text(
                json.dumps(dict(key_config), indent=1, default=str))
        except OSError as error:
            raise path_error(directory, error, "write the profile cache") from None
        return cls(directory, enabled)

    def path(self, name: str) -> Path:
        """The file of unit ``name``."""
        return self.directory / f"{cache_name(name)}.npz"

    def load(self, name: str) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
        """The arrays and metadata of unit ``name``, or ``None`` when absent or unreadable."""
        path = self.path(name)
        if not self.enabled or not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {key: data[key] for key in data.files if key != _META}
                meta = json.loads(str(data[_META])) if _META in data.files else {}
            problem = unit_problem(name, arrays, meta) if isinstance(meta, dict) else (
                f"its metadata is {type(meta).__name__}, not a table")
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
            problem = f"{type(error).__name__}: {error}"
        if problem is not None:
            # A torn or foreign file is measured again (and overwritten), and the user told.
            cache_notice(f"the cached profile partial {path} is damaged ({problem}); measuring "
                         f"it again")
            return None
        return arrays, meta

    def save(self, name: str, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        """Write unit ``name`` atomically."""
        path = self.path(name)
        temporary = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")
        payload = {key: np.asarray(value) for key, value in arrays.items()}
        payload[_META] = np.asarray(json.dumps({**meta, _UNIT: name}, default=str))
        np.savez(temporary, **payload)  # type: ignore[arg-type]
        os.replace(temporary, path)

    def table_directory(self, estimators: Mapping[str, Any]) -> Path:
        """Where the final table built with ``estimators`` (and sampling) is saved."""
        return self.directory / f"table-{config_hash(dict(estimators))}"
