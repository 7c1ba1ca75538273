"""Every zoo test runs on the real compressors: a broken one fails here, never passes on a fake."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sparseloom.zoo.types import Zoo
from tests.zoo.zoo_support import require_real_compressors, tiny_zoo


@pytest.fixture(scope="module", autouse=True)
def _real_compressors() -> None:
    require_real_compressors()


@pytest.fixture
def private_zoo(tmp_path: Path) -> Zoo:
    """A private copy of the tiny S = 2 zoo without its metric store, so that what a test
    measures is measured by that test (and no test sees another's metrics)."""
    source = tiny_zoo(2)
    copy = tmp_path / "zoo"
    shutil.copytree(source.directory, copy, ignore=shutil.ignore_patterns("metrics"))
    return Zoo(copy, source.manifest)
