"""Faults: injected backend errors are retried or failed explicitly, never lost."""

from __future__ import annotations

from typing import Any

from sparseloom.core.hookspecs import hookimpl
from sparseloom.runtime.executor import RuntimeOptions
from sparseloom.runtime.load import LoadSpec
from tests.runtime.support import check_invariant, run


class BackendErrorObserver:
    """Counts ``sparseloom_backend_error`` notifications (an observer, not a double)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    @hookimpl
    def sparseloom_backend_error(self, processor: Any, operation: str, error: BaseException
                                 ) -> None:
        self.seen.append((processor.name, operation))


def test_faults_at_a_few_percent_keep_the_invariant(tiny: tuple[Any, Any],
                                                    register_plugin: Any) -> None:
    observer = BackendErrorObserver()
    register_plugin(observer)
    for load in (LoadSpec("closed", queries=150), LoadSpec("poisson", queries=150, rate=500.0)):
        result = run(tiny, load, options=RuntimeOptions(fault_rate=0.05, fault_seed=3))
        check_invariant(result)
        summary = result.summary
        assert summary.injected_faults > 0
        # Every offered query is accounted for: served, failed, or refused by a full queue
        # (a Poisson burst during a plan switch may fill the tiny task's queue).
        assert summary.submitted + summary.rejected == 150
        assert summary.submitted > 0
        retried = [r for r in result.records if r.retries]
        assert retried, "a failed stage is retried on another processor"
        assert any(r.status == "completed" for r in retried)
        for record in result.records:
            if record.status == "failed":
                assert "injected fault" in record.reason
    assert observer.seen and all(op == "infer" for _, op in observer.seen)


def test_a_failing_processor_is_marked_down_and_the_policy_replans(tiny: tuple[Any, Any]
                                                                   ) -> None:
    plan_result = run(tiny, LoadSpec("closed", queries=5))
    used = set(plan_result.plan.processors_of("tiny"))
    broken = sorted(used)[0]
    options = RuntimeOptions(fault_rate=1.0, fault_processors=(broken,), down_after=2)
    result = run(tiny, LoadSpec("closed", queries=60), options=options)
    check_invariant(result)
    assert result.summary.processors_down == (broken,)
    late = [r for r in result.records if r.request_id >= 30]
    assert all(r.status == "completed" and broken not in r.processors for r in late)
