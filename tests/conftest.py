"""Test-wide settings: no autoloaded third-party plugins, one shared build cache."""

from __future__ import annotations

import os
from pathlib import Path

from sparseloom.runtime.heap import SURVIVOR_FREEZE

# Tests never autoload installed plugins (tests that want them register them explicitly).
os.environ["SPARSELOOM_DISABLE_PLUGIN_AUTOLOAD"] = "1"
# Built workloads, zoos and profiles are shared by the whole run (and by later local runs).
os.environ.setdefault(
    "SPARSELOOM_CACHE_DIR", str(Path(__file__).resolve().parent.parent / ".cache" / "tests")
)

# A full collection walks every object the process holds, and this session accumulates hundreds
# of thousands (models, zoos, tables, records): without this the tests ran 17 min 16 s from an
# empty test cache, with it 10 min 25 s (AMD EPYC, nothing else running; docs/runtime.md).
SURVIVOR_FREEZE.install()
