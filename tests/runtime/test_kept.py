"""Models kept across runs (``keep_loaded``): reused whole, or within a bound on idle bytes."""

from __future__ import annotations

from typing import Any

import pytest

from sparseloom.runtime.kept import keep_loaded, kept
from sparseloom.runtime.load import LoadSpec
from tests.runtime.support import check_invariant, run


def test_an_unbounded_pool_serves_a_second_run_without_loading(tiny: tuple[Any, Any]) -> None:
    with keep_loaded() as pool:
        check_invariant(run(tiny, LoadSpec("closed", queries=20)))
        held, count = pool.total_bytes, len(pool._entries)
        assert held > 0 and count > 0
        check_invariant(run(tiny, LoadSpec("closed", queries=20)))
        assert (pool.total_bytes, len(pool._entries), pool.evicted, pool.reloads) == (
            held, count, 0, 0)
    assert kept() is None  # leaving the block unloads and forgets every model


def test_a_bounded_pool_keeps_its_idle_models_within_the_bound(tiny: tuple[Any, Any]) -> None:
    with keep_loaded() as pool:
        run(tiny, LoadSpec("closed", queries=20))
        everything, count = pool.total_bytes, len(pool._entries)
    bound = everything // 2
    with keep_loaded(bound) as pool:
        check_invariant(run(tiny, LoadSpec("closed", queries=20)))
        assert 0 < pool.total_bytes <= bound and pool.evicted > 0
        first_evicted = pool.evicted
        check_invariant(run(tiny, LoadSpec("closed", queries=20)))
        assert pool.total_bytes <= bound
        # The second run loaded again exactly what the first one's end had unloaded.
        assert pool.reloads == first_evicted and len(pool._entries) < count
    with keep_loaded(0) as pool:
        run(tiny, LoadSpec("closed", queries=20))
        assert pool.total_bytes == 0 and pool.evicted == count


def test_a_negative_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="max_bytes must be >= 0"), keep_loaded(-1):
        pass
