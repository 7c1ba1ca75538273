"""Choosing again under a tighter selection margin: the loop with verdicts worked by hand, and
a real tiny benchmark context whose first judgement is made to fail (an injected fault)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import pytest

from sparseloom.core.errors import PlanError
from sparseloom.core.types import SLO
from sparseloom.evaluation.contenders import ServeContext
from sparseloom.evaluation.judging import Judged
from sparseloom.evaluation.tightening import (
    DENSE_ONLY,
    STEPS,
    raised_slo,
    render_tightened,
    within_margins,
)

SLOS = {"a": SLO(0.90, 5.0), "b": SLO(0.80, 5.0)}


def _judged(task: str, pick: tuple[int, ...], drop: float, rows: int = 100) -> Judged:
    return Judged(task, "_".join(map(str, pick)), "f32", rows, 0.9 - drop, 0.9, -drop, -drop,
                  0.0, 0.01)


def test_a_raised_slo_moves_by_each_steps_fraction_of_the_margin_never_above_dense() -> None:
    slo = SLO(0.90, 5.0)
    assert raised_slo(slo, 0, 0.92, 0.90) == slo
    assert raised_slo(slo, 1, 0.92, 0.90).accuracy == pytest.approx(0.90 + STEPS[0] * 0.02)
    assert raised_slo(slo, 2, 0.92, 0.90).accuracy == pytest.approx(0.92)
    assert raised_slo(slo, DENSE_ONLY, 0.92, 0.90).accuracy == pytest.approx(0.92)
    # what the benchmark raised every SLO to already (--choose-above) is the floor
    assert raised_slo(slo, 1, 0.92, 0.915).accuracy == pytest.approx(0.915)
    # an SLO above dense leaves no margin to raise it by, and is never lowered
    assert raised_slo(SLO(0.95, 5.0), 2, 0.92, 0.92) == SLO(0.95, 5.0)
    assert raised_slo(slo, 2, 0.92, 0.90).latency_ms == 5.0


def test_a_pick_outside_its_margin_is_chosen_again_until_one_keeps_it() -> None:
    asked: list[dict[str, int]] = []

    def plan(levels: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
        asked.append(dict(levels))
        return {"a": (1, 1) if not levels.get("a") else (2, 1), "b": (3, 3)}

    drops = {("a", (1, 1)): 0.03, ("a", (2, 1)): 0.005, ("b", (3, 3)): 0.0}
    levels, steps = within_margins("p", SLOS, plan,
                                   lambda t, pick: _judged(t, pick, drops[t, pick]))
    assert levels == {"a": 1} and asked == [{}, {"a": 1}]
    (step,) = steps
    assert (step.policy, step.task, step.model, step.level) == ("p", "a", "1_1", 1)
    assert step.drop == pytest.approx(0.03) and step.margin == pytest.approx(0.01)
    assert step.then == f"SLO raised by {STEPS[0]:g} × the margin"
    assert step.to_json()["then"] == step.then


def test_a_task_outside_at_every_step_ends_on_its_dense_variants() -> None:
    def plan(levels: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
        return {"a": (0, 0) if levels.get("a", 0) >= DENSE_ONLY else (levels.get("a", 0), 1)}

    def judge(task: str, pick: tuple[int, ...]) -> Judged | None:
        return None if pick == (0, 0) else _judged(task, pick, 0.05)  # None: dense

    levels, steps = within_margins("p", SLOS, plan, judge)
    assert levels == {"a": DENSE_ONLY}
    assert [s.level for s in steps] == list(range(1, DENSE_ONLY + 1))
    assert steps[-1].then == "dense variants only"


def test_a_pick_with_no_rows_held_out_or_no_margin_is_not_chosen_again() -> None:
    levels, steps = within_margins("p", SLOS, lambda levels: {"a": (1,)},
                                   lambda t, pick: _judged(t, pick, 0.05, rows=0))
    assert levels == {} and steps == []
    above_dense = attrs.evolve(_judged("a", (1,), 0.05), margin=-0.01)  # a grid cell
    assert within_margins("p", SLOS, lambda levels: {"a": (1,)},
                          lambda t, pick: above_dense) == ({}, [])


def test_a_policy_that_keeps_a_stitched_pick_from_a_dense_only_table_is_an_error() -> None:
    with pytest.raises(PlanError, match=r"p chose a's stitched variant 1 from a table left "
                                        r"only its dense variants"):
        within_margins("p", SLOS, lambda levels: {"a": (1,)},
                       lambda t, pick: _judged(t, pick, 0.05))


@pytest.fixture(scope="module")
def context() -> ServeContext:
    import sparseloom
    from sparseloom.cli.profile import profile_options
    from sparseloom.evaluation.contenders import profile_context
    from sparseloom.zoo.load import profiled_zoos

    workload = sparseloom.load_workload("tiny", progress=False)
    profile = sparseloom.build_profile(workload, options=profile_options(workload),
                                       progress=False)
    return profile_context(workload, profile, profiled_zoos(profile))


@attrs.define(eq=False)
class FirstPickFailsContext(ServeContext):
    """Injects a fault: the first stitched pick judged, and that pick whenever it is judged
    again, reads as losing twice its margin on the held-out rows; every other pick's
    judgement is the real one."""

    failing: list[str] = attrs.field(factory=list, init=False)

    def judged(self, task: str, pick: Any, precision: str, slo_accuracy: float) -> Judged:
        real = super().judged(task, pick, precision, slo_accuracy)
        if pick is None or (self.failing and real.model != self.failing[0]):
            return real
        self.failing[:] = [real.model]
        return attrs.evolve(real, accuracy=real.dense - 2 * max(real.margin, 0.01))


def test_a_benchmark_serves_the_pick_it_chose_again_under_the_tighter_margin(
        context: ServeContext) -> None:
    from sparseloom.evaluation.contender import select_contenders
    from sparseloom.evaluation.serve_figures import dense_slos
    from sparseloom.evaluation.serving import serve_contender
    from sparseloom.plan.gating import is_dense
    from sparseloom.runtime.load import LoadSpec

    policy = "sparseloom"  # Algorithm 1: a stitched pick on the tiny profile (the loaded
    # policy serves its dense variant there, faster on one core)
    slos = dense_slos(context)
    first = attrs.evolve(context, tighten=False).picks(slos, policy)["tiny"]
    if is_dense(context.profile.task("tiny"), first):
        pytest.skip("the tiny profile's pick is its dense variant: nothing to judge")
    faulty = FirstPickFailsContext(context.workload, context.profile, context.zoos,
                                   context.cores, context.precision,
                                   processor_precisions=context.processor_precisions)
    pick = faulty.picks(slos, policy)["tiny"]
    failed = "_".join(map(str, first))
    assert faulty.failing == [failed] and pick != first
    # One step per plan that chose the failing pick, each a step tighter ...
    steps = faulty.tightened
    assert [(s.policy, s.task, s.model) for s in steps] == [(policy, "tiny", failed)] * len(steps)
    assert [s.level for s in steps] == list(range(1, len(steps) + 1))
    # ... the last plan chose under an SLO raised by its step's fraction of the margin, from
    # the selection rows (dense variants only after the last step) ...
    dense = faulty.selection_accuracy("tiny", None)
    margin = dense - slos["tiny"].accuracy
    raised = faulty.choosing(slos, policy)["tiny"].accuracy
    fraction = STEPS[min(len(steps), len(STEPS)) - 1]
    assert raised == pytest.approx(min(dense, slos["tiny"].accuracy + fraction * margin))
    if len(steps) >= DENSE_ONLY:
        assert is_dense(context.profile.task("tiny"), pick)
    else:
        assert faulty.selection_accuracy("tiny", pick) >= raised - 1e-9
    # every plan under these SLOs reads one table, not a copy rebuilt per plan
    assert faulty.profile_for(slos, policy) is faulty.profile_for(slos, policy)
    # ... and the policy's own run plans that pick from the same table and SLOs, judged at
    # the SLO it is held to, not the raised one.
    summary = serve_contender(faulty, select_contenders([policy])[0],
                              LoadSpec("closed", queries=20), slos)
    (task,) = summary.tasks
    assert set(task.served) and all(r.startswith(f"tiny[{','.join(map(str, pick))}] @")
                                    for r in task.served), (task.served, pick)
    assert task.slo_accuracy == slos["tiny"].accuracy
    # The report names each step.
    lines = "\n".join(render_tightened([s.to_json() for s in steps]))
    assert f"{policy}'s tiny {failed}" in lines and steps[-1].then in lines
