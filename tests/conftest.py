"""Test-wide settings: no autoloaded third-party plugins, one shared build cache."""

from __future__ import annotations

import os
from pathlib import Path

# Tests never autoload installed plugins (tests that want them register them explicitly).
os.environ["SPARSELOOM_DISABLE_PLUGIN_AUTOLOAD"] = "1"
# Built workloads, zoos and profiles are shared by the whole run (and by later local runs).
os.environ.setdefault(
    "SPARSELOOM_CACHE_DIR", str(Path(__file__).resolve().parent.parent / ".cache" / "tests")
)
