"""The on-disk profile cache: partial results written as they are measured, so a run resumes.

A store is one directory, ``cache_dir()/profiles/<workload>/<key>``, where ``key`` hashes the
zoo hashes, the processor config and the profiler settings: change any of them and a fresh
directory (a fresh profile) is used. Each unit of work (one task on one processor, one task's
hand-offs, one task's accuracy samples) is one ``<name>.npz`` holding its arrays plus a JSON
``_meta`` entry, written atomically (temporary file, then rename).
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from sparseloom.core.cache import cache_dir, cache_notice, config_hash, path_error

_META = "_meta"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]", "_", name)


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
        base = Path(root) if root is not None else cache_dir() / "profiles"
        directory = base / _safe(workload) / config_hash(dict(key_config))
        try:
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "key.json").write_text(
                json.dumps(dict(key_config), indent=1, default=str))
        except OSError as error:
            raise path_error(directory, error, "write the profile cache") from None
        return cls(directory, enabled)

    def path(self, name: str) -> Path:
        """The file of unit ``name``."""
        return self.directory / f"{_safe(name)}.npz"

    def load(self, name: str) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
        """The arrays and metadata of unit ``name``, or ``None`` when absent or unreadable."""
        path = self.path(name)
        if not self.enabled or not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {key: data[key] for key in data.files if key != _META}
                meta = json.loads(str(data[_META])) if _META in data.files else {}
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
            # A torn or foreign file is measured again (and overwritten), and the user told.
            cache_notice(f"the cached profile partial {path} is damaged "
                         f"({type(error).__name__}: {error}); measuring it again")
            return None
        return arrays, meta

    def save(self, name: str, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        """Write unit ``name`` atomically."""
        path = self.path(name)
        temporary = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")
        payload = {key: np.asarray(value) for key, value in arrays.items()}
        payload[_META] = np.asarray(json.dumps(dict(meta), default=str))
        np.savez(temporary, **payload)  # type: ignore[arg-type]
        os.replace(temporary, path)

    def table_directory(self, estimators: Mapping[str, Any]) -> Path:
        """Where the final table built with ``estimators`` (and sampling) is saved."""
        return self.directory / f"table-{config_hash(dict(estimators))}"
