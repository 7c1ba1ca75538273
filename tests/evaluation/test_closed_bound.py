"""The closed scenario's work bound: its arithmetic by hand, and which configurations count."""

from __future__ import annotations

import math

import pytest

from sparseloom.evaluation.closed_bound import ModelCost, bound_rps, model_cost, render_bounds
from sparseloom.evaluation.stock_tuned import Config, Measured


def test_one_slow_task_bounds_the_makespan_by_its_chain() -> None:
    # a: 100 requests of 2 ms one after another take 200 ms; the work, (200 + 100) ms over
    # two cores, 150 ms: the chain decides, 200 requests in 0.2 s.
    costs = {"a": ModelCost(2.0, 2.0), "b": ModelCost(1.0, 1.0)}
    assert bound_rps({"a": 100, "b": 100}, costs, cores=2) == pytest.approx(1000.0)


def test_many_light_tasks_bound_the_makespan_by_their_work() -> None:
    # four tasks of 100 requests at 1 ms: each chain 100 ms, the work 400 ms over two
    # cores 200 ms: 400 requests in 0.2 s; on one core 0.4 s.
    costs = {t: ModelCost(1.0, 1.0) for t in "abcd"}
    done = dict.fromkeys("abcd", 100)
    assert bound_rps(done, costs, cores=2) == pytest.approx(2000.0)
    assert bound_rps(done, costs, cores=1) == pytest.approx(1000.0)


def test_a_model_s_cost_takes_the_fastest_round_and_the_cheapest_core_time() -> None:
    one = Measured("a", Config("ort", "f32", 1), 1.0, 0.9)
    # faster: its fastest round 0.6 ms (1.2 core-ms), though its median is 0.7
    two = Measured("a", Config("ov", "f32", 2), 0.7, 0.9, rounds_ms=(0.8, 0.6, 0.7))
    bf16 = Measured("a", Config("ov", "bf16", 1), 0.4, 0.5)  # refused: lost accuracy
    failed = Measured("a", Config("ort", "f32", 2), math.nan, math.nan, failure="crashed")
    cost = model_cost([one, two, bf16, failed], ["", "", "loses accuracy", ""])
    assert cost == ModelCost(latency_ms=0.6, core_ms=1.0)
    assert model_cost([bf16, failed], ["loses accuracy", ""]) is None


@pytest.mark.parametrize(("done", "costs", "cores", "message"), [
    ({"a": 10}, {"a": ModelCost(1.0, 1.0)}, 0, "at least one core"),
    ({"a": 10, "b": 5}, {"a": ModelCost(1.0, 1.0)}, 2, "no cost for task"),
    ({"a": 0}, {"a": ModelCost(1.0, 1.0)}, 2, "at least one completed request"),
])
def test_a_bound_that_cannot_be_taken_says_why(done: dict[str, int],
                                               costs: dict[str, ModelCost], cores: int,
                                               message: str) -> None:
    with pytest.raises(ValueError, match=message):
        bound_rps(done, costs, cores)


def test_the_report_tables_each_bound_and_names_what_has_none() -> None:
    figure = {"median": 900.0, "min": 800.0, "max": 950.0, "n": 3}
    share = {"median": 0.81, "min": 0.7, "max": 0.9, "n": 3}
    lines = render_bounds({"contenders": {"stock-tuned": {"bound_rps": figure, "share": share}},
                           "ceiling": {"sparseloom-loaded": {"median": 1.4, "min": 1.2,
                                                             "max": 1.5, "n": 3}},
                           "variant_ceiling": {"median": 1.29, "min": 1.25, "max": 1.3,
                                               "n": 3},
                           "unmeasured": ["stock-ort"]})
    text = "\n".join(lines)
    assert "| stock-tuned | 900 [800–950] | 0.81 [0.70–0.90] |" in text
    assert "sparseloom-loaded's ceiling" in text and "1.40× [1.20–1.50]" in text
    assert "variant choice's ceiling" in text and "1.29× [1.25–1.30]" in text
    assert "No bound" in text and "stock-ort" in text
    assert render_bounds(None) == [] and render_bounds(
        {"contenders": {}, "ceiling": {}, "unmeasured": []}) == []
