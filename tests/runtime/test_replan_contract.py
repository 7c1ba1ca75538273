"""Re-plans hold a third-party policy to the same contract as the first plan: it is given
``Processor`` records, and what it returns is checked and completed — when an SLO changes, a
task joins or leaves, a processor goes down, and when ``on_feedback`` returns a plan."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

from sparseloom.core.hookspecs import hookimpl
from sparseloom.core.types import SLO, Plan, StitchedVariant
from sparseloom.runtime.executor import RuntimeOptions
from sparseloom.runtime.server import Server
from tests.plugins import contract_edges
from tests.plugins.contract_edges import MinimalPlanPolicy
from tests.runtime.support import eval_row, plain_onnxruntime

TIMEOUT_S = 60.0
LOOSE = SLO(0.0, 1000.0)
#: A monitor window of 5 requests: a feedback after the 5th request, not the 20th.
QUICK_FEEDBACK = RuntimeOptions(window=5)


def _dense_answers(setup: tuple[Any, Any], server: Server, rows: range) -> None:
    """Serve ``rows`` of tiny and check each answer against tiny's dense chain run by plain
    ONNX Runtime (what ``minimal-plan`` places)."""
    workload, profile = setup
    task = workload.task("tiny")
    oracle = plain_onnxruntime(setup, "tiny", (0,) * profile.task("tiny").n_positions)
    futures = [(row, server.submit("tiny", eval_row(task, row))) for row in rows]
    for row, future in futures:
        np.testing.assert_allclose(future.result(TIMEOUT_S)["logits"],
                                   oracle(eval_row(task, row))["logits"], rtol=1e-4, atol=1e-5)


def test_a_minimal_plan_policy_serves_through_slo_changes_joins_and_leaves(
        tiny: tuple[Any, Any], register_plugin: Callable[..., str]) -> None:
    register_plugin(contract_edges, "contract-edges")
    workload, profile = tiny
    first = profile.processors[0]
    with Server(workload, profile, policy="minimal-plan", slos={"tiny": LOOSE},
                tasks=[]) as server:
        server.add_task("tiny")
        _dense_answers(tiny, server, range(0, 10))
        tighter = server.set_slo("tiny", latency_ms=500.0)
        _dense_answers(tiny, server, range(10, 20))
        plan = server.runtime.plan
        server.remove_task("tiny")
        server.add_task("tiny")
        _dense_answers(tiny, server, range(20, 30))
        stats = server.stats()
        errors, notes = list(server.runtime.control.errors), list(server.runtime.notes)
    assert errors == [] and not any("re-plan" in n for n in notes), (errors, notes)
    # The re-plan after the SLO change was completed from the profile, like the first plan.
    assert plan.policy == "minimal-plan" and plan.slos["tiny"] == tighter == SLO(0.0, 500.0)
    expected_ms = profile.latency("tiny", [0] * profile.task("tiny").n_positions,
                                  [first] * profile.task("tiny").n_positions)
    assert plan.estimated_latency_ms["tiny"] == float(expected_ms) > 0
    assert plan.feasible["tiny"] is True  # tiny's dense chain takes well under 500 ms
    view = stats.tasks["tiny"]
    assert view.route.startswith(f"tiny[{','.join('0' * profile.task('tiny').n_positions)}] @ ")
    assert view.submitted == view.completed == 30 and view.failed == 0


def test_a_minimal_plan_policy_re_plans_without_a_processor_gone_down(
        tiny: tuple[Any, Any], register_plugin: Callable[..., str]) -> None:
    register_plugin(contract_edges, "contract-edges")
    workload, profile = tiny
    assert len(profile.processors) >= 2, "tiny is profiled on two processors"
    broken, spare = profile.processors[0], profile.processors[1]
    options = RuntimeOptions(fault_rate=1.0, fault_processors=(broken,), down_after=2)
    with Server(workload, profile, policy="minimal-plan", slos={"tiny": LOOSE},
                options=options) as server:
        for row in range(8):  # in turn: each fails on the broken processor first
            server.submit("tiny", eval_row(workload.task("tiny"), row)).exception(TIMEOUT_S)
        server.runtime.control.wait_idle(TIMEOUT_S)
        _dense_answers(tiny, server, range(8, 28))
        stats = server.stats()
        notes = list(server.runtime.notes) + list(server.runtime.control.errors)
    assert stats.processors[broken].down
    # The policy re-planned (it is given the processors that are up, as records): no fallback.
    assert not any("re-plan without" in n for n in notes), notes
    assert stats.tasks["tiny"].route.split(" @ ")[1].split(">") == \
        [spare] * profile.task("tiny").n_positions


class _FeedbackPolicy(MinimalPlanPolicy):
    """``minimal-plan`` whose ``on_feedback`` returns :attr:`result`; it counts its calls."""

    calls = 0
    result: Callable[[Any], Any] = staticmethod(lambda observations: None)

    def on_feedback(self, observations: Any) -> Any:
        type(self).calls += 1
        return self.result(observations)


def _feedback_plugin(result: Callable[[Any], Any]) -> tuple[SimpleNamespace, type]:
    policy = type("Feedback", (_FeedbackPolicy,), {"calls": 0,
                                                   "result": staticmethod(result)})
    plugin = SimpleNamespace(sparseloom_register_policies=hookimpl(
        lambda register: register("odd-feedback", policy, description="test")))
    return plugin, policy


def test_an_on_feedback_result_that_is_not_a_plan_is_refused_once(
        tiny: tuple[Any, Any], register_plugin: Callable[..., str]) -> None:
    plugin, policy = _feedback_plugin(lambda observations: {"tiny": (0, 0)})
    register_plugin(plugin, "odd-feedback")
    workload, _ = tiny
    with Server(workload, tiny[1], policy="odd-feedback", slos={"tiny": LOOSE},
                options=QUICK_FEEDBACK) as server:
        before = server.stats().tasks["tiny"].route
        _dense_answers(tiny, server, range(0, 10))  # two windows: one feedback, refused
        server.runtime.control.wait_idle(TIMEOUT_S)
        time.sleep(0.15)  # past the least interval between two feedbacks
        _dense_answers(tiny, server, range(10, 30))  # four more windows: no feedback asked
        server.runtime.control.wait_idle(TIMEOUT_S)
        stats = server.stats()
        errors = list(server.runtime.control.errors)
    assert policy.calls == 1
    assert len(errors) == 1, errors
    assert errors[0].startswith("PlanError: on_feedback(): policy 'odd-feedback' returned dict, "
                                "not a Plan")
    assert "the plan in force stays" in errors[0] and "not called again" in errors[0]
    view = stats.tasks["tiny"]
    assert view.route == before and view.switches == 0
    assert view.submitted == view.completed == 30 and view.failed == 0


def test_an_on_feedback_plan_with_only_the_required_fields_is_completed_and_applied(
        tiny: tuple[Any, Any], register_plugin: Callable[..., str]) -> None:
    workload, profile = tiny
    positions = profile.task("tiny").n_positions
    last = profile.processors[-1]

    def elsewhere(observations: Any) -> Plan:
        return Plan("odd-feedback", (last,) * positions,
                    {"tiny": StitchedVariant("tiny", (0,) * positions)})

    plugin, policy = _feedback_plugin(elsewhere)
    register_plugin(plugin, "odd-feedback")
    with Server(workload, profile, policy="odd-feedback", slos={"tiny": LOOSE},
                options=QUICK_FEEDBACK) as server:
        _dense_answers(tiny, server, range(0, 10))
        server.runtime.control.wait_idle(TIMEOUT_S)
        _dense_answers(tiny, server, range(10, 20))
        plan, stats = server.runtime.plan, server.stats()
        errors = list(server.runtime.control.errors)
    assert errors == [] and policy.calls >= 1
    assert stats.tasks["tiny"].route.split(" @ ")[1].split(">") == [last] * positions
    assert plan.order == (last,) * positions and plan.slos["tiny"] == LOOSE
    assert plan.estimated_latency_ms["tiny"] == float(
        profile.latency("tiny", [0] * positions, [last] * positions))
    assert plan.feasible["tiny"] is (plan.estimated_latency_ms["tiny"] <= LOOSE.latency_ms)
