"""Every zoo test runs on the real compressors: a broken one fails here, never passes on a fake."""

from __future__ import annotations

import pytest

from tests.zoo.zoo_support import require_real_compressors


@pytest.fixture(scope="module", autouse=True)
def _real_compressors() -> None:
    require_real_compressors()
