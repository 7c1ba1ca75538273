"""The paired gate: picks kept only where the selection rows vouch for them beside dense, on
real profiles and real runs of the tiny workload; the re-planning loop with injected verdicts."""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
import pytest

from sparseloom.core.types import SLO
from sparseloom.evaluation.judging import judging_report, render_judging
from sparseloom.plan.paired_gate import (
    EXCLUDED,
    GATE_ATTEMPTS,
    GATE_ATTEMPTS_ABOVE_DENSE,
    GateVerdict,
    excluded_profile,
    gate_pick,
    gated_profile,
)


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any, Any]:
    import sparseloom
    from sparseloom.cli.profile import profile_options
    from sparseloom.zoo.load import profiled_zoos

    workload = sparseloom.load_workload("tiny", progress=False)
    profile = sparseloom.build_profile(workload, options=profile_options(workload),
                                       progress=False)
    return workload, profile, profiled_zoos(profile)


def _verdict(task: str, pick: tuple[int, ...], passed: bool) -> GateVerdict:
    return GateVerdict(task, "_".join(map(str, pick)), "f32", 100,
                       0.0 if passed else -0.05, 0.01)


def _plan_by_accuracy(table: Any) -> dict[str, tuple[int, ...]]:
    """A policy that serves each task's most accurate variant (ties: the first row)."""
    picks = {}
    for name, task in table.tasks.items():
        row = int(np.argmax(task.accuracy()))
        picks[name] = tuple(int(c) for c in task.choices([row])[0])
    return picks


def _dense(task: Any, pick: tuple[int, ...]) -> bool:
    return all(task.variant_kinds[c] == "dense" for c in pick)


def _plan_stitched_first(table: Any) -> dict[str, tuple[int, ...]]:
    """A policy that serves each task's most accurate stitched variant the table still
    admits, dense only when none is left."""
    picks = {}
    for name, task in table.tasks.items():
        choices = task.choices(np.arange(task.accuracy().shape[0]))
        admitted = [(float(a), r) for r, a in enumerate(task.accuracy())
                    if a > EXCLUDED and not _dense(task, tuple(choices[r]))]
        row = max(admitted)[1] if admitted else int(np.argmax(task.accuracy()))
        picks[name] = tuple(int(c) for c in choices[row])
    return picks


def test_an_excluded_variant_reads_below_every_metric_and_nothing_else_moves(
        tiny: tuple[Any, Any, Any]) -> None:
    _, profile, _ = tiny
    name = next(iter(profile.tasks))
    before = profile.task(name).accuracy().copy()
    masked = excluded_profile(profile, {name: {3, 5}})
    after = masked.task(name).accuracy()
    assert after[3] == after[5] == EXCLUDED
    keep = np.setdiff1d(np.arange(before.size), [3, 5])
    np.testing.assert_array_equal(after[keep], before[keep])
    np.testing.assert_array_equal(profile.task(name).accuracy(), before)  # a copy
    assert excluded_profile(profile, {}) is profile


def test_the_gate_replans_without_each_refused_pick_until_one_passes(
        tiny: tuple[Any, Any, Any]) -> None:
    _, profile, _ = tiny
    first = _plan_by_accuracy(profile)
    refused = {t: p for t, p in first.items() if not _dense(profile.task(t), p)}
    if not refused:
        pytest.skip("the tiny profile's most accurate variants are all dense")
    asked: list[tuple[str, tuple[int, ...]]] = []

    def refuse_first_picks(task: str, pick: tuple[int, ...]) -> GateVerdict:
        asked.append((task, pick))
        return _verdict(task, pick, passed=refused.get(task) != pick)

    table = gated_profile(profile, _plan_by_accuracy, refuse_first_picks)
    final = _plan_by_accuracy(table)
    for task, pick in refused.items():
        assert final[task] != pick
        assert table.task(task).accuracy(list(pick)) == EXCLUDED
    assert set(refused.items()) <= set(asked)


def test_a_task_refused_every_time_serves_its_dense_variants(
        tiny: tuple[Any, Any, Any]) -> None:
    _, profile, _ = tiny
    calls: list[str] = []

    def refuse_all(task: str, pick: tuple[int, ...]) -> GateVerdict:
        calls.append(task)
        return _verdict(task, pick, passed=False)

    table = gated_profile(profile, _plan_by_accuracy, refuse_all)
    for task, pick in _plan_by_accuracy(table).items():
        assert _dense(table.task(task), pick)
    # each task is refused at most GATE_ATTEMPTS times before it keeps dense only
    assert all(calls.count(t) <= GATE_ATTEMPTS for t in profile.tasks)


@pytest.mark.parametrize(("margin", "tries"), [(0.01, GATE_ATTEMPTS),
                                               (-0.01, GATE_ATTEMPTS_ABOVE_DENSE)])
def test_an_slo_above_dense_gets_fewer_refused_picks_before_dense(
        tiny: tuple[Any, Any, Any], margin: float, tries: int) -> None:
    _, profile, _ = tiny
    calls: list[str] = []

    def refuse_all(task: str, pick: tuple[int, ...]) -> GateVerdict:
        calls.append(task)
        return GateVerdict(task, "_".join(map(str, pick)), "f32", 100, -0.05, margin)

    table = gated_profile(profile, _plan_stitched_first, refuse_all)
    # The policy picks a stitched variant while the table admits one: each task is refused
    # exactly its budget, then keeps only dense.
    assert sorted(calls) == sorted(list(profile.tasks) * tries)
    for task, pick in _plan_stitched_first(table).items():
        assert _dense(table.task(task), pick)


def test_a_policy_that_keeps_serving_a_refused_pick_is_an_error_not_a_loop(
        tiny: tuple[Any, Any, Any]) -> None:
    from sparseloom.core.errors import PlanError

    _, profile, _ = tiny
    name = next(iter(profile.tasks))
    stitched = (1,) * profile.task(name).n_positions  # unstructured pruning: not dense

    def stubborn(table: Any) -> dict[str, tuple[int, ...]]:
        return {name: stitched}

    calls: list[tuple[int, ...]] = []

    def refuse(task: str, pick: tuple[int, ...]) -> GateVerdict:
        calls.append(pick)
        return _verdict(task, pick, passed=False)

    with pytest.raises(PlanError, match=f"refused its picks {GATE_ATTEMPTS} times"):
        gated_profile(profile, stubborn, refuse)
    assert len(calls) == GATE_ATTEMPTS + 1


def test_every_first_pick_passing_leaves_the_profile_as_it_was(
        tiny: tuple[Any, Any, Any]) -> None:
    _, profile, _ = tiny
    assert gated_profile(profile, _plan_by_accuracy,
                         lambda t, p: _verdict(t, p, passed=True)) is profile


def test_the_gate_runs_on_the_selection_rows_never_the_judging_rows(
        tiny: tuple[Any, Any, Any]) -> None:
    from sparseloom.evaluation.judging import served_outputs

    workload, profile, zoos = tiny
    name = next(iter(profile.tasks))
    task, zoo = workload.task(name), zoos[name]
    table = profile.task(name)
    pick = tuple(int(c) for c in table.choices([table.accuracy_estimated.size - 1])[0])
    verdict, dense = gate_pick(task, zoo, pick, "f32", margin=0.01)
    assert verdict.rows == len(task.labels)
    assert dense.shape[0] == len(task.labels)  # task.labels: the selection rows only
    np.testing.assert_allclose(dense, served_outputs(task, zoo, None, "f32"), rtol=1e-5)
    # the dense chain stitched from the zoo answers as dense does: nothing to lose
    same, _ = gate_pick(task, zoo, (0,) * zoo.positions, "f32", margin=0.0)
    assert same.low == pytest.approx(0.0, abs=1e-6) and same.passed
    assert verdict.passed == (verdict.low >= -0.01 - 1e-9)


def test_a_pick_asked_at_another_margin_is_judged_as_a_fresh_run_judges_it(
        tiny: tuple[Any, Any, Any]) -> None:
    from sparseloom.plan.paired_gate import SelectionGate

    workload, profile, zoos = tiny
    name = next(iter(profile.tasks))
    table = profile.task(name)
    pick = tuple(int(c) for c in table.choices([table.accuracy_estimated.size - 1])[0])
    gate = SelectionGate(workload, zoos)
    first = gate(name, pick, "f32", 0.5)
    # a grid cell with a tighter SLO: the same rows' difference, another margin
    tight = -first.low - 0.01  # the low end lies 1 point below what this margin allows
    second = gate(name, pick, "f32", tight)
    fresh, _ = gate_pick(workload.task(name), zoos[name], pick, "f32", margin=tight)
    assert second == fresh and second.margin == tight and not second.passed
    assert first.passed and first.low == fresh.low and first.margin == 0.5
    assert gate(name, pick, "f32", 0.5) is first  # asked again: the verdict already given
    assert gate.verdicts == [first, second]


def test_a_context_with_the_gate_serves_only_picks_the_gate_kept(
        tiny: tuple[Any, Any, Any]) -> None:
    from sparseloom.evaluation.contenders import profile_context
    from sparseloom.evaluation.serve_scenarios import dense_slos

    workload, profile, zoos = tiny
    context = profile_context(workload, profile, zoos, paired_gate=True)
    slos = {t: SLO(s.accuracy, 1e9) for t, s in dense_slos(context).items()}
    picks = context.picks(slos, "sparseloom-loaded")
    kept = {(v.task, v.model) for v in context.gate.verdicts if v.passed}
    for task, pick in picks.items():
        assert _dense(profile.task(task), pick) or (task, "_".join(map(str, pick))) in kept
    section = judging_report([], context.gate.verdicts)
    assert len(section["gate"]) == len(context.gate.verdicts)
    off = attrs.evolve(context, paired_gate=False)
    assert off.profile_for(slos, "sparseloom-loaded") is profile


def test_the_report_names_each_refused_pick() -> None:
    verdicts = [_verdict("t", (0, 1), passed=True), _verdict("t", (2, 1), passed=False)]
    section = judging_report([], verdicts)
    assert [v["passed"] for v in section["gate"]] == [True, False]
    judged = {"judged": [{"task": "t", "model": "dense", "precision": "f32", "rows": 0,
                          "accuracy": 0.9, "dense": 0.9, "low": 0.0, "high": 0.0,
                          "drop": 0.0, "selection_drop": 0.0, "margin": 0.01,
                          "within": True}], "picks_chosen_within": 0, "fell_outside": []}
    text = "\n".join(render_judging(judged | {"gate": section["gate"]}))
    assert ("The paired gate gave 2 verdict(s) on the selection rows and refused 1 pick(s): "
            "t 2_1 (f32, -5.00 against a 1.00 margin).") in text


def _loose_slos(zoos: Any, drop: float) -> dict[str, SLO]:
    """Each task at its dense selection accuracy − ``drop``, any latency."""
    return {name: SLO(float(zoo.manifest["metric"]["dense"]) - drop, 1e9)
            for name, zoo in zoos.items()}


def _without_dense(profile: Any) -> Any:
    """``profile`` with each task's dense chain excluded: tiny's dense model is its fastest
    variant too, so every policy serves it; without it a policy must pick a stitched one."""
    return excluded_profile(profile, {name: {int(task.index([0] * task.n_positions))}
                                      for name, task in profile.tasks.items()})


def test_make_plan_plans_again_without_each_pick_its_gate_refuses(
        tiny: tuple[Any, Any, Any]) -> None:
    from sparseloom.plan.api import make_plan

    _, dense_first, zoos = tiny
    profile = _without_dense(dense_first)
    slos = _loose_slos(zoos, 0.05)
    first = make_plan(profile, slos=slos)
    assert first.refused == {} and first.table is profile
    stitched = {t: tuple(v.choices) for t, v in first.plan.variants.items()
                if not _dense(profile.task(t), tuple(v.choices))}
    assert stitched, "without its dense chain, tiny's pick is stitched"
    asked: list[tuple[str, tuple[int, ...], tuple[str, ...], SLO]] = []

    def refuse_the_first_picks(task: str, pick: tuple[int, ...], route: tuple[str, ...],
                               slo: SLO) -> GateVerdict:
        asked.append((task, pick, route, slo))
        return _verdict(task, pick, passed=stitched.get(task) != pick)

    gated = make_plan(profile, slos=slos, gate=refuse_the_first_picks)
    for task, pick in stitched.items():
        assert tuple(gated.plan.variants[task].choices) != pick
        assert gated.refused[task] == ("_".join(map(str, pick)),)
        assert gated.table.task(task).accuracy(list(pick)) == EXCLUDED
        assert (task, pick, first.plan.processors_of(task), slos[task]) in asked
    assert all(not _dense(profile.task(t), p) for t, p, _, _ in asked)  # dense never asked


def test_plan_api_refuses_the_gate_without_the_rows_it_judges_on(
        tiny: tuple[Any, Any, Any]) -> None:
    import sparseloom
    from sparseloom.core.errors import ArgumentError

    _, profile, _ = tiny
    with pytest.raises(ArgumentError, match="paired_gate=True judges each pick"):
        sparseloom.make_plan(profile, paired_gate=True)
    with pytest.raises(ArgumentError, match="paired_gate"):
        sparseloom.make_plan(profile, paired_gate="yes")  # type: ignore[arg-type]
    assert sparseloom.make_plan(profile).refused == {}


def test_a_server_serves_a_stitched_pick_only_where_the_paired_gate_kept_it(
        tiny: tuple[Any, Any, Any]) -> None:
    from sparseloom.runtime.server import Server

    workload, dense_first, zoos = tiny
    profile = _without_dense(dense_first)
    slos = _loose_slos(zoos, 0.02)
    with Server(workload, profile, slos=slos) as server:
        served = {t: (tuple(v.choices), server.plan.processors_of(t))
                  for t, v in server.plan.variants.items()}
        refused = dict(server.refused)
    with Server(workload, profile, slos=slos, paired_gate=False) as ungated:
        assert ungated.refused == {}
        trusted = {t: tuple(v.choices) for t, v in ungated.plan.variants.items()}
    from sparseloom.core.processors import openvino_precision
    from sparseloom.evaluation.judging import chain_precision, judged_precision
    from sparseloom.plan.api import profiled_processors

    computes = {p.name: judged_precision(openvino_precision([p]))
                for p in profiled_processors(profile)}
    margin = {t: float(zoos[t].manifest["metric"]["dense"]) - s.accuracy
              for t, s in slos.items()}
    judged = 0
    for task, (pick, route) in served.items():
        assert "_".join(map(str, pick)) not in refused.get(task, ())
        if _dense(profile.task(task), pick):
            continue
        precision = chain_precision([computes[name] for name in route])
        verdict, _ = gate_pick(workload.task(task), zoos[task], pick, precision, margin[task])
        assert verdict.passed, verdict
        judged += 1
    for task, models in refused.items():
        assert trusted[task] != served[task][0] and models
    assert judged or refused, "the gate judged nothing: no stitched pick to test it on"


def test_a_server_refuses_a_paired_gate_that_is_not_a_flag(tiny: tuple[Any, Any, Any]) -> None:
    from sparseloom.core.errors import ArgumentError
    from sparseloom.runtime.server import Server

    workload, profile, _ = tiny
    with pytest.raises(ArgumentError, match="paired_gate"):
        Server(workload, profile, paired_gate="no")  # type: ignore[arg-type]


def test_a_run_names_each_pick_the_paired_gate_refused_and_serves_none_of_them(
        tiny: tuple[Any, Any, Any]) -> None:
    from sparseloom.runtime.load import LoadSpec
    from sparseloom.runtime.session import RunConfig, serve

    workload, dense_first, zoos = tiny
    profile = _without_dense(dense_first)
    # An accuracy SLO one point above dense: no pick's paired low end vouches for it, so the
    # gate refuses pick after pick until the task keeps only its (excluded) dense chain.
    slos = _loose_slos(zoos, -0.01)
    result = serve(workload, profile, RunConfig(slos=slos, load=LoadSpec(queries=5)))
    notes = [n for n in result.summary.notes if n.startswith("the paired gate refused tiny's")]
    assert len(notes) == 1, result.summary.notes
    refused = notes[0].split("tiny's ", 1)[1].split(":", 1)[0].split(", ")
    assert len(refused) == GATE_ATTEMPTS_ABOVE_DENSE  # its SLO asks for more than dense
    served = {r.variant.replace(",", "_") for r in result.records}
    assert served and not served & set(refused)
