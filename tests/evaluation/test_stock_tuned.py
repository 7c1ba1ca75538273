"""``stock-tuned`` and ``picks-tuned``: the partition search against a brute force, the
choice of configurations, and real tuning and serving on the tiny workload."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

import pytest

from sparseloom.core.errors import EvaluationError
from sparseloom.core.types import SLO
from sparseloom.evaluation.stock_tuned import (
    Choice,
    Config,
    Measured,
    best_partition,
    candidates,
    core_sets,
    measure_candidates,
    tune,
)


def brute_force(latency: dict[str, dict[int, float]], cores: tuple[int, ...]
                ) -> tuple[float, float]:
    """The least (busiest core's load, total core time) over every assignment of contiguous
    core runs, enumerated outright."""
    runs = [tuple(range(a, b + 1)) for a in cores for b in cores if b >= a]
    tasks = sorted(latency)
    best = (math.inf, math.inf)
    for assignment in itertools.product(runs, repeat=len(tasks)):
        if any(len(r) not in latency[t] for t, r in zip(tasks, assignment, strict=True)):
            continue
        per_core = {c: 0.0 for c in cores}
        total = 0.0
        for task, run in zip(tasks, assignment, strict=True):
            for core in run:
                per_core[core] += latency[task][len(run)]
            total += latency[task][len(run)] * len(run)
        best = min(best, (max(per_core.values()), total))
    return best


@pytest.mark.parametrize("seed", range(12))
def test_the_partition_search_finds_the_brute_force_optimum(seed: int) -> None:
    rng = random.Random(seed)
    cores = (0, 1, 2)
    latency: dict[str, dict[int, float]] = {}
    for index in range(rng.randint(2, 5)):
        one = rng.uniform(0.1, 10.0)
        # more threads: faster by a random factor, sometimes slower, sometimes not usable
        latency[f"t{index}"] = {n: one / rng.uniform(0.7, n) for n in (1, 2, 3)
                                if n == 1 or rng.random() > 0.2}
    partition, bottleneck = best_partition(latency, cores)
    per_core = {c: 0.0 for c in cores}
    for task, run in partition.items():
        assert run in core_sets(cores) and len(run) in latency[task]
        for core in run:
            per_core[core] += latency[task][len(run)]
    assert max(per_core.values()) == pytest.approx(bottleneck)
    total = sum(latency[t][len(r)] * len(r) for t, r in partition.items())
    assert (bottleneck, total) == pytest.approx(brute_force(latency, cores))


def test_two_equal_tasks_get_a_core_each_and_a_lone_task_both() -> None:
    partition, bottleneck = best_partition({"a": {1: 2.0, 2: 1.2}, "b": {1: 2.0, 2: 1.2}},
                                           (0, 1))
    assert sorted(partition.values()) == [(0,), (1,)] and bottleneck == 2.0
    partition, bottleneck = best_partition({"a": {1: 2.0, 2: 1.2}}, (0, 1))
    assert partition == {"a": (0, 1)} and bottleneck == 1.2
    with pytest.raises(EvaluationError, match="'a' has no usable configuration"):
        best_partition({"a": {2: 1.0}}, (0,))


def test_candidates_and_core_runs() -> None:
    assert core_sets((1, 0)) == [(0,), (0, 1), (1,)]
    assert {(c.backend, c.precision) for c in candidates((0, 1), bf16=False)} == {
        ("ort", "f32"), ("ov", "f32")}
    with_bf16 = candidates((0, 1), bf16=True)
    assert len(with_bf16) == 6 and {c.threads for c in with_bf16} == {1, 2}
    assert ("ov", "bf16") in {(c.backend, c.precision) for c in with_bf16}


def test_tune_takes_the_fastest_usable_configuration_per_thread_count() -> None:
    ort1, ov1, bf1 = Config("ort", "f32", 1), Config("ov", "f32", 1), Config("ov", "bf16", 1)
    slos = {"a": SLO(0.89, 10.0), "b": SLO(0.89, 10.0)}
    whole = {"a": 0.9, "b": 0.9}  # each model's f32 accuracy on the whole eval set
    measured = [Measured("a", ort1, 3.0, 0.8), Measured("a", ov1, 2.0, 0.8),
                Measured("a", bf1, 1.0, 0.7),  # fastest, but 0.1 below f32 on its rows
                Measured("b", ort1, 1.0, 0.8)]
    assert "would fall below the SLO 0.8900" in measured[2].refusal(slos["a"], 0.8, 0.9)
    # f32 serves the model the profile measured, whatever the rows served score.
    assert measured[0].refusal(SLO(0.95, 10.0), 0.8, 0.9) == ""
    tuned = tune("stock-tuned", measured, (0, 1), picks=False, slos=slos, whole=whole)
    assert tuned.choices["a"].config == ov1 and tuned.choices["b"].config == ort1
    assert {tuned.choices["a"].cores, tuned.choices["b"].cores} == {(0,), (1,)}
    assert tuned.makespan_ms == 2.0
    processor = tuned.processor("a")
    assert (processor.backend, processor.threads, processor.options[
        "INFERENCE_PRECISION_HINT"]) == ("ov", 1, "f32")
    # Under an SLO 0.1 looser the bf16 configuration may serve, and is the fastest.
    loose = tune("stock-tuned", measured, (0, 1), picks=False,
                 slos={"a": SLO(0.8, 10.0), "b": slos["b"]}, whole=whole)
    assert loose.choices["a"].config == bf1
    with pytest.raises(EvaluationError, match=r"no configuration may serve task\(s\) b:"):
        tune("stock-tuned", [*measured[:3], Measured("b", ort1, math.nan, math.nan, "failed")],
             (0, 1), picks=False, slos=slos, whole=whole)


def test_a_configuration_that_fails_is_reported_and_never_used() -> None:
    def failing_serve(task: str, choice: Choice) -> Any:  # fault injection
        raise RuntimeError(f"no {choice.config.backend} here")

    lines: list[str] = []
    measured = measure_candidates(failing_serve, "a", [Config("ov", "f32", 1)], (0,),
                                  lines.append)
    assert "RuntimeError: no ov here" in measured[0].refusal(SLO(0.0, 10.0), math.nan, 0.5)
    assert "not used" in lines[0]


def test_a_configuration_that_failed_is_not_run_again_in_later_rounds() -> None:
    calls: list[str] = []

    def lost_device(task: str, choice: Choice) -> Any:  # fault injection
        calls.append(choice.config.backend)
        raise RuntimeError(f"{choice.config.backend} lost its device")

    measured = measure_candidates(lost_device, "a", [Config("ov", "f32", 1)],
                                  (0,), rounds=3)
    assert calls == ["ov"]  # a failed configuration is not run again
    assert measured[0].failure.startswith("failed: RuntimeError")
    assert math.isnan(measured[0].latency_ms)
    with pytest.raises(EvaluationError, match="at least 1 round"):
        measure_candidates(lost_device, "a", [Config("ov", "f32", 1)], (0,),
                           rounds=0)


@pytest.fixture(scope="module")
def tiny_context() -> Any:
    import sparseloom
    from sparseloom.cli.profile import profile_options
    from sparseloom.evaluation.contenders import ServeContext
    from sparseloom.runtime.session import profile_processors
    from sparseloom.zoo.load import load_zoo
    from sparseloom.zoo.options import zoo_directory

    workload = sparseloom.load_workload("tiny", progress=False)
    profile = sparseloom.build_profile(workload, options=profile_options(workload),
                                       progress=False)
    zoos = {name: load_zoo(zoo_directory(profile.meta["zoo_hashes"][name]), verify=False)
            for name in profile.tasks}
    cores = tuple(sorted({c for p in profile_processors(profile) for c in p.cores}))
    return ServeContext(workload, profile, zoos, cores, tuning_queries=20, tuning_rounds=3)


def assert_at_equal_accuracy(runs: list[dict[str, Any]]) -> None:
    """Every run served what keeps its accuracy SLO on the held-out rows: the dense models,
    and picks chosen again under a tighter margin where one fell outside it (the tiny build's
    picks move with where it was trained: on one 2-vCPU AMD EPYC Zen 3, 2026-12-07, a pick
    fell outside its margin there; :mod:`sparseloom.evaluation.tightening`)."""
    unequal = sorted({r["contender"] for r in runs
                      if r["figures"].get("equal_accuracy", 1.0) < 1})
    assert not unequal, unequal


def test_stock_tuned_is_measured_on_the_machine_and_serves_its_choice(tiny_context: Any
                                                                      ) -> None:
    from sparseloom.evaluation.contender import Contender
    from sparseloom.evaluation.serve_figures import dense_slos
    from sparseloom.evaluation.serving import serve_contender
    from sparseloom.runtime.load import LoadSpec

    context = tiny_context
    slos = dense_slos(context)
    tuned = context.tuned("stock-tuned", slos)
    assert context.tuned("stock-tuned", slos) is tuned  # measured once per benchmark
    (tuning,) = context.tunings
    assert tuning["picks"] is None
    measured = tuning["measured"]
    tasks = set(context.workload.task_names)
    assert set(tuned.choices) == tasks
    assert {(r["task"], r["backend"], r["threads"]) for r in measured} == {
        (t, b, n) for t in tasks for b in ("ort", "ov") for n in range(1, len(context.cores) + 1)}
    # Each configuration ran in three interleaved rounds; its latency is their median.
    for row in measured:
        if row["usable"]:
            assert len(row["rounds_ms"]) == 3 and all(x > 0 for x in row["rounds_ms"])
            assert row["latency_ms"] == sorted(row["rounds_ms"])[1]
    # The choice is the optimum of what was measured.
    fastest: dict[str, dict[int, float]] = {}
    for row in measured:
        if row["usable"]:
            by_threads = fastest.setdefault(row["task"], {})
            by_threads[row["threads"]] = min(by_threads.get(row["threads"], math.inf),
                                             row["latency_ms"])
    # The search's optimum is the first layout tried; each was served with every task at
    # once in three interleaved rounds, and the one with the highest median serves.
    layouts = tuning["layouts"]
    assert layouts[0]["predicted_bottleneck_ms"] == pytest.approx(
        brute_force(fastest, context.cores)[0])
    assert len({row["configuration"] for row in layouts}) == len(layouts) > 1
    for row in layouts:
        assert not row["failure"] and len(row["throughput_rps"]) == 3
        assert row["median_rps"] == sorted(row["throughput_rps"])[1]
    served = max(layouts, key=lambda row: row["median_rps"])
    assert tuned.describe() == served["configuration"] == tuning["configuration"]
    for task, choice in tuned.choices.items():
        assert set(choice.cores) <= set(context.cores)
        assert choice.latency_ms == fastest[task][len(choice.cores)]
    # picks-tuned: the same search on the merged variants sparseloom-loaded picks.
    picked = context.tuned("picks-tuned", slos)
    assert context.tunings[-1]["picks"] == context.picks(slos, "sparseloom-loaded")
    assert set(picked.choices) == tasks and picked.picks
    summary = serve_contender(context, Contender("stock-tuned", "stock"),
                              LoadSpec("closed", queries=100), slos)
    assert summary.valid, summary.reasons
    assert summary.settings["configuration"] == tuned.describe()
    assert {t.task for t in summary.tasks} == tasks and all(
        t.completed == 100 for t in summary.tasks)


def test_the_three_factors_multiply_to_the_whole_ratio() -> None:
    from sparseloom.evaluation.contender import Contender
    from sparseloom.evaluation.serve_figures import factors

    contenders = [Contender("sparseloom-loaded", "policy"), Contender("stock-ov", "stock"),
                  Contender("stock-tuned", "stock"), Contender("picks-tuned", "stock")]
    values = {"sparseloom-loaded": {0: 300.0, 1: 330.0, 2: 290.0},
              "stock-ov": {0: 100.0, 1: 250.0, 2: 120.0},
              "stock-tuned": {0: 200.0, 1: 220.0},
              "picks-tuned": {0: 250.0, 1: 200.0, 2: 240.0}}
    parts = factors(values, contenders)["sparseloom-loaded"]
    assert parts["whole"]["n"] == 2  # round 2 has no stock-tuned figure
    for index in range(2):
        product = (parts["variant_choice"]["rounds"][index]
                   * parts["runtime_placement"]["rounds"][index]
                   * parts["tuning"]["rounds"][index])
        assert product == pytest.approx(parts["whole"]["rounds"][index])
    # round 1: the best stock runtime is stock-ov (250), not stock-tuned (220)
    assert parts["tuning"]["rounds"] == pytest.approx([1.0, 220 / 250])
    assert parts["variant_choice"]["rounds"] == pytest.approx([1.25, 200 / 220])
    assert factors(values, contenders[:3]) == {}


def test_the_steady_state_keeps_every_task_asking_and_reports_stp_and_antt(
        tiny_context: Any) -> None:
    from sparseloom.evaluation.contender import select_contenders
    from sparseloom.evaluation.serve_figures import BenchOptions, Recorder
    from sparseloom.evaluation.serve_scenarios import steady
    from sparseloom.runtime.kept import keep_loaded

    contenders = select_contenders(["sparseloom-loaded", "stock-ort-matched"])
    recorder = Recorder()
    with keep_loaded():
        result = steady(tiny_context, contenders, BenchOptions(rounds=1, steady_s=0.5),
                        recorder)
    runs = recorder.runs_of("steady")
    assert len(runs) == 2 and all(r["valid"] for r in runs), [r["reasons"] for r in runs]
    # (the last request's end is stamped just before the check that stops issuing)
    assert all(r["summary"].wall_s >= 0.45 for r in runs)
    assert_at_equal_accuracy(runs)
    antt = {row["contender"]: row["median"] for row in result["antt"]}
    for row in result["contenders"]:
        assert row["n"] == 1
        # One task, one request in flight: its rate is about 1 / its mean latency, so its
        # rate ÷ isolated rate and its latency ÷ isolated latency are about reciprocal.
        assert 0.6 < row["median"] * antt[row["contender"]] < 1.4, (row, antt)
    worst = result["worst_task"]["sparseloom-loaded"]
    assert worst["n"] == 1 and worst["tasks"] == ["tiny"]
    rates = result["task_rates"]
    assert worst["median"] == pytest.approx(rates["sparseloom-loaded"]["tiny"]["median"]
                                            / rates["stock-ort-matched"]["tiny"]["median"])


def _set_pick(context: Any, below_dense: float, pick: tuple[int, ...]) -> dict[str, SLO]:
    """SLOs of a test's own (the context caches picks and tunings by SLOs: each test's
    ``below_dense`` differs), with the pick picks-tuned serves under them set to ``pick``."""
    from sparseloom.evaluation.contender import TUNED_PICKS_POLICY
    from sparseloom.evaluation.contenders import _slo_key
    from sparseloom.evaluation.serve_figures import dense_slos

    slos = {t: SLO(max(s.accuracy - below_dense, 0.0), s.latency_ms)
            for t, s in dense_slos(context).items()}
    context.picks(slos, TUNED_PICKS_POLICY)  # (planned, then replaced)
    context._picks[TUNED_PICKS_POLICY, _slo_key(slos)] = {"tiny": pick}
    return slos


def test_each_pick_s_predicted_speedup_is_set_beside_the_served_one(tiny_context: Any
                                                                    ) -> None:
    from sparseloom.evaluation.pick_speedup import pick_speedups, render_pick_speedups
    from sparseloom.runtime.session import profile_processors

    context = tiny_context
    # The pick picks-tuned serves is set here (sparseloom-loaded picks tiny's dense chain,
    # fastest merged): structured-0.5 at both positions.
    table = context.profile.task("tiny")
    structured = table.variant_names.index("structured-0.5")
    pick = (structured,) * table.n_positions
    loose = _set_pick(context, 0.3, pick)
    context.tuned("stock-tuned", loose)
    context.tuned("picks-tuned", loose)
    processors = profile_processors(context.profile)
    every = pick_speedups(context.measured_alone(), context.profile, processors)
    # (the module's other tests measured other picks: one row set per pick)
    rows = [r for r in every if r["pick"] == "_".join(map(str, pick))]
    assert rows and all(r["pick"] != "0_0" for r in every)
    # Served: the two medians each tuned runtime measured alone in the same configuration.
    measured = context.measured_alone()
    for row in rows:
        processor = next(p for p in processors if p.name == row["processor"])
        latency = {key[1]: next(m.latency_ms for m in runs if m.config.backend ==
                                processor.backend and m.config.threads == processor.threads
                                and m.config.precision == row["precision"])
                   for key, runs in measured.items() if key[0] == "tiny"}
        assert row["dense_ms"] == latency[None] and row["pick_ms"] == latency[tuple(pick)]
        assert row["served"] == pytest.approx(latency[None] / latency[tuple(pick)])
        # Predicted: the profile's chain latency, every position on that processor by name.
        names = [row["processor"]] * len(pick)
        assert context.profile.task("tiny").variant_kinds[0] == "dense"
        dense = [0] * len(pick)
        assert row["predicted"] == pytest.approx(
            context.profile.latency("tiny", dense, names)
            / context.profile.latency("tiny", list(pick), names))
    # One row per profiled processor whose runtime, precision and threads a config matches.
    assert len({r["processor"] for r in rows}) == len(rows) <= len(processors)
    table = render_pick_speedups(rows)
    assert table[1] == "## Picks: predicted against served speed-up"
    assert len([line for line in table if line.startswith("| tiny |")]) == len(rows)
    assert render_pick_speedups([]) == []


def test_a_dense_pick_is_served_and_measured_as_stock_tuned_serves_dense(tiny_context: Any
                                                                       ) -> None:
    from sparseloom.evaluation.contender import Contender
    from sparseloom.evaluation.serving import serve_contender
    from sparseloom.evaluation.tuned_layouts import layouts
    from sparseloom.runtime.load import LoadSpec

    context = tiny_context
    # The pick picks-tuned serves is set to the dense model at both positions.
    table = context.profile.task("tiny")
    assert table.variant_kinds[0] == "dense"
    slos = _set_pick(context, 0.25, (0,) * table.n_positions)
    assert context.compressed_picks(slos) == {}
    stock = context.tuned("stock-tuned", slos)
    measured = dict(context.measured_alone())
    picked = context.tuned("picks-tuned", slos)
    # Nothing measured again: the dense model's figures serve both, so both chose among the
    # same layouts (each by its own trial runs).
    assert context.measured_alone() == measured
    assert ("tiny", (0,) * table.n_positions) not in measured
    models, shared = context.measure("picks-tuned", slos)
    assert models == {"tiny": None} and context.measured_alone() == measured
    whole = {"tiny": context.selection_accuracy("tiny", None)}
    options = [c.choices for c in layouts("picks-tuned", shared, context.cores, True, slos, whole)]
    assert picked.choices in options and stock.choices in options and picked.picks
    summary = serve_contender(context, Contender("picks-tuned", "stock"),
                              LoadSpec("closed", queries=100), slos)
    assert summary.valid, summary.reasons
    assert [t.completed for t in summary.tasks] == [100]


def test_the_closed_scenario_bounds_each_contender_by_the_models_it_served(
        tiny_context: Any) -> None:
    from sparseloom.evaluation.contender import select_contenders
    from sparseloom.evaluation.serve_figures import BenchOptions, Recorder
    from sparseloom.evaluation.serve_scenarios import closed
    from sparseloom.runtime.kept import keep_loaded

    names = ["sparseloom-loaded", "stock-tuned", "picks-tuned", "stock-ort"]
    recorder = Recorder()
    with keep_loaded():
        result = closed(tiny_context, select_contenders(names),
                        BenchOptions(rounds=1, closed_queries=200, closed_min_s=None), recorder)
    assert_at_equal_accuracy(recorder.runs_of("closed"))
    bounds = result["bounds"]
    # stock-ort serves the dense model too, measured alone by stock-tuned: it has a bound.
    assert set(bounds["contenders"]) == set(names) and not bounds["unmeasured"]
    for name, row in bounds["contenders"].items():
        assert row["bound_rps"]["n"] == row["share"]["n"] == 1
        # One task, one request in flight: the run goes at about 1 ÷ its latency, and the
        # bound is 1 ÷ the fastest latency measured alone, so the share is near 1 or under
        # (a bound in the wrong unit or over the wrong cores is off by 1000× or 2×).
        assert 0.1 < row["share"]["median"] < 1.6, (name, row)
    ceiling = bounds["ceiling"]["sparseloom-loaded"]
    assert ceiling["n"] == 1 and ceiling["median"] > 0
    assert bounds["variant_ceiling"]["n"] == 1 and bounds["variant_ceiling"]["median"] > 0


def test_the_steady_state_bounds_a_policys_stp_by_the_models_it_served(
        tiny_context: Any) -> None:
    from sparseloom.evaluation.contender import select_contenders
    from sparseloom.evaluation.serve_figures import BenchOptions, Recorder
    from sparseloom.evaluation.serve_scenarios import steady
    from sparseloom.runtime.kept import keep_loaded

    recorder = Recorder()
    with keep_loaded():
        result = steady(tiny_context, select_contenders(["sparseloom-loaded", "stock-tuned"]),
                        BenchOptions(rounds=1, steady_s=0.5), recorder)
    assert_at_equal_accuracy(recorder.runs_of("steady"))
    bounds = result["stp_bounds"]
    assert not bounds["unmeasured"] and bounds["floors_unreachable"] == {"sparseloom-loaded": 0}
    ceiling = bounds["ceiling"]["sparseloom-loaded"]
    # One task, one request in flight: its STP is about its isolated latency ÷ its served
    # latency under either contender, and the bound is that at the fastest latency measured
    # alone; a bound in the wrong unit (1000×) fails this (the width leaves room for a run
    # slowed by the other tests' load).
    assert ceiling["n"] == 1 and 0.1 < ceiling["median"] < 30.0, ceiling
