"""Test-wide settings: no autoloaded third-party plugins, one build cache for the run (one per
xdist worker)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparseloom.runtime.heap import SURVIVOR_FREEZE

# Tests never autoload installed plugins (tests that want them register them explicitly).
os.environ["SPARSELOOM_DISABLE_PLUGIN_AUTOLOAD"] = "1"
# Built workloads, zoos and profiles are shared by the whole run (and by later local runs).
# Under pytest-xdist (`make test` runs two workers) each worker has a cache of its own: one
# worker's profile of a workload holds that workload's lock, and a test of the other would
# wait for it and say so on stderr.
# (A worker inherits the variable as the controlling process set it: the worker's cache is
# that one's name with the worker's appended.)
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
os.environ.setdefault(
    "SPARSELOOM_CACHE_DIR", str(Path(__file__).resolve().parent.parent / ".cache" / "tests")
)
if _WORKER:
    os.environ["SPARSELOOM_CACHE_DIR"] = f"{os.environ['SPARSELOOM_CACHE_DIR']}-{_WORKER}"

# A full collection walks every object the process holds, and this session accumulates hundreds
# of thousands (models, zoos, tables, records): without this the tests ran 17 min 16 s from an
# empty test cache, with it 10 min 25 s (AMD EPYC, nothing else running; docs/runtime.md).
SURVIVOR_FREEZE.install()


def pytest_sessionstart(session: pytest.Session) -> None:
    """An xdist worker plans ``tiny`` before its first test, so that its workload, zoo and
    profile are in the worker's cache.

    Many tests run ``sparseloom plan tiny`` (or a command like it) and read its stderr; the
    first one in a run builds the profile. Beside another worker, that build's timing would
    be flagged as taken under load (each worker is the other's foreign load) on stderr.
    """
    if not _WORKER:
        return
    command = [str(Path(sys.executable).with_name("sparseloom")), "plan", "tiny"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise pytest.UsageError(f"`{' '.join(command[1:])}` failed before worker {_WORKER}'s "
                                f"first test:\n{result.stderr}")
