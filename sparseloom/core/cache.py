"""Where sparseloom caches what it builds (workloads, zoos, profiles), keyed by config hashes."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

CACHE_DIR_ENV = "SPARSELOOM_CACHE_DIR"


def cache_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """The cache root: ``override``, else ``$SPARSELOOM_CACHE_DIR``, else the user cache dir."""
    if override is not None:
        root = Path(override)
    elif os.environ.get(CACHE_DIR_ENV):
        root = Path(os.environ[CACHE_DIR_ENV])
    else:
        import platformdirs

        root = Path(platformdirs.user_cache_dir("sparseloom"))
    root = root.expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    return root


def config_hash(config: Any, length: int = 16) -> str:
    """A stable hex digest of a JSON-serialisable config (keys sorted)."""
    text = json.dumps(config, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def file_hash(path: str | os.PathLike[str]) -> str:
    """The SHA-256 hex digest of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
